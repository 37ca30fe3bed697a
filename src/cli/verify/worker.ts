import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { LockTimeoutError } from '../../core/errors.js';
import type { Lock } from '../../core/lock.js';
import { withTimeout } from '../../core/timeout.js';
import { fencedUpdate } from '../../fencing/index.js';
import { Leasehold } from '../../leasehold.js';
import { connectServer } from '../redis.js';
import type { RecordValue, WorkerEvent, WorkerPlan } from './history.js';

/**
 * One worker of `verify`, in its own process: it loops acquire → read the record → work → write
 * the record with its token → release, and logs each step as a JSON line on stdout. It starts on
 * the parent's `go` and stops when its stdin ends (the parent's last word, or the parent's death).
 * A worker does not stop working when its lease is lost: it writes anyway, the worst case a
 * client can be, so that only the lock and the fence stand between a stale holder and the record.
 */

type Event = WorkerEvent extends infer E ? (E extends WorkerEvent ? Omit<E, 't' | 'w' | 'pid'> : never) : never;
type Log = (event: Event) => void;

type Outcome = { ok: true } | { ok: false; newest: number };
type Compute = (current: RecordValue | null) => Promise<RecordValue>;

/** One grant as the loop sees it, whichever lock gave it. */
interface Held {
  readonly token: number;
  /** Read the record, compute (the work happens here), write it with the token. */
  update(compute: Compute): Promise<Outcome>;
  release(): Promise<boolean>;
}

