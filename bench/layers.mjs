/**
 * Where a serial cycle's node CPU goes, layer by layer: the same acquire + release on one
 * redis-server, entered at each layer of the library in turn, interleaved in short slices.
 *
 *   node bench/layers.mjs [--rounds N] [--slice MS]
 *
 * Rows, from the bottom up (each includes the ones above it in this list):
 * - `fenced functions (floor)`: two FCALLs of a minimal fenced lock (fenced-floor.mjs);
 * - `leasehold's functions, raw`: leasehold's acquire and release functions called straight on
 *   ioredis with the keys and arguments the store sends: what the scripts' interface costs;
 * - `store`: the Redis store's acquire and release (keys, arguments, FCALL, replies decoded);
 * - `engine`: the single-store engine's attempt and release (commandTimeout, validity);
 * - `Leasehold acquire + release`, `withLock`: what an application calls.
 * The internals are bundled from src/ with esbuild for this run (they are not exported). Node and
 * redis-server share CPU 0, as in the main bench; only the differences between rows mean much.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { closeAll, connect } from './clients.mjs';
import { fencedFloorOn } from './fenced-floor.mjs';
import { pinToOneCpu } from './placement.mjs';
import { startRedis } from './server.mjs';
import { median } from './stats.mjs';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '12' }, slice: { type: 'string', default: '300' } },
});
const rounds = Number(values.rounds);
const slice = Number(values.slice);
const TTL = 10_000;

// Inside the checkout, so the bundle's imports of ioredis and the rest resolve from node_modules.
const cache = new URL('../node_modules/.cache/', import.meta.url).pathname;
mkdirSync(cache, { recursive: true });
const dir = mkdtempSync(join(cache, 'leasehold-layers-'));
const entry = join(dir, 'entry.js');
const src = new URL('../src/', import.meta.url).pathname;
await build({
  stdin: {
    contents: [
      `export { Leasehold } from '${src}leasehold.ts';`,
      `export { resolveStore } from '${src}store/registry.ts';`,
      `export { mutex } from '${src}primitives/mutex.ts';`,
      `export { Single } from '${src}topology/single.ts';`,
      `export { EvictionCheck } from '${src}store/eviction-check.ts';`,
      `export { DEFAULTS } from '${src}core/defaults.ts';`,
      `export { SCRIPTS, boundArgs } from '${src}store/redis/scripts.ts';`,
      `export { storeSettings } from '${src}store/settings.ts';`,
      `export { lockKeys } from '${src}store/redis/keys.ts';`,
    ].join('\n'),
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
const L = await import(entry);

const server = await startRedis();
const placement = pinToOneCpu([server.pid]);
const client = await connect(server.port);
const lh = new L.Leasehold(client);
try {
  await (await lh.acquire('warm', { ttl: TTL })).release();
  const { DEFAULTS } = L;
  const settings = L.storeSettings({ prefix: 'layers', instance: 'layers-bench' });
  const { store } = L.resolveStore(client, { ...settings, onError: () => {} });
  const engine = new L.Single(L.mutex, store, false, {
    commandTimeout: DEFAULTS.commandTimeout,
    driftFactor: DEFAULTS.driftFactor,
    driftConstant: DEFAULTS.driftConstant,
    eviction: new L.EvictionCheck([store], 'warn', () => {}),
  });
  const floor = await fencedFloorOn(client);
  // Through the store once, so its library is loaded; then its functions, called as the store calls them.
  await store.acquire('raw', { owner: 'warm-owner', ttl: TTL });
  await store.release('raw', 'warm-owner');
  const bound = L.boundArgs(settings, 'room');
  const raw = (script, request, publish) => script.input('layers', 'raw', request, publish, bound);
  let n = 0;
  const owner = () => `layers-bench-owner-${n++}`;
  const rows = {
    'fenced functions (floor)': async () => {
      await floor.release(await floor.acquire('floor', TTL));
    },
    "leasehold's functions, raw": async () => {
      const t = owner();
      const a = raw(L.SCRIPTS.acquire, { owner: t, ttl: TTL }, '');
      await client.fcall(L.SCRIPTS.acquire.fn, a.keys.length, ...a.keys, ...a.args);
      const r = raw(L.SCRIPTS.release, t, 'PUBLISH');
      // Released (1): a cycle that took and freed the lock, as the other rows' cycles do.
      if ((await client.fcall(L.SCRIPTS.release.fn, r.keys.length, ...r.keys, ...r.args)) !== 1) {
        throw new Error(`${t}: the raw release did not release`);
      }
    },
    store: async () => {
      const t = owner();
      await store.acquire('store', { owner: t, ttl: TTL });
      await store.release('store', t);
    },
    engine: async () => {
      const t = owner();
      await engine.attempt('engine', t, TTL, 0, false);
      await engine.release('engine', t);
    },
    'Leasehold acquire + release': async () => {
      const lock = await lh.acquire('leasehold', { ttl: TTL, wait: 0 });
      await lock.release();
    },
    withLock: () => lh.withLock('with-lock', { ttl: TTL, wait: 0 }, () => undefined),
  };
  const samples = Object.fromEntries(Object.keys(rows).map((name) => [name, []]));
  for (let round = 0; round < rounds; round++) {
    const order = Object.entries(rows).sort(() => Math.random() - 0.5);
    for (const [name, cycle] of order) {
      for (let i = 0; i < 300; i++) await cycle();
      const cpu = process.cpuUsage();
      const started = performance.now();
      let cycles = 0;
      while (performance.now() - started < slice) {
        await cycle();
        cycles++;
      }
      const used = process.cpuUsage(cpu);
      samples[name].push((used.user + used.system) / cycles);
    }
  }
  console.log(`${placement}; ${rounds} rounds of ${slice} ms per row; median node CPU per cycle\n`);
  console.log('| layer | node CPU µs/cycle | added by this layer |');
  console.log('|---|--:|--:|');
  let previous;
  for (const name of Object.keys(rows)) {
    const us = median(samples[name]);
    const added = previous === undefined || name === 'withLock' ? '' : (us - previous).toFixed(1);
    console.log(`| ${name} | ${us.toFixed(1)} | ${added} |`);
    if (name !== 'withLock') previous = us;
  }
} finally {
  await lh.close();
  await closeAll([client]);
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
