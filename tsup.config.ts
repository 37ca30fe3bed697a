import { defineConfig } from 'tsup';

// Every build is the whole package: JavaScript for ESM and CJS, their declaration files and the
// CLI. `npm test`, `npm pack` (prepack) and `npm publish` all leave the same dist/ behind.
export default defineConfig([
  {
    entry: { index: 'src/index.ts', fencing: 'src/fencing/index.ts' },
    format: ['esm', 'cjs'],
    // LEASEHOLD_BUILD=js: JavaScript only, for a quick test run while declarations do not build.
    dts: process.env.LEASEHOLD_BUILD !== 'js',
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
