import { Cron } from 'croner';
import { ErrorCode, LockError } from '../index.js';

/** The metadata key under which `@nestjs/schedule`'s `@Cron` keeps its options on the method. */
export const NEST_CRON_OPTIONS = 'SCHEDULE_CRON_OPTIONS';

/** The part of `@Cron(cronTime, options)`'s metadata that fixes when it fires. */
interface CronMetadata {
  readonly cronTime?: unknown;
  readonly timeZone?: unknown;
  readonly utcOffset?: unknown;
}

/** From the scheduled time back to the latest tick at or before it: at most ~35 years back. */
const FIRST_LOOKBACK = 1_000;
const LAST_LOOKBACK = 4 ** 20 * FIRST_LOOKBACK;

/** ms of the latest occurrence of `cron` at or before `now`, or null when there is none. */
function latestAtOrBefore(cron: Cron, now: number): number | null {
  for (let lookback = FIRST_LOOKBACK; lookback <= LAST_LOOKBACK; lookback *= 4) {
    let found = cron.nextRun(new Date(now - lookback));
    if (found === null || found.getTime() > now) continue;
    for (let next = cron.nextRun(found); next !== null && next.getTime() <= now; next = cron.nextRun(next)) {
      found = next;
    }
    return found.getTime();
  }
  return null;
}

function invalid(where: string, message: string): LockError {
  return new LockError(ErrorCode.INVALID_ARGUMENT, `@Once on ${where}: ${message}`);
}

/**
 * How `@Once` names the tick of a call from `@Cron`'s metadata: the scheduled time of the fire
 * that called it. The `cron` package that `@nestjs/schedule` runs never fires before the
 * scheduled time, so that is the latest occurrence of the expression at or before the call (read
 * with croner, in the same time zone or UTC offset). Every instance computes the same tick for the
 * same fire, which is what makes a tick run once. A `Date` (a one-off `@Cron`) is its own tick.
 * Without `@Cron` metadata there is no tick: null.
 */
export function cronTickOf(metadata: unknown, where: string): ((now: number) => number) | null {
  if (metadata === undefined || metadata === null) return null;
  const { cronTime, timeZone, utcOffset } = metadata as CronMetadata;
  if (cronTime instanceof Date) return () => cronTime.getTime();
  const asDate = (cronTime as { toJSDate?: unknown } | null)?.toJSDate;
  if (typeof asDate === 'function') {
    const at = (asDate.call(cronTime) as Date).getTime();
    return () => at;
  }
  if (typeof cronTime !== 'string') throw invalid(where, `cannot read the @Cron time ${String(cronTime)}`);
  let cron: Cron;
  try {
    cron = new Cron(cronTime, {
      paused: true,
      ...(typeof timeZone === 'string' ? { timezone: timeZone } : {}),
      ...(typeof utcOffset === 'number' ? { utcOffset } : {}),
    });
  } catch (error) {
    throw new LockError(ErrorCode.INVALID_ARGUMENT, `@Once on ${where}: cannot read @Cron('${cronTime}')`, {
      cause: error,
    });
  }
  return (now) => {
    const tick = latestAtOrBefore(cron, now);
    if (tick === null)
      throw invalid(where, `@Cron('${cronTime}') has no occurrence before ${new Date(now).toISOString()}`);
    return tick;
  };
}
