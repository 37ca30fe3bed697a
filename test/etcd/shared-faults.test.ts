import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { type Leasehold, type Lock, StoreUnavailableError } from '../../src/index.js';
import { decodeMember } from '../../src/store/etcd/codec.js';
import { randomPrefix, startEtcdCluster, waitFor } from '../harness/index.js';
import { etcdFixture } from './fixture.js';
import { type EtcdHolder, startHolder } from './holder.js';

/**
 * Semaphores and read-write locks on a 3-member etcd under real faults: a burst of first attempts
 * racing for the last permits, readers racing a writer into the line, the leader killed with
 * kill -9 while holders contend, and a holder process frozen with SIGSTOP past its session. Every
 * bound comes from the session, the ttl or commandTimeout it waits on, never from the machine's speed.
 */

/** The session of every Leaseholds here: how long a frozen or dead process keeps its holds. */
const SESSION_TTL = 3_000;
/** Each call is bounded by this; an election can take about as long. */
const COMMAND_TIMEOUT = 3_000;
/** What a waiter for a frozen holder's place may need: its session to end, then a call or two. */
const RECLAIM = SESSION_TTL + 3 * COMMAND_TIMEOUT;

describe('etcd shared holds under faults, 3 members', () => {
  const etcd = etcdFixture(startEtcdCluster, async (cluster) => {
    for (const member of cluster.members) if (!member.running) await member.restart();
    await cluster.waitHealthy();
  });
  const leasehold = (prefix: string) => etcd.leasehold(prefix, SESSION_TTL, { commandTimeout: COMMAND_TIMEOUT });

  /** The line's holders (keys granted), by kind: shared ones and exclusive ones. */
  async function holdersOf(prefix: string, name: string): Promise<{ shared: number; exclusive: number }> {
    const members = (await etcd.line(prefix, name)).map((kv) => decodeMember(kv as never));
    const held = members.filter((m) => m.takenAt !== null);
    return {
      shared: held.filter((m) => m.limit !== undefined).length,
      exclusive: held.filter((m) => m.limit === undefined).length,
    };
  }

  async function holder(prefix: string): Promise<EtcdHolder> {
    const h = await startHolder(etcd.server().endpoints, prefix, SESSION_TTL);
    etcd.cleanup(() => h.kill9());
    return h;
  }

  it('a burst of first attempts for the last free permits takes no more than are free', async () => {
    const prefix = randomPrefix();
    const pods = Array.from({ length: 8 }, () => leasehold(prefix));
    const first = await (pods[0] as Leasehold).acquire('burst', { limit: 3, ttl: 10_000 });
    for (let round = 0; round < 3; round++) {
      // Every attempt reads a line with room for two, at about the same time.
      const got = (
        await Promise.all(pods.slice(1).map((p) => p.tryAcquire('burst', { limit: 3, ttl: 10_000 })))
      ).filter((l): l is Lock => l !== null);
      expect(got.length).toBeLessThanOrEqual(2);
      expect((await holdersOf(prefix, 'burst')).shared).toBeLessThanOrEqual(3);
      for (const lock of got) await lock.release();
    }
    await first.release();
  });

  it('readers racing a writer into the line never hold with the writer ahead of them', async () => {
    const prefix = randomPrefix();
    const pods = Array.from({ length: 6 }, () => leasehold(prefix));
    for (let round = 0; round < 6; round++) {
      const opening = await (pods[0] as Leasehold).acquire('race', { mode: 'shared', ttl: 10_000 });
      const writing = (pods[1] as Leasehold).acquire('race', { ttl: 10_000, wait: 10_000 });
      const readers = await Promise.all(
        pods.slice(2).map((p) => p.tryAcquire('race', { mode: 'shared', ttl: 10_000 })),
      );
      const line = (await etcd.line(prefix, 'race')).map((kv) => ({
        rev: Number(kv.create_revision),
        m: decodeMember(kv as never),
      }));
      for (const reader of readers) {
        if (!reader) continue;
        // A reader holds only if it went in before the writer joined: no exclusive key ahead of it.
        const writerAhead = line.some(({ rev, m }) => m.limit === undefined && rev < reader.fencingToken);
        expect(writerAhead, `reader ${reader.fencingToken} holds behind a writer`).toBe(false);
        await reader.release();
      }
      await opening.release();
      const writer = await writing;
      expect((await holdersOf(prefix, 'race')).shared).toBe(0);
      expect(await writer.release()).toBe(true);
    }
  });

  /**
   * Workers on `pods` taking `name` in a loop (`options` per worker) and counting who is inside,
   * until stopped; calls left unanswered by an election are tried again.
   */
  function contend(pods: readonly Leasehold[], name: string, kinds: readonly ('shared' | 'exclusive' | number)[]) {
    const state = {
      running: true,
      holds: 0,
      readers: 0,
      writers: 0,
      permits: 0,
      most: 0,
      clash: 0,
      tokens: [] as number[],
    };
    const work = async (lock: Lock, kind: 'shared' | 'exclusive' | number) => {
      state.tokens.push(lock.fencingToken);
      if (typeof kind === 'number') state.most = Math.max(state.most, ++state.permits);
      else if (kind === 'shared') {
        state.readers++;
        if (state.writers > 0) state.clash++;
      } else {
        state.writers++;
        if (state.writers > 1 || state.readers > 0) state.clash++;
      }
      // Until the semaphore has once admitted as many holders as it has permits, a holder keeps its
      // permit for the next one to join (bounded by commandTimeout; the lease is extended meanwhile),
      // so "it admits that many at once" does not rest on two 15 ms holds happening to overlap.
      if (typeof kind === 'number' && state.most < kind) {
        const until = Date.now() + COMMAND_TIMEOUT;
        while (state.most < kind && state.running && Date.now() < until) await sleep(5);
      } else {
        await sleep(15);
      }
      if (typeof kind === 'number') state.permits--;
      else if (kind === 'shared') state.readers--;
      else state.writers--;
      state.holds++;
    };
    const worker = async (locks: Leasehold, kind: 'shared' | 'exclusive' | number) => {
      const options = typeof kind === 'number' ? { limit: kind } : kind === 'shared' ? { mode: 'shared' as const } : {};
      while (state.running) {
        try {
          await locks.withLock(name, { ...options, ttl: 2 * COMMAND_TIMEOUT, wait: 20_000 }, (_signal, lock) =>
            work(lock, kind),
          );
        } catch (error) {
          if (!(error instanceof StoreUnavailableError)) throw error;
          await sleep(50);
        }
      }
    };
    const done = Promise.all(pods.map((pod, i) => worker(pod, kinds[i % kinds.length] as 'shared')));
    const stop = () => {
      state.running = false;
      return done;
    };
    return { state, stop };
  }

  /** Kill the leader with kill -9 while `state` counts holds; resolve once holds went on under a new one. */
  async function killLeaderWhile(state: { holds: number }): Promise<void> {
    await waitFor(() => state.holds >= 10, { timeout: 10_000 });
    const leader = await etcd.server().leader();
    await leader.kill9();
    const before = state.holds;
    expect(await etcd.server().leader({ timeout: 15_000 })).not.toBe(leader);
    await waitFor(() => state.holds >= before + 10, { timeout: 15_000 });
  }

  it('semaphore: the leader killed while holders contend: never more holders than permits, and holds go on', async () => {
    const prefix = randomPrefix();
    const run = contend(
      [1, 2, 3, 4].map(() => leasehold(prefix)),
      'pool',
      [2],
    );
    await killLeaderWhile(run.state);
    await run.stop();
    expect(run.state.most).toBeLessThanOrEqual(2);
    expect(run.state.most).toBe(2);
    // Every hold has a token of its own.
    expect(new Set(run.state.tokens).size).toBe(run.state.tokens.length);
  });

  it('read-write lock: the leader killed while readers and writers contend: no writer beside anyone, and holds go on', async () => {
    const prefix = randomPrefix();
    const run = contend(
      [1, 2, 3, 4].map(() => leasehold(prefix)),
      'doc',
      ['shared', 'shared', 'exclusive'],
    );
    await killLeaderWhile(run.state);
    await run.stop();
    expect(run.state.clash).toBe(0);
    expect(new Set(run.state.tokens).size).toBe(run.state.tokens.length);
  });

  /** A holder process that took `name` as `kind` asks, frozen with SIGSTOP; thawed by the cleanup at the latest. */
  async function frozenHolder(
    prefix: string,
    name: string,
    kind: Record<string, unknown>,
  ): Promise<[EtcdHolder, number]> {
    const child = await holder(prefix);
    child.send({ cmd: 'acquire', name, ttl: 1_000, ...kind });
    const report = await child.next();
    if (report.event !== 'acquired') throw new Error(`the holder did not acquire: ${JSON.stringify(report)}`);
    child.process.kill('SIGSTOP');
    etcd.cleanup(() => child.process.kill('SIGCONT'));
    return [child, report.fencingToken as number];
  }

  /** Thaw a frozen holder: its own clock says its hold ran out; an extension and a release find it gone. */
  async function thawedFindsItLost(child: EtcdHolder): Promise<void> {
    child.process.kill('SIGCONT');
    expect(await child.next()).toMatchObject({ event: 'lost' });
    child.send({ cmd: 'extend' });
    const extended = await child.next();
    expect(extended).toMatchObject({ event: 'extended', aborted: true });
    expect(extended.extended).not.toBe(true);
    child.send({ cmd: 'release' });
    expect(await child.next()).toEqual({ event: 'released', released: false });
  }

  it('semaphore: a holder frozen past its session loses its permit to the waiter; the other holder keeps its own', async () => {
    const prefix = randomPrefix();
    const [frozen, staleToken] = await frozenHolder(prefix, 'pool', { limit: 2 });
    const [a, b] = [leasehold(prefix), leasehold(prefix)];
    const kept = await a.acquire('pool', { limit: 2, ttl: 2_000 });
    const frozenAt = performance.now();
    // Only etcd frees the frozen permit: its session ends unrenewed, and its key with it.
    const next = await b.acquire('pool', { limit: 2, ttl: 10_000, wait: RECLAIM });
    expect(performance.now() - frozenAt).toBeLessThan(RECLAIM);
    expect(next.fencingToken).toBeGreaterThan(staleToken);
    expect((await holdersOf(prefix, 'pool')).shared).toBe(2);
    await thawedFindsItLost(frozen);
    expect((await holdersOf(prefix, 'pool')).shared).toBe(2);
    expect(kept.signal.aborted).toBe(false);
    expect(next.signal.aborted).toBe(false);
    for (const lock of [kept, next]) expect(await lock.release()).toBe(true);
  });

  it('read-write lock: a reader frozen past its session: the writer gets in, and the thawed reader finds its hold lost', async () => {
    const prefix = randomPrefix();
    const [frozen, staleToken] = await frozenHolder(prefix, 'doc', { mode: 'shared' });
    const writing = leasehold(prefix).acquire('doc', { ttl: 10_000, wait: RECLAIM });
    await waitFor(async () => (await etcd.line(prefix, 'doc')).length === 2);
    // A reader arriving now queues behind the writer (writers are not starved).
    const late = leasehold(prefix).acquire('doc', { mode: 'shared', ttl: 10_000, wait: 2 * RECLAIM });
    const writer = await writing;
    expect(writer.fencingToken).toBeGreaterThan(staleToken);
    expect(await holdersOf(prefix, 'doc')).toEqual({ shared: 0, exclusive: 1 });
    await thawedFindsItLost(frozen);
    expect(await holdersOf(prefix, 'doc')).toEqual({ shared: 0, exclusive: 1 });
    expect(await writer.release()).toBe(true);
    const reader = await late;
    expect(reader.fencingToken).toBeGreaterThan(writer.fencingToken);
    expect(await reader.release()).toBe(true);
  });
});
