/**
 * One adapter per library, all with the same shape:
 *   { name, setup(clients), acquire(key, { ttl, wait }) → handle, release(handle), teardown() }
 * `clients` holds one ioredis client, or several (one per independent master) for Redlock.
 * Each library is configured the way its README shows a user: its own defaults, plus only what
 * it takes to say "lease `ttl` ms, wait up to `wait` ms". Peers that count retries instead of
 * taking a wait budget get as many retries as fit in it at their default retry delay.
 */

import { execFileSync } from 'node:child_process';
import diagnostics from 'node:diagnostics_channel';
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ResourceLockedError as SesameLocked, Redlock as SesameRedlock } from '@sesamecare-oss/redlock';
import { Mutex, RedlockMutex } from 'redis-semaphore';
import Redlock, { ResourceLockedError } from 'redlock';
import { Leasehold } from '../dist/index.js';
import { fencedFloorOn, oneKeyOn, retainedTokenOn } from './fenced-floor.mjs';
import { rawFunctionsOn, rawWaitingOn } from './internals.mjs';

/**
 * redlock-universal asks for Node >= 22 (its `engines`), so as a dev dependency it made `npm ci`
 * warn EBADENGINE on the Node 20 that leasehold supports. The bench installs it on first use
 * instead, into node_modules without saving it (package.json and package-lock.json stay as they
 * are; the next `npm ci` removes it). If it cannot be installed, its row is left out, with a note.
 */
const REDLOCK_UNIVERSAL = 'redlock-universal@0.8.5';

async function loadOnDemand(spec) {
  const name = spec.slice(0, spec.lastIndexOf('@'));
  const root = new URL('..', import.meta.url);
  // Checked on disk, not by a failed import: Node would remember the failure for this process.
  if (!existsSync(new URL(`node_modules/${name}/package.json`, root))) {
    console.error(`bench: installing ${spec} for the bench (not saved to package.json)`);
    try {
      execFileSync(
        'npm',
        ['install', '--no-save', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error', spec],
        { cwd: fileURLToPath(root), stdio: ['ignore', 'ignore', 'inherit'] },
      );
    } catch (error) {
      console.error(`bench: leaving ${name} out: cannot install ${spec}: ${error?.message ?? error}`);
      return undefined;
    }
  }
  return import(name);
}

const universal = await loadOnDemand(REDLOCK_UNIVERSAL);

function retriesWithin(wait, retryDelay) {
  return Math.ceil(wait / retryDelay);
}

/** Errors a library reports on the side (failed votes that are not "someone holds it"). */
function sideErrors(name, isExpected) {
  let reported = false;
  return (error) => {
    if (isExpected(error) || reported) return;
    reported = true;
    console.error(`[${name}] ${error?.message ?? error}`);
  };
}

/**
 * `LEASEHOLD_BASELINE=/path/to/other/dist/index.js` adds that build as the library `baseline`:
 * leasehold at another revision, measured in the same run, to show what a change costs.
 */
const baselinePath = process.env.LEASEHOLD_BASELINE;
const Baseline = baselinePath ? (await import(pathToFileURL(baselinePath).href)).Leasehold : undefined;

function leasehold(name = 'leasehold', LeaseholdClass = Leasehold, options = {}, backend = undefined) {
  let lh;
  let opened;
  return {
    name,
    async setup(clients) {
      opened = backend ? await backend() : undefined;
      lh = new LeaseholdClass(opened?.client ?? (clients.length === 1 ? clients[0] : clients), options);
      const report = sideErrors('leasehold', () => false);
      lh.on('backendError', ({ error }) => report(error));
    },
    acquire: (key, { ttl, wait }) => lh.acquire(key, { ttl, wait }),
    release: (lock) => lock.release(),
    instance: () => lh,
    async teardown() {
      await lh?.close();
      await opened?.close();
    },
  };
}

/**
 * leasehold with every diagnostics channel subscribed (no-op handlers): what tracing costs when
 * someone listens. The plain `leasehold` row has nobody subscribed.
 */
function tracedLeasehold() {
  const inner = leasehold('leasehold (traced)');
  const handlers = { start() {}, end() {}, asyncStart() {}, asyncEnd() {}, error() {} };
  const noop = () => {};
  const traced = ['leasehold:acquire', 'leasehold:extend', 'leasehold:release'];
  const plain = ['leasehold:lost', 'leasehold:handoff', 'leasehold:job', 'leasehold:backend-error'];
  return {
    ...inner,
    async setup(clients) {
      for (const name of traced) diagnostics.tracingChannel(name).subscribe(handlers);
      for (const name of plain) diagnostics.subscribe(name, noop);
      await inner.setup(clients);
    },
    async teardown() {
      await inner.teardown();
      for (const name of traced) diagnostics.tracingChannel(name).unsubscribe(handlers);
      for (const name of plain) diagnostics.unsubscribe(name, noop);
    },
  };
}

/**
 * leasehold's `withLock`, what most applications call, in the same acquire/release shape: `acquire`
 * settles when the work starts (the lock is granted), `release` lets the work return and settles
 * when `withLock` does (the lock released). Serial only: the bar compares it with the best peer's
 * acquire + release there.
 */
function withLockLeasehold() {
  const inner = leasehold('leasehold (withLock)');
  let lh;
  return {
    ...inner,
    async setup(clients) {
      await inner.setup(clients);
      lh = inner.instance();
    },
    acquire: (key, { ttl, wait }) =>
      new Promise((granted, refused) => {
        const done = lh.withLock(key, { ttl, wait }, () => new Promise((finish) => granted({ finish, done })));
        done.catch(refused);
      }),
    release: async ({ finish, done }) => {
      finish();
      await done;
      return true;
    },
  };
}

/** A PostgreSQL pool and an etcd client, when the run was given their URLs (bench/backends.ts starts both). */
const POSTGRES_URL = process.env.BENCH_POSTGRES_URL;
/** Every member, comma-separated (BENCH_ETCD_URLS), so the client survives a member going; one also works. */
const ETCD_URL = process.env.BENCH_ETCD_URLS ?? process.env.BENCH_ETCD_URL;

async function postgresBackend() {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 20 });
  return { client: pool, close: () => pool.end() };
}

