import { defineConfig } from 'tsup';

// Every build is the whole package: JavaScript for ESM and CJS, their declaration files and the
// CLI. `npm test`, `npm pack` (prepack) and `npm publish` all leave the same dist/ behind.
export default defineConfig([
  {
    entry: { index: 'src/index.ts', fencing: 'src/fencing/index.ts' },
    format: ['esm', 'cjs'],
    dts: true,
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
