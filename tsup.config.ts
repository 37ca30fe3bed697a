import { defineConfig } from 'tsup';

export default defineConfig([
  {
    entry: { index: 'src/index.ts' },
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