async function etcdBackend() {
  const { Etcd3 } = await import('etcd3');
  const client = new Etcd3({ hosts: ETCD_URL.split(',') });
  return { client, close: async () => client.close() };
}

/** Both Redlock ports share their API; their README wants an 'error' listener (it emits one per failed vote). */
function redlockLike(name, RedlockClass, LockedError) {
  return () => {
    let redlock;
    return {
      name,
      async setup(clients) {
        redlock = new RedlockClass(clients);
        redlock.on(
          'error',
          sideErrors(name, (e) => e instanceof LockedError),
        );
      },
      acquire: (key, { ttl, wait }) =>
        redlock.acquire([key], ttl, { retryCount: retriesWithin(wait, redlock.settings.retryDelay) }),
      release: (lock) => lock.release(),
      async teardown() {},
    };
  };
}

/** The README builds one Mutex per use: `new Mutex(client, key)`, acquire, release. */
function redisSemaphore() {
  let make;
  return {
    name: 'redis-semaphore',
    async setup(clients) {
      make =
        clients.length === 1
          ? (key, options) => new Mutex(clients[0], key, options)
          : (key, options) => new RedlockMutex(clients, key, options);
    },
    async acquire(key, { ttl, wait }) {
      const mutex = make(key, { lockTimeout: ttl, acquireTimeout: wait });
      await mutex.acquire();
      return mutex;
    },
    release: (mutex) => mutex.release(),
    async teardown() {},
  };
}

/** redlock-universal's default retry delays (its README's Configuration section). */
const UNIVERSAL_RETRY_DELAY = 100;
const UNIVERSAL_REDLOCK_RETRY_DELAY = 200;

/** The README builds one lock object per key (`createLock({ adapter, key, ttl })`) and reuses it. */
function redlockUniversal() {
  let make;
  const locks = new Map();
  return {
    name: 'redlock-universal',
    async setup(clients) {
      const { createLock, createRedlock, IoredisAdapter } = universal;
      const adapters = clients.map((c) => new IoredisAdapter(c));
      make =
        adapters.length === 1
          ? (key, ttl, wait) =>
              createLock({ adapter: adapters[0], key, ttl, retryAttempts: retriesWithin(wait, UNIVERSAL_RETRY_DELAY) })
          : (key, ttl, wait) =>
              createRedlock({ adapters, key, ttl, retryAttempts: retriesWithin(wait, UNIVERSAL_REDLOCK_RETRY_DELAY) });
    },
    async acquire(key, { ttl, wait }) {
      const id = `${key}\0${ttl}\0${wait}`;
      let lock = locks.get(id);
      if (!lock) {
        lock = make(key, ttl, wait);
        locks.set(id, lock);
      }
      return { lock, handle: await lock.acquire() };
    },
    release: ({ lock, handle }) => lock.release(handle),
    async teardown() {
      locks.clear();
    },
  };
}

const COMPARE_AND_DELETE =
  "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/**
 * Not a library: the least any lock can send on ioredis, one SET NX PX to take it and one
 * compare-and-delete script to give it back, with no waiting, fencing or watchdog. The ceiling
 * a two-round-trip lock can reach on this machine; uncontended scenarios only.
 */
function bareIoredis() {
  let client;
  let sha;
  let n = 0;
  return {
    name: 'bare ioredis (floor)',
    async setup(clients) {
      [client] = clients;
      sha = await client.script('LOAD', COMPARE_AND_DELETE);
    },
    async acquire(key, { ttl }) {
      const token = `${process.pid}:${n++}`;
      if ((await client.set(key, token, 'PX', ttl, 'NX')) !== 'OK') throw new Error(`${key} is held`);
      return { key, token };
    },
    release: ({ key, token }) => client.evalsha(sha, 1, key, token),
    async teardown() {},
  };
}

/**
 * A floor row of fenced-floor.mjs: `on(client)` gives its acquire and release, no library around
 * them. Over several masters (Redlock), each node's acquire and then each node's release, all at
 * once, as a quorum would call them.
 */
