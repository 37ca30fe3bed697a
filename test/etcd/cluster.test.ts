import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { type Leasehold, type Lock, StoreUnavailableError } from '../../src/index.js';
import { type EtcdMember, randomPrefix, startEtcdCluster, waitFor } from '../harness/index.js';
import { etcdFixture } from './fixture.js';

/**
 * A 3-member etcd cluster under real faults: a member killed with kill -9 while a lock is held and
 * waited on, the leader killed while instances contend. What each grant writes goes to a fenced
 * resource that refuses a token below the newest it has seen: it never has to, because no two
 * grants overlap. The negative control shows what it stops when one does (a lease lost behind its
 * holder's back), and that an unfenced write lands.
 */

/** A resource in the test: keeps the newest token it accepted and refuses older ones (equal: the same grant). */
class Ledger {
  fence = 0;
  value: string | null = null;
  readonly accepted: number[] = [];
  refused = 0;

  write(token: number, value: string, fenced = true): boolean {
    if (fenced && token < this.fence) {
      this.refused++;
      return false;
    }
    this.fence = Math.max(this.fence, token);
    this.value = value;
    this.accepted.push(token);
    return true;
  }
}

describe('etcd cluster, 3 members', () => {
  // Every member back before the next case.
  const etcd = etcdFixture(startEtcdCluster, async (cluster) => {
    for (const member of cluster.members) if (!member.running) await member.restart();
    await cluster.waitHealthy();
  });
  const leasehold = (prefix: string) => etcd.leasehold(prefix, 3_000, { commandTimeout: 3_000 });

  const inLine = async (prefix: string, name: string) => (await etcd.line(prefix, name)).length;

  it('a member killed while a lock is held and waited on: the lease holds, and the waiters are served in order', async () => {
    const prefix = randomPrefix();
    const [a, b, c] = [leasehold(prefix), leasehold(prefix), leasehold(prefix)];
    const held = await a.acquire('order', { ttl: 1_500 });
    const second = b.acquire('order', { ttl: 5_000, wait: 20_000 });
    // Awaited below; should an earlier step fail, its rejection at close() is not left unhandled.
    second.catch(() => undefined);
    await waitFor(async () => (await inLine(prefix, 'order')) === 2);
    const third = c.acquire('order', { ttl: 5_000, wait: 20_000 });
    third.catch(() => undefined);
    await waitFor(async () => (await inLine(prefix, 'order')) === 3);

    const leader = await etcd.server().leader();
    const victim = etcd.server().members.find((m) => m !== leader) as EtcdMember;
    await victim.kill9();
    // Several extensions later (every ttl/3), through the members left, the lease is still ours.
    let extended = 0;
    a.on('extended', () => extended++);
    await waitFor(() => extended >= 3, { timeout: 10_000 });
    expect(held.signal.aborted).toBe(false);

    expect(await held.release()).toBe(true);
    const bLock = await second;
    expect(bLock.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await bLock.release()).toBe(true);
    const cLock = await third;
    expect(cLock.fencingToken).toBeGreaterThan(bLock.fencingToken);
    expect(await cLock.release()).toBe(true);
  });

  it('the leader killed while three instances contend: locks survive the election, and the fenced resource never sees a token go back', async () => {
    const prefix = randomPrefix();
    const ledger = new Ledger();
    let inside = 0;
    let most = 0;
    let unavailable = 0;
    let running = true;
    const worker = async (locks: Leasehold, id: number) => {
      while (running) {
        try {
          await locks.withLock('ledger', { ttl: 2_000, wait: 20_000 }, async (_signal, lock: Lock) => {
            most = Math.max(most, ++inside);
            ledger.write(lock.fencingToken, `worker ${id}`);
            await sleep(15);
            inside--;
          });
        } catch (error) {
          // The election: calls fail while no leader answers; the worker tries again.
          if (!(error instanceof StoreUnavailableError)) throw error;
          unavailable++;
          await sleep(50);
        }
      }
    };
    const pods = [leasehold(prefix), leasehold(prefix), leasehold(prefix)];
    // A lock held right through the election, beside the contended one: its ttl outlasts an election
    // and a request that waits for it (etcd answers nothing that needs a leader meanwhile).
    const steady = await (pods[0] as Leasehold).acquire('steady', { ttl: 10_000 });
    const workers = pods.map((pod, i) => worker(pod, i));
    await waitFor(() => ledger.accepted.length >= 10, { timeout: 10_000 });

    const leader = await etcd.server().leader();
    await leader.kill9();
    const before = ledger.accepted.length;
    const elected = await etcd.server().leader({ timeout: 15_000 });
    expect(elected).not.toBe(leader);
    // Work goes on under the new leader.
    await waitFor(() => ledger.accepted.length >= before + 10, { timeout: 15_000 });
    running = false;
    await Promise.all(workers);

    expect(most).toBe(1);
    expect(ledger.refused).toBe(0);
    for (let i = 1; i < ledger.accepted.length; i++) {
      expect(ledger.accepted[i]).toBeGreaterThan(ledger.accepted[i - 1] as number);
    }
    expect(steady.signal.aborted, String(steady.signal.reason)).toBe(false);
    expect(await steady.release()).toBe(true);
    console.info(`leader killed: ${ledger.accepted.length} fenced writes, ${unavailable} calls unanswered meanwhile`);
  });

  it('negative control: a holder whose session is revoked behind its back writes late; the fenced resource refuses it, an unfenced one lets it land', async () => {
    const prefix = randomPrefix();
    const ledger = new Ledger();
    const stale = await leasehold(prefix).acquire('ledger', { ttl: 5_000, autoExtend: false });
    const [key] = await etcd.line(prefix, 'ledger');
    await etcd.raw().leaseClient.leaseRevoke({ ID: key?.lease ?? '' });

    const fresh = await leasehold(prefix).acquire('ledger', { wait: 0 });
    expect(fresh.fencingToken).toBeGreaterThan(stale.fencingToken);
    expect(ledger.write(fresh.fencingToken, 'fresh')).toBe(true);
    // Two grants overlap now: the stale holder's validity has not run out on its own clock.
    expect(stale.signal.aborted).toBe(false);
    expect(stale.expiresIn()).toBeGreaterThan(0);
    expect(ledger.write(stale.fencingToken, 'stale')).toBe(false);
    expect(ledger.value).toBe('fresh');
    // Without the fence the late write lands over the newer holder's.
    expect(ledger.write(stale.fencingToken, 'stale', false)).toBe(true);
    expect(ledger.value).toBe('stale');
    expect(await fresh.release()).toBe(true);
  });
});
