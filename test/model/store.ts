import { AsyncLocalStorage, AsyncResource } from 'node:async_hooks';
import type {
  AcquireRequest,
  ClaimReply,
  ClaimRequest,
  ExtendReply,
  FinishReply,
  FinishRequest,
  ForceReleaseReply,
  HandOff,
  HandOffListener,
  HandOn,
  JobState,
  LockState,
  QueueState,
  ReleaseReply,
  SharedAcquireReply,
  SharedRequest,
  SharedState,
  Store,
} from '../../src/store/port.js';
import { STORE } from '../../src/store/port.js';
import { type Actor, asNobody, type Clock } from './clock.js';

/**
 * The store each Leasehold of a model talks to: the shared store (a MemoryStore scope, or a
 * RedisStore) behind a wrapper that plays the network. It can delay a command on its way and its
 * reply on the way back (`late`), or send each command twice, the first reply lost (`resend`: the
 * store methods are idempotent per owner token); it holds replies and hand-off messages for an
 * actor that is frozen, and drops everything of a dead one. It logs each command as the store
 * ran it, for the checks that need the store's order (fencing tokens, what is surely free).
 * `broken` turns it into a deliberately wrong store, for the negative controls.
 */

export type Net =
  | { readonly kind: 'normal' }
  | { readonly kind: 'late'; readonly before: number; readonly after: number }
  | { readonly kind: 'resend' };

export const NORMAL: Net = Object.freeze({ kind: 'normal' });

export interface Broken {
  /**
   * A plain DEL as release: the lock is deleted whoever holds it (forceRelease for a mutex or a
   * job's finish that finds the lock not its own; a semaphore's or shared release that frees
   * someone else's hold when its own is gone, as a DECR of a counter would).
   */
  readonly plainDel?: boolean;
}

/** One command as the store ran it. */
export interface Entry {
  readonly seq: number;
  /** Clock time the store ran it. */
  readonly at: number;
  readonly op: string;
  readonly name: string;
  readonly owner: string | undefined;
  readonly actor: Actor;
  /** The model's operation it belongs to (operation()), if any. */
  readonly operation: number | undefined;
  /** The lease asked for (acquire, extend, claim), in ms. */
  readonly ttl: number | undefined;
  /** The attempt queues when refused. */
  readonly queues: boolean;
  /** The attempt of a waiter queued already (it leaves the queue when granted). */
  readonly member: boolean;
  /** A job run's finish: the lockAtLeastFor it asked for (an abandoned claim asks for none). */
  readonly atLeast: number | undefined;
  reply: unknown;
  done: boolean;
}

const operationContext = new AsyncLocalStorage<number>();

/** Run `fn` as model operation `id`: every command it sends is logged with it. */
export function operation<T>(id: number, fn: () => T): T {
  return operationContext.run(id, fn);
}

/** Every command every wrapper of one run sent, in the order the store ran them. */
export class StoreLog {
  readonly entries: Entry[] = [];
  /** Commands sent and not yet run by the store (delayed on their way). */
  inFlight = 0;
  #seq = 0;

  add(fields: Omit<Entry, 'seq' | 'reply' | 'done'>): Entry {
    const entry: Entry = { ...fields, seq: ++this.#seq, reply: undefined, done: false };
    this.entries.push(entry);
    return entry;
  }
}

const never = <T>(): Promise<T> => new Promise<T>(() => {});

export class FaultyStore implements Store {
  readonly [STORE] = true;
  readonly kind: string;
  net: Net = NORMAL;
  readonly #inner: Store;
  readonly #actor: Actor;
  readonly #clock: Clock;
  readonly #log: StoreLog;
  readonly #broken: Broken;

  constructor(inner: Store, actor: Actor, clock: Clock, log: StoreLog, broken: Broken = {}) {
    this.#inner = inner;
    this.kind = `model:${inner.kind}`;
    this.#actor = actor;
    this.#clock = clock;
    this.#log = log;
    this.#broken = broken;
  }

  /**
   * One command through the network: delayed on its way (it runs on the store later, whatever
   * the sender does meanwhile), run (twice when re-sent), its reply delayed on its way back, and
   * held while the sender is frozen.
   */
  async #call<T>(
    op: string,
    name: string,
    detail: {
      owner?: string | undefined;
      ttl?: number | undefined;
      queues?: boolean;
      member?: boolean;
      atLeast?: number;
    },
    send: () => Promise<T>,
    net: Net = this.net,
  ): Promise<T> {
    const actor = this.#actor;
    if (actor.dead) return never();
    const id = operationContext.getStore();
    if (net.kind === 'late' && net.before > 0) {
      this.#log.inFlight += 1;
      await asNobody(() => this.#clock.sleep(net.before));
      this.#log.inFlight -= 1;
      // Lost with the process that sent it: a dead actor's command never arrives.
      if (actor.dead) return never();
    }
    const run = async (): Promise<T> => {
      const entry = this.#log.add({
        at: this.#clock.now(),
        op,
        name,
        owner: detail.owner,
        actor,
        operation: id,
        ttl: detail.ttl,
        queues: detail.queues ?? false,
        member: detail.member ?? false,
        atLeast: detail.atLeast,
      });
      try {
        entry.reply = await send();
        return entry.reply as T;
      } finally {
        entry.done = true;
      }
    };
    let reply = await run();
    if (net.kind === 'resend') reply = await run();
    if (net.kind === 'late' && net.after > 0) await asNobody(() => this.#clock.sleep(net.after));
    await actor.gate();
    return reply;
  }

