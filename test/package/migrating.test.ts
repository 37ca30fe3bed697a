import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisServer, startRedis } from '../harness/index.js';

/**
 * docs/migrating.md as a user follows it: each ```js block marked `runnable` is run as it stands
 * with plain Node against a real redis-server, `leasehold` resolved through package.json's exports
 * to the dist/ the test setup built, and the peers (redlock, redis-semaphore) from node_modules.
 * Every program must exit 0 by itself with nothing on stderr, and within a section the program
 * after the migration must print what the one before it printed.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const GUIDE = readFileSync(join(ROOT, 'docs', 'migrating.md'), 'utf8');
/** A hang detector, not a speed bar: a program still running after this is killed, and fails. */
const EXIT_WITHIN_MS = 15_000;

interface Program {
  readonly section: string;
  readonly role: 'before' | 'after';
  readonly source: string;
}

const programs: Program[] = GUIDE.split(/^## /m)
  .slice(1)
  .flatMap((section) => {
    const title = section.slice(0, section.indexOf('\n'));
    return [...section.matchAll(/^```js runnable (before|after)\n([\s\S]*?)\n```$/gm)].map((m) => ({
      section: title,
      role: m[1] as 'before' | 'after',
      source: `${m[2]}\n`,
    }));
  });
const sections = [...new Set(programs.map((p) => p.section))];

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** The program as an ES module read from stdin, run from the repository's root. */
function runModule(source: string, env: Record<string, string>): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module'], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (text: string) => {
      stdout += text;
    });
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), EXIT_WITHIN_MS);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
    child.stdin.end(source);
  });
}

describe('docs/migrating.md: the programs marked runnable', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('are there: a program before and after for redlock, redis-semaphore and SET NX PX', () => {
    expect(sections).toEqual(['From redlock (v5)', 'From redis-semaphore (v5)', 'From `SET NX PX` and `DEL`']);
    for (const section of sections) {
      const roles = programs.filter((p) => p.section === section).map((p) => p.role);
      expect({ section, roles }).toEqual({ section, roles: ['before', 'after'] });
    }
    for (const after of programs.filter((p) => p.role === 'after')) {
      expect(after.source).toMatch(/^import \{ Leasehold \} from 'leasehold';$/m);
    }
  });

  it.each(sections)('%s: both programs run against a real redis-server and print the same lines', async (section) => {
    const [before, after] = ['before', 'after'].map((role) =>
      programs.find((p) => p.section === section && p.role === role),
    );
    const outputs: string[] = [];
    // One after the other on one server: each program releases what it took before it exits.
    for (const program of [before, after]) {
      if (program === undefined) throw new Error(`${section}: a program is missing`);
      const result = await runModule(program.source, { REDIS_URL: server.url });
      const label = `${section}, ${program.role}`;
      expect(result.signal, `${label}: killed after ${EXIT_WITHIN_MS} ms, the program did not exit`).toBeNull();
      expect(result.stderr, label).toBe('');
      expect(result.code, label).toBe(0);
      expect(result.stdout, label).not.toMatch(/twice/);
      outputs.push(result.stdout);
    }
    expect(outputs[0]?.split('\n').length).toBeGreaterThan(2);
    expect(outputs[1]).toBe(outputs[0]);
  });
});
