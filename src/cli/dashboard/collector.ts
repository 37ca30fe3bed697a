import { runRecords } from '../../schedule/history.js';
import { type LockState, portsOf, type SharedState, type SharedStore, type Store } from '../../store/port.js';
import { shortToken } from '../format.js';
import type { Operator } from '../operator.js';

/**
 * The dashboard's one reader of the backend. Every interval it scans the lock names (as `list`
 * does, a bounded page at a time) and reads the details of a bounded number of them, the ones on
 * an open page first; every open page is then served from what this one scan found, so the cost
 * does not grow with the pages open. It scans only while a page is open (and a short while after
 * the last one closed, so a page reconnecting with a new filter finds its data warm).
 */

/** Entries SCAN (or its equivalent) looks at per round trip, as `list`. */
const SCAN_COUNT = 500;
/** Locks whose details (holder, lease, queue) are read per interval; the others keep their last reading. */
export const DETAIL_BUDGET = 500;
/** Reads in flight at once. */
const BATCH = 50;
/** Names first seen per interval that are asked whether they are a scheduled job (a run history). */
const PROBE_BUDGET = 50;
/** Runs shown per job. */
export const RUNS_SHOWN = 8;
/** Jobs followed at most; beyond this, newly found ones are not added. */
const MAX_JOBS = 50;
/** Waiters named per lock (the count covers them all). */
export const WAITERS_SHOWN = 5;
/** How far back the timeline reaches. */
export const TIMELINE_MS = 5 * 60_000;
/** Grants kept per lock within the window; the oldest go first. */
const GRANTS_KEPT = 200;
/** How long the scan goes on after the last page closed. */
const LINGER_MS = 30_000;
/** Names remembered as probed (jobs or not) before the memory starts again. */
const PROBED_KEPT = 200_000;

export interface Waiter {
  /** The owner token, shortened: enough to tell waiters apart, not to impersonate one. */
  readonly id: string;
  /** Dashboard clock (ms) when this waiter was first seen queued. */
  readonly since: number;
  /** Already queued when the dashboard first read this lock's queue: it has waited at least this long. */
  readonly atLeast: boolean;
}

/** What one read of a lock found. Times named `…At` are ms since the epoch. */
export interface LockDetail {
  /** `free`: found by the scan but neither held nor shared (reserved for a waiter, or just released). */
  readonly mode: 'exclusive' | 'semaphore' | 'shared' | 'free';
  /** A semaphore's permits. */
  readonly limit: number | null;
  /** Holders now: 1, or the shared holds. */
  readonly holders: number;
  /** The holder's owner token, shortened; null for shared holds. */
  readonly owner: string | null;
  readonly instance: string | null;
  /** The store's time of the (latest) grant. */
  readonly takenAt: number | null;
  /** On the dashboard's clock: when the lease ends unless extended; null for a key without expiry. */
  readonly expiresAt: number | null;
  /** The holder's fencing token (a shared lock's newest hold's). */
  readonly fence: number;
  readonly waiters: number;
  readonly first: readonly Waiter[];
}

export interface LockRow {
  readonly name: string;
  /** null until the first read. */
  detail: LockDetail | null;
  /** Dashboard clock of the last read; 0 before the first. */
  readAt: number;
}

export interface JobRun {
  readonly tick: number | null;
  readonly instance: string;
  readonly fence: number;
  readonly startedAt: number;
  readonly duration: number | null;
  readonly outcome: string;
  readonly error: string | null;
}

export interface JobView {
  readonly name: string;
  readonly held: boolean;
  readonly lastTick: number | null;
  readonly runs: readonly JobRun[];
}

/** One grant on the timeline: start on the store's clock, end on the dashboard's (null: still held). */
export interface Grant {
  readonly fence: number;
  readonly instance: string;
  readonly start: number;
  end: number | null;
}

export interface CycleStatus {
  /** Dashboard clock at the end of the last scan that completed, or 0. */
  readonly at: number;
  /** ms the last scan took. */
  readonly took: number;
  /** Locks whose details were read in the last scan. */
  readonly read: number;
  /** The last scan's error (already redacted), or null. */
  readonly error: string | null;
}

