import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Etcd3 } from 'etcd3';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PostgresServer, startEtcd, startEtcdCluster, startPostgres, waitFor } from './index.js';

const cleanups: (() => Promise<void>)[] = [];

afterAll(async () => {
  await Promise.allSettled(cleanups.map((cleanup) => cleanup()));
});

async function connectTo(server: PostgresServer): Promise<Client> {
  const client = new Client({ connectionString: server.url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => {});
  await client.connect();
  cleanups.push(() => client.end().catch(() => {}));
  return client;
}

/** The real user id a process runs as, from /proc. */
function uidOf(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((text) => text.startsWith('Uid:'));
  return Number(line?.split(/\s+/)[1]);
}

async function nextval(server: PostgresServer): Promise<number> {
  const client = await connectTo(server);
  try {
    const { rows } = await client.query<{ n: string }>("SELECT nextval('tokens') AS n");
    return Number(rows[0]?.n);
  } finally {
    await client.end();
  }
}

describe('postgres harness', () => {
  let server: PostgresServer;

  beforeAll(async () => {
    server = await startPostgres();
    cleanups.push(() => server.stop());
  });

  it('starts on loopback and answers select 1 through the pg client, as the leasehold role', async () => {
    expect(server.running).toBe(true);
    expect(server.url).toBe(`postgres://leasehold@127.0.0.1:${server.port}/leasehold`);
    const client = await connectTo(server);
    const { rows } = await client.query<{ one: number; who: string; db: string }>(
      'SELECT 1 AS one, current_user AS who, current_database() AS db',
    );
    expect(rows).toEqual([{ one: 1, who: 'leasehold', db: 'leasehold' }]);
    await client.end();
    // PostgreSQL will not run as root: as root, the harness runs it as an unprivileged user.
    if (process.getuid?.() === 0) expect(uidOf(server.pid)).not.toBe(0);
    else expect(uidOf(server.pid)).toBe(process.getuid?.());
  });

  it('keeps committed data across restart(): a sequence goes on where it was', async () => {
    const client = await connectTo(server);
    await client.query('CREATE SEQUENCE tokens');
    await client.query('CREATE TABLE kept (v text)');
    await client.query("INSERT INTO kept VALUES ('before restart')");
    await client.end();
    expect(await nextval(server)).toBe(1);
    expect(await nextval(server)).toBe(2);
    const pid = server.pid;

    await server.restart();

    expect(server.pid).not.toBe(pid);
    // A fast shutdown checkpoints the sequence's page as it was: no value is skipped.
    expect(await nextval(server)).toBe(3);
    expect(await server.query('SELECT v FROM kept')).toEqual([{ v: 'before restart' }]);
  });

  it('keeps committed data across restart({ hard: true }): the sequence never goes back', async () => {
    const before = await nextval(server);
    await server.query("INSERT INTO kept VALUES ('before kill -9')");

    await server.restart({ hard: true });

    // After crash recovery a sequence may skip ahead (it logs values in advance), never back.
    const after = await nextval(server);
    expect(after).toBeGreaterThan(before);
    const rows = await server.query<{ v: string }>('SELECT v FROM kept ORDER BY v');
    expect(rows.map((row) => row.v)).toEqual(['before kill -9', 'before restart']);
  });

  it('pause() makes a query on an open connection hang until resume()', async () => {
    const client = await connectTo(server);
    await client.query('SELECT 1');
    server.pause();
    let answered = false;
    try {
      const pending = client.query<{ n: number }>('SELECT 2 AS n').then((result) => {
        answered = true;
        return result.rows;
      });
      await sleep(500);
      expect(answered).toBe(false);
      server.resume();
      expect(await pending).toEqual([{ n: 2 }]);
    } finally {
      if (!answered) server.resume();
    }
    await client.end();
  });
});

describe('etcd harness', () => {
  it('starts a single member that the etcd3 client can put to and get from', async () => {
    const server = await startEtcd();
    cleanups.push(() => server.stop());
    expect(server.endpoints).toEqual([`http://127.0.0.1:${server.clientPort}`]);
    const client = new Etcd3({ hosts: server.endpoints });
    try {
      await client.put('leasehold/single').value('one');
      expect(await client.get('leasehold/single').string()).toBe('one');
    } finally {
      client.close();
    }
    const status = await server.status();
    expect(status.leaderId).toBe(status.memberId);
  });

  it('runs a 3-member cluster that survives losing its leader, and the lost member rejoins', async () => {
    const cluster = await startEtcdCluster({ members: 3 });
    cleanups.push(() => cluster.stop());
    expect(cluster.members).toHaveLength(3);
    expect(new Set(cluster.endpoints).size).toBe(3);
    // A deadline per attempt: a call sent to a paused member times out and is retried on another.
    const client = new Etcd3({
      hosts: cluster.endpoints,
      defaultCallOptions: (call) => (call.isStream ? {} : { deadline: Date.now() + 2_000 }),
    });
    try {
      await client.put('leasehold/cluster').value('first');

      const leader = await cluster.leader();
      await leader.kill9();
      expect(leader.running).toBe(false);
      const next = await cluster.leader();
      expect(next).not.toBe(leader);
      await client.put('leasehold/cluster').value('while one is down');

      await leader.restart();
      expect(leader.running).toBe(true);
      expect(await leader.healthy()).toBe(true);
      // Read through the member that was down: it has caught up with the write it missed.
      const direct = new Etcd3({ hosts: leader.url });
      try {
        expect(await direct.get('leasehold/cluster').string()).toBe('while one is down');
      } finally {
        direct.close();
      }
      await cluster.waitHealthy();
      const status = await leader.status();
      expect(status.leaderId).toBe((await next.status()).memberId);

      // A paused follower does not answer; the other two still take writes; resumed, it is healthy.
      const follower = cluster.members.find((member) => member !== next);
      if (follower === undefined) throw new Error('no follower');
      follower.pause();
      try {
        // Stopped once the signal is taken: from then on it answers nothing.
        await waitFor(
          async () =>
            follower.status().then(
              () => false,
              () => true,
            ),
          { timeout: 10_000 },
        );
        expect(await follower.healthy()).toBe(false);
        await client.put('leasehold/cluster').value('while one is paused');
      } finally {
        follower.resume();
      }
      await cluster.waitHealthy();
    } finally {
      client.close();
    }
  });
});
