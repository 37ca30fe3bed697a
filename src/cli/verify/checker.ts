import { count, type Level, worst } from '../doctor/finding.js';
import type { Fault, History, HistoryEvent } from './history.js';

/**
 * The checker: reads a run's history and says whether the lock kept its promises. All times are
 * this machine's wall clock as each process read it (see history.ts). A grant is believed valid
 * from the moment its worker logged it until the validity it logged (extended by the watchdog),
 * or earlier if the worker released it, learnt it was lost, or died. Every approximation here
 * shortens a belief, never lengthens it, so an overlap found is an overlap that happened.
 */

export interface Grant {
  readonly worker: number;
  readonly pid: number;
  readonly token: number;
  /** When the worker logged the grant. */
  readonly start: number;
  /** Believed valid until (extensions included). */
  until: number;
  lostAt: number | null;
  releaseAt: number | null;
  /** The process died (killed, exited) at this time while holding. */
  diedAt: number | null;
  /** The last time the worker acted under this grant (read, write, release). */
  lastAct: number;
}

export interface Write {
  readonly worker: number;
  readonly pid: number;
  readonly token: number;
  /** The version written; null for a write refused before it computed one. */
  readonly n: number | null;
  readonly at: number;
  /** `moved`: not written, the fence moved between its read and its write, so it was computed again. */
  outcome: 'ok' | 'refused' | 'unknown' | 'moved';
  doneAt: number | null;
}

export type ViolationKind =
  | 'overlap'
  | 'lost-update'
  | 'stale-write'
  | 'regressed-record'
  | 'repeated-token'
  | 'decreasing-token';

export interface Violation {
  readonly kind: ViolationKind;
  readonly message: string;
  /** When it happened, for the timeline. */
  readonly at: number;
  readonly to: number;
  readonly workers: readonly number[];
}

export interface Check {
  readonly check: 'overlap' | 'lost-updates' | 'tokens' | 'starvation' | 'recovery';
  readonly level: Level;
  readonly summary: string;
}

export interface WorkerSummary {
  readonly worker: number;
  readonly grants: number;
  readonly accepted: number;
  readonly refused: number;
  readonly unknown: number;
  readonly lost: number;
  readonly paused: number;
  readonly killed: number;
  readonly errors: number;
}

export interface Recovery {
  readonly fault: Fault;
  /** ms from the fault's start to the next grant to another worker; null if none came before the end. */
  readonly nextGrantMs: number | null;
}

export interface CheckResult {
  readonly level: Level;
  readonly checks: readonly Check[];
  readonly violations: readonly Violation[];
  readonly grants: readonly Grant[];
  readonly writes: readonly Write[];
  readonly workers: readonly WorkerSummary[];
  readonly recoveries: readonly Recovery[];
}

/** The end of a grant's believed validity: the first of its logged validity, a loss, its release, its death. */
export function validEnd(g: Grant): number {
  const end = Math.min(g.until, g.lostAt ?? Infinity, g.releaseAt ?? Infinity, g.diedAt ?? Infinity);
  return Math.max(g.start, end);
}

type EventOf<E extends HistoryEvent['e']> = Extract<HistoryEvent, { readonly e: E }>;

/** Grants and writes, rebuilt from each process's events in the order it logged them. */
function rebuild(events: readonly HistoryEvent[]): { grants: Grant[]; writes: Write[]; errors: Map<number, number> } {
  const run = new Rebuild();
  for (const ev of events) {
    switch (ev.e) {
      case 'granted':
        run.granted(ev);
        break;
      case 'valid':
        run.valid(ev);
        break;
      case 'lost':
        run.lost(ev);
        break;
      case 'read':
        run.read(ev);
        break;
      case 'write':
        run.write(ev);
        break;
      case 'wrote':
        run.wrote(ev);
        break;
      case 'release':
        run.release(ev);
        break;
      case 'released':
        run.released(ev);
        break;
      case 'exited':
        run.exited(ev);
        break;
      case 'error':
        run.error(ev);
        break;
      default:
        break;
    }
  }
  return { grants: run.grants, writes: run.writes, errors: run.errors };
}

