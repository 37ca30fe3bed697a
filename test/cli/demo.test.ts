import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisServer, startRedis } from '../harness/index.js';

/** The README's demo, run as a user would: the built CLI, on the memory store and on a real Redis. */

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
const run = promisify(execFile);

function check(stdout: string): void {
  const lines = stdout.trim().split('\n');
  // Plain text when not on a terminal.
  expect(stdout.includes('\u001b[')).toBe(false);
  expect(stdout).toMatch(/KILLED 150 ms into the run/);
  expect(stdout).toMatch(/lease is still held/);
  expect(stdout).toMatch(/takeover: pod-\d runs the job/);
  expect(stdout).not.toMatch(/RAN \d TIMES|nobody ran it/);
  expect(stdout).toMatch(/run history in the store: 5 runs \(4 ok, 1 abandoned\)/);
  expect(lines.at(-1)).toBe(
    "verdict: 6 ticks, none ran twice: 5 ran exactly once (one of them cut short by the kill), 1 skipped while the dead pod's lease ran out",
  );
}

describe('leasehold demo', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server.stop();
  });

  it.concurrent('three pods on the memory store', async () => {
    const { stdout } = await run(process.execPath, [CLI, 'demo', '--ticks', '6'], { timeout: 20_000 });
    check(stdout);
  }, 25_000);

  it.concurrent('three pod processes against a real Redis', async () => {
    const { stdout } = await run(process.execPath, [CLI, 'demo', '--ticks', '6', '--redis', server.url], {
      timeout: 20_000,
    });
    expect(stdout).toMatch(/each pod its own process/);
    check(stdout);
  }, 25_000);
});
