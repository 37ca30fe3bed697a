import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * The built entry points as a user loads them (plain Node, `leasehold` resolved through the
 * package's exports to the dist/ the test setup built): the main entry never loads Nest, and
 * `leasehold/nestjs` shares the main entry's classes, in ESM and in CJS.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);

/** Module loading that fails on any Nest package: an ESM resolve hook, and a CJS `Module._load`. */
const BLOCKED = /^(@nestjs\/|reflect-metadata$|rxjs$)/;
const ESM_HOOKS = `data:text/javascript,${encodeURIComponent(`
  export async function resolve(specifier, context, next) {
    if (${BLOCKED}.test(specifier)) throw new Error('blocked ' + specifier);
    return next(specifier, context);
  }`)}`;
const ESM_BLOCK = `data:text/javascript,${encodeURIComponent(
  `import { register } from 'node:module'; register(${JSON.stringify(ESM_HOOKS)});`,
)}`;
const CJS_BLOCK = `
  const Module = require('node:module');
  const load = Module._load;
  Module._load = function (request, ...rest) {
    if (${BLOCKED}.test(request)) throw new Error('blocked ' + request);
    return load.call(this, request, ...rest);
  };`;

async function node(args: string[]): Promise<{ stdout: string; stderr: string; code: number }> {
  try {
    const { stdout, stderr } = await run(process.execPath, args, { cwd: ROOT, timeout: 20_000 });
    return { stdout, stderr, code: 0 };
  } catch (error) {
    const failed = error as { stdout?: string; stderr?: string; code?: number };
    return { stdout: failed.stdout ?? '', stderr: failed.stderr ?? '', code: failed.code ?? 1 };
  }
}

const esm = (source: string, ...pre: string[]) => node([...pre, '--input-type=module', '--eval', source]);
const cjs = (source: string, ...pre: string[]) => node([...pre, '--input-type=commonjs', '--eval', source]);

describe('peer dependencies: Nest is loaded only by leasehold/nestjs', () => {
  it('ESM: the main entry and leasehold/fencing load with every Nest package blocked; leasehold/nestjs does not', async () => {
    const main = await esm(
      "const l = await import('leasehold'); await import('leasehold/fencing'); console.log(typeof l.Leasehold);",
      '--import',
      ESM_BLOCK,
    );
    expect(main.stderr).toBe('');
    expect(main.stdout.trim()).toBe('function');
    const nest = await esm("await import('leasehold/nestjs');", '--import', ESM_BLOCK);
    expect(nest.code).not.toBe(0);
    expect(nest.stderr).toMatch(/blocked @nestjs\/common/);
  });

  it('CJS: the same with require', async () => {
    const main = await cjs(`${CJS_BLOCK}; console.log(typeof require('leasehold').Leasehold);`);
    expect(main.stderr).toBe('');
    expect(main.stdout.trim()).toBe('function');
    const nest = await cjs(`${CJS_BLOCK}; require('leasehold/nestjs');`);
    expect(nest.code).not.toBe(0);
    expect(nest.stderr).toMatch(/blocked @nestjs\/common/);
  });

  it('no built file but leasehold/nestjs names a Nest package (the shared chunks included)', async () => {
    const files = (await readdir(join(ROOT, 'dist'))).filter((f) => /\.c?js$/.test(f) && !f.startsWith('nestjs.'));
    expect(files).toContain('index.js');
    for (const file of files) {
      expect(await readFile(join(ROOT, 'dist', file), 'utf8'), file).not.toMatch(/@nestjs|reflect-metadata/);
    }
  });
});

/** A Nest application in plain JavaScript: the module, a provider with a @WithLock method, on a MemoryStore. */
const APP = `
  const { Injectable } = nest;
  const { Test } = testing;
  class Ledger { async post() { return heldLock().fencingToken > 0; } }
  Injectable()(Ledger);
  const proto = Ledger.prototype;
  Object.defineProperty(proto, 'post', Reflect.decorate([WithLock('ledger')], proto, 'post', Object.getOwnPropertyDescriptor(proto, 'post')));
  const app = await Test.createTestingModule({
    imports: [LeaseholdModule.forRoot({ store: new MemoryStore() })],
    providers: [Ledger],
  }).compile();
  await app.init();
  const locks = app.get(Leasehold);
  const posted = await app.get(Ledger).post();
  await app.close();
  const afterClose = await app.get(Ledger).post().catch((error) => error);
  console.log(JSON.stringify({
    sameClass: locks instanceof Leasehold,
    posted,
    lockError: afterClose instanceof LockError,
    code: afterClose.code,
  }));
`;

describe('leasehold/nestjs shares the classes of the main entry', () => {
  const expected = { sameClass: true, posted: true, lockError: true, code: 'CLOSED' };

  it('ESM', async () => {
    const result = await esm(`
      import * as nest from '@nestjs/common';
      import * as testing from '@nestjs/testing';
      import { Leasehold, LockError, MemoryStore } from 'leasehold';
      import { LeaseholdModule, WithLock, heldLock } from 'leasehold/nestjs';
      ${APP}`);
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual(expected);
  });

  it('CJS', async () => {
    const result = await cjs(`
      const nest = require('@nestjs/common');
      const testing = require('@nestjs/testing');
      const { Leasehold, LockError, MemoryStore } = require('leasehold');
      const { LeaseholdModule, WithLock, heldLock } = require('leasehold/nestjs');
      (async () => { ${APP} })();`);
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual(expected);
  });
});
