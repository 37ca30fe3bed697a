import { setTimeout as sleep } from 'node:timers/promises';
import { Mutex, Semaphore } from 'redis-semaphore';
import { Leasehold } from '../../dist/index.js';
import { closeAll, commandsSent, connect, serverCpuSeconds } from '../clients.mjs';
import { LOCK_OPTIONS, now, warmupMs } from '../harness.mjs';
import { Samples } from '../stats.mjs';

/**
 * Locks of several holders under contention (the semaphore and read-write lock scenarios): 16
 * workers on one key, one shared client and library instance, each worker taking its turn as a
 * `role` the scenario gives it, holding HOLD_MS, releasing, going again. Each contestant says how
 * it takes a role: leasehold by `limit` or `mode`, redis-semaphore by its Semaphore, or (having
 * no read-write lock) by its Mutex for every role.
 */

export const WORKERS = 16;
export const HOLD_MS = 1;
const KEY = 'bench-holders';

/** How each contestant acquires `key` in `role`: a handle to release. */
export const CONTESTANTS = {
  leasehold: (client) => {
    const lh = new Leasehold(client);
    return {
      acquire: (key, options) => lh.acquire(key, { ...LOCK_OPTIONS, ...options }),
      release: (lock) => lock.release(),
      close: () => lh.close(),
    };
  },
  'redis-semaphore': (client) => ({
    async acquire(key, { limit }) {
      const options = { lockTimeout: LOCK_OPTIONS.ttl, acquireTimeout: LOCK_OPTIONS.wait };
      const lock = limit === undefined ? new Mutex(client, key, options) : new Semaphore(client, key, limit, options);
      await lock.acquire();
      return lock;
    },
    release: (lock) => lock.release(),
    close: async () => {},
  }),
};

/** One acquisition: its handle, when it was granted and how long it waited; undefined if it failed. */
async function timed(lock, options) {
  const asked = now();
  try {
    const handle = await lock.acquire(KEY, options);
    const got = now();
    return { handle, got, waited: got - asked };
  } catch {
    return undefined;
  }
}

/**
 * The contest for `ms`: every worker in its role (`roles[i]` gives the options leasehold gets for
 * it: `{ limit }` or `{ mode }`), counting acquisitions per worker and per role, waits, how many
 * held at once (`most`, and the time-weighted mean `meanHeld`), and `broken` moments: a holder
 * admitted where `admits(open, role)` says it must not be.
 */
async function contest(lock, roles, ms, admits) {
  const perWorker = new Array(roles.length).fill(0);
  const waits = new Map();
  const open = new Map();
  let acquisitions = 0;
  let timeouts = 0;
  let broken = 0;
  let most = 0;
  let held = 0;
  let heldArea = 0;
  let lastChange = now();
  let stopped = false;
  const start = now();
  const end = start + ms;
  const stop = setTimeout(() => {
    stopped = true;
  }, ms);
  const change = (delta) => {
    const at = Math.min(now(), end);
    if (at > lastChange) heldArea += held * (at - lastChange);
    lastChange = Math.max(lastChange, at);
    held += delta;
    most = Math.max(most, held);
  };
  const worker = async (id) => {
    const { name, options } = roles[id];
    if (!waits.has(name)) waits.set(name, new Samples());
    while (!stopped) {
      const taken = await timed(lock, options);
      if (taken === undefined) {
        timeouts++;
        continue;
      }
      const { handle, got } = taken;
      waits.get(name).add(taken.waited);
      acquisitions++;
      if (got <= end) perWorker[id]++;
      if (!admits(open, name)) broken++;
      open.set(name, (open.get(name) ?? 0) + 1);
      change(1);
      await sleep(HOLD_MS);
      open.set(name, open.get(name) - 1);
      change(-1);
      await lock.release(handle);
    }
  };
  await Promise.all(roles.map((_, id) => worker(id)));
  clearTimeout(stop);
  return { perWorker, waits, acquisitions, timeouts, broken, most, meanHeld: heldArea / ms };
}

/**
 * Run `contestant` through the contest on a fresh client: a warm-up, then the timed pass, with
 * the commands it sent and the CPU it and the server spent.
 */
export async function contended(contestant, ctx, roles, admits) {
  const [client] = [await connect(ctx.port)];
  const lock = CONTESTANTS[contestant.name](client);
  try {
    await contest(lock, roles, warmupMs(ctx.duration), admits);
    const sentBefore = commandsSent();
    const serverCpuBefore = await serverCpuSeconds(ctx.admin);
    const clientCpuBefore = process.cpuUsage();
    const c = await contest(lock, roles, ctx.duration, admits);
    const clientCpu = process.cpuUsage(clientCpuBefore);
    const serverCpuUs = ((await serverCpuSeconds(ctx.admin)) - serverCpuBefore) * 1e6;
    const calls = commandsSent() - sentBefore;
    return {
      ...c,
      seconds: ctx.duration / 1000,
      callsPerAcquisition: calls / c.acquisitions,
      clientCpuPerAcquisition: (clientCpu.user + clientCpu.system) / c.acquisitions,
      serverCpuPerAcquisition: serverCpuUs / c.acquisitions,
    };
  } finally {
    await lock.close();
    await closeAll([client]);
  }
}

/** The fewest acquisitions of the workers `ids`, and that ÷ their fair share. */
export function fairness(perWorker, ids) {
  const counts = ids.map((i) => perWorker[i]);
  const fewest = Math.min(...counts);
  const total = counts.reduce((a, b) => a + b, 0);
  return { fewest, share: total > 0 ? fewest / (total / counts.length) : 0 };
}
