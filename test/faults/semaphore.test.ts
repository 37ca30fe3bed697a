import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type RedisServer, randomPrefix, startRedis, waitFor } from '../harness/index.js';

/**
 * The semaphore and the read-write lock across processes on a real redis-server, each process its
 * own client and Leasehold (semaphore-worker.mjs), reporting every section it held: a semaphore of
 * 2 never has 3 holders whose leases were valid, and a holder killed with kill -9 while it holds
 * loses its permit to the others once its lease runs out; an exclusive section never overlaps
 * another, readers overlap, and the writer keeps getting in among them.
 */

interface Section {
  readonly worker: number;
  readonly kind: string;
  readonly enter: number;
  readonly exit: number;
  readonly valid: boolean;
  readonly fencingToken: number;
}

const WORKER = fileURLToPath(new URL('./semaphore-worker.mjs', import.meta.url));
let server: RedisServer;
const children: ChildProcess[] = [];

beforeAll(async () => {
  server = await startRedis();
});
afterEach(async () => {
  await Promise.all(children.splice(0).map(kill9));
});
afterAll(async () => {
  await server?.stop();
});

async function kill9(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}

/** Start `kinds.length` workers on one lock; every section any of them reports lands in `sections`. */
async function workers(
  kinds: readonly string[],
  { limit = 0, hold, ttl }: { limit?: number; hold: number; ttl: number },
): Promise<{ procs: ChildProcess[]; sections: Section[]; errors: string[] }> {
  const prefix = randomPrefix();
  const sections: Section[] = [];
  const errors: string[] = [];
  const procs = kinds.map((kind, worker) => {
    const args = [server.url, prefix, 'shared', kind, String(limit), String(hold), String(ttl)];
    const child = fork(WORKER, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(child);
    child.on('message', (m: { event: string; message?: string } & Omit<Section, 'worker'>) => {
      if (m.event === 'section') sections.push({ ...m, worker });
      if (m.event === 'error') errors.push(String(m.message));
    });
    return child;
  });
  await Promise.all(procs.map((p) => once(p, 'message')));
  return { procs, sections, errors };
}

/** Ask every live worker to stop after its current section, and wait until each has exited. */
async function stop(procs: readonly ChildProcess[]): Promise<void> {
  await Promise.all(
    procs
      .filter((p) => p.exitCode === null && p.signalCode === null)
      .map(async (p) => {
        const exited = once(p, 'exit');
        p.send({ cmd: 'stop' });
        await exited;
      }),
  );
}

/** The most sections open at one moment, counting only those `counted`. */
function mostAtOnce(sections: readonly Section[], counted = (_: Section) => true): number {
  const events = sections
    .filter(counted)
    .flatMap((s) => [
      { at: s.enter, delta: 1 },
      { at: s.exit, delta: -1 },
    ])
    // A section that ends at the moment another begins does not overlap it.
    .sort((a, b) => a.at - b.at || a.delta - b.delta);
  let open = 0;
  let most = 0;
  for (const e of events) {
    open += e.delta;
    most = Math.max(most, open);
  }
  return most;
}

describe('a semaphore across processes', () => {
  it('never has more valid holders than permits; a holder killed with kill -9 loses its permit by its ttl', async () => {
    const ttl = 600;
    const { procs, sections, errors } = await workers(['semaphore', 'semaphore', 'semaphore', 'semaphore'], {
      limit: 2,
      hold: 15,
      ttl,
    });
    await waitFor(async () => sections.filter((s) => s.worker === 0).length >= 5, { timeout: 10_000 });
    await sleep(500);
    // Killed the moment it holds: its lease lives on until its ttl, a permit nobody can use.
    const first = procs[0] as ChildProcess;
    await new Promise<void>((resolve) => {
      first.on('message', (m: { event: string }) => {
        if (m.event === 'entered') resolve();
      });
    });
    await kill9(first);
    // The workers' clock: CLOCK_MONOTONIC, shared by every process of the machine.
    const killedAt = Number(process.hrtime.bigint()) / 1e6;
    await sleep(ttl + 1_000);
    await stop(procs);
    expect(errors).toEqual([]);
    expect(mostAtOnce(sections, (s) => s.valid)).toBeLessThanOrEqual(2);
    expect(mostAtOnce(sections)).toBe(2);
    // Until the dead holder's lease ran out, the survivors shared the one permit left.
    const meanwhile = sections.filter((s) => s.enter > killedAt && s.exit < killedAt + ttl - 100);
    expect(meanwhile.length).toBeGreaterThan(5);
    expect(mostAtOnce(meanwhile)).toBe(1);
    // Once the dead holder's lease ran out, the survivors held both permits at once again.
    const reclaimed = sections.filter((s) => s.worker !== 0 && s.enter > killedAt + ttl);
    expect(reclaimed.length).toBeGreaterThan(10);
    expect(mostAtOnce(reclaimed)).toBe(2);
    const tokens = sections.map((s) => s.fencingToken);
    expect(new Set(tokens).size).toBe(tokens.length);
  });
});

describe('a read-write lock across processes', () => {
  it('an exclusive section never overlaps another; readers overlap; the writer keeps getting in', async () => {
    const { procs, sections, errors } = await workers(['reader', 'reader', 'reader', 'writer'], {
      hold: 20,
      ttl: 2_000,
    });
    // Until the writer got in five times and two readers held at once: on a busy machine the five
    // writes can come before the readers' 20 ms holds happen to meet, so the run goes on until they
    // do (a lock that never lets two readers in times out here).
    const readers = (x: Section) => x.kind === 'reader';
    await waitFor(
      async () => sections.filter((s) => s.kind === 'writer').length >= 5 && mostAtOnce(sections, readers) >= 2,
      { timeout: 15_000 },
    );
    await stop(procs);
    expect(errors).toEqual([]);
    const writes = sections.filter((s) => s.kind === 'writer');
    for (const w of writes) {
      const overlapping = sections.filter((s) => s !== w && s.enter < w.exit && w.enter < s.exit);
      expect(overlapping, `write ${w.fencingToken}`).toEqual([]);
      // Every section that began before this write has a lower token.
      for (const s of sections.filter((o) => o.exit <= w.enter)) expect(w.fencingToken).toBeGreaterThan(s.fencingToken);
    }
    expect(mostAtOnce(sections, readers)).toBeGreaterThanOrEqual(2);
  });
});