/** The state of a rebuild: what each process holds, and its writes still waiting for their outcome. */
class Rebuild {
  readonly grants: Grant[] = [];
  readonly writes: Write[] = [];
  /** Errors logged, by worker. */
  readonly errors = new Map<number, number>();
  /** The grant each process holds, by pid. */
  readonly #open = new Map<number, Grant>();
  /** Every grant, by `pid:token`. */
  readonly #byToken = new Map<string, Grant>();
  /** Writes sent and not yet answered, by `pid:token`. */
  readonly #sent = new Map<string, Write>();

  granted(ev: EventOf<'granted'>): void {
    const g: Grant = {
      worker: ev.w,
      pid: ev.pid,
      token: ev.token,
      start: ev.t,
      until: ev.until,
      lostAt: null,
      releaseAt: null,
      diedAt: null,
      lastAct: ev.t,
    };
    this.grants.push(g);
    this.#open.set(ev.pid, g);
    this.#byToken.set(`${ev.pid}:${ev.token}`, g);
  }

  /** The watchdog extended the process's lease. */
  valid(ev: EventOf<'valid'>): void {
    const g = this.#open.get(ev.pid);
    if (g) g.until = Math.max(g.until, ev.until);
  }

  lost(ev: EventOf<'lost'>): void {
    const g = this.#open.get(ev.pid);
    if (g && g.lostAt === null) g.lostAt = ev.t;
  }

  read(ev: EventOf<'read'>): void {
    // fencedUpdate reads again only when its write found the fence moved: that write was not applied.
    const pending = this.#sent.get(`${ev.pid}:${ev.token}`);
    if (pending) {
      pending.outcome = 'moved';
      pending.doneAt = ev.t;
      this.#sent.delete(`${ev.pid}:${ev.token}`);
    }
    this.#act(ev.pid, ev.token, ev.t);
  }

  write(ev: EventOf<'write'>): void {
    const w: Write = {
      worker: ev.w,
      pid: ev.pid,
      token: ev.token,
      n: ev.n,
      at: ev.t,
      outcome: 'unknown',
      doneAt: null,
    };
    this.writes.push(w);
    this.#sent.set(`${ev.pid}:${ev.token}`, w);
    this.#act(ev.pid, ev.token, ev.t);
  }

  wrote(ev: EventOf<'wrote'>): void {
    const key = `${ev.pid}:${ev.token}`;
    let w = this.#sent.get(key);
    this.#sent.delete(key);
    if (w === undefined) {
      // Refused at the read: the fence was already above the token, nothing was computed.
      w = { worker: ev.w, pid: ev.pid, token: ev.token, n: null, at: ev.t, outcome: 'unknown', doneAt: null };
      this.writes.push(w);
    }
    w.outcome = ev.ok === true ? 'ok' : ev.ok === false ? 'refused' : 'unknown';
    w.doneAt = ev.t;
    this.#act(ev.pid, ev.token, ev.t);
  }

  release(ev: EventOf<'release'>): void {
    const g = this.#open.get(ev.pid);
    if (g) {
      g.releaseAt = ev.t;
      g.lastAct = Math.max(g.lastAct, ev.t);
    }
  }

  released(ev: EventOf<'released'>): void {
    this.#open.delete(ev.pid);
  }

  /** The process died: a grant it held and had not begun to release ends there. */
  exited(ev: EventOf<'exited'>): void {
    const g = this.#open.get(ev.pid);
    if (g && g.releaseAt === null) g.diedAt = ev.t;
    this.#open.delete(ev.pid);
  }

  error(ev: EventOf<'error'>): void {
    this.errors.set(ev.w, (this.errors.get(ev.w) ?? 0) + 1);
  }

