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
 * The internals are bundled from src/ for this run (internals.mjs: they are not exported). Node and
 * redis-server share CPU 0, as in the main bench; only the differences between rows mean much.
 */
import { parseArgs } from 'node:util';
import { closeAll, connect } from './clients.mjs';
import { fencedFloorOn } from './fenced-floor.mjs';
import { internals, rawFunctionsOn } from './internals.mjs';
import { pinToOneCpu } from './placement.mjs';
import { startRedis } from './server.mjs';
import { median } from './stats.mjs';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '12' }, slice: { type: 'string', default: '300' } },
});
const rounds = Number(values.rounds);
const slice = Number(values.slice);
const TTL = 10_000;

const L = await internals();

const server = await startRedis();
const placement = pinToOneCpu([server.pid]);
const client = await connect(server.port);
const lh = new L.Leasehold(client);
let raw;
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
  raw = await rawFunctionsOn(client, 'layers');
  let n = 0;
  const owner = () => `layers-bench-owner-${n++}`;
  const rows = {
    'fenced functions (floor)': async () => {
      await floor.release(await floor.acquire('floor', TTL));
    },
    "leasehold's functions, raw": async () => {
      await raw.release(await raw.acquire('raw', TTL));
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
  await raw?.close();
  await closeAll([client]);
  await server.stop();
}
