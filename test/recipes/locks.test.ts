import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencedRead } from '../../src/fencing/index.js';
import { Leasehold } from '../../src/index.js';
import { type PostgresServer, startPostgres } from '../harness/index.js';
import { matches, redisForThisFile, runRecipe, startRecipe } from './run.js';

/**
 * The recipes around one lock, each run as a user runs it against a real redis-server (and a real
 * PostgreSQL for the long-work recipe), and alone on its MemoryStore where it has one: what each
 * shows is asserted from its output and from the server.
 */

const server = redisForThisFile();
let client: Redis;
beforeAll(() => {
  client = new Redis(server.url);
});
afterAll(async () => {
  await client?.quit();
});

describe('examples/dedupe-payment.mjs: one charge per payment id', () => {
  const file = 'examples/dedupe-payment.mjs';
  const delivery = /^(\S+) delivery \d+: (charged|skipped)$/;

  it('three processes receive the same webhook three times each at once: one charge, eight skipped, then a late redelivery skipped too', async () => {
    const env = { REDIS_URL: server.url, PAYMENT_ID: 'pay_dedupe_1', DELIVERIES: '3' };
    const exits = await Promise.all(
      ['pod-1', 'pod-2', 'pod-3'].map((INSTANCE) => runRecipe(file, { ...env, INSTANCE })),
    );
    for (const exit of exits) expect(exit.code, exit.stderr).toBe(0);
    const output = exits.map((e) => e.stdout).join('\n');
    const outcomes = matches(output, delivery).map(([, outcome]) => outcome);
    expect(outcomes.sort()).toEqual(['charged', ...Array(8).fill('skipped')]);
    expect(matches(output, /^(\S+) charged pay_dedupe_1 \(4200 EUR\)$/)).toHaveLength(1);
    // The record under the lock, fenced by the charging holder's token.
    const record = await fencedRead(client, 'payments:pay_dedupe_1:handled');
    expect(record?.value).toBe('charged');

    const later = await runRecipe(file, { ...env, INSTANCE: 'pod-4' });
    expect(matches(later.stdout, delivery).map(([, outcome]) => outcome)).toEqual(['skipped', 'skipped', 'skipped']);
  });

  it('without REDIS_URL: one of the three deliveries charges', async () => {
    const exit = await runRecipe(file, { REDIS_URL: '', DELIVERIES: '3' });
    expect(exit.code, exit.stderr).toBe(0);
    expect(
      matches(exit.stdout, delivery)
        .map(([, o]) => o)
        .sort(),
    ).toEqual(['charged', 'skipped', 'skipped']);
  });
});