export interface CollectorOptions {
  readonly interval: number;
  /** Jobs named on the command line: followed from the start, found or not. */
  readonly jobs: readonly string[];
  /** Every text that leaves for a page passes through this. */
  readonly redact: (text: string) => string;
  /** The names on the pages open now, read first each interval. */
  readonly wanted: () => Iterable<string>;
  /** After each scan, successful or not. */
  readonly published: () => void;
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

export class Collector {
  readonly #op: Operator;
  readonly #options: CollectorOptions;
  readonly #shared: SharedStore | undefined;
  /** Every name the last scan found, sorted. */
  #names: string[] = [];
  readonly #rows = new Map<string, LockRow>();
  /** Per lock, the queue's length and each first waiter's full owner token → when first seen (only short forms leave). */
  readonly #queues = new Map<string, { count: number; seen: Map<string, { since: number; atLeast: boolean }> }>();
  readonly #jobs = new Map<string, JobView | null>();
  readonly #probed = new Set<string>();
  readonly #grants = new Map<string, Grant[]>();
  #status: CycleStatus = { at: 0, took: 0, read: 0, error: null };
  #running: Promise<void> | null = null;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #again = false;
  #subscribers = 0;
  #lastLeft = 0;
  #stopped = false;

  constructor(op: Operator, options: CollectorOptions) {
    this.#op = op;
    this.#options = options;
    this.#shared = portsOf(op.lease as Store).shared;
    for (const job of options.jobs) this.#jobs.set(job, null);
  }

  get names(): readonly string[] {
    return this.#names;
  }
  row(name: string): LockRow | undefined {
    return this.#rows.get(name);
  }
  get status(): CycleStatus {
    return this.#status;
  }
  /** Followed jobs, by name; a job not read yet is null. */
  get jobs(): ReadonlyMap<string, JobView | null> {
    return this.#jobs;
  }
  get grants(): ReadonlyMap<string, readonly Grant[]> {
    return this.#grants;
  }
  /** Whether a scan has completed (a page can be sent something). */
  get ready(): boolean {
    return this.#status.at > 0 || this.#status.error !== null;
  }

  /** A page opened: scan now if idle. */
  subscribe(): void {
    this.#subscribers += 1;
    if (this.#running === null && this.#timer === undefined) this.#schedule(0);
  }

  unsubscribe(): void {
    this.#subscribers = Math.max(0, this.#subscribers - 1);
    if (this.#subscribers === 0) this.#lastLeft = Date.now();
  }

  /** Scan again as soon as the current scan ends (after a release from a page). */
  kick(): void {
    if (this.#stopped) return;
    if (this.#running !== null) {
      this.#again = true;
      return;
    }
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#schedule(0);
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** The current scan, if one runs (for a clean shutdown). */
  settled(): Promise<void> {
    return this.#running ?? Promise.resolve();
  }

  #schedule(delay: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      const idle = this.#subscribers === 0 && Date.now() - this.#lastLeft > LINGER_MS;
      if (idle) return;
      const started = Date.now();
      this.#running = this.#cycle().finally(() => {
        this.#running = null;
        const took = Date.now() - started;
        // Never busier than half the time: a scan slower than the interval stretches it.
        const next = this.#again ? 0 : Math.max(this.#options.interval - took, took);
        this.#again = false;
        this.#schedule(next);
      });
    }, delay);
  }

