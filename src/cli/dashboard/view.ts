import { type Collector, type Grant, type LockDetail, TIMELINE_MS, type Waiter } from './collector.js';

/** What one open page asks to see: its filter and the window of the held locks it shows. */
export interface ViewQuery {
  /** Part of a name, case-insensitive; empty for all. */
  readonly filter: string;
  readonly offset: number;
  readonly size: number;
}

export const PAGE_SIZES: readonly number[] = [25, 50, 100];
const MAX_FILTER = 200;
/** Locks with waiters listed in the waiters panel, most waiters first. */
const WAITER_LOCKS_SHOWN = 12;
/** Jobs shown, by name. */
const JOBS_SHOWN = 12;
/** Timeline lanes: the locks granted most recently, then shown by name. */
const LANES_SHOWN = 12;
/** Grants sent per lane, the newest. */
const GRANTS_PER_LANE = 100;

/** The page's query string, bounded: unknown or out-of-range values fall back to the defaults. */
export function viewQuery(params: URLSearchParams): ViewQuery {
  const filter = (params.get('filter') ?? '').slice(0, MAX_FILTER);
  const size = Number(params.get('size'));
  const offset = Number(params.get('offset'));
  return {
    filter,
    size: PAGE_SIZES.includes(size) ? size : 50,
    offset: Number.isInteger(offset) && offset >= 0 && offset <= 10_000_000 ? offset : 0,
  };
}

/** Case-insensitive substring match. */
export function matcher(filter: string): (name: string) => boolean {
  const wanted = filter.trim().toLowerCase();
  if (wanted === '') return () => true;
  return (name) => name.toLowerCase().includes(wanted);
}

/** The names a page shows in its table: held (or not read yet), matching, in name order. */
export function heldNames(collector: Collector, filter: string): string[] {
  const matches = matcher(filter);
  return collector.names.filter((name) => matches(name) && collector.row(name)?.detail?.mode !== 'free');
}

/** The window of the table a page shows, clamped to the last page. */
export function pageOf(names: readonly string[], query: ViewQuery): { offset: number; names: readonly string[] } {
  const last = names.length === 0 ? 0 : Math.floor((names.length - 1) / query.size) * query.size;
  const offset = Math.min(query.offset - (query.offset % query.size), last);
  return { offset, names: names.slice(offset, offset + query.size) };
}

export interface PageMeta {
  readonly backend: string;
  readonly prefix: string;
  readonly interval: number;
  readonly allowRelease: boolean;
}

interface RowOut extends Omit<LockDetail, 'first' | 'waiters'> {
  readonly name: string;
  readonly waiters: number;
  /** Dashboard clock of the reading. */
  readonly readAt: number;
}

/** Everything one page shows, for its query, from the collector's last scan. */
export function snapshot(collector: Collector, query: ViewQuery, meta: PageMeta): unknown {
  const now = Date.now();
  const matches = matcher(query.filter);
  const held = heldNames(collector, query.filter);
  const { offset, names } = pageOf(held, query);
  let heldTotal = 0;
  let unread = 0;
  let waiting = 0;
  let queuedLocks = 0;
  const withWaiters: { name: string; count: number; first: readonly Waiter[] }[] = [];
  for (const name of collector.names) {
    const detail = collector.row(name)?.detail;
    if (detail === null || detail === undefined) {
      unread += 1;
      heldTotal += 1;
      continue;
    }
    if (detail.mode !== 'free') heldTotal += 1;
    if (detail.waiters > 0) {
      waiting += detail.waiters;
      queuedLocks += 1;
      if (matches(name)) withWaiters.push({ name, count: detail.waiters, first: detail.first });
    }
  }
  withWaiters.sort((a, b) => b.count - a.count || (a.name < b.name ? -1 : 1));
  const rows: (RowOut | { readonly name: string; readonly unread: true })[] = names.map((name) => {
    const row = collector.row(name);
    if (!row?.detail) return { name, unread: true };
    const { first: _first, ...detail } = row.detail;
    return { ...detail, name, readAt: row.readAt };
  });
  const jobs = [...collector.jobs].filter(([name]) => matches(name)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const status = collector.status;
  return {
    meta,
    now,
    status: {
      at: status.at,
      took: status.took,
      read: status.read,
      error: status.error,
    },
    totals: { held: heldTotal, unread, waiting, queuedLocks, jobs: collector.jobs.size },
    locks: { total: held.length, offset, size: query.size, rows },
    waiters: { total: withWaiters.length, locks: withWaiters.slice(0, WAITER_LOCKS_SHOWN) },
    jobs: {
      total: jobs.length,
      list: jobs.slice(0, JOBS_SHOWN).map(([name, view]) => view ?? { name, held: false, lastTick: null, runs: [] }),
    },
    timeline: timeline(collector.grants, matches, now),
  };
}

/**
 * The timeline's lanes, over the last TIMELINE_MS or, while the grants seen reach back less far,
 * over the whole minutes they span (at least one), so a dashboard just started is not a blank strip.
 */
function timeline(grants: ReadonlyMap<string, readonly Grant[]>, matches: (name: string) => boolean, now: number) {
  const shown = lanes(grants, matches, now);
  const earliest = Math.min(now, ...shown.map((lane) => lane.grants[0]?.start ?? now));
  const minutes = Math.min(TIMELINE_MS / 60_000, Math.max(1, Math.ceil((now - earliest) / 60_000)));
  return { from: now - minutes * 60_000, to: now, lanes: shown };
}

function lanes(
  grants: ReadonlyMap<string, readonly Grant[]>,
  matches: (name: string) => boolean,
  now: number,
): { name: string; grants: readonly Grant[]; count: number }[] {
  const from = now - TIMELINE_MS;
  const found: { name: string; grants: readonly Grant[]; latest: number; count: number }[] = [];
  for (const [name, list] of grants) {
    if (!matches(name)) continue;
    const inWindow = list.filter((g) => g.end === null || g.end >= from);
    const latest = inWindow.at(-1);
    if (latest) found.push({ name, grants: inWindow, latest: latest.start, count: inWindow.length });
  }
  found.sort((a, b) => b.latest - a.latest);
  return found
    .slice(0, LANES_SHOWN)
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map(({ name, grants: list, count }) => ({ name, count, grants: list.slice(-GRANTS_PER_LANE) }));
}
