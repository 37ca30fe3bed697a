import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DOCS = [
  'README.md',
  'ARCHITECTURE.md',
  'bench/README.md',
  ...readdirSync(join(ROOT, 'docs')).map((f) => `docs/${f}`),
];

describe('the docs name tests that exist', () => {
  it('every test file a document cites is in the tree', () => {
    const cited = DOCS.flatMap((doc) =>
      [...readFileSync(join(ROOT, doc), 'utf8').matchAll(/test\/[\w/.-]+\.(?:ts|mjs)/g)].map((m) => ({
        doc,
        path: m[0],
      })),
    );
    expect(cited.length).toBeGreaterThan(10);
    const missing = cited.filter(({ path }) => !existsSync(join(ROOT, path)));
    expect(missing).toEqual([]);
  });
});
