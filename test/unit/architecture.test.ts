import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The layers of ARCHITECTURE.md, checked on the code's own imports: a file imports only from its
 * own layer or the layers below it, and the folders that must stay apart do.
 */
const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');

/** Bottom to top. A file's layer is the first whose test its path (relative to src/) passes. */
const LAYERS: readonly { readonly name: string; readonly holds: (path: string) => boolean }[] = [
  { name: 'core', holds: (p) => p.startsWith('core/') },
  { name: 'store', holds: (p) => p.startsWith('store/') },
  { name: 'primitives', holds: (p) => p.startsWith('primitives/') },
  { name: 'topology', holds: (p) => p.startsWith('topology/') },
  { name: 'schedule', holds: (p) => p.startsWith('schedule/') },
  { name: 'facade', holds: (p) => p === 'leasehold.ts' || p === 'index.ts' || p.startsWith('facade/') },
  { name: 'integrations', holds: (p) => p.startsWith('otel/') || p.startsWith('nestjs/') },
  { name: 'cli', holds: (p) => p.startsWith('cli/') },
];

function layerOf(path: string): number {
  return LAYERS.findIndex((layer) => layer.holds(path));
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** Every relative import of every source file, as paths relative to src/. */
function imports(): { from: string; to: string }[] {
  return sources(SRC).flatMap((file) => {
    const text = readFileSync(file, 'utf8');
    const from = relative(SRC, file);
    const found = [...text.matchAll(/(?:import|export)[^'"]*?from\s+'(\.[^']+)'|import\('(\.[^']+)'\)/g)];
    return found.map((m) => {
      const spec = (m[1] ?? m[2]) as string;
      const to = relative(SRC, resolve(dirname(file), spec)).replace(/\.js$/, '.ts');
      return { from, to };
    });
  });
}

const ALL = imports();

describe('architecture: what may import what', () => {
  it('reads the imports (the check is not vacuous)', () => {
    expect(ALL.length).toBeGreaterThan(100);
    for (const { from } of ALL) {
      if (from.startsWith('fencing/') || from === 'lua.d.ts') continue;
      expect(layerOf(from), `${from} belongs to no layer`).toBeGreaterThanOrEqual(0);
    }
  });

  it('no import runs up a layer', () => {
    const upward = ALL.filter(({ from, to }) => {
      if (to.endsWith('.lua')) return false;
      const a = layerOf(from);
      const b = layerOf(to);
      return a >= 0 && b > a;
    }).map(({ from, to }) => `${from} -> ${to}`);
    expect(upward).toEqual([]);
  });

  it('the memory store and the Redis store never import each other', () => {
    const crossing = ALL.filter(
      ({ from, to }) =>
        (from.startsWith('store/memory/') && to.startsWith('store/redis/')) ||
        (from.startsWith('store/redis/') && to.startsWith('store/memory/')),
    ).map(({ from, to }) => `${from} -> ${to}`);
    expect(crossing).toEqual([]);
  });

  it('the Redis key layout is imported only inside src/store/redis/ (and re-exported by leasehold/store)', () => {
    const outside = ALL.filter(
      ({ from, to }) => to === 'store/redis/keys.ts' && !from.startsWith('store/redis/') && from !== 'store/index.ts',
    ).map(({ from }) => from);
    expect(outside).toEqual([]);
  });

  it('the leasehold/fencing entry point stands alone', () => {
    const reaching = ALL.filter(({ from, to }) => from.startsWith('fencing/') && !to.startsWith('fencing/'));
    expect(reaching).toEqual([]);
  });

  it('src/store/memory/ holds no Redis key string', () => {
    const dir = join(SRC, 'store/memory');
    for (const file of sources(dir)) {
      const text = readFileSync(file, 'utf8');
      expect(text, relative(SRC, file)).not.toMatch(/:fence|:released|:waiters|:alive|:tick'|:runs'|\{\$\{/);
    }
  });

  it('a deliberately upward import is caught (the rule can fail)', () => {
    const planted = [...ALL, { from: 'core/clock.ts', to: 'leasehold.ts' }];
    const upward = planted.filter(({ from, to }) => layerOf(to) > layerOf(from));
    expect(upward).toEqual([{ from: 'core/clock.ts', to: 'leasehold.ts' }]);
  });
});