  /** The worker acted under a grant: it believed it held the lock at `t`. */
  #act(pid: number, token: number, t: number): void {
    const g = this.#byToken.get(`${pid}:${token}`);
    if (g) g.lastAct = Math.max(g.lastAct, t);
  }
}

function clock(ms: number, origin: number): string {
  return `${((ms - origin) / 1_000).toFixed(3)} s`;
}

function overlaps(grants: readonly Grant[], origin: number): Violation[] {
  const sorted = [...grants].sort((a, b) => a.start - b.start);
  const found: Violation[] = [];
  for (let j = 0; j < sorted.length; j++) {
    const b = sorted[j] as Grant;
    for (let i = 0; i < j; i++) {
      const a = sorted[i] as Grant;
      if (a.pid === b.pid) continue;
      const from = b.start;
      const to = Math.min(validEnd(a), validEnd(b));
      if (to <= from) continue;
      found.push({
        kind: 'overlap',
        at: from,
        to,
        workers: [a.worker, b.worker],
        message: `worker ${a.worker} (token ${a.token}) and worker ${b.worker} (token ${b.token}) both held a valid lease for ${to - from} ms from ${clock(from, origin)}`,
      });
    }
  }
  return found;
}

function lostUpdates(writes: readonly Write[], final: History['final'], origin: number): Violation[] {
  const accepted = writes.filter((w): w is Write & { n: number } => w.outcome === 'ok' && w.n !== null);
  const found: Violation[] = [];
  const byVersion = new Map<number, (Write & { n: number })[]>();
  for (const w of accepted) byVersion.set(w.n, [...(byVersion.get(w.n) ?? []), w]);
  for (const [n, same] of byVersion) {
    if (same.length < 2) continue;
    const who = same.map((w) => `worker ${w.worker} (token ${w.token})`).join(', ');
    const at = Math.min(...same.map((w) => w.doneAt ?? w.at));
    found.push({
      kind: 'lost-update',
      at,
      to: Math.max(...same.map((w) => w.doneAt ?? w.at)),
      workers: same.map((w) => w.worker),
      message: `version ${n} of the record was accepted ${same.length} times, from ${who}: each was computed from version ${n - 1}, so ${same.length - 1} of the updates ${same.length === 2 ? 'is' : 'are'} lost (at ${clock(at, origin)})`,
    });
  }
  // In the record's own order (its version), a token must never fall below one accepted before it.
  const ordered = [...accepted].sort((a, b) => a.n - b.n || (a.doneAt ?? 0) - (b.doneAt ?? 0));
  let highest: (Write & { n: number }) | undefined;
  for (const w of ordered) {
    if (highest !== undefined && w.token < highest.token) {
      found.push({
        kind: 'stale-write',
        at: w.doneAt ?? w.at,
        to: w.doneAt ?? w.at,
        workers: [w.worker, highest.worker],
        message: `worker ${w.worker} wrote version ${w.n} with token ${w.token}, after worker ${highest.worker}'s version ${highest.n} with the higher token ${highest.token} had been accepted (at ${clock(w.doneAt ?? w.at, origin)})`,
      });
    }
    if (highest === undefined || w.token > highest.token) highest = w;
  }
  const top = ordered[ordered.length - 1];
  if (final !== null && top !== undefined && final.n < top.n) {
    found.push({
      kind: 'regressed-record',
      at: top.doneAt ?? top.at,
      to: top.doneAt ?? top.at,
      workers: [final.worker],
      message: `the record ended at version ${final.n} (written by worker ${final.worker}), below version ${top.n} that was accepted: a later write overwrote it with an older state`,
    });
  }
  return found;
}

