import { ErrorCode, LockError, RedisUnavailableError } from '../../core/errors.js';
import { ChannelHub } from '../channel-hub.js';
import { type JobKeys, type LockKeys, nameFromLockKey } from './keys.js';
import {
  type AcquireReply,
  type AcquireRequest,
  type ClaimReply,
  type ClaimRequest,
  type ExtendReply,
  type FinishReply,
  type FinishRequest,
  type ForceReleaseReply,
  type HandOn,
  type Holder,
  type JobState,
  type LockState,
  type QueueState,
  type ReleaseReply,
  STORE,
  type Store,
  type StoredOutcome,
  type StoredRun,
} from '../port.js';
import {
  describeError,
  isReplyError,
  isUnavailableReply,
  type RedisConnection,
  type Subscriber,
} from './connection.js';
import { infoField } from './info.js';
import { ScriptRunner } from './run-script.js';
import { SCRIPTS, type Script } from './scripts.js';

/**
 * Turn whatever a client library threw into a LockError that says what happened: an error reply
 * from a live server is a store error (never "unavailable", so `whenUnavailable: 'run'` cannot
 * run work unlocked because of, say, OOM); a connection failure is unavailable, with the client's
 * last connection error as its cause.
 */
export function storeError(connection: RedisConnection, action: string, error: unknown): LockError {
  if (error instanceof LockError) return error;
  if (isReplyError(error) && !isUnavailableReply(error)) {
    return new LockError(ErrorCode.STORE, `${connection.kind}: ${action} failed: ${error.message}`, { cause: error });
  }
  if (isReplyError(error)) {
    return new RedisUnavailableError(`${connection.kind}: ${action} failed: ${error.message}`, { cause: error });
  }
  const last = connection.lastError();
  const cause = last ?? error;
  const detail = describeError(error);
  const why =
    last === undefined || last === error ? detail : `${detail} (last connection error: ${describeError(last)})`;
  return new RedisUnavailableError(`${connection.kind}: ${action} on ${connection.address} failed: ${why}`, { cause });
}

function integer(reply: unknown, script: Script): number {
  const n = typeof reply === 'number' ? reply : Number(reply);
  if (!Number.isFinite(n)) {
    throw new LockError(ErrorCode.STORE, `unexpected reply from ${script.name}: ${JSON.stringify(reply)}`);
  }
  return n;
}

const OUTCOMES: readonly StoredOutcome[] = ['running', 'ok', 'failed', 'done', 'lost', 'abandoned'];

/** A run record as claim-tick / finish-tick wrote it (JSON); anything else is a store error. */
function storedRun(member: unknown): StoredRun {
  let value: unknown;
  try {
    value = typeof member === 'string' ? JSON.parse(member) : undefined;
  } catch {
    value = undefined;
  }
  const r = (value ?? {}) as Record<string, unknown>;
  const num = (v: unknown) => typeof v === 'number' && Number.isFinite(v);
  // The fencing token is written as a decimal string (a JSON number in Lua would lose digits).
  if (typeof r.fence === 'string' && /^\d+$/.test(r.fence)) r.fence = Number(r.fence);
  const numOrNull = (v: unknown) => v === null || v === undefined || num(v);
  if (
    !num(r.fence) ||
    !num(r.startedAt) ||
    !numOrNull(r.tick) ||
    !numOrNull(r.finishedAt) ||
    typeof r.instance !== 'string' ||
    !(OUTCOMES as readonly unknown[]).includes(r.outcome)
  ) {
    throw new LockError(ErrorCode.STORE, `unexpected run record in the job history: ${JSON.stringify(member)}`);
  }
  return {
    fence: r.fence as number,
    tick: typeof r.tick === 'number' ? r.tick : null,
    instance: r.instance,
    startedAt: r.startedAt as number,
    finishedAt: typeof r.finishedAt === 'number' ? r.finishedAt : null,
    outcome: r.outcome as StoredOutcome,
    error: typeof r.error === 'string' ? r.error : null,
  };
}

