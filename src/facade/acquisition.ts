import { setMaxListeners } from 'node:events';
import { AcquireLoop, type Acquisition, type Outcome } from '../core/acquire-loop.js';
import { now } from '../core/clock.js';
import { DEFAULTS } from '../core/defaults.js';
import { type AcquireContext, outcomeOf, trace, traced, tracing } from '../core/diagnostics.js';
import type { Attempt, LockEngine } from '../core/engine.js';
import { closedError, LockTimeoutError } from '../core/errors.js';
import { LeaseKeeper } from '../core/lease-keeper.js';
import { Lock, type LockContext } from '../core/lock.js';
import { newOwnerToken } from '../core/owner.js';
import { WaitQueues } from '../core/waiting.js';
import type { Reentrancy } from '../primitives/reentrant.js';
import type { Engines } from '../topology/engines.js';
import type { LeaseholdEvents } from './events.js';
import { kindName, type Resolved } from './options.js';

/** An engine's attempt that won the lock. */
type Granted = Extract<Attempt, { acquired: true }>;

/** The grant an acquisition came to; refused until its wait ran out, it times out. */
function grantOf(name: string, outcome: Outcome<Granted, null>): Granted {
  if ('refused' in outcome) throw new LockTimeoutError(name, outcome.waited);
  return outcome.granted;
}

/** What the acquisitions of an instance report to it. */
export interface AcquisitionHost {
  readonly instance: string;
  readonly driftFactor: number;
  readonly reentrancy: Reentrancy;
  emit<K extends keyof LeaseholdEvents>(event: K, ...args: LeaseholdEvents[K]): void;
  /** Whether anyone listens to `event` (an event nobody hears is not built). */
  hears(event: keyof LeaseholdEvents): boolean;
}

/**
 * One instance's acquisitions and the locks they hold: the engine of a call's kind of lock, the
 * acquire loop and its wait queues, the Lock handles with their watchdog, and closing all of it.
 */
export class Acquisitions {
  readonly loop: AcquireLoop;
  readonly #engines: Engines;
  readonly #host: AcquisitionHost;
  readonly #keeper = new LeaseKeeper();
  readonly #waits: WaitQueues;
  readonly #held = new Set<Lock>();
  /** Extensions sent and not yet answered (or timed out): close() waits for them. */
  readonly #extending = new Set<Promise<unknown>>();
  /** The Lock context of each engine in use, made with it. */
  readonly #contexts = new WeakMap<LockEngine, LockContext>();
  /** Aborted by close(): every parked acquisition rejects with CLOSED at once (each listens to it). */
  readonly #closing = new AbortController();
  #closed = false;