function tokenOrder(grants: readonly Grant[], origin: number): Violation[] {
  const found: Violation[] = [];
  const seen = new Map<number, Grant>();
  for (const g of grants) {
    const first = seen.get(g.token);
    if (first === undefined) seen.set(g.token, g);
    else {
      found.push({
        kind: 'repeated-token',
        at: g.start,
        to: g.start,
        workers: [first.worker, g.worker],
        message: `token ${g.token} was granted twice: to worker ${first.worker} at ${clock(first.start, origin)} and to worker ${g.worker} at ${clock(g.start, origin)}`,
      });
    }
  }
  // Grants in the order their workers saw them. A grant seen with no validity left was logged
  // late (its worker was paused between the reply and the log): its place in the order is unknown.
  const ordered = grants.filter((g) => g.until > g.start).sort((a, b) => a.start - b.start);
  let highest: Grant | undefined;
  for (const g of ordered) {
    if (highest !== undefined && g.token < highest.token) {
      found.push({
        kind: 'decreasing-token',
        at: g.start,
        to: g.start,
        workers: [highest.worker, g.worker],
        message: `worker ${g.worker} was granted token ${g.token} at ${clock(g.start, origin)}, after worker ${highest.worker} had been granted the higher token ${highest.token}`,
      });
    }
    if (highest === undefined || g.token > highest.token) highest = g;
  }
  return found;
}

