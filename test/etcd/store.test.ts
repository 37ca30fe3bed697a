import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { DEFAULTS, Leasehold } from '../../src/index.js';
import { EtcdStore } from '../../src/store/etcd/etcd-store.js';
import { randomPrefix, startEtcd, waitFor } from '../harness/index.js';
import { etcdFixture } from './fixture.js';

/** The operator's view of the etcd store (inspect, queued, forceRelease, scanLocks), namespaces, and waiting without a herd. */
describe('etcd store', () => {
  const etcd = etcdFixture(() => startEtcd());
  const handOn = { reservation: DEFAULTS.reservation, announce: false };

  function store(prefix: string, client = new Etcd3({ hosts: [...etcd.server().endpoints] })): EtcdStore {
    const s = new EtcdStore(client, { prefix, handOn });
    etcd.cleanup(
      () => client.close(),
      () => s.close(),
    );
    return s;
  }

  it('inspect names the holder, its token and instance; after a release, who released which token', async () => {
    const prefix = randomPrefix();
    const locks = etcd.leasehold(prefix, 5_000, { instance: 'pod-7' });
    const lock = await locks.acquire('order:1', { ttl: 3_000 });
    const admin = store(prefix);
    const held = await admin.inspect('order:1');
    expect(held).toMatchObject({ owner: lock.owner, fence: lock.fencingToken, releasedBy: null });
    expect(held.holder).toMatchObject({ token: lock.fencingToken, instance: 'pod-7' });
    expect(Math.abs((held.holder?.takenAt ?? 0) - Date.now())).toBeLessThan(60_000);
    expect(held.pttl).toBeGreaterThan(0);
    await lock.release();
    expect(await admin.inspect('order:1')).toEqual({
      owner: null,
      pttl: -2,
      fence: lock.fencingToken,
      holder: null,
      releasedBy: lock.owner,
    });
  });

  it('queued lists the waiters in arrival order; forceRelease hands the lock to the first, whose token is higher', async () => {
    const prefix = randomPrefix();
    const [a, b, c] = [0, 1, 2].map(() => etcd.leasehold(prefix, 5_000));
    const held = await (a as Leasehold).acquire('job', { ttl: 10_000 });
    const owners: string[] = [];
    const waiting = [b, c].map(async (pod, i) => {
      await waitFor(async () => (await etcd.line(prefix, 'job')).length === i + 1);
      const lock = await (pod as Leasehold).acquire('job', { wait: 10_000 });
      owners.push(lock.owner);
      return lock;
    });
    const admin = store(prefix);
    await waitFor(async () => (await admin.queued('job', 10)).count === 2);
    const queue = await admin.queued('job', 10);
    expect(queue.reserved).toBeNull();
    expect((await admin.queued('job', 1)).first).toHaveLength(1);

    const forced = await admin.forceRelease('job');
    expect(forced).toMatchObject({ result: 'released', owner: held.owner, woken: queue.first[0] });
    const first = await waiting[0];
    expect(first?.owner).toBe(queue.first[0]);
    expect(first?.fencingToken).toBeGreaterThan(held.fencingToken);
    // The forced holder finds out at its next extension.
    await expect(held.extend()).rejects.toMatchObject({ reason: 'not-owner' });
    await first?.release();
    const second = await waiting[1];
    expect(second?.owner).toBe(queue.first[1]);
    await second?.release();
    expect(await admin.forceRelease('job')).toEqual({ result: 'not-held' });
  });

  it('scanLocks lists held locks whose name matches a Redis glob, each once; names may hold / and %', async () => {
    const prefix = randomPrefix();
    const locks = etcd.leasehold(prefix, 5_000);
    const names = ['order:1', 'order:2', 'user:1', 'a/b%2F', 'order:']; // 'order:' is then released
    const held = await Promise.all(names.map((name) => locks.acquire(name, { ttl: 5_000 })));
    await held.at(-1)?.release();
    const waiter = etcd.leasehold(prefix, 5_000).acquire('order:1', { wait: 5_000 });
    await waitFor(async () => (await etcd.line(prefix, 'order:1')).length === 2);
    const admin = store(prefix);
    const scan = async (match: string, count = 1) => {
      const found: string[] = [];
      for await (const name of admin.scanLocks(match, count)) found.push(name);
      return found.sort();
    };
    expect(await scan('*')).toEqual(['a/b%2F', 'order:1', 'order:2', 'user:1']);
    expect(await scan('order:*', 100)).toEqual(['order:1', 'order:2']);
    expect(await scan('a/b?2F')).toEqual(['a/b%2F']);
    expect(await scan('order:[2-9]')).toEqual(['order:2']);
    await held[0]?.release();
    await (await waiter).release();
  });

  it('a namespace of the client keeps its own locks: the same name under another namespace is another lock', async () => {
    const prefix = randomPrefix();
    const client = new Etcd3({ hosts: [...etcd.server().endpoints] });
    const [app, other] = [
      new Leasehold(client.namespace('app/'), { prefix }),
      new Leasehold(client.namespace('other/'), { prefix }),
    ];
    etcd.cleanup(
      () => client.close(),
      () => app.close(),
      () => other.close(),
    );
    const lock = await app.acquire('shared-name', { ttl: 5_000 });
    expect(await app.tryAcquire('shared-name')).toBeNull();
    const elsewhere = await other.tryAcquire('shared-name');
    expect(elsewhere).not.toBeNull();
    const keys = await etcd.raw().getAll().prefix(`app/${prefix}/q/`).keys();
    expect(keys).toHaveLength(1);
    await lock.release();
    await elsewhere?.release();
  });

  it('no herd: each waiter watches only the key just before it, so a release wakes one waiter', async () => {
    const prefix = randomPrefix();
    const clients = [0, 1, 2, 3, 4].map(() => new Etcd3({ hosts: [...etcd.server().endpoints] }));
    const pods = clients.map((client) => new Leasehold({ etcd: client, sessionTtl: 5_000 }, { prefix }));
    etcd.cleanup(...clients.map((c) => () => c.close()), ...pods.map((p) => () => p.close()));
    const held = await (pods[0] as Leasehold).acquire('hot', { ttl: 10_000 });
    const waits = [];
    for (const [i, pod] of pods.slice(1).entries()) {
      waits.push(pod.acquire('hot', { wait: 10_000 }));
      await waitFor(async () => (await etcd.line(prefix, 'hot')).length === i + 2);
    }
    // Every key but the last is watched by exactly one waiter (its successor), wherever it runs.
    const watched = new Map<string, number>();
    await waitFor(() => {
      watched.clear();
      for (const client of clients) {
        const manager = (client as unknown as { watchManager: { watchers: { request: { key: Buffer } }[] } })
          .watchManager;
        for (const w of manager.watchers)
          watched.set(w.request.key.toString(), (watched.get(w.request.key.toString()) ?? 0) + 1);
      }
      return watched.size === 4;
    });
    const line = await etcd.line(prefix, 'hot');
    expect(line.slice(0, -1).map((kv) => watched.get(kv.key.toString()))).toEqual([1, 1, 1, 1]);
    await held.release();
    let previous = held.fencingToken;
    for (const wait of waits) {
      const lock = await wait;
      expect(lock.fencingToken).toBeGreaterThan(previous);
      previous = lock.fencingToken;
      await lock.release();
    }
  });

  it('shared holds: inspectShared lists permits and readers, queued the waiters, scanLocks the name; inspect shows no owner', async () => {
    const prefix = randomPrefix();
    const [a, b, c] = [0, 1, 2].map(() => etcd.leasehold(prefix, 5_000, { instance: 'pod-s' }));
    const admin = store(prefix);
    const permits = [await (a as Leasehold).acquire('pool', { limit: 2, ttl: 4_000 })];
    permits.push(await (b as Leasehold).acquire('pool', { limit: 2, ttl: 4_000 }));
    const waiting = (c as Leasehold).acquire('pool', { limit: 2, wait: 10_000 });
    await waitFor(async () => (await admin.queued('pool', 10)).count === 1);
    const pool = await admin.inspectShared('pool');
    expect(pool).toMatchObject({ mode: 'semaphore', limit: 2, reserved: [] });
    expect(pool.holds.map((h) => h.token).sort()).toEqual(permits.map((l) => l.fencingToken).sort());
    for (const hold of pool.holds) expect(hold).toMatchObject({ instance: 'pod-s' });
    for (const hold of pool.holds) expect(hold.pttl).toBeGreaterThan(0);
    expect(await admin.inspect('pool')).toMatchObject({ owner: null, pttl: -2, holder: null });
    const reader = await (a as Leasehold).acquire('doc', { mode: 'shared' });
    expect(await admin.inspectShared('doc')).toMatchObject({
      mode: 'shared',
      limit: null,
      holds: [{ owner: reader.owner }],
    });
    const names: string[] = [];
    for await (const name of admin.scanLocks('*', 10)) names.push(name);
    expect(names.sort()).toEqual(['doc', 'pool']);
    await reader.release();
    expect(await admin.inspectShared('doc')).toMatchObject({ mode: 'free', holds: [] });
    await permits[0]?.release();
    const next = await waiting;
    expect((await admin.inspectShared('pool')).holds).toHaveLength(2);
    for (const lock of [permits[1], next]) expect(await lock?.release()).toBe(true);
  });
});
