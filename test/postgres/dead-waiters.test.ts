import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { now } from '../../src/core/clock.js';
import { DEFAULTS } from '../../src/index.js';
import { schemaNames } from '../../src/store/postgres/schema.js';
import type { HolderMessage } from '../faults/child.js';
import { randomPrefix, waitFor } from '../harness/index.js';
import { postgresFixture } from './fixture.js';

/**
 * Waiters killed with kill -9 while queued on PostgreSQL: the dead cost the live waiter behind
 * them one reservation each, once. A hand-off that names a dead waiter next gives it its turn; it
 * never comes, its row is dropped, and no later release names it again.
 */

const HOLDER = fileURLToPath(new URL('./holder.mjs', import.meta.url));

describe('PostgreSQL: dead waiters', () => {
  const db = postgresFixture();

  /** Rows in the waiters table for `name`, live or not (the contract's `queued` counts the live only). */
  async function rows(prefix: string, name: string): Promise<number> {
    const { waiters } = schemaNames(prefix);
    const found = await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${waiters} WHERE name = $1`, [name]);
    return Number(found.rows[0]?.n ?? 0);
  }

  /** A holder process (holder.mjs), its messages read in order. */
  async function start(prefix: string): Promise<{
    process: ChildProcess;
    send(message: Record<string, unknown>): void;
    next(): Promise<HolderMessage>;
  }> {
    const child = fork(HOLDER, [db.server.url, prefix], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    db.later(async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    });
    const inbox: HolderMessage[] = [];
    const readers: Array<(m: HolderMessage) => void> = [];
    child.on('message', (m: HolderMessage) => {
      const reader = readers.shift();
      if (reader) reader(m);
      else inbox.push(m);
    });
    const next = () => {
      const queued = inbox.shift();
      if (queued) return Promise.resolve(queued);
      return new Promise<HolderMessage>((resolve) => readers.push(resolve));
    };
    expect((await next()).event).toBe('ready');
    return { process: child, send: (message) => child.send(message), next };
  }

  it('dead waiters skipped once leave the queue: three at the head cost the live waiter behind them three reservations in all, over three releases', async () => {
    const prefix = randomPrefix();
    const holder = db.leasehold(db.pool, { prefix });
    const live = db.leasehold(db.ownPool(), { prefix });
    let held = await holder.acquire('skip', { ttl: 30_000 });
    // The processes start together, then queue one after another, then are all killed.
    const doomed = await Promise.all([1, 2, 3].map(() => start(prefix)));
    for (const [i, d] of doomed.entries()) {
      d.send({ cmd: 'wait', name: 'skip', ttl: 10_000, wait: 60_000 });
      expect((await d.next()).event).toBe('waiting');
      await waitFor(async () => (await rows(prefix, 'skip')) === i + 1, { timeout: 5_000 });
    }
    for (const d of doomed) {
      const exited = once(d.process, 'exit');
      d.process.kill('SIGKILL');
      await exited;
    }
    let waiting = live.acquire('skip', { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await rows(prefix, 'skip')) === 4, { timeout: 5_000 });
    let extra = 0;
    for (let round = 0; round < 3; round++) {
      // Let the live waiter settle into its park: its fallback timer is the holder's lease, capped.
      await sleep(300);
      await held.release();
      const released = now();
      const lock = await waiting;
      extra += now() - released;
      // The first release named the dead waiters after the one it woke; none came in its turn.
      if (round === 0) expect(await rows(prefix, 'skip')).toBe(0);
      await lock.release();
      if (round === 2) break;
      held = await holder.acquire('skip', { ttl: 30_000, wait: 0 });
      const before = await rows(prefix, 'skip');
      waiting = live.acquire('skip', { ttl: 30_000, wait: 20_000 });
      await waitFor(async () => (await rows(prefix, 'skip')) === before + 1, { timeout: 5_000 });
    }
    // One reservation each (the live waiter is third after the one woken), once.
    expect(extra).toBeGreaterThanOrEqual(3 * DEFAULTS.reservation);
    expect(extra).toBeLessThan(3 * (DEFAULTS.reservation + DEFAULTS.expiryMargin) + 2 * DEFAULTS.reservation);
  });
});
