/**
 * leasehold's internals (not exported by the package), bundled from src/ with esbuild for a bench
 * that measures below the public API: layers.mjs, the `leasehold's functions (floor)` row of
 * peers.mjs, and postgres-cycle.mjs's statements floor. Built once per process inside the
 * checkout, so the bundle's imports of ioredis and the rest resolve from node_modules; the
 * directory goes when the process exits.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';

const EXPORTS = {
  Leasehold: 'leasehold.ts',
  resolveStore: 'store/registry.ts',
  mutex: 'primitives/mutex.ts',
  Single: 'topology/single.ts',
  EvictionCheck: 'store/eviction-check.ts',
  DEFAULTS: 'core/defaults.ts',
  SCRIPTS: 'store/redis/scripts.ts',
  boundArgs: 'store/redis/scripts.ts',
  storeSettings: 'store/settings.ts',
  lockKeys: 'store/redis/keys.ts',
  statements: 'store/postgres/queries.ts',
  schemaNames: 'store/postgres/schema.ts',
};

let loaded;

export function internals() {
  loaded ??= bundle();
  return loaded;
}

async function bundle() {
  const cache = new URL('../node_modules/.cache/', import.meta.url).pathname;
  mkdirSync(cache, { recursive: true });
  const dir = mkdtempSync(join(cache, 'leasehold-internals-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  const entry = join(dir, 'entry.js');
  const src = new URL('../src/', import.meta.url).pathname;
  await build({
    stdin: {
      contents: Object.entries(EXPORTS)
        .map(([name, file]) => `export { ${name} } from '${src}${file}';`)
        .join('\n'),
      resolveDir: src,
      loader: 'ts',
    },
    bundle: true,
    platform: 'node',
    format: 'esm',
    outfile: entry,
    loader: { '.lua': 'text' },
    packages: 'external',
    logLevel: 'error',
  });
  return import(entry);
}

/**
 * The internals, a store's settings for `prefix`, and a store on `client` that has taken and
 * released a lock once, so the library of functions is loaded on the server.
 */
async function loadedOn(client, prefix) {
  const L = await internals();
  const settings = L.storeSettings({ prefix, instance: 'bench-raw' });
  const { store } = L.resolveStore(client, { ...settings, onError: () => {} });
  await store.acquire('raw-warm', { owner: 'raw-warm-owner', ttl: 1_000 });
  await store.release('raw-warm', 'raw-warm-owner');
  return { L, settings, store };
}

/**
 * leasehold's acquire and free functions called straight on one ioredis client, with the keys and
 * arguments its Redis store sends for a quiet name (one whose last release woke nobody, as every
 * cycle of a bench loop's is), and nothing of the library around them: what the scripts' work and
 * interface cost. `prefix` keeps its keys apart; the library is loaded through a store.
 */
export async function rawFunctionsOn(client, prefix) {
  const { L, settings, store } = await loadedOn(client, prefix);
  const bound = L.boundArgs(settings, 'room');
  let n = 0;
  return {
    async acquire(name, ttl) {
      const owner = `${process.pid}-raw-${n++}`;
      const a = L.SCRIPTS.acquire.input(prefix, name, { owner, ttl }, '', bound);
      const token = await client.fcall(L.SCRIPTS.acquire.fn, a.keys.length, ...a.keys, ...a.args);
      if (typeof token !== 'number') throw new Error(`${name} is held`);
      return { name, owner };
    },
    async release({ name, owner }) {
      // A name this loop released with nobody behind it is quiet: the store frees it by free.lua.
      const r = L.SCRIPTS.free.input(prefix, name, owner, '', bound);
      // Released (1): a cycle that took and freed the lock, as every other row's does.
      if ((await client.fcall(L.SCRIPTS.free.fn, r.keys.length, ...r.keys, ...r.args)) !== 1) {
        throw new Error(`${name}: the raw release did not release`);
      }
    },
    close: () => store.close(),
  };
}

/**
 * leasehold's acquire and release functions on one ioredis client with the least waiting a queue
 * needs around them, for the contended scenario: a refused caller queues as the store queues it
 * (from one room, so a release here grants it the lock outright) and waits for the release whose
 * reply names it; that release hands it the lock at once, and returns on the next turn of the
 * event loop, once the woken waiter holds the lock (as leasehold's store does). No timers,
 * subscription, watchdog or Lock: every waiter is this process's, so every hand-off comes back in
 * a release's reply. What a hand-off costs with leasehold's scripts and nothing of its client
 * side. `prefix` keeps its keys apart; the library is loaded through a store.
 */
export async function rawWaitingOn(client, prefix) {
  const { L, settings, store } = await loadedOn(client, prefix);
  const room = 'bench-raw-room';
  const bound = { ...L.boundArgs(settings, room), directRoom: room };
  const call = (script, name, request) => {
    const i = script.input(prefix, name, request, 'PUBLISH', bound);
    return client.fcall(script.fn, i.keys.length, ...i.keys, ...i.args);
  };
  /**
   * Refused waiters: owner token → wake(granted outright?). A waiter parks before any release can
   * name it: its refusal and that release share one connection, so the refusal is answered first.
   */
  const parked = new Map();
  const handedOn = (owner) => new Promise((wake) => parked.set(owner, wake));
  let n = 0;
  return {
    async acquire(name, ttl) {
      const owner = `${process.pid}-wait-${n++}`;
      // A first attempt joins the queue when refused; a waiter handed a reservation (not a grant) tries again.
      for (let queue = 'join'; ; queue = 'member') {
        if (typeof (await call(L.SCRIPTS.acquire, name, { owner, ttl, queue })) === 'number') return { name, owner };
        if (await handedOn(owner)) return { name, owner };
      }
    },
    async release({ name, owner }) {
      // 1, or [1, '<woken> <next>… [=<ttl>]', <token of a grant outright>, 'here'] when it woke a waiter.
      const reply = await call(L.SCRIPTS.release, name, owner);
      const code = Array.isArray(reply) ? reply[0] : reply;
      if (code !== 1) throw new Error(`${name}: the raw release did not release (${code})`);
      if (!Array.isArray(reply)) return;
      const woken = String(reply[1]).split(' ')[0];
      const granted = typeof reply[2] === 'number';
      const wake = parked.get(woken);
      if (wake === undefined) throw new Error(`${name}: the release named ${woken}, which is not waiting`);
      parked.delete(woken);
      wake(granted);
      // As leasehold's store does: the woken waiter's way to the lock runs first, and the
      // releasing caller goes on at the next turn of the event loop.
      await new Promise((resolve) => setImmediate(resolve));
    },
    close: () => store.close(),
  };
}
