import { defineConfig } from 'tsup';

// The test suite builds only the JavaScript its child processes load; types are checked by tsc.
const dts = process.env.LEASEHOLD_BUILD_JS_ONLY !== '1';

export default defineConfig([
  {
    entry: { index: 'src/index.ts' },
    format: ['esm', 'cjs'],
    dts,
    clean: true,
    target: 'node20',
    loader: { '.lua': 'text' },
    sourcemap: true,
  },
  {
    entry: { cli: 'src/cli/main.ts' },
    format: ['esm'],
    target: 'node20',
    loader: { '.lua': 'text' },
    banner: { js: '#!/usr/bin/env node' },
  },
]);
