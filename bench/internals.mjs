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
 * leasehold's acquire and free functions called straight on one ioredis client, with the keys and
 * arguments its Redis store sends for a quiet name (one whose last release woke nobody, as every
 * cycle of a bench loop's is), and nothing of the library around them: what the scripts' work and
 * interface cost. `prefix` keeps its keys apart; the library is loaded through a store.
 */
export async function rawFunctionsOn(client, prefix) {
  const L = await internals();
  const settings = L.storeSettings({ prefix, instance: 'bench-raw' });
  const { store } = L.resolveStore(client, { ...settings, onError: () => {} });
  await store.acquire('raw-warm', { owner: 'raw-warm-owner', ttl: 1_000 });
  await store.release('raw-warm', 'raw-warm-owner');
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