describe('examples/rate-limited-api.mjs: at most LIMIT calls at once at the partner', () => {
  const file = 'examples/rate-limited-api.mjs';

  /** A partner that counts the requests in flight and refuses (429) any beyond `limit`. */
  async function startPartner(limit: number) {
    const seen = { inFlight: 0, most: 0, served: 0, refused: 0 };
    const partner: Server = createServer(async (_request, response) => {
      seen.inFlight += 1;
      seen.most = Math.max(seen.most, seen.inFlight);
      const refuse = seen.inFlight > limit;
      await sleep(50);
      seen.inFlight -= 1;
      if (refuse) seen.refused += 1;
      else seen.served += 1;
      response.writeHead(refuse ? 429 : 200, { 'content-type': 'application/json' }).end('{}');
    });
    await new Promise<void>((resolve) => partner.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(partner.address() as AddressInfo).port}`, seen, close: () => partner.close() };
  }

  it('three processes, eight calls each, share two permits through Redis: the partner never sees three at once', async () => {
    const partner = await startPartner(2);
    const env = { REDIS_URL: server.url, PARTNER_URL: partner.url, LIMIT: '2', REQUESTS: '8' };
    const exits = await Promise.all(
      ['pod-1', 'pod-2', 'pod-3'].map((INSTANCE) => runRecipe(file, { ...env, INSTANCE })),
    );
    partner.close();
    for (const exit of exits) {
      expect(exit.code, exit.stderr).toBe(0);
      expect(exit.stdout).toMatch(/: 8 calls answered, none refused/);
    }
    expect(partner.seen).toMatchObject({ served: 24, refused: 0, most: 2 });
  });

  it('without REDIS_URL and PARTNER_URL: its own stand-in partner sees at most two at once', async () => {
    const exit = await runRecipe(file, { REDIS_URL: '', PARTNER_URL: '' });
    expect(exit.code, exit.stderr).toBe(0);
    expect(exit.stdout).toMatch(/the partner saw at most 2 requests at once \(limit 2\)/);
  });
});

describe('examples/long-work.mjs: the watchdog, and the signal into fetch and a query', () => {
  const file = 'examples/long-work.mjs';
  let postgres: PostgresServer;
  beforeAll(async () => {
    postgres = await startPostgres();
  });
  afterAll(async () => {
    await postgres?.stop();
  });

  function checkLongWork(stdout: string, query: RegExp): void {
    const finished = /^finished: 25 bytes and the (.+) in ([\d.]+) s under a 1000 ms lease$/m.exec(stdout);
    expect(finished, stdout).not.toBeNull();
    expect(Number(finished?.[2])).toBeGreaterThanOrEqual(2.5);
    const extended = /^the watchdog extended it (\d+) times; token \d+, still held: true$/m.exec(stdout);
    expect(Number(extended?.[1]), stdout).toBeGreaterThanOrEqual(3);
    expect(stdout).toMatch(/^lease lost \(validity-elapsed\): the signal aborted the work$/m);
    expect(stdout).toMatch(/^fetch: LockLostError$/m);
    expect(stdout).toMatch(query);
  }

  it('on Redis and PostgreSQL: a 2.5 s download and pg_sleep under a 1 s lease; after a stall, the fetch aborted and the query cancelled on the server', async () => {
    const exit = await runRecipe(file, { REDIS_URL: server.url, DATABASE_URL: postgres.url });
    expect(exit.code, exit.stderr).toBe(0);
    checkLongWork(exit.stdout, /^query: cancelled \(57014: canceling statement due to user request\)$/m);
    expect(exit.stdout).toMatch(/and the pg_sleep in/);
  });

  it('without a server: the same on a MemoryStore, a local timer standing in for the query', async () => {
    const exit = await runRecipe(file, { REDIS_URL: '', DATABASE_URL: '' });
    expect(exit.code, exit.stderr).toBe(0);
    checkLongWork(exit.stdout, /^query: cancelled$/m);
    expect(exit.stdout).toMatch(/and the local operation in/);
  });
});

describe('examples/graceful-shutdown.mjs: SIGTERM releases the lock at once', () => {
  const file = 'examples/graceful-shutdown.mjs';

  it('the holder is sent SIGTERM: the waiting process holds the lock within a fraction of its 60 s lease; after its own SIGTERM the lock is free', async () => {
    const first = startRecipe(file, { REDIS_URL: server.url });
    const firstToken = Number((await first.line(/^holding exports:nightly/)).match(/token (\d+)/)?.[1]);
    const second = startRecipe(file, { REDIS_URL: server.url });
    await sleep(500); // the second process is waiting in the lock's queue
    expect(second.stdout()).toBe('');

    const sent = performance.now();
    first.child.kill('SIGTERM');
    const secondToken = Number((await second.line(/^holding exports:nightly/)).match(/token (\d+)/)?.[1]);
    expect(performance.now() - sent).toBeLessThan(5_000);
    expect(secondToken).toBeGreaterThan(firstToken);
    const firstExit = await first.exited;
    expect(firstExit.code, firstExit.stderr).toBe(0);
    expect(firstExit.stdout).toMatch(/^SIGTERM: stopped the export and released exports:nightly\nclosed; exiting$/m);

    second.child.kill('SIGTERM');
    expect((await second.exited).code).toBe(0);
    const locks = new Leasehold(client);
    const free = await locks.tryAcquire('exports:nightly');
    expect(free, 'released, not left to its 60 s lease').not.toBeNull();
    await free?.release();
    await locks.close();
  });
});