  async #cycle(): Promise<void> {
    const started = Date.now();
    let error: string | null = null;
    let read = 0;
    try {
      const names: string[] = [];
      for await (const name of this.#op.scanLocks('*', SCAN_COUNT)) names.push(name);
      if (this.#stopped) return;
      names.sort(byName);
      this.#merge(names);
      const chosen = this.#choose();
      const failures: unknown[] = [];
      for (let i = 0; i < chosen.length && !this.#stopped; i += BATCH) {
        const batch = chosen.slice(i, i + BATCH);
        const results = await Promise.allSettled(batch.map((name) => this.#read(name)));
        for (const result of results) {
          if (result.status === 'fulfilled') read += 1;
          else failures.push(result.reason);
        }
      }
      failures.push(...(await this.#readJobs()));
      if (failures.length > 0) error = `${failures.length} reads failed: ${message(failures[0])}`;
      this.#prune(Date.now());
    } catch (e) {
      error = message(e);
    }
    if (this.#stopped) return;
    const now = Date.now();
    this.#status = {
      at: error === null ? now : this.#status.at,
      took: now - started,
      read,
      error: error === null ? null : this.#options.redact(error),
    };
    this.#options.published();
  }

  /** Take the scan's names: rows for new ones, gone ones dropped and their grants ended. */
  #merge(names: string[]): void {
    const now = Date.now();
    const found = new Set(names);
    for (const name of this.#rows.keys()) {
      if (found.has(name)) continue;
      this.#rows.delete(name);
      this.#queues.delete(name);
      this.#endGrants(name, now, new Set());
    }
    for (const name of names) {
      if (!this.#rows.has(name)) this.#rows.set(name, { name, detail: null, readAt: 0 });
    }
    this.#names = names;
  }

  /**
   * Which locks to read this time, at most DETAIL_BUDGET: those on an open page, then those never
   * read, then those whose lease should have ended by now (extended, or about to go), then the
   * longest unread.
   */
  #choose(): string[] {
    const chosen = new Set<string>();
    for (const name of this.#options.wanted()) {
      if (chosen.size >= DETAIL_BUDGET) break;
      if (this.#rows.has(name)) chosen.add(name);
    }
    if (chosen.size >= DETAIL_BUDGET) return [...chosen];
    const soon = Date.now() + this.#options.interval;
    const rank = (row: LockRow): number => {
      if (row.detail === null) return 0;
      const ends = row.detail.expiresAt;
      return ends !== null && ends <= soon ? 1 : 2;
    };
    const rest = [...this.#rows.values()].filter((row) => !chosen.has(row.name));
    rest.sort((a, b) => rank(a) - rank(b) || a.readAt - b.readAt);
    for (const row of rest) {
      if (chosen.size >= DETAIL_BUDGET) break;
      chosen.add(row.name);
    }
    return [...chosen];
  }

  async #read(name: string): Promise<void> {
    const op = this.#op;
    const [state, queue] = await Promise.all([
      op.bounded(op.lease.inspect(name), 'inspect'),
      op.bounded(op.admin.queued(name, WAITERS_SHOWN), 'queued'),
    ]);
    // One held by shared holds (a semaphore's permits, a read-write lock's readers) has no owner.
    const shared =
      state.owner === null && this.#shared
        ? await op.bounded(this.#shared.inspectShared(name), 'inspect-shared')
        : null;
    const now = Date.now();
    const row = this.#rows.get(name);
    if (!row) return;
    // Read for the first time, or not for a while: waiters found may have queued any time before.
    const unseen = row.readAt === 0 || now - row.readAt > 2 * this.#options.interval;
    const first = this.#waiters(name, queue.first, queue.count, unseen, now);
    row.detail = describe(state, shared, queue.count, first, now);
    row.readAt = now;
    this.#record(name, state, shared, now);
  }

  /** The first waiters with when each was first seen; the queue's other waiters are only counted. */
  #waiters(name: string, tokens: readonly string[], count: number, unseen: boolean, now: number): readonly Waiter[] {
    const before = this.#queues.get(name);
    // A waiter new among the first may have been queued unseen behind them: then it waited longer.
    const hidden = unseen || (before !== undefined && before.count > before.seen.size);
    const next = new Map<string, { since: number; atLeast: boolean }>();
    for (const token of tokens) {
      next.set(token, before?.seen.get(token) ?? { since: now, atLeast: hidden });
    }
    if (count === 0) this.#queues.delete(name);
    else this.#queues.set(name, { count, seen: next });
    return [...next].map(([token, seen]) => ({ id: shortToken(token), ...seen }));
  }

  /** A new grant starts a bar on the timeline; a grant no longer held ends its bar. */
  #record(name: string, state: LockState, shared: SharedState | null, now: number): void {
    const holds =
      state.owner !== null && state.holder
        ? [state.holder]
        : (shared?.holds ?? []).map((h) => ({ token: h.token, takenAt: h.takenAt, instance: h.instance }));
    const live = new Set(holds.map((h) => h.token));
    this.#endGrants(name, now, live);
    for (const hold of holds) this.#addGrant(name, hold.token, hold.instance, hold.takenAt, null);
  }

  #addGrant(name: string, fence: number, instance: string, start: number, end: number | null): void {
    let list = this.#grants.get(name);
    if (!list) {
      list = [];
      this.#grants.set(name, list);
    }
    const known = list.find((g) => g.fence === fence);
    if (known) {
      if (end !== null) known.end = end;
      return;
    }
    list.push({ fence, instance, start, end });
    list.sort((a, b) => a.start - b.start);
    if (list.length > GRANTS_KEPT) list.splice(0, list.length - GRANTS_KEPT);
  }

  #endGrants(name: string, now: number, live: ReadonlySet<number>): void {
    for (const grant of this.#grants.get(name) ?? []) {
      if (grant.end === null && !live.has(grant.fence)) grant.end = now;
    }
  }

  /** Read the followed jobs, and ask a few names seen for the first time whether they are jobs. */
  async #readJobs(): Promise<unknown[]> {
    const op = this.#op;
    const failures: unknown[] = [];
    const probes: string[] = [];
    for (const name of this.#names) {
      if (probes.length >= PROBE_BUDGET || this.#jobs.size + probes.length >= MAX_JOBS) break;
      if (this.#probed.has(name) || this.#jobs.has(name)) continue;
      probes.push(name);
    }
    if (this.#probed.size > PROBED_KEPT) this.#probed.clear();
    const probed = await Promise.allSettled(probes.map((name) => op.bounded(op.jobs.readJob(name, 1), 'read-job')));
    probed.forEach((result, i) => {
      const name = probes[i] as string;
      if (result.status === 'rejected') {
        failures.push(result.reason);
        return;
      }
      this.#probed.add(name);
      if (result.value.runs.length > 0 || result.value.lastTick !== null) this.#jobs.set(name, null);
    });
    const names = [...this.#jobs.keys()];
    const states = await Promise.allSettled(
      names.map((name) => op.bounded(op.jobs.readJob(name, RUNS_SHOWN), 'read-job')),
    );
    states.forEach((result, i) => {
      const name = names[i] as string;
      if (result.status === 'rejected') {
        failures.push(result.reason);
        return;
      }
      const runs = runRecords(name, result.value).map((run) => ({
        tick: run.tick?.getTime() ?? null,
        instance: run.instance,
        fence: run.fencingToken,
        startedAt: run.startedAt.getTime(),
        duration: run.duration,
        outcome: run.outcome,
        error: run.error === null ? null : this.#options.redact(run.error),
      }));
      this.#jobs.set(name, { name, held: result.value.held, lastTick: result.value.lastTick, runs });
      // A job's runs are its lock's grants, known exactly: each run from its start to its finish.
      for (const run of runs) {
        const end =
          run.duration === null ? (run.outcome === 'running' ? null : run.startedAt) : run.startedAt + run.duration;
        this.#addGrant(name, run.fence, run.instance, run.startedAt, end);
      }
    });
    return failures;
  }

  /** Forget grants that ended before the window. */
  #prune(now: number): void {
    const from = now - TIMELINE_MS;
    for (const [name, list] of this.#grants) {
      const kept = list.filter((g) => g.end === null || g.end >= from);
      if (kept.length === 0) this.#grants.delete(name);
      else if (kept.length !== list.length) this.#grants.set(name, kept);
    }
  }
}

/** One lock's reading, as the page shows it. */
export function describe(
  state: LockState,
  shared: SharedState | null,
  waiters: number,
  first: readonly Waiter[],
  now: number,
): LockDetail {
  const common = { waiters, first };
  if (state.owner !== null) {
    return {
      ...common,
      mode: 'exclusive',
      limit: null,
      holders: 1,
      owner: shortToken(state.owner),
      instance: state.holder?.instance ?? null,
      takenAt: state.holder?.takenAt ?? null,
      expiresAt: state.pttl < 0 ? null : now + state.pttl,
      fence: state.holder?.token ?? state.fence,
    };
  }
  if (shared && shared.holds.length > 0) {
    // The lock lasts as long as its longest hold; the latest grant is its newest hold's.
    const last = shared.holds.reduce((a, b) => (b.takenAt > a.takenAt ? b : a));
    const pttl = Math.max(...shared.holds.map((h) => h.pttl));
    return {
      ...common,
      mode: shared.mode === 'semaphore' ? 'semaphore' : 'shared',
      limit: shared.limit,
      holders: shared.holds.length,
      owner: null,
      instance: last.instance,
      takenAt: last.takenAt,
      expiresAt: now + pttl,
      fence: last.token,
    };
  }
  return {
    ...common,
    mode: 'free',
    limit: null,
    holders: 0,
    owner: null,
    instance: null,
    takenAt: null,
    expiresAt: null,
    fence: state.fence,
  };
}

function message(error: unknown): string {
  return error instanceof Error && error.message !== '' ? error.message : String(error);
}
