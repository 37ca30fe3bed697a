import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis } from '../harness/index.js';

/**
 * The package as a user gets it: `npm pack` (its prepack script builds), the tarball installed into
 * a project of its own, then imported from ESM and CJS, run, and type-checked against.
 */

/** The most the tarball may weigh, packed (npm's `size`), in bytes. */
const MAX_PACKED_BYTES = 400_000;

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const run = promisify(execFile);

interface Manifest {
  name: string;
  version: string;
  main: string;
  module: string;
  types: string;
  bin: Record<string, string>;
  exports: Record<string, string | Record<string, string | Record<string, string>>>;
  scripts: Record<string, string>;
}

/** Every file a manifest points at: main, module, types, bin, and each leaf of exports. */
function pointedAt(manifest: Manifest): string[] {
  const leaves = (value: unknown): string[] =>
    typeof value === 'string' ? [value] : Object.values(value as object).flatMap(leaves);
  return [manifest.main, manifest.module, manifest.types, ...Object.values(manifest.bin), ...leaves(manifest.exports)]
    .map((path) => path.replace(/^\.\//, ''))
    .filter((path, i, all) => all.indexOf(path) === i)
    .sort();
}

/** The `count` largest files of a tarball, as `path size`, largest first. */
async function largest(tarball: string, count: number): Promise<string[]> {
  const { stdout } = await run('tar', ['-tvzf', tarball]);
  return stdout
    .split('\n')
    .map((line) => /^\S+\s+\S+\s+(\d+)\s+\S+\s+\S+\s+package\/(.+)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ path: m[2] as string, size: Number(m[1]) }))
    .sort((a, b) => b.size - a.size)
    .slice(0, count)
    .map(({ path, size }) => `${path} ${(size / 1000).toFixed(1)} kB`);
}

/** What both programs do with the installed package: the same checks, printed as JSON. */
const PROGRAM_BODY = `
  const store = new MemoryStore();
  const locks = new Leasehold(store);
  const other = new Leasehold(store);
  const lock = await locks.acquire('job', { ttl: 5_000 });
  const whileHeld = await other.tryAcquire('job');
  const released = await lock.release();
  const afterwards = await other.tryAcquire('job');
  await afterwards?.release();
  await locks.close();
  await other.close();
  const result = {
    fencingToken: Number.isSafeInteger(lock.fencingToken) && lock.fencingToken > 0,
    whileHeld: whileHeld === null ? null : 'taken',
    released,
    afterwards: afterwards === null ? null : afterwards.fencingToken > lock.fencingToken,
    lockError: typeof LockError,
    storeEntry: [typeof lockKeys, typeof migrationSql],
  };
`;

const ESM_PROGRAM = `
import { Leasehold, MemoryStore, LockError } from 'leasehold';
import { lockKeys, migrationSql } from 'leasehold/store';
${PROGRAM_BODY}
console.log(JSON.stringify({ format: 'esm', ...result }));
`;

const CJS_PROGRAM = `
const { Leasehold, MemoryStore, LockError } = require('leasehold');
const { lockKeys, migrationSql } = require('leasehold/store');

let ioredis = 'not installed';
try {
  require.resolve('ioredis');
  ioredis = 'installed';
} catch {}

(async () => {
${PROGRAM_BODY}
  console.log(JSON.stringify({ format: 'cjs', ...result, ioredis }));
})();
`;

