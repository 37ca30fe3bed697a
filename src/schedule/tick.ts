import { Cron } from 'croner';
import { invalidArgument } from '../core/errors.js';
import { duration, show } from '../core/validate.js';

/** When a job's ticks fall. A tick's identity is its scheduled time, so every instance computes the same ticks. */
export interface TickSource {
  /** The first tick strictly after `after` (ms since the epoch), or null when there is none. */
  next(after: number): number | null;
}

/**
 * A cron expression (croner: 5 fields, or 6 with seconds first; `@hourly` and friends) or an
 * interval in ms. Interval ticks are aligned to the Unix epoch, not to when a process started,
 * so instances started at different times agree on them.
 */
export function tickSource(when: unknown, timezone: string | undefined): TickSource {
  if (typeof when === 'number') {
    const every = duration(when, 'interval', 1);
    return { next: (after) => (Math.floor(after / every) + 1) * every };
  }
  if (typeof when !== 'string' || when.trim() === '') {
    throw invalidArgument(
      `a schedule must be a cron expression (string) or an interval in ms (number), got ${show(when)}`,
    );
  }
  // croner reads a string with ':' as a one-off date; a job's schedule must recur.
  if (when.includes(':')) {
    throw invalidArgument(`a schedule must be a cron expression or an interval, not a date: ${show(when)}`);
  }
  let cron: Cron;
  try {
    cron = new Cron(when, timezone === undefined ? {} : { timezone });
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    throw invalidArgument(`invalid cron expression ${show(when)}: ${detail}`);
  }
  return { next: (after) => cron.nextRun(new Date(after))?.getTime() ?? null };
}
