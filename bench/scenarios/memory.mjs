import { runChild, serveChild } from '../child.mjs';
import { closeAll, connect } from '../clients.mjs';
import { LOCK_OPTIONS, now } from '../harness.mjs';
import { LIBRARIES } from '../peers.mjs';

const LOOPS = 64;
const CHECKPOINTS = 10;
const MB = 1024 * 1024;

/** Least-squares slope of y over x. */
function slope(points) {
  const n = points.length;
  const mx = points.reduce((a, p) => a + p.x, 0) / n;
  const my = points.reduce((a, p) => a + p.y, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.x - mx) * (p.y - my);
    den += (p.x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

/**
 * The measured side, in a child process of its own: a fresh heap that no other scenario's
 * garbage shares, and --expose-gc so that each checkpoint reads live memory, not garbage.
 */
async function child(port, cycles, libraryName) {
  const library = LIBRARIES.find((l) => l.name === libraryName);
  const client = await connect(port);
  const lock = library.create();
  await lock.setup([client]);

  const warmup = Math.round(cycles / 20);
  const step = Math.ceil(cycles / CHECKPOINTS);
  const samples = [];
  let done = 0;
  let next = warmup;
  let started = 0;
  const checkpoint = () => {
    globalThis.gc();
    const { rss, heapUsed } = process.memoryUsage();
    samples.push({ cycles: done - warmup, rss, heapUsed });
  };
  const loop = async (key) => {
    while (done < warmup + cycles) {
      if (done === next) {
        if (next === warmup) started = now();
        checkpoint();
        next += step;
      }
      done++;
      await lock.release(await lock.acquire(key, LOCK_OPTIONS));
    }
  };
  await Promise.all(Array.from({ length: LOOPS }, (_, i) => loop(`bench-memory-${i}`)));
  const elapsed = (now() - started) / 1000;
  checkpoint();
  await lock.teardown();
  await closeAll([client]);
  return { samples, cyclesPerSec: cycles / elapsed };
}

/** Many acquire/release cycles: memory must not grow with the count (no per-acquisition leak). */
export default {
  name: 'memory',
  title: `Memory: acquire/release cycles (${LOOPS} loops, distinct keys), memory after GC`,
  once: true,
  // Even at 5 cycles per ms (a slow machine) the run fits; past that something is stuck.
  timeLimitMs: (ctx) => ctx.memoryCycles / 5 + 60_000,
  libraries: ['leasehold'],
  metrics: [
    { key: 'cycles', label: 'cycles', better: 'higher', digits: 0 },
    { key: 'rssBeforeMB', label: 'RSS before MB', better: 'lower', digits: 1 },
    { key: 'rssAfterMB', label: 'RSS after MB', better: 'lower', digits: 1 },
    { key: 'heapBeforeMB', label: 'heap before MB', better: 'lower', digits: 2 },
    { key: 'heapAfterMB', label: 'heap after MB', better: 'lower', digits: 2 },
    { key: 'heapBytesPerCycle', label: 'heap B/cycle (slope)', better: 'lower', digits: 3 },
    { key: 'cyclesPerSec', label: 'cycles/s', better: 'higher', digits: 0 },
  ],
  async run(library, ctx) {
    const { samples, cyclesPerSec } = await runChild(
      import.meta.url,
      [ctx.port, ctx.memoryCycles, library.name],
      `memory child for ${library.name}`,
    );
    const first = samples[0];
    const last = samples.at(-1);
    return {
      cycles: ctx.memoryCycles,
      rssBeforeMB: first.rss / MB,
      rssAfterMB: last.rss / MB,
      heapBeforeMB: first.heapUsed / MB,
      heapAfterMB: last.heapUsed / MB,
      heapBytesPerCycle: slope(samples.map((s) => ({ x: s.cycles, y: s.heapUsed }))),
      cyclesPerSec,
      checkpoints: samples,
    };
  },
};

serveChild(import.meta.url, (port, count, libraryName) => child(Number(port), Number(count), libraryName));