function floorRow(name, on) {
  let nodes = [];
  let one;
  return {
    name,
    async setup(clients) {
      nodes = await Promise.all(clients.map((client) => on(client)));
      one = nodes.length === 1 ? nodes[0] : undefined;
    },
    acquire: (key, { ttl }) => (one ? one.acquire(key, ttl) : Promise.all(nodes.map((n) => n.acquire(key, ttl)))),
    release: (held) => (one ? one.release(held) : Promise.all(nodes.map((n, i) => n.release(held[i])))),
    async teardown() {},
  };
}

/** Not a library either: the least a lock with fencing tokens costs as two functions. */
const fencedFloor = () => floorRow('fenced functions (floor)', fencedFloorOn);

/** The least a lock whose clock token outlives it for the retention keeps (footprint only). */
const retainedToken = () => floorRow('retained token (floor)', retainedTokenOn);

/** The leanest one-key layout that keeps what leasehold's uncontended cycle keeps. */
const oneKey = () => floorRow('one key per lock (floor)', oneKeyOn);

/**
 * leasehold's own acquire and release functions called straight on ioredis, with the keys and
 * arguments its store sends and no library around them (internals.mjs): the least leasehold's
 * scripts, with every guarantee they keep, cost on this client (on each of Redlock's masters at once,
 * as a quorum would call them). Against it the bench tells how much of a gap is the library's client
 * side and how much the scripts'.
 */
function rawFunctions() {
  let nodes = [];
  return {
    name: "leasehold's functions (floor)",
    async setup(clients) {
      // Over several masters (Redlock), each node's acquire and then each node's release, all at once.
      nodes = await Promise.all(clients.map((client) => rawFunctionsOn(client, 'bench-raw')));
    },
    acquire: (key, { ttl }) => Promise.all(nodes.map((raw) => raw.acquire(key, ttl))),
    release: (held) => Promise.all(nodes.map((raw, i) => raw.release(held[i]))),
    teardown: () => Promise.all(nodes.map((raw) => raw.close())),
  };
}

/**
 * leasehold's acquire and release functions with the least waiting around them (internals.mjs):
 * a refused caller waits for the release whose reply grants it the lock. The contended scenario's
 * floor: how much of a hand-off is the scripts', and how much the library's client side.
 */
function rawWaiting() {
  let raw;
  return {
    name: "leasehold's functions, waiting (floor)",
    async setup([client]) {
      raw = await rawWaitingOn(client, 'bench-raw-wait');
    },
    acquire: (key, { ttl }) => raw.acquire(key, ttl),
    release: (held) => raw.release(held),
    teardown: () => raw.close(),
  };
}

/** The scenarios with the uncontended floors beside the libraries. */
const UNCONTENDED = ['serial', 'parallel', 'parallel-split'];

/** Fresh adapters for one run: nothing carries over from one scenario or round to the next. */
export const LIBRARIES = [
  { name: 'leasehold', create: () => leasehold() },
  { name: 'leasehold (traced)', create: tracedLeasehold },
  { name: 'leasehold (withLock)', create: withLockLeasehold, scenarios: ['serial'] },
  {
    name: 'leasehold (replicas: 1)',
    create: () => leasehold('leasehold (replicas: 1)', Leasehold, { replicas: 1, replicaTimeout: 1_000 }),
    replica: true,
  },
  ...(POSTGRES_URL
    ? [
        {
          name: 'leasehold (postgres)',
          create: () => leasehold('leasehold (postgres)', Leasehold, {}, postgresBackend),
        },
      ]
    : []),
  ...(ETCD_URL
    ? [{ name: 'leasehold (etcd)', create: () => leasehold('leasehold (etcd)', Leasehold, {}, etcdBackend) }]
    : []),
  ...(Baseline ? [{ name: 'baseline', create: () => leasehold('baseline', Baseline) }] : []),
  { name: 'redlock', create: redlockLike('redlock', Redlock, ResourceLockedError) },
  { name: '@sesamecare-oss/redlock', create: redlockLike('@sesamecare-oss/redlock', SesameRedlock, SesameLocked) },
  { name: 'redis-semaphore', create: redisSemaphore },
  ...(universal ? [{ name: 'redlock-universal', create: redlockUniversal }] : []),
  { name: 'bare ioredis (floor)', create: bareIoredis, reference: true, scenarios: UNCONTENDED },
  { name: 'fenced functions (floor)', create: fencedFloor, reference: true, scenarios: UNCONTENDED },
  { name: "leasehold's functions (floor)", create: rawFunctions, reference: true, scenarios: UNCONTENDED },
  { name: "leasehold's functions, waiting (floor)", create: rawWaiting, reference: true, scenarios: ['contended'] },
  { name: 'retained token (floor)', create: retainedToken, reference: true, scenarios: ['footprint'] },
  {
    name: 'one key per lock (floor)',
    create: oneKey,
    reference: true,
    scenarios: ['serial', 'parallel', 'parallel-split', 'footprint', 'redlock'],
  },
];
