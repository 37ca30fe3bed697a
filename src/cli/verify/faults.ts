import { setTimeout as sleep } from 'node:timers/promises';
import type { Fault, FaultKind } from './history.js';
import type { LocalServer } from './local-server.js';
import type { WorkerSlot } from './workers.js';

/**
 * The fault injector: one fault at a time, the kinds taken in turn, each aimed where it hurts
 * most (a worker between reading the record and writing it, else the holder, else anyone), held
 * long enough to outlast the lease, then healed, then a quiet gap. Faults touch only verify's own
 * processes and links, and with --local its own server: never the user's server.
 */
export interface InjectorContext {
  readonly kinds: readonly FaultKind[];
  readonly slots: readonly WorkerSlot[];
  readonly server: LocalServer | null;
  readonly ttl: number;
  /** No fault starts that could not be healed this long before `end`. */
  readonly end: number;
  /** Resolves when a worker reports anything (the phases may have changed). */
  readonly changed: () => Promise<void>;
  readonly record: (fault: Fault) => void;
  /** Aborted when the run ends: the fault under way is healed at once. */
  readonly signal: AbortSignal;
}

/** The actions of the proxy fault, in turn. */
const PROXY_ACTIONS = ['partition', 'delay', 'reset'] as const;
/** How long a killed worker stays dead before a new process takes its slot. */
const RESTART_AFTER = 250;

function pick<T>(items: readonly T[]): T | undefined {
  return items[Math.floor(Math.random() * items.length)];
}

/** Sleeps `ms`, or less if the run ends; never rejects. */
async function hold(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal }).catch(() => undefined);
}

/** How long each fault lasts: past the lease, so that someone else is granted the lock meanwhile. */
function lengthOf(kind: FaultKind, ttl: number): number {
  return kind === 'kill' || kind === 'restart' ? RESTART_AFTER : 2 * ttl;
}

/** The worst target for a fault on a worker: one mid-work, else the holder; waits a little for one. */
async function target(ctx: InjectorContext): Promise<WorkerSlot | undefined> {
  const live = () => ctx.slots.filter((s) => s.phase !== 'dead' && s.phase !== 'starting' && !s.paused);
  const deadline = Date.now() + 2 * ctx.ttl;
  while (Date.now() < deadline && !ctx.signal.aborted) {
    const working = live().filter((s) => s.phase === 'working');
    if (working.length > 0) return pick(working);
    await Promise.race([ctx.changed(), hold(ctx.ttl / 4, ctx.signal)]);
  }
  const alive = live();
  return pick(alive.filter((s) => s.holds)) ?? pick(alive);
}

async function onWorker(ctx: InjectorContext, kind: FaultKind, action: string): Promise<void> {
  const slot = await target(ctx);
  if (slot === undefined || ctx.signal.aborted) return;
  const at = Date.now();
  const holder = slot.holds;
  const pid = slot.pid;
  const base = { kind, action, worker: slot.slot, pid, holder, at };
  const length = lengthOf(kind, ctx.ttl);
  if (kind === 'pause') {
    slot.pause();
    await hold(length, ctx.signal);
    slot.resume();
  } else if (kind === 'kill') {
    await slot.kill(RESTART_AFTER);
  } else if (action === 'partition') {
    slot.link.partition(true);
    await hold(length, ctx.signal);
    slot.link.partition(false);
  } else if (action === 'delay') {
    // Each way, so a round trip grows by half the lease's drift-free share: slow, but inside commandTimeout.
    slot.link.delay(Math.round(ctx.ttl / 4));
    await hold(length, ctx.signal);
    slot.link.delay(0);
  } else {
    slot.link.reset();
  }
  ctx.record({ ...base, until: Date.now() });
}

async function onServer(ctx: InjectorContext, kind: FaultKind): Promise<void> {
  const server = ctx.server;
  if (server === null) return;
  const holder = ctx.slots.some((s) => s.holds);
  const at = Date.now();
  if (kind === 'restart') {
    await server.restart();
  } else {
    server.freeze();
    await hold(lengthOf(kind, ctx.ttl), ctx.signal);
    server.thaw();
  }
  ctx.record({
    kind,
    action: kind === 'restart' ? 'kill -9, start' : 'SIGSTOP',
    worker: null,
    pid: null,
    holder,
    at,
    until: Date.now(),
  });
}

/** Runs faults until the run ends. */
export async function injectFaults(ctx: InjectorContext): Promise<void> {
  if (ctx.kinds.length === 0) return;
  const gap = ctx.ttl;
  // Let every worker get going first.
  await hold(ctx.ttl, ctx.signal);
  let proxyTurn = 0;
  for (let turn = 0; !ctx.signal.aborted; turn++) {
    const kind = ctx.kinds[turn % ctx.kinds.length] as FaultKind;
    // The aim can take up to 2 ttl, the fault its length, then the lock must be seen to recover.
    if (Date.now() + 2 * ctx.ttl + lengthOf(kind, ctx.ttl) + 1.5 * ctx.ttl > ctx.end) return;
    if (kind === 'restart' || kind === 'freeze') await onServer(ctx, kind);
    else {
      const action = kind === 'proxy' ? PROXY_ACTIONS[proxyTurn++ % PROXY_ACTIONS.length] : kind;
      await onWorker(ctx, kind, action ?? kind);
    }
    await hold(gap, ctx.signal);
  }
}
