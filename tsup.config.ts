import { defineConfig, type Options } from 'tsup';

/**
 * leasehold/nestjs uses the main entry as a package would: its `../index.js` stays an import of
 * dist/index.js (ESM) or dist/index.cjs (CJS), so both entries share one Leasehold class and one
 * set of error classes rather than each bundling its own copy. Any other way out of src/nestjs
 * would bundle a second copy, and fails the build.
 */
const nestjsUsesTheMainEntry: NonNullable<Options['esbuildPlugins']>[number] = {
  name: 'nestjs-uses-the-main-entry',
  setup(build) {
    const main = build.initialOptions.format === 'cjs' ? './index.cjs' : './index.js';
    build.onResolve({ filter: /^\.\.\// }, (args) => {
      if (!/[\\/]src[\\/]nestjs[\\/]/.test(args.importer)) return undefined;
      if (args.path === '../index.js') return { path: main, external: true };
      return { errors: [{ text: `src/nestjs imports the main entry only, as '../index.js', not '${args.path}'` }] };
    });
  },
};

// Every build is the whole package: JavaScript for ESM and CJS, their declaration files and the
// CLI. `npm test`, `npm pack` (prepack) and `npm publish` all leave the same dist/ behind.
export default defineConfig([
  {
    entry: {
      index: 'src/index.ts',
      fencing: 'src/fencing/index.ts',
      nestjs: 'src/nestjs/index.ts',
      otel: 'src/otel/index.ts',
    },
    format: ['esm', 'cjs'],
    // LEASEHOLD_BUILD=js: JavaScript only, for a quick test run while declarations do not build.
    dts: process.env.LEASEHOLD_BUILD !== 'js',
    clean: true,
    target: 'node20',
    loader: { '.lua': 'text' },
    sourcemap: true,
    esbuildPlugins: [nestjsUsesTheMainEntry],
  },
  {
    entry: { cli: 'src/cli/main.ts' },
    format: ['esm'],
    target: 'node20',
    loader: { '.lua': 'text' },
    banner: { js: '#!/usr/bin/env node' },
  },
]);