interface LockUnderTest {
  /** Waits for a grant; null once the run is stopping. */
  acquire(): Promise<Held | null>;
  close(): Promise<void>;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function parseRecord(raw: string | null): RecordValue | null {
  if (raw === null) return null;
  try {
    const value = JSON.parse(raw) as Partial<RecordValue>;
    return typeof value.n === 'number' ? { n: value.n, token: value.token ?? 0, worker: value.worker ?? 0 } : null;
  } catch {
    return null;
  }
}

/** leasehold's mutex, with fencedUpdate on the record. */
function leaseholdLock(client: Redis, plan: WorkerPlan, log: Log, stop: AbortSignal): LockUnderTest {
  const locks = new Leasehold(client, {
    prefix: plan.prefix,
    ttl: plan.ttl,
    commandTimeout: plan.commandTimeout,
    fenceRetention: plan.fenceRetention,
    instance: `verify-worker-${plan.worker}`,
    // The deployment's settings are doctor's business; here they only add a warning line.
    unsafeConfig: 'ignore',
  });
  let current: Lock | undefined;
  locks.on('extended', ({ fencingToken }) => {
    if (current === undefined || current.fencingToken !== fencingToken) return;
    // The wall clock first, the validity second: a pause between the two can only shorten it.
    const now = Date.now();
    const left = current.expiresIn();
    if (left > 0) log({ e: 'valid', until: now + left });
  });
  return {
    async acquire() {
      log({ e: 'acquire' });
      while (!stop.aborted) {
        let lock: Lock;
        try {
          lock = await locks.acquire(plan.name, { wait: 60_000, signal: stop });
        } catch (error) {
          if (stop.aborted) return null;
          if (!(error instanceof LockTimeoutError)) {
            log({ e: 'error', op: 'acquire', message: message(error) });
            await sleep(50);
          }
          continue;
        }
        const now = Date.now();
        const until = now + lock.expiresIn();
        current = lock;
        const token = lock.fencingToken;
        log({ e: 'granted', token, until });
        lock.signal.addEventListener('abort', () => {
          const reason = (lock.signal.reason as { reason?: unknown } | undefined)?.reason;
          log({ e: 'lost', reason: typeof reason === 'string' ? reason : 'lost' });
        });
        return {
          token,
          async update(compute) {
            const result = await fencedUpdate(client, plan.keys.record, token, async (raw) =>
              JSON.stringify(await compute(parseRecord(raw))),
            );
            return result.written ? { ok: true } : { ok: false, newest: result.newest };
          },
          release: () => lock.release(),
        };
      }
      return null;
    },
    close: () => locks.close(),
  };
}

/**
 * The negative control: SET NX PX to take, DEL to release, no token checked anywhere. A counter
 * numbers its grants so the checker can order them; nothing reads it to protect the record.
 */
function naiveLock(client: Redis, plan: WorkerPlan, log: Log, stop: AbortSignal): LockUnderTest {
  const { naiveLock: key, naiveGrants, record } = plan.keys;
  return {
    async acquire() {
      log({ e: 'acquire' });
      const owner = randomBytes(16).toString('hex');
      while (!stop.aborted) {
        const sent = Date.now();
        try {
          if ((await client.set(key, owner, 'PX', plan.ttl, 'NX')) === 'OK') {
            const token = await client.incr(naiveGrants);
            // As a careful naive client counts its lease: from the moment it sent the SET, less a drift margin.
            log({ e: 'granted', token, until: sent + plan.ttl * 0.99 - 2 });
            return {
              token,
              async update(compute) {
                const next = await compute(parseRecord(await client.get(record)));
                await client.set(record, JSON.stringify(next), 'KEEPTTL');
                return { ok: true };
              },
              release: async () => (await client.del(key)) === 1,
            };
          }
        } catch (error) {
          log({ e: 'error', op: 'acquire', message: message(error) });
          await sleep(50);
          continue;
        }
        await sleep(5 + Math.random() * 10);
      }
      return null;
    },
    close: async () => {},
  };
}

function workFor(plan: WorkerPlan): number {
  if (plan.longWorkEvery > 0 && Math.random() < 1 / plan.longWorkEvery) return Math.round(plan.ttl * 1.5);
  const [min, max] = plan.work;
  return Math.round(min + Math.random() * (max - min));
}

async function cycle(held: Held, plan: WorkerPlan, log: Log): Promise<void> {
  const token = held.token;
  const work = workFor(plan);
  try {
    // No reply in time: the outcome is unknown (the write may still land), and the loop goes on.
    const outcome = await withTimeout(
      held.update(async (current) => {
        const n = current?.n ?? 0;
        log({ e: 'read', token, n, fence: current?.token ?? null });
        await sleep(work);
        log({ e: 'write', token, n: n + 1 });
        return { n: n + 1, token, worker: plan.worker };
      }),
      Math.max(10_000, 4 * plan.ttl + work),
      () => new Error('no reply in time'),
    );
    log(outcome.ok ? { e: 'wrote', token, ok: true } : { e: 'wrote', token, ok: false, newest: outcome.newest });
  } catch (error) {
    log({ e: 'wrote', token, ok: null, error: message(error) });
  }
  log({ e: 'release' });
  try {
    log({ e: 'released', ok: await held.release() });
  } catch (error) {
    log({ e: 'error', op: 'release', message: message(error) });
  }
}

/** The worker process: connect, say ready, wait for go, loop until told to stop. */
export async function verifyWorker(plan: WorkerPlan): Promise<number> {
  const log: Log = (event) => {
    process.stdout.write(`${JSON.stringify({ t: Date.now(), w: plan.worker, pid: process.pid, ...event })}\n`);
  };
  const stopping = new AbortController();
  let go: () => void = () => {};
  const started = new Promise<void>((resolve) => {
    go = resolve;
  });
  const input = createInterface({ input: process.stdin });
  input.on('line', (line) => {
    if (line.trim() === 'go') go();
  });
  input.on('close', () => {
    stopping.abort();
    go();
  });
  // Reconnect at once and keep trying: faults drop connections and restart the server on purpose.
  const client = await connectServer(plan.redis, {
    what: 'verify',
    reconnect: (times) => Math.min(20 * times, 200),
  });
  const lock =
    plan.lock === 'leasehold'
      ? leaseholdLock(client, plan, log, stopping.signal)
      : naiveLock(client, plan, log, stopping.signal);
  log({ e: 'ready' });
  await started;
  try {
    while (!stopping.signal.aborted) {
      const held = await lock.acquire();
      if (held !== null) await cycle(held, plan, log);
    }
  } finally {
    await lock.close().catch(() => undefined);
    await client.quit().catch(() => client.disconnect());
    log({ e: 'stopped' });
  }
  return 0;
}
