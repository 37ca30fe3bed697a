import { bold, green, red, yellow } from '../style.js';

/** How bad a finding is: `unsafe` can break mutual exclusion or stop locks working; `warn` needs a look. */
export type Level = 'ok' | 'warn' | 'unsafe';

const RANK: Readonly<Record<Level, number>> = { ok: 0, warn: 1, unsafe: 2 };

/** Exit status of `doctor` and `verify` when something unsafe was found (1 is a run that failed, 2 wrong use). */
export const EXIT_UNSAFE = 3;

/** One thing a check found, with why it matters and what to set. */
export interface Finding {
  /** Stable identifier of the check: `eviction`, `persistence`, `lock-without-ttl`, … */
  readonly check: string;
  readonly level: Level;
  /** What was found, in one line. */
  readonly summary: string;
  /** Why it matters for locks (warn and unsafe findings). */
  readonly why?: string;
  /** What to set or change. */
  readonly fix?: string;
  /** The server it was found on (host:port), when more than one was checked. */
  readonly node?: string;
  /** Numbers and examples behind the summary, for --json. */
  readonly details?: Readonly<Record<string, unknown>>;
}

export function worst(levels: Iterable<Level>): Level {
  let found: Level = 'ok';
  for (const level of levels) if (RANK[level] > RANK[found]) found = level;
  return found;
}

/** Most severe first; the order of the checks otherwise. */
export function bySeverity<T extends { readonly level: Level }>(items: readonly T[]): T[] {
  return items
    .map((item, i) => ({ item, i }))
    .sort((a, b) => RANK[b.item.level] - RANK[a.item.level] || a.i - b.i)
    .map(({ item }) => item);
}

/** The level as a fixed-width word, coloured when the terminal wants colour. */
export function levelWord(level: Level): string {
  if (level === 'unsafe') return bold(red('UNSAFE'));
  if (level === 'warn') return yellow('WARN  ');
  return green('ok    ');
}

/** `n thing` or `n things`. */
export function count(n: number, thing: string, things = `${thing}s`): string {
  return `${n} ${n === 1 ? thing : things}`;
}