  constructor(engines: Engines, host: AcquisitionHost) {
    this.#engines = engines;
    this.#host = host;
    // One listener per parked waiter of this instance: any number is expected.
    setMaxListeners(0, this.#closing.signal);
    const onError = (error: unknown, operation: 'wait' | 'leave-queue') =>
      host.emit('backendError', { error, operation });
    this.#waits = new WaitQueues({ reservation: DEFAULTS.reservation, onError: (e) => onError(e, 'wait') });
    this.loop = new AcquireLoop({
      waits: this.#waits,
      closing: this.#closing.signal,
      isClosed: () => this.#closed,
      onLeaveError: (error) => onError(error, 'leave-queue'),
    });
  }

  /** Locks held right now. */
  get heldCount(): number {
    return this.#held.size;
  }

  /** Acquire `name` as the resolved call `o` asks: re-entered, or taken on its kind's engine. */
  acquire(name: string, o: Resolved): Promise<Lock> {
    if (o.reentrant) {
      const held = this.#host.reentrancy.held(name);
      if (held) {
        try {
          return Promise.resolve(held.reenter());
        } catch (error) {
          return Promise.reject(error);
        }
      }
    }
    const started = now();
    let engine: LockEngine;
    try {
      engine = this.#engines.engineFor(o.kind, o.replication);
    } catch (error) {
      return Promise.reject(error);
    }
    // Nobody listening: no context, no closures, the acquisition as it is.
    if (!traced(tracing.acquire)) return this.#take(name, o, started, engine);
    const instance = this.#host.instance;
    return trace(
      tracing.acquire,
      (): AcquireContext => ({ name, instance, wait: o.wait, ttl: o.ttl, kind: kindName(o.kind) }),
      () => this.#take(name, o, started, engine),
      (ctx, lock) => {
        ctx.owner = lock.owner;
        ctx.fencingToken = lock.fencingToken;
        ctx.waited = Math.round(now() - started);
        ctx.outcome = 'acquired';
      },
      (ctx, error) => {
        ctx.waited = Math.round(now() - started);
        ctx.outcome = outcomeOf(error);
      },
    );
  }

  async #take(name: string, o: Resolved, started: number, engine: LockEngine): Promise<Lock> {
    const owner = newOwnerToken();
    const loop = this.loop;
    const queue = o.wait > 0;
    let attempt: Granted;
    if (loop.straight(name, queue, o.signal)) {
      // The first attempt straight to the engine: the loop's closures are made only if refused.
      const sentAt = now();
      let first: Attempt;
      try {
        first = await engine.attempt(name, owner, o.ttl, 0, queue);
      } catch (error) {
        loop.end();
        throw error;
      }
      if (first.acquired) {
        try {
          const unwanted = loop.unwanted(o.signal);
          if (unwanted !== undefined) {
            // Won, but nobody will use it: give it back before reporting why.
            await engine.release(name, first.owner ?? owner).catch(() => undefined);
            throw unwanted;
          }
        } finally {
          loop.end();
        }
        attempt = first;
      } else {
        const refused = { refused: null, ...first };
        attempt = grantOf(name, await loop.resume(this.#acquisition(name, owner, o, engine), refused, sentAt, started));
      }
    } else {
      attempt = grantOf(name, await loop.run(this.#acquisition(name, owner, o, engine)));
    }
    const lock = new Lock(
      {
        name,
        owner: attempt.owner ?? owner,
        fencingToken: attempt.fencingToken,
        ttl: o.ttl,
        validUntil: attempt.validUntil,
        autoExtend: o.autoExtend,
        replicas: attempt.replicas,
      },
      this.contextFor(engine),
    );
    this.#held.add(lock);
    if (this.#host.hears('acquired')) {
      this.#host.emit('acquired', { name, fencingToken: lock.fencingToken, waited: Math.round(now() - started) });
    }
    return lock;
  }

  /** An acquisition of `name` under `owner` on `engine`, as the acquire loop runs it. */
  #acquisition(name: string, owner: string, o: Resolved, engine: LockEngine): Acquisition<Granted, null> {
    return {
      name,
      owner,
      wait: o.wait,
      signal: o.signal,
      attempt: async (tries, queue) => {
        const attempt = await engine.attempt(name, owner, o.ttl, tries, queue);
        return attempt.acquired ? { granted: attempt } : { refused: null, ...attempt };
      },
      giveBack: (attempt) => engine.release(name, attempt.owner ?? owner),
      subscribe: (onHandOff) => engine.watch(name, onHandOff),
      leave: async () => engine.leave?.(name, owner),
    };
  }

  /** A lock taken elsewhere (a job's run) that this instance now holds. */
  adopt(lock: Lock): void {
    this.#held.add(lock);
    this.#host.emit('acquired', { name: lock.name, fencingToken: lock.fencingToken, waited: 0 });
  }

  /** What the Lock handles of `engine` call back through: its extend and release, and the instance's events. */
  contextFor(engine: LockEngine): LockContext {
    let context = this.#contexts.get(engine);
    if (context) return context;
    const host = this.#host;
    context = {
      keeper: this.#keeper,
      driftFactor: host.driftFactor,
      instance: host.instance,
      extend: (name, owner, ttl) => this.#inFlight(engine.extend(name, owner, ttl)),
      release: (lock) =>
        engine.release(lock.name, lock.owner).then((released) => {
          if (host.hears('released'))
            host.emit('released', { name: lock.name, fencingToken: lock.fencingToken, released });
          return released;
        }),
      onLost: (lock, error) => host.emit('lost', { name: lock.name, fencingToken: lock.fencingToken, error }),
      onExtended: (lock) =>
        host.emit('extended', { name: lock.name, fencingToken: lock.fencingToken, expiresIn: lock.expiresIn() }),
      onExtendError: (lock, error) =>
        host.emit('extendFailed', { name: lock.name, fencingToken: lock.fencingToken, error }),
      onDone: (lock) => {
        this.#held.delete(lock);
      },
    };
    this.#contexts.set(engine, context);
    return context;
  }

  /** `call`, counted among the extensions in flight until it settles. */
  #inFlight<T>(call: Promise<T>): Promise<T> {
    this.#extending.add(call);
    const settled = () => this.#extending.delete(call);
    call.then(settled, settled);
    return call;
  }

  /**
   * Reject every acquisition still waiting with CLOSED and wait until each has left the backend's
   * queue; stop every watchdog (held locks' signals abort with reason 'closed'); close the engines.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort(closedError());
    await this.loop.drained();
    this.#keeper.stopAll();
    for (const lock of [...this.#held]) lock.abandon();
    this.#held.clear();
    this.#waits.close();
    // An extension in flight (of a lease lost or abandoned meanwhile) ends within commandTimeout.
    await Promise.allSettled([...this.#extending]);
    await this.#engines.close();
  }
}
