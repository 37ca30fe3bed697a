/**
 * Where a contended hand-off's time goes: leasehold beside its own functions with the least waiting
 * around them (internals.mjs, `rawWaitingOn`), as the contended scenario runs them (16 workers on one
 * key, each holding it 1 ms, one client), in interleaved rounds.
 *
 *   npx tsup --silent && node bench/handoff.mjs [--rounds 3] [--duration 4000] [--pin cpu0|split]
 *
 * Each hand-off (an acquisition by another worker than the last holder) is cut at the client's
 * socket, so no build of leasehold is instrumented: the release called; its write to the socket
 * begun; that write call returned (sharing a CPU, the server answers inside it: the write wakes
 * redis-server, which takes the CPU from node there); the reply's data event; the next worker
 * holding the lock. The table gives each segment's median over every hand-off, then the median
 * over rounds. Times are the process's own clock; the hooks cost a little of their own.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import Redis from 'ioredis';
import { Leasehold } from '../dist/index.js';
import { LOCK_OPTIONS } from './harness.mjs';
import { rawWaitingOn } from './internals.mjs';
import { pinSplit, pinToOneCpu } from './placement.mjs';
import { HOST, startRedis } from './server.mjs';
import { median } from './stats.mjs';

const { values: flags } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    duration: { type: 'string', default: '4000' },
    pin: { type: 'string', default: 'cpu0' },
  },
});
if (!['cpu0', 'split'].includes(flags.pin)) throw new Error(`--pin must be cpu0 or split, got ${flags.pin}`);
const ROUNDS = Number(flags.rounds);
const DURATION_MS = Number(flags.duration);
const WORKERS = 16;
const HOLD_MS = 1;
const KEY = 'bench-handoff';
const SEGMENTS = [
  ['release called → its write begins', 'write'],
  ['the write call returns', 'written'],
  ["→ the reply's data event", 'data'],
  ['→ the next worker holds the lock', 'holding'],
];

/** leasehold on `client`, as the contended scenario's row makes it. */
async function leasehold(client) {
  const locks = new Leasehold(client);
  return {
    acquire: (key) => locks.acquire(key, LOCK_OPTIONS),
    release: (lock) => lock.release(),
    close: () => locks.close(),
  };
}

/** leasehold's functions with the least waiting around them (the contended scenario's floor). */
async function functionsAlone(client) {
  const raw = await rawWaitingOn(client, 'bench-handoff-raw');
  return {
    acquire: (key) => raw.acquire(key, LOCK_OPTIONS.ttl),
    release: (held) => raw.release(held),
    close: () => raw.close(),
  };
}

const ROWS = [
  ['leasehold', leasehold],
  ['its functions alone', functionsAlone],
];

/** One round of `make`'s lock: each segment's median (µs, from the release called) and hand-offs/s. */
async function round(port, make) {
  const client = new Redis({ host: HOST, port, lazyConnect: true });
  await client.connect();
  const lock = await make(client);
  const marks = [];
  const mark = (kind) => marks.push([performance.now(), kind]);
  const stream = client.stream;
  const write = stream.write.bind(stream);
  stream.write = (...args) => {
    mark('write');
    const done = write(...args);
    mark('written');
    return done;
  };
  stream.prependListener('data', () => mark('data'));
  let stopped = false;
  let last = -1;
  let releasedAt = 0;
  const handoffs = [];
  const worker = async (id) => {
    while (!stopped) {
      const held = await lock.acquire(KEY);
      const got = performance.now();
      if (last !== id && last >= 0) handoffs.push([releasedAt, got]);
      last = id;
      await sleep(HOLD_MS);
      releasedAt = performance.now();
      await lock.release(held);
    }
  };
  const workers = Array.from({ length: WORKERS }, (_, id) => worker(id));
  await sleep(Math.min(500, DURATION_MS / 4));
  marks.length = 0;
  handoffs.length = 0;
  const start = performance.now();
  await sleep(DURATION_MS);
  const end = performance.now();
  stopped = true;
  await Promise.all(workers);
  await lock.close();
  client.disconnect();
  const segments = Object.fromEntries(SEGMENTS.map(([, key]) => [key, []]));
  let i = 0;
  for (const [released, got] of handoffs) {
    if (got > end) continue;
    while (i < marks.length && marks[i][0] < released) i++;
    // The first write after the release called, the return of that call, the first reply after it.
    const at = { holding: got };
    for (let j = i; j < marks.length && marks[j][0] <= got; j++) {
      const [t, kind] = marks[j];
      if (kind === 'write' && at.write === undefined) at.write = t;
      else if (kind === 'written' && at.write !== undefined && at.written === undefined) at.written = t;
      else if (kind === 'data' && at.written !== undefined && at.data === undefined) at.data = t;
    }
    if (at.data === undefined) continue;
    for (const [, key] of SEGMENTS) segments[key].push((at[key] - released) * 1000);
  }
  return {
    at: Object.fromEntries(Object.entries(segments).map(([key, values]) => [key, median(values)])),
    handoffsPerSec: segments.holding.length / ((end - start) / 1000),
  };
}

const server = await startRedis();
const placement = (flags.pin === 'split' ? pinSplit : pinToOneCpu)([server.pid]);
const results = Object.fromEntries(ROWS.map(([name]) => [name, []]));
try {
  for (let r = 1; r <= ROUNDS; r++) {
    for (const [name, make] of r % 2 ? ROWS : [...ROWS].reverse()) {
      results[name].push(await round(server.port, make));
      console.error(`round ${r}/${ROUNDS}: ${name}`);
    }
  }
} finally {
  await server.stop();
}
console.log(`Contended hand-offs, ${ROUNDS} rounds of ${DURATION_MS} ms; ${placement}\n`);
console.log(`| segment (µs, medians) | ${ROWS.map(([name]) => name).join(' | ')} |`);
console.log(`|---|${ROWS.map(() => '---:').join('|')}|`);
const at = (name, key) => median(results[name].map((r) => r.at[key]));
SEGMENTS.forEach(([label, key], n) => {
  const cells = ROWS.map(([name]) => {
    const value = at(name, key);
    const step = n === 0 ? value : value - at(name, SEGMENTS[n - 1][1]);
    return `${n === 0 ? '' : '+'}${step.toFixed(0)}`;
  });
  console.log(`| ${label} | ${cells.join(' | ')} |`);
});
console.log(`| the hand-off gap | ${ROWS.map(([name]) => at(name, 'holding').toFixed(0)).join(' | ')} |`);
console.log(
  `| hand-offs/s | ${ROWS.map(([name]) => median(results[name].map((r) => r.handoffsPerSec)).toFixed(0)).join(' | ')} |`,
);