  acquire(name: string, request: AcquireRequest): ReturnType<Store['acquire']> {
    const detail = {
      owner: request.owner,
      ttl: request.ttl,
      queues: request.queue !== undefined,
      member: request.queue === 'member',
    };
    return this.#call('acquire', name, detail, () => this.#inner.acquire(name, request));
  }

  release(name: string, owner: string): Promise<ReleaseReply> {
    if (this.#broken.plainDel) {
      return this.#call('release', name, { owner }, async () => {
        const r = await (this.#inner.forceRelease as NonNullable<Store['forceRelease']>)(name);
        return r.result === 'released' ? 'released' : 'expired';
      });
    }
    return this.#call('release', name, { owner }, () => this.#inner.release(name, owner));
  }

  extend(name: string, owner: string, ttl: number): Promise<ExtendReply> {
    return this.#call('extend', name, { owner, ttl }, () => this.#inner.extend(name, owner, ttl));
  }

  leave(name: string, owner: string): Promise<void> {
    return this.#call('leave', name, { owner }, () => this.#inner.leave(name, owner));
  }

  inspect(name: string): Promise<LockState> {
    return this.#call('inspect', name, {}, () => this.#inner.inspect(name));
  }

  /**
   * Hand-offs reach a frozen actor when it wakes, in order; a dead one never hears them. The
   * listener's answer (its waiter is here) goes back to the store, which keeps a direct grant for
   * a waiter here and gives it back otherwise. A frozen actor's answer cannot be had until it
   * wakes; a real frozen process would not have read the reply either, and when it does, a waiter
   * still in its queue answers yes: so does a frozen one here.
   */
  async watch(name: string, onHandOff: HandOffListener): Promise<() => void> {
    const actor = this.#actor;
    const listener = AsyncResource.bind(onHandOff);
    const deliver = (handOff: HandOff): unknown => {
      if (actor.dead) return false;
      if (!actor.frozen) return listener(handOff);
      void actor.gate().then(() => listener(handOff));
      return true;
    };
    // A subscription is not re-sent: the client subscribes once per connection.
    const net = this.net.kind === 'resend' ? NORMAL : this.net;
    return this.#call('watch', name, {}, () => this.#inner.watch(name, deliver), net);
  }

  async close(): Promise<void> {}

  acquireShared(name: string, request: SharedRequest): Promise<SharedAcquireReply> {
    const detail = {
      owner: request.owner,
      ttl: request.ttl,
      queues: request.queue !== undefined,
      member: request.queue === 'member',
    };
    return this.#call('acquireShared', name, detail, () => this.#shared().acquireShared(name, request));
  }

  extendShared(name: string, owner: string, ttl: number): Promise<ExtendReply> {
    return this.#call('extendShared', name, { owner, ttl }, () => this.#shared().extendShared(name, owner, ttl));
  }

  releaseShared(name: string, owner: string): Promise<ReleaseReply> {
    const inner = this.#shared();
    return this.#call('releaseShared', name, { owner }, async () => {
      const reply = await inner.releaseShared(name, owner);
      if (!this.#broken.plainDel || reply === 'released') return reply;
      // A counter decremented whoever's permit it was: someone else's hold goes.
      const other = (await inner.inspectShared(name)).holds.find((h) => h.owner !== owner);
      if (!other) return reply;
      await inner.releaseShared(name, other.owner);
      return 'released';
    });
  }

  leaveShared(name: string, owner: string): Promise<void> {
    return this.#call('leaveShared', name, { owner }, () => this.#shared().leaveShared(name, owner));
  }

  inspectShared(name: string): Promise<SharedState> {
    return this.#call('inspectShared', name, {}, () => this.#shared().inspectShared(name));
  }

  claimTick(name: string, request: ClaimRequest): Promise<ClaimReply> {
    const detail = { owner: request.owner, ttl: request.ttl };
    return this.#call('claimTick', name, detail, () => this.#jobs().claimTick(name, request));
  }

  finishTick(name: string, request: FinishRequest): Promise<FinishReply> {
    const jobs = this.#jobs();
    const detail = { owner: request.owner, atLeast: request.lockAtLeastFor };
    return this.#call('finishTick', name, detail, async () => {
      const reply = await jobs.finishTick(name, request);
      if (!this.#broken.plainDel || reply.lease !== 'not-owner') return reply;
      // DEL whoever holds it.
      await (this.#inner.forceRelease as NonNullable<Store['forceRelease']>)(name);
      return { lease: 'released' };
    });
  }

  readJob(name: string, limit: number): Promise<JobState> {
    return this.#call('readJob', name, {}, () => this.#jobs().readJob(name, limit));
  }

  forgetJob(name: string): Promise<void> {
    return this.#call('forgetJob', name, {}, () => this.#jobs().forgetJob(name));
  }

  #shared(): Required<
    Pick<Store, 'acquireShared' | 'extendShared' | 'releaseShared' | 'leaveShared' | 'inspectShared'>
  > {
    return this.#inner as Required<Store>;
  }

  #jobs(): Required<Pick<Store, 'claimTick' | 'finishTick' | 'readJob' | 'forgetJob'>> {
    return this.#inner as Required<Store>;
  }
}

/** What the final checks read from the store itself (not through any wrapper). */
export interface Inspectable {
  inspect(name: string): Promise<LockState>;
  queued(name: string, limit: number): Promise<QueueState>;
  inspectShared(name: string): Promise<SharedState>;
  scanLocks(match: string, count: number): AsyncIterable<string>;
  forceRelease(name: string, handOn: HandOn): Promise<ForceReleaseReply>;
  readJob?(name: string, limit: number): Promise<JobState>;
}