/** Type-checked, never run: the declarations must carry real types, not `any`. */
const ESM_TYPES = `
import { Leasehold, type Lock, LockError, LockTimeoutError, MemoryStore } from 'leasehold';
import { type LeaseStore, lockKeys, type Store } from 'leasehold/store';

const locks = new Leasehold(new MemoryStore(), { ttl: 10_000 });
const lock: Lock = await locks.acquire('job', { ttl: 1_000, wait: 0 });
const token: number = lock.fencingToken;
const signal: AbortSignal = lock.signal;
const released: boolean = await lock.release();
const maybe: Lock | null = await locks.tryAcquire('job');
const timeout: LockError = null as unknown as LockTimeoutError;
{
  await using held = await locks.acquire('job');
  held.name satisfies string;
}
// @ts-expect-error: ttl is a number of milliseconds
await locks.acquire('job', { ttl: '1s' });
// @ts-expect-error: there is no such method
locks.frobnicate();
// The ports are in leasehold/store, and a MemoryStore is a Store.
const store: Store = new MemoryStore();
const lease: LeaseStore = store;
const key: string = lockKeys('leasehold', 'job').lock;
// @ts-expect-error: leasehold/store, not the root entry
export type { LeaseStore as RootLeaseStore } from 'leasehold';
export { key, lease, maybe, released, signal, timeout, token };
`;

const CJS_TYPES = `
import { Leasehold, type Lock, MemoryStore } from 'leasehold';
import type { Store } from 'leasehold/store';

async function main(): Promise<number> {
  const store: Store = new MemoryStore();
  const locks = new Leasehold(store);
  const lock: Lock = await locks.acquire('job');
  // @ts-expect-error: fencingToken is a number
  const wrong: string = lock.fencingToken;
  await lock.release();
  return wrong.length;
}
export = main;
`;