/** A prefix as a literal inside a SCAN pattern: glob characters in it match only themselves. */
function globLiteral(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

function unexpected(script: Script, reply: unknown): LockError {
  return new LockError(ErrorCode.STORE, `unexpected reply from ${script.name}: ${JSON.stringify(reply)}`);
}

/**
 * A fencing counter's value, as lua/lib/lease.lua writes it: '<token> <taken-at µs> <instance>',
 * then '|<owner>' once that owner released the grant.
 */
export function parseCounter(counter: string): { holder: Holder | null; releasedBy: string | null } {
  const bar = counter.lastIndexOf('|');
  const releasedBy = bar >= 0 ? counter.slice(bar + 1) : null;
  const match = /^(\d+) (\d+) ([\s\S]*)$/.exec(bar >= 0 ? counter.slice(0, bar) : counter);
  if (!match) return { holder: null, releasedBy };
  const holder = {
    token: Number(match[1]),
    takenAt: Math.floor(Number(match[2]) / 1000),
    instance: match[3] as string,
  };
  return { holder, releasedBy };
}

/**
 * A lock key's value (see lua/lib/lease.lua): '<owner>' or '<owner>*' while held (the mark: waiters
 * queued), '~<waiter>' or '~<waiter>*' while reserved for a waiter a release handed it to.
 */
export function readLockValue(value: unknown): { owner: string | null; reservedFor: string | null } {
  if (typeof value !== 'string') return { owner: null, reservedFor: null };
  const bare = value.endsWith('*') ? value.slice(0, -1) : value;
  return bare.startsWith('~') ? { owner: null, reservedFor: bare.slice(1) } : { owner: bare, reservedFor: null };
}

const QUEUE_MODE = { join: '1', member: '2' } as const;

/** The Store port on Redis: one Lua script per state change, run through one runner. */
export class RedisStore implements Store {
  readonly [STORE] = true;
  readonly kind: string;
  readonly #connection: RedisConnection;
  readonly #scripts: ScriptRunner;
  #publish: Promise<string> | undefined;
  /** The publish command once known: standalone is always PUBLISH, a cluster asks its version once. */
  #publishKnown: string | undefined;
  #subscriber: Subscriber | undefined;
  #hub: ChannelHub | undefined;
  readonly #onError: (error: unknown) => void;

  constructor(connection: RedisConnection, onError: (error: unknown) => void = () => {}) {
    this.#connection = connection;
    this.#scripts = new ScriptRunner(connection);
    this.kind = connection.kind;
    if (!connection.cluster) this.#publishKnown = 'PUBLISH';
    this.#onError = onError;
  }

  #run(script: Script, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    // A client whose reconnections are being refused would only queue the call: say so at once.
    const down = this.#connection.down();
    if (down)
      return Promise.reject(
        new RedisUnavailableError(`${this.kind}: ${script.name} failed: ${down.message}`, {
          cause: down.cause ?? down,
        }),
      );
    return this.#scripts.run(script, keys, args).catch((error: unknown) => {
      throw storeError(this.#connection, script.name, error);
    });
  }

  /** The last connection error of the client, for a call that got no answer in time. */
  lastError(): unknown {
    return this.#connection.lastError();
  }

  get address(): string {
    return this.#connection.address;
  }

  /** Cluster on Redis ≥ 7 publishes on the lock's own shard (SPUBLISH); elsewhere plain PUBLISH. */
  #publishCommand(): Promise<string> {
    if (this.#publishKnown !== undefined) return Promise.resolve(this.#publishKnown);
    this.#publish ??= this.#connection.serverMajorVersion().then(
      (major) => {
        this.#publishKnown = major >= 7 ? 'SPUBLISH' : 'PUBLISH';
        return this.#publishKnown;
      },
      (error: unknown) => {
        this.#publish = undefined;
        throw storeError(this.#connection, 'INFO server', error);
      },
    );
    return this.#publish;
  }

  get sharded(): Promise<boolean> {
    return this.#publishCommand().then((cmd) => cmd === 'SPUBLISH');
  }

  /** The arguments every hand-on takes, after the publish command and channel. */
  #handOnArgs(keys: LockKeys, publish: string, handOn: HandOn): (string | number)[] {
    return [publish, keys.channel, handOn.reservation];
  }

  async acquire(keys: LockKeys, r: AcquireRequest): Promise<AcquireReply> {
    const reply = await this.#run(
      SCRIPTS.acquire,
      [keys.lock, keys.fence, keys.waiters, keys.alive],
      [
        r.owner,
        r.ttl,
        r.minFence,
        r.queue === undefined ? '0' : QUEUE_MODE[r.queue],
        r.instance,
        r.fenceRetention,
        r.waiterLease,
      ],
    );
    if (!Array.isArray(reply) || reply.length !== 2) throw unexpected(SCRIPTS.acquire, reply);
    const value = integer(reply[1], SCRIPTS.acquire);
    return integer(reply[0], SCRIPTS.acquire) === 1
      ? { acquired: true, fence: value }
      : { acquired: false, pttl: value };
  }

  async release(keys: LockKeys, owner: string, handOn: HandOn): Promise<ReleaseReply> {
    const publish = this.#publishKnown ?? (await this.#publishCommand());
    const code = integer(
      await this.#run(
        SCRIPTS.release,
        [keys.lock, keys.fence, keys.waiters, keys.alive],
        [owner, ...this.#handOnArgs(keys, publish, handOn), handOn.announce ? '1' : '0'],
      ),
      SCRIPTS.release,
    );
    return code === 1 ? 'released' : code === 0 ? 'expired' : 'not-owner';
  }

  async leave(keys: LockKeys, owner: string, handOn: HandOn): Promise<void> {
    const publish = this.#publishKnown ?? (await this.#publishCommand());
    await this.#run(
      SCRIPTS.leave,
      [keys.lock, keys.waiters, keys.alive],
      [owner, ...this.#handOnArgs(keys, publish, handOn), handOn.announce ? '1' : '0'],
    );
  }

  async extend(keys: LockKeys, owner: string, ttl: number): Promise<ExtendReply> {
    const code = integer(await this.#run(SCRIPTS.extend, [keys.lock], [owner, ttl]), SCRIPTS.extend);
    return code === 1 ? 'extended' : code === 0 ? 'expired' : 'not-owner';
  }

  async raiseFence(keys: LockKeys, fence: number, retention: number): Promise<number> {
    return integer(await this.#run(SCRIPTS.raiseFence, [keys.fence], [fence, retention]), SCRIPTS.raiseFence);
  }

  async inspect(keys: LockKeys): Promise<LockState> {
    const reply = await this.#run(SCRIPTS.inspect, [keys.lock, keys.fence], []);
    if (!Array.isArray(reply) || reply.length !== 3) throw unexpected(SCRIPTS.inspect, reply);
    const [value, pttl, counter] = reply as [unknown, unknown, unknown];
    const parsed = typeof counter === 'string' ? parseCounter(counter) : { holder: null, releasedBy: null };
    const { owner } = readLockValue(value);
    const held = owner !== null;
    return {
      owner,
      pttl: held ? integer(pttl, SCRIPTS.inspect) : -2,
      fence: parsed.holder?.token ?? 0,
      // The counter tells who holds the lock only while its grant is not released.
      holder: held && parsed.releasedBy === null ? parsed.holder : null,
      releasedBy: parsed.releasedBy,
    };
  }

  async claimTick(keys: JobKeys, request: ClaimRequest): Promise<ClaimReply> {
    const reply = await this.#run(
      SCRIPTS.claimTick,
      [keys.lock, keys.fence, keys.tick, keys.runs],
      [
        request.owner,
        request.ttl,
        request.tick ?? '',
        request.instance,
        request.historyLimit,
        request.fenceRetention,
        request.clockTolerance,
      ],
    );
    if (!Array.isArray(reply) || reply.length < 2) throw unexpected(SCRIPTS.claimTick, reply);
    const code = integer(reply[0], SCRIPTS.claimTick);
    const value = integer(reply[1], SCRIPTS.claimTick);
    if (code === 1) return { claimed: true, fence: value, startedAt: integer(reply[2], SCRIPTS.claimTick) };
    if (code === 0) return { claimed: false, reason: 'locked', pttl: value };
    if (code === -2) return { claimed: false, reason: 'clock-skew', now: value };
    return { claimed: false, reason: 'already-ran', lastTick: value };
  }

  async finishTick(keys: JobKeys, request: FinishRequest): Promise<FinishReply> {
    const publish = this.#publishKnown ?? (await this.#publishCommand());
    const { handOn } = request;
    const reply = await this.#run(
      SCRIPTS.finishTick,
      [keys.lock, keys.runs, keys.waiters, keys.alive, keys.fence],
      [
        request.owner,
        request.fence,
        request.startedAt,
        request.outcome,
        request.error ?? '',
        request.lockAtLeastFor,
        ...this.#handOnArgs(keys, publish, handOn),
        handOn.announce ? '1' : '0',
      ],
    );
    if (!Array.isArray(reply) || reply.length !== 2) throw unexpected(SCRIPTS.finishTick, reply);
    const code = integer(reply[0], SCRIPTS.finishTick);
    if (code === 1) return { lease: 'kept', remaining: integer(reply[1], SCRIPTS.finishTick) };
    return { lease: code === 2 ? 'released' : code === 0 ? 'expired' : 'not-owner' };
  }

  async readJob(keys: JobKeys, limit: number): Promise<JobState> {
    const reply = await this.#run(SCRIPTS.readJob, [keys.lock, keys.fence, keys.tick, keys.runs], [limit]);
    if (!Array.isArray(reply) || reply.length < 3) throw unexpected(SCRIPTS.readJob, reply);
    const lastTick = integer(reply[2], SCRIPTS.readJob);
    return {
      held: integer(reply[0], SCRIPTS.readJob) === 1,
      fence: integer(reply[1], SCRIPTS.readJob),
      lastTick: lastTick < 0 ? null : lastTick,
      runs: reply.slice(3).map(storedRun),
    };
  }

  async *scanLocks(prefix: string, match: string, count: number): AsyncGenerator<string> {
    if (this.#connection.cluster) {
      // A keyless script runs on whichever node the client picks: it would list one shard's locks.
      throw new LockError(ErrorCode.STORE, `${this.kind}: listing locks is supported on a standalone server only`);
    }
    const pattern = `${globLiteral(prefix)}:{${match}}`;
    // SCAN may return a key twice across pages; callers get each name once.
    const seen = new Set<string>();
    let cursor = '0';
    do {
      const reply = await this.#run(SCRIPTS.scanLocks, [], [cursor, pattern, count]);
      if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1])) {
        throw unexpected(SCRIPTS.scanLocks, reply);
      }
      cursor = String(reply[0]);
      for (const key of reply[1] as unknown[]) {
        // A lock key ends with the brace that closes its name; the fencing counter, queue,
        // reservation, markers, tick marker and history all end with their own suffix.
        const name = typeof key === 'string' ? nameFromLockKey(prefix, key) : null;
        if (name === null || seen.has(name)) continue;
        seen.add(name);
        yield name;
      }
    } while (cursor !== '0');
  }

  async forceRelease(keys: LockKeys, handOn: HandOn): Promise<ForceReleaseReply> {
    const publish = this.#publishKnown ?? (await this.#publishCommand());
    const reply = await this.#run(
      SCRIPTS.forceRelease,
      [keys.lock, keys.waiters, keys.alive, keys.fence],
      [...this.#handOnArgs(keys, publish, handOn), handOn.announce ? '1' : '0'],
    );
    if (!Array.isArray(reply) || reply.length < 1) throw unexpected(SCRIPTS.forceRelease, reply);
    const code = integer(reply[0], SCRIPTS.forceRelease);
    if (code === 0) return { result: 'not-held' };
    const [, owner, woken, counter] = reply as unknown[];
    if (code !== 1 || typeof owner !== 'string' || typeof woken !== 'string') {
      throw unexpected(SCRIPTS.forceRelease, reply);
    }
    const holder = typeof counter === 'string' ? parseCounter(counter).holder : null;
    return { result: 'released', owner, holder, woken: woken === '' ? null : woken };
  }

  async queued(keys: LockKeys, limit: number): Promise<QueueState> {
    const reply = await this.#run(SCRIPTS.queued, [keys.waiters, keys.lock], [limit]);
    if (!Array.isArray(reply) || reply.length < 3) throw unexpected(SCRIPTS.queued, reply);
    const { reservedFor } = readLockValue(reply[1]);
    return {
      count: integer(reply[0], SCRIPTS.queued),
      first: reply.slice(3).map(String),
      reserved: reservedFor === null ? null : { owner: reservedFor, pttl: integer(reply[2], SCRIPTS.queued) },
    };
  }

  async evictionPolicies(): Promise<readonly (string | null)[]> {
    let infos: string[];
    try {
      infos = await this.#connection.infoOfMasters('memory');
    } catch (error) {
      throw storeError(this.#connection, 'INFO memory', error);
    }
    return infos.map((info) => infoField(info, 'maxmemory_policy') ?? null);
  }

  async subscribe(channel: string, onMessage: (message: string) => void): Promise<() => void> {
    if (!this.#hub) {
      const sharded = await this.sharded;
      if (!this.#hub) {
        const subscriber = this.#connection.openSubscriber(sharded, (ch, message) => hub.deliver(ch, message));
        this.#subscriber = subscriber;
        // The subscriber connection lives only while someone waits: an idle one would keep the
        // process alive after the caller closed its own client.
        const hub: ChannelHub = new ChannelHub(
          {
            subscribe: (ch) =>
              subscriber
                .subscribe(ch)
                .catch((e: unknown) => Promise.reject(storeError(this.#connection, 'SUBSCRIBE', e))),
            unsubscribe: (ch) => subscriber.unsubscribe(ch),
          },
          this.#onError,
          () => {
            if (this.#hub !== hub) return;
            this.#hub = undefined;
            this.#subscriber = undefined;
            subscriber.close().catch(this.#onError);
          },
        );
        this.#hub = hub;
      }
    }
    return this.#hub.subscribe(channel, onMessage);
  }

  async close(): Promise<void> {
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    this.#hub?.clear();
    this.#hub = undefined;
    this.#connection.dispose();
    if (subscriber) await subscriber.close();
  }
}