function recoveries(faults: readonly Fault[], grants: readonly Grant[]): Recovery[] {
  const byStart = [...grants].sort((a, b) => a.start - b.start);
  return faults.map((fault) => {
    const next = byStart.find((g) => g.start > fault.at && g.worker !== fault.worker);
    return { fault, nextGrantMs: next === undefined ? null : next.start - fault.at };
  });
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

/** What else the writes say: stale writes the fence refused, late ones it let through, retries, no replies. */
function writeNotes(writes: readonly Write[], grants: readonly Grant[]): string {
  const grantOf = new Map(grants.map((g) => [`${g.pid}:${g.token}`, g]));
  const of = (outcome: Write['outcome']) => writes.filter((w) => w.outcome === outcome).length;
  const late = writes.filter((w) => {
    const g = grantOf.get(`${w.pid}:${w.token}`);
    return w.outcome === 'ok' && g !== undefined && w.at > validEnd(g);
  }).length;
  const notes = [
    of('refused') > 0 ? `${count(of('refused'), 'stale write')} refused by the fence` : '',
    late > 0
      ? `${count(late, 'write')} sent after ${late === 1 ? 'its' : 'their'} lease accepted, no newer token having written yet (as fencing allows)`
      : '',
    of('moved') > 0 ? `${of('moved')} computed again after the fence moved` : '',
    of('unknown') > 0 ? `${of('unknown')} with no reply (a kill, a timeout)` : '',
  ];
  return notes
    .filter((n) => n !== '')
    .map((n) => `; ${n}`)
    .join('');
}

export function check(history: History): CheckResult {
  const origin = history.start;
  const { grants, writes, errors } = rebuild(history.events);
  const violations = [
    ...overlaps(grants, origin),
    ...lostUpdates(writes, history.final, origin),
    ...tokenOrder(grants, origin),
  ];
  const of = (kinds: readonly string[]) => violations.filter((v) => kinds.includes(v.kind));
  const perWorker = Array.from({ length: history.workers }, (_, i) => i + 1);
  const recovered = recoveries(history.faults, grants);
  const checks: Check[] = [
    overlapCheck(of(['overlap']), grants),
    lostUpdatesCheck(of(['lost-update', 'stale-write', 'regressed-record']), writes, grants),
    tokensCheck(of(['repeated-token', 'decreasing-token']), grants),
    starvationCheck(perWorker, grants),
    recoveryCheck(recovered),
  ];
  return {
    level: worst(checks.map((c) => c.level)),
    checks,
    violations,
    grants,
    writes,
    workers: perWorker.map((w) => workerSummary(w, { grants, writes, errors, faults: history.faults })),
    recoveries: recovered,
  };
}

function overlapCheck(overlapping: readonly Violation[], grants: readonly Grant[]): Check {
  return {
    check: 'overlap',
    level: overlapping.length > 0 ? 'unsafe' : 'ok',
    summary:
      overlapping.length > 0
        ? `${count(overlapping.length, 'overlap')} of valid leases: two workers each believed it held the lock at the same instant`
        : `no two workers held a valid lease at the same instant (${count(grants.length, 'grant')})`,
  };
}

function lostUpdatesCheck(lost: readonly Violation[], writes: readonly Write[], grants: readonly Grant[]): Check {
  const accepted = writes.filter((w) => w.outcome === 'ok').length;
  return {
    check: 'lost-updates',
    level: lost.length > 0 ? 'unsafe' : accepted === 0 ? 'warn' : 'ok',
    summary:
      lost.length > 0
        ? `${count(lost.length, 'lost update')} among ${accepted} accepted writes${writeNotes(writes, grants)}`
        : accepted === 0
          ? 'no write was accepted: nothing to check'
          : `none: ${accepted} accepted writes, each on the version before it, tokens never going back${writeNotes(writes, grants)}`,
  };
}

function tokensCheck(tokens: readonly Violation[], grants: readonly Grant[]): Check {
  return {
    check: 'tokens',
    level: tokens.length > 0 ? 'unsafe' : 'ok',
    summary:
      tokens.length > 0
        ? `${count(tokens.length, 'token')} repeated or going back`
        : `every grant's token above every token granted before it (${count(grants.length, 'grant')})`,
  };
}

function starvationCheck(perWorker: readonly number[], grants: readonly Grant[]): Check {
  const starved = perWorker.filter((w) => !grants.some((g) => g.worker === w));
  const grantCounts = perWorker.map((w) => grants.filter((g) => g.worker === w).length);
  return {
    check: 'starvation',
    level: starved.length > 0 ? 'warn' : 'ok',
    summary:
      starved.length > 0
        ? `never granted the lock: ${starved.map((w) => `worker ${w}`).join(', ')}`
        : `every worker was granted the lock (${Math.min(...grantCounts)} to ${Math.max(...grantCounts)} times each)`,
  };
}

function recoveryCheck(recovered: readonly Recovery[]): Check {
  const never = recovered.filter((r) => r.nextGrantMs === null);
  const times = recovered.flatMap((r) => (r.nextGrantMs === null ? [] : [r.nextGrantMs]));
  return {
    check: 'recovery',
    level: never.length > 0 ? 'warn' : 'ok',
    summary:
      recovered.length === 0
        ? 'no faults injected'
        : never.length > 0
          ? `the lock was not granted again before the end after ${count(never.length, 'fault')}`
          : recovered.length === 1
            ? `after the fault the lock was granted again in ${times[0]} ms`
            : `after each of ${recovered.length} faults the lock was granted again: median ${median(times)} ms, at most ${Math.max(...times)} ms`,
  };
}

interface RunFacts {
  readonly grants: readonly Grant[];
  readonly writes: readonly Write[];
  readonly errors: ReadonlyMap<number, number>;
  readonly faults: readonly Fault[];
}

function workerSummary(w: number, { grants, writes, errors, faults }: RunFacts): WorkerSummary {
  const mine = writes.filter((x) => x.worker === w);
  return {
    worker: w,
    grants: grants.filter((g) => g.worker === w).length,
    accepted: mine.filter((x) => x.outcome === 'ok').length,
    refused: mine.filter((x) => x.outcome === 'refused').length,
    unknown: mine.filter((x) => x.outcome === 'unknown').length,
    lost: grants.filter((g) => g.worker === w && g.lostAt !== null).length,
    paused: faults.filter((f) => f.worker === w && f.kind === 'pause').length,
    killed: faults.filter((f) => f.worker === w && f.kind === 'kill').length,
    errors: errors.get(w) ?? 0,
  };
}
