import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold } from '../../src/index.js';
import { matches, ROOT, redisForThisFile, runRecipe, startRecipe } from './run.js';

/**
 * examples/nestjs/: a Nest application written with the decorator syntax (experimentalDecorators
 * and emitDecoratorMetadata, as Nest projects compile), built by tsc and run as three processes
 * on one real redis-server. With the package's declarations built, tsc also type-checks it against
 * leasehold/nestjs's types; a JavaScript-only build (LEASEHOLD_BUILD=js) compiles it unchecked.
 */

const OUT = join('examples', 'nestjs', 'dist', `test-${randomBytes(4).toString('hex')}`);
const MAIN = join(OUT, 'main.js');
const typeChecked = existsSync(join(ROOT, 'dist', 'nestjs.d.ts'));

const server = redisForThisFile();
let client: Redis;
beforeAll(async () => {
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const args = [tsc, '-p', join(ROOT, 'examples', 'nestjs'), '--outDir', join(ROOT, OUT)];
  await promisify(execFile)(process.execPath, typeChecked ? args : [...args, '--noCheck'], { cwd: ROOT });
  client = new Redis(server.url);
});
afterAll(async () => {
  await client?.quit();
  rmSync(join(ROOT, OUT), { recursive: true, force: true });
});

describe(`examples/nestjs (${typeChecked ? 'type-checked' : 'compiled without a type check'})`, () => {
  it('three instances: each @Cron tick runs once (@Once), and the @WithLock method runs on one at a time', async () => {
    const exits = await Promise.all(
      ['pod-1', 'pod-2', 'pod-3'].map((INSTANCE) =>
        runRecipe(MAIN, { REDIS_URL: server.url, INSTANCE, RUN_FOR_MS: '4500', CLOSE_MS: '400' }),
      ),
    );
    for (const exit of exits) expect(exit.code, exit.stderr).toBe(0);
    const output = exits.map((e) => e.stdout).join('\n');

    const ticks = matches(output, /^tick (\S+) ran on (\S+) with token \d+$/).map(([tick]) => tick);
    expect(ticks.length, output).toBeGreaterThanOrEqual(2);
    expect(new Set(ticks).size, `a tick ran twice:\n${output}`).toBe(ticks.length);

    const closed = matches(output, /^closed 2026-11 on (\S+) with token (\d+) from (\d+) to (\d+)$/)
      .map(([instance, token, from, to]) => ({ instance, token: Number(token), from: Number(from), to: Number(to) }))
      .sort((a, b) => a.from - b.from);
    expect(closed.map((c) => c.instance).sort()).toEqual(['pod-1', 'pod-2', 'pod-3']);
    for (let i = 1; i < closed.length; i++) {
      const [before, after] = [closed[i - 1], closed[i]];
      expect(after?.from, 'one instance at a time').toBeGreaterThanOrEqual(before?.to ?? Number.POSITIVE_INFINITY);
      expect(after?.token).toBeGreaterThan(before?.token ?? Number.POSITIVE_INFINITY);
    }
  });

  it('SIGTERM to the instance holding the lock: its method is told to stop, and the waiting instance gets the lock at once', async () => {
    const env = { REDIS_URL: server.url, CLOSE_MS: '60000' };
    const first = startRecipe(MAIN, { ...env, INSTANCE: 'pod-1' });
    await first.line(/^closing 2026-11 on pod-1/);
    const second = startRecipe(MAIN, { ...env, INSTANCE: 'pod-2' });
    await sleep(1_500); // started, and waiting for the lock
    expect(second.stdout()).not.toMatch(/closing/);

    const sent = performance.now();
    first.child.kill('SIGTERM');
    await second.line(/^closing 2026-11 on pod-2/);
    expect(performance.now() - sent, 'well within the 30 s lease').toBeLessThan(5_000);
    const firstExit = await first.exited;
    expect(firstExit.stdout).toMatch(/^stopped closing 2026-11 on pod-1: the application is shutting down$/m);
    // enableShutdownHooks closes the application, then lets the signal end the process.
    expect(firstExit.signal ?? firstExit.code).toBe('SIGTERM');

    second.child.kill('SIGTERM');
    expect((await second.exited).stdout).toMatch(/^stopped closing 2026-11 on pod-2/m);
    const locks = new Leasehold(client);
    const free = await locks.tryAcquire('invoices:close:2026-11');
    expect(free, 'released by the shutdown, not left to its lease').not.toBeNull();
    await free?.release();
    await locks.close();
  });
});
