import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisServer, startRedis } from '../harness/index.js';

/**
 * The README's quick start is examples/quick-start.mjs, byte for byte, and it runs as a user runs
 * it: plain Node, `import … from 'leasehold'` resolved through package.json's exports (a package
 * may import itself by name) to the dist/ the test setup built, against a real redis-server. It
 * must print its result and exit by itself: nothing leasehold opened may keep the process alive.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const EXAMPLE = join(ROOT, 'examples', 'quick-start.mjs');
/** Long enough for a slow start on a busy machine; a program that does not exit is killed here. */
/** A hang detector, not a speed bar: a program still running after this is killed, and the test fails. */
const EXIT_WITHIN_MS = 15_000;

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function runNode(file: string, env: Record<string, string>): Promise<Exit> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [file],
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: EXIT_WITHIN_MS, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => {
        const failed = error as (Error & { code?: unknown; signal?: NodeJS.Signals | null }) | null;
        resolve({
          code: failed === null ? 0 : typeof failed.code === 'number' ? failed.code : null,
          signal: failed?.signal ?? null,
          stdout,
          stderr,
        });
      },
    );
  });
}

/** The first ```js block of the README section whose heading is `heading`. */
function codeBlock(readme: string, heading: string): string | undefined {
  const section = readme.split(/^## /m).find((s) => s.startsWith(`${heading}\n`));
  return section === undefined ? undefined : /```js\n([\s\S]*?)\n```/.exec(section)?.[1];
}

describe('the README quick start', () => {
  let server: RedisServer;

  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('is examples/quick-start.mjs, byte for byte', async () => {
    const [readme, source] = await Promise.all([readFile(join(ROOT, 'README.md'), 'utf8'), readFile(EXAMPLE, 'utf8')]);
    const block = codeBlock(readme, 'Quick start');
    expect(block, 'a ```js block under "## Quick start"').toBeDefined();
    expect(block).toBe(source.replace(/\n$/, ''));
  });

  it('runs against a real redis-server, prints the fencing token and the result, and exits 0 by itself', async () => {
    const before = Date.now();
    const result = await runNode(EXAMPLE, { REDIS_URL: server.url });
    expect(result.signal, `killed after ${EXIT_WITHIN_MS} ms: the program did not exit`).toBeNull();
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const match = /^holding invoice:42 with fencing token (\d+)\ninvoice 42 sent\n$/.exec(result.stdout);
    expect(match, result.stdout).not.toBeNull();
    // A token is the server's clock in µs (or one above the last token): a large, exact integer.
    const token = Number(match?.[1]);
    expect(Number.isSafeInteger(token)).toBe(true);
    expect(token).toBeGreaterThan((before - 60_000) * 1_000);
  });

  it('a second run gets a larger fencing token from the same server', async () => {
    const tokens: number[] = [];
    for (let i = 0; i < 2; i++) {
      const result = await runNode(EXAMPLE, { REDIS_URL: server.url });
      expect(result.code).toBe(0);
      tokens.push(Number(/fencing token (\d+)/.exec(result.stdout)?.[1]));
    }
    expect(tokens[1]).toBeGreaterThan(tokens[0] ?? Number.POSITIVE_INFINITY);
  });
});