describe('the packed package, installed into a project of its own', () => {
  let work: string;
  let project: string;
  let tarball: string;
  let packed: string[];
  let installed: Manifest;
  /** `npm pack`'s own figures for the tarball. */
  let sizes: { packed: number; unpacked: number; files: number };

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'leasehold-package-'));
    // `npm pack` runs prepack, which rebuilds dist/. It runs on a copy of what the package is
    // built from, so it never rebuilds the dist/ of this checkout under the other test files'
    // child processes. Its node_modules are this checkout's.
    const source = join(work, 'source');
    await mkdir(source);
    for (const entry of [
      'src',
      'examples',
      'package.json',
      'tsup.config.ts',
      'tsconfig.json',
      'README.md',
      'LICENSE',
    ]) {
      await cp(join(ROOT, entry), join(source, entry), { recursive: true });
    }
    await symlink(join(ROOT, 'node_modules'), join(source, 'node_modules'), 'dir');
    const out = join(work, 'packed');
    await mkdir(out);
    await run('npm', ['pack', '--pack-destination', out], { cwd: source });
    const [file] = await readdir(out);
    if (file === undefined) throw new Error('npm pack wrote no tarball');
    tarball = join(out, file);
    const { stdout } = await run('tar', ['-tzf', tarball]);
    packed = stdout
      .split('\n')
      .filter(Boolean)
      .map((path) => path.replace(/^package\//, ''))
      .sort();
    // What npm reports for the tarball just built (dist/ is there now, so no build runs again).
    const report = JSON.parse(
      (await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: source })).stdout,
    ) as { unpackedSize: number; entryCount: number }[];
    sizes = {
      packed: (await stat(tarball)).size,
      unpacked: report[0]?.unpackedSize ?? Number.NaN,
      files: report[0]?.entryCount ?? Number.NaN,
    };
    const kB = (bytes: number) => `${(bytes / 1000).toFixed(1)} kB`;
    console.log(
      `${file}: ${kB(sizes.packed)} packed, ${kB(sizes.unpacked)} unpacked, ${sizes.files} files; ` +
        `largest: ${(await largest(tarball, 3)).join(', ')}`,
    );

    // The project: croner (the one runtime dependency) copied from this checkout, so npm has
    // nothing to fetch and the install works offline. No Redis client: both are optional peers.
    project = join(work, 'project');
    await mkdir(join(project, 'node_modules'), { recursive: true });
    await writeFile(
      join(project, 'package.json'),
      JSON.stringify({ name: 'scratch', version: '0.0.0', private: true }),
    );
    await cp(join(ROOT, 'node_modules', 'croner'), join(project, 'node_modules', 'croner'), { recursive: true });
    await run('npm', ['install', '--no-save', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', tarball], {
      cwd: project,
    });
    installed = JSON.parse(
      await readFile(join(project, 'node_modules', 'leasehold', 'package.json'), 'utf8'),
    ) as Manifest;
  }, 90_000);

  afterAll(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('the tarball holds the JavaScript, the declaration files and the CLI, and every file package.json names', () => {
    expect(packed).toEqual(
      expect.arrayContaining([
        'package.json',
        'README.md',
        'dist/index.js',
        'dist/index.cjs',
        'dist/index.d.ts',
        'dist/index.d.cts',
        'dist/store.js',
        'dist/store.cjs',
        'dist/store.d.ts',
        'dist/store.d.cts',
        'dist/cli.js',
      ]),
    );
    expect(pointedAt(installed)).toEqual(
      expect.arrayContaining(['dist/index.d.ts', 'dist/index.d.cts', 'dist/store.d.ts', 'dist/store.d.cts']),
    );
    for (const path of pointedAt(installed)) expect(packed).toContain(path);
    expect(installed.scripts.prepack).toMatch(/\btsup\b|\bnpm run build\b/);
  });

  it(`the tarball holds LICENSE (MIT), no source maps, and weighs at most ${MAX_PACKED_BYTES / 1000} kB packed`, async () => {
    expect(packed).toContain('LICENSE');
    const license = await readFile(join(project, 'node_modules', 'leasehold', 'LICENSE'), 'utf8');
    expect(license).toMatch(/^MIT License\n\nCopyright \(c\) 2026 the leasehold authors\n/);
    expect(installed).toMatchObject({ license: 'MIT' });
    // Source maps stay out of the package: the JavaScript in dist/ is not minified.
    expect(packed.filter((path) => path.endsWith('.map'))).toEqual([]);
    expect(sizes.packed).toBeLessThanOrEqual(MAX_PACKED_BYTES);
  });

  it('the examples the README links to are in the tarball', async () => {
    const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
    const linked = [...new Set([...readme.matchAll(/\]\((examples\/[^)#\s]*)\)/g)].map((m) => m[1] as string))];
    expect(linked).toContain('examples/quick-start.mjs');
    for (const path of linked) {
      const shipped = path.endsWith('/') ? packed.some((p) => p.startsWith(path)) : packed.includes(path);
      expect({ path, shipped }).toEqual({ path, shipped: true });
    }
  });

  it('the CLI imports the chunks of the library entries rather than a copy of the library', async () => {
    const dist = join(project, 'node_modules', 'leasehold', 'dist');
    const esm = packed.filter((path) => /^dist\/[^/]+\.js$/.test(path));
    const defining: string[] = [];
    for (const path of esm) {
      if (/\bLeasehold ?= ?class\b|\bclass Leasehold\b/.test(await readFile(join(dist, '..', path), 'utf8'))) {
        defining.push(path);
      }
    }
    // One ESM file defines the Leasehold class: a chunk that dist/index.js and dist/cli.js import.
    expect(defining).toHaveLength(1);
    const [chunk] = defining;
    const cli = await readFile(join(dist, 'cli.js'), 'utf8');
    expect(cli.startsWith('#!/usr/bin/env node\n')).toBe(true);
    // White space is minified: `from"./chunk…"`.
    const from = new RegExp(`from ?"\\./${chunk?.replace(/^dist\//, '')}"`);
    expect(cli).toMatch(from);
    expect(await readFile(join(dist, 'index.js'), 'utf8')).toMatch(from);
  });

  it('the dist/ a test run builds is the whole package too, declaration files included', async () => {
    const manifest = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as Manifest;
    for (const path of pointedAt(manifest)) expect(existsSync(join(ROOT, path)), path).toBe(true);
  });

  it('imports from ESM and from CJS, and takes and releases a lock on a MemoryStore', async () => {
    await writeFile(join(project, 'esm.mjs'), ESM_PROGRAM);
    await writeFile(join(project, 'cjs.cjs'), CJS_PROGRAM);
    const [esm, cjs] = await Promise.all(
      ['esm.mjs', 'cjs.cjs'].map((file) => run(process.execPath, [file], { cwd: project, timeout: 15_000 })),
    );
    // A positive integer token; the next holder's is greater.
    const expected = {
      fencingToken: true,
      whileHeld: null,
      released: true,
      afterwards: true,
      lockError: 'function',
      storeEntry: ['function', 'function'],
    };
    expect(JSON.parse(esm?.stdout ?? '')).toEqual({ format: 'esm', ...expected });
    expect(JSON.parse(cjs?.stdout ?? '')).toEqual({ format: 'cjs', ...expected, ioredis: 'not installed' });
  });

  it('the README quick start, run from the installed tarball against a real redis-server, prints its result and exits 0 by itself', async () => {
    // A second project: the installed leasehold, and ioredis from this checkout (a user installs both).
    const app = join(work, 'app');
    await mkdir(join(app, 'node_modules'), { recursive: true });
    await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '0.0.0', private: true }));
    await symlink(join(project, 'node_modules', 'leasehold'), join(app, 'node_modules', 'leasehold'));
    await symlink(join(ROOT, 'node_modules', 'ioredis'), join(app, 'node_modules', 'ioredis'));
    // The example as the tarball ships it, copied into the project as a user would.
    await cp(join(project, 'node_modules', 'leasehold', 'examples', 'quick-start.mjs'), join(app, 'quick-start.mjs'));
    const server = await startRedis();
    try {
      // A program that left a handle open would be killed at the timeout, and `run` would reject:
      // exiting by itself is what is checked here, not how fast (that is the bench's business).
      const result = await run(process.execPath, ['quick-start.mjs'], {
        cwd: app,
        timeout: 10_000,
        env: { ...process.env, REDIS_URL: server.url },
      });
      expect(result.stdout).toMatch(/^holding invoice:42 with fencing token \d+\ninvoice 42 sent\n$/);
    } finally {
      await server.stop();
    }
  });

  it('npx leasehold demo runs from the installed package on the in-process memory store, and exits 0', async () => {
    // --offline: npx finds the installed bin in the project and never asks the registry.
    const { stdout } = await run('npx', ['--offline', 'leasehold', 'demo', '--ticks', '6'], {
      cwd: project,
      timeout: 60_000,
      env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
    });
    expect(stdout).toMatch(/^verdict: 6 ticks, none ran twice/m);
  }, 70_000);

  it('installs the leasehold command, which prints its version', async () => {
    const { stdout } = await run(join(project, 'node_modules', '.bin', 'leasehold'), ['--version'], {
      cwd: project,
      timeout: 15_000,
    });
    expect(stdout).toBe(`${installed.version}\n`);
  });

  it('type-checks ESM and CJS code against the installed declarations (NodeNext)', async () => {
    await writeFile(join(project, 'esm-types.mts'), ESM_TYPES);
    await writeFile(join(project, 'cjs-types.cts'), CJS_TYPES);
    await writeFile(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2023', 'ESNext.Disposable'],
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules', '@types')],
        },
        files: ['esm-types.mts', 'cjs-types.cts'],
      }),
    );
    const result = await run(process.execPath, [TSC, '-p', 'tsconfig.json', '--listFiles'], {
      cwd: project,
      timeout: 60_000,
    }).catch((error: { stdout?: string }) => {
      throw new Error(`tsc failed:\n${error.stdout ?? String(error)}`);
    });
    // Both entry points' declarations, from the installed package, were the ones checked.
    const checked = result.stdout.split('\n');
    expect(checked).toContain(join(project, 'node_modules', 'leasehold', 'dist', 'index.d.ts'));
    expect(checked).toContain(join(project, 'node_modules', 'leasehold', 'dist', 'index.d.cts'));
    expect(checked).toContain(join(project, 'node_modules', 'leasehold', 'dist', 'store.d.ts'));
    expect(checked).toContain(join(project, 'node_modules', 'leasehold', 'dist', 'store.d.cts'));
  }, 60_000);
});
