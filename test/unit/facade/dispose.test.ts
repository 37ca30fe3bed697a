import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { Script } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * `await using held = await locks.acquire('job')` as a user writes it: compiled by TypeScript
 * (which lowers it to try/finally for runtimes without the syntax), and as plain JavaScript on a
 * runtime that has the syntax. Both run against the built package in a process of their own.
 */

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const DIST = join(ROOT, 'dist', 'index.js');
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const run = promisify(execFile);

/** Whether this runtime parses `await using` itself (V8 has it enabled from Node 24). */
function nativeAwaitUsing(): boolean {
  try {
    new Script('(async () => { await using resource = null; })');
    return true;
  } catch {
    return false;
  }
}
const NATIVE = nativeAwaitUsing();

/** The program, in TypeScript or JavaScript: `entry` is how it imports the built package. */
function program(entry: string, typed: boolean): string {
  const t = (type: string) => (typed ? `: ${type}` : '');
  return `
import { Leasehold, MemoryStore } from '${entry}';

const store = new MemoryStore();
const locks = new Leasehold(store);
const other = new Leasehold(store);
const seen${t('Record<string, unknown>')} = {};

async function held()${t('Promise<void>')} {
  await using lock = await locks.acquire('job', { ttl: 10_000 });
  seen.disposable = typeof lock[Symbol.asyncDispose];
  seen.whileHeld = (await other.tryAcquire('job')) === null ? 'refused' : 'taken';
}

async function failing()${t('Promise<void>')} {
  await using lock = await locks.acquire('failing', { ttl: 10_000 });
  seen.fencingToken = typeof lock.fencingToken;
  throw new Error('the work failed');
}

await held();
const after = await other.tryAcquire('job');
seen.afterBlock = after === null ? 'still held' : 'free';
await after?.release();

try {
  await failing();
} catch (error) {
  seen.thrown = (error${typed ? ' as Error' : ''}).message;
}
const afterThrow = await other.tryAcquire('failing');
seen.afterThrow = afterThrow === null ? 'still held' : 'free';
await afterThrow?.release();

await locks.close();
await other.close();
console.log(JSON.stringify(seen));
`;
}

const EXPECTED = {
  disposable: 'function',
  whileHeld: 'refused',
  afterBlock: 'free',
  fencingToken: 'number',
  thrown: 'the work failed',
  afterThrow: 'free',
};

describe('await using on a Lock', () => {
  let work: string;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'leasehold-dispose-'));
  });
  afterAll(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('this runtime has Symbol.asyncDispose, which await using (native or compiled) needs', async () => {
    const { stdout } = await run(process.execPath, ['-p', 'typeof Symbol.asyncDispose']);
    expect(stdout.trim()).toBe('symbol');
  });

  it('compiled by TypeScript (ES2022, esnext.disposable), it releases the lock when the block ends', async () => {
    const entry = relative(work, DIST).split('\\').join('/');
    await writeFile(join(work, 'held.mts'), program(entry.startsWith('.') ? entry : `./${entry}`, true));
    await writeFile(
      join(work, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2022', 'ESNext.Disposable'],
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules', '@types')],
          outDir: '.',
        },
        files: ['held.mts'],
      }),
    );
    await run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: work, timeout: 60_000 }).catch(
      (error: { stdout?: string }) => {
        throw new Error(`tsc failed:\n${error.stdout ?? String(error)}`);
      },
    );
    const compiled = await readFile(join(work, 'held.mjs'), 'utf8');
    // Lowered for ES2022: no `await using` left for the runtime to parse.
    expect(compiled).not.toMatch(/await using/);
    expect(compiled).toContain('__addDisposableResource');

    const { stdout } = await run(process.execPath, ['held.mjs'], { cwd: work, timeout: 15_000 });
    expect(JSON.parse(stdout)).toEqual(EXPECTED);
  }, 60_000);

  it('as plain JavaScript, on a runtime with native await using, it releases the lock too', async ({ skip }) => {
    skip(
      !NATIVE,
      `Node ${process.versions.node} cannot parse \`await using\` (V8 enables it from Node 24): compile it with TypeScript ≥ 5.2 instead`,
    );
    await writeFile(join(work, 'native.mjs'), program(pathToFileURL(DIST).href, false));
    const { stdout } = await run(process.execPath, ['native.mjs'], { cwd: work, timeout: 15_000 });
    expect(JSON.parse(stdout)).toEqual(EXPECTED);
  });

  it('as plain JavaScript, on a runtime without it, it is a SyntaxError', async ({ skip }) => {
    skip(NATIVE, `Node ${process.versions.node} has native \`await using\``);
    await writeFile(join(work, 'plain.mjs'), program(pathToFileURL(DIST).href, false));
    const failed = await run(process.execPath, ['plain.mjs'], { cwd: work, timeout: 15_000 }).then(
      () => null,
      (error: { code?: number; stderr?: string }) => error,
    );
    expect(failed?.code).toBe(1);
    expect(failed?.stderr).toContain('SyntaxError');
  });
});
