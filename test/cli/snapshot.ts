import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../harness/index.js';

const BUILT = fileURLToPath(new URL('../../dist/', import.meta.url));
const CACHE = fileURLToPath(new URL('../../node_modules/.cache/', import.meta.url));

/**
 * A copy of the built dist/, inside the checkout so that the CLI finds ioredis; returns its cli.js.
 * Builds run meanwhile by other test runs clean dist/ first, and a worker started again after a
 * kill must still find it. cli.js imports the chunks it shares with the library's entries, so the
 * whole of dist/ is copied, again while a chunk it names is missing (a build half written).
 */
export async function snapshotCli(label: string): Promise<string> {
  mkdirSync(CACHE, { recursive: true });
  const copy = mkdtempSync(join(CACHE, `leasehold-${label}-cli-`));
  await waitFor(
    () => {
      cpSync(BUILT, copy, { recursive: true });
      const cli = readFileSync(join(copy, 'cli.js'), 'utf8');
      const chunks = [...cli.matchAll(/(?:from|import)\s*"\.\/(chunk-[\w-]+\.js)"/g)].map((m) => m[1] ?? '');
      return chunks.every((chunk) => existsSync(join(copy, chunk)));
    },
    { timeout: 60_000, message: 'dist/cli.js and its chunks are built' },
  );
  return join(copy, 'cli.js');
}
