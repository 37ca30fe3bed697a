import { readFile } from 'node:fs/promises';
import { defineConfig, type Options } from 'tsup';

type EsbuildPlugin = NonNullable<Options['esbuildPlugins']>[number];

/**
 * leasehold/nestjs uses the main entry as a package would: its `../index.js` stays an import of
 * dist/index.js (ESM) or dist/index.cjs (CJS), so both entries share one Leasehold class and one
 * set of error classes rather than each bundling its own copy. Any other way out of src/nestjs
 * would bundle a second copy, and fails the build.
 */
const nestjsUsesTheMainEntry: EsbuildPlugin = {
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

/**
 * dist/cli.js is the `leasehold` bin: it opens with a hashbang. esbuild keeps an entry point's own
 * hashbang at the top of that entry's output, so it is added to the CLI's source here; a banner
 * would put it in every file of the build, the library's entries and shared chunks included.
 */
const cliHashbang: EsbuildPlugin = {
  name: 'cli-hashbang',
  setup(build) {
    build.onLoad({ filter: /[\\/]src[\\/]cli[\\/]main\.ts$/ }, async (args) => ({
      contents: `#!/usr/bin/env node\n${await readFile(args.path, 'utf8')}`,
      loader: 'ts',
    }));
  },
};

const library = {
  index: 'src/index.ts',
  fencing: 'src/fencing/index.ts',
  nestjs: 'src/nestjs/index.ts',
  otel: 'src/otel/index.ts',
  store: 'src/store/index.ts',
};

const shared = {
  target: 'node20',
  loader: { '.lua': 'text' },
  // No source maps: they were two thirds of the package. Only white space is minified: every
  // function keeps its name in a stack trace, and the package stays under 400 kB with its docs.
  sourcemap: false,
  minifyWhitespace: true,
} satisfies Options;

// Every build is the whole package: JavaScript for ESM and CJS, their declaration files and the
// CLI. `npm test`, `npm pack` (prepack) and `npm publish` all leave the same dist/ behind. The
// three builds below run at once; each cleans only what it writes.
export default defineConfig([
  {
    // ESM, the CLI included, code-split: dist/cli.js imports the chunks the library's entries are
    // made of, so the package holds one copy of the library rather than two. Dependencies and
    // peer dependencies (croner, the clients) stay imports, as in every build tsup makes.
    ...shared,
    entry: { ...library, cli: 'src/cli/main.ts' },
    format: ['esm'],
    splitting: true,
    // Empties dist/ of everything but declarations (the third build's) as it starts: the CJS
    // build's first file is written hundreds of milliseconds later, once esbuild has bundled.
    clean: ['!**/*.d.{ts,cts,mts}'],
    esbuildPlugins: [nestjsUsesTheMainEntry, cliHashbang],
  },
  {
    // CJS: the library's entries only (the CLI is ESM).
    ...shared,
    entry: library,
    format: ['cjs'],
    esbuildPlugins: [nestjsUsesTheMainEntry],
  },
  // The declarations of both formats, in one pass of the type checker: .d.ts and .d.cts. It
  // removes the old declaration files as it starts.
  // LEASEHOLD_BUILD=js: JavaScript only, for a quick test run while declarations do not build.
  ...(process.env.LEASEHOLD_BUILD === 'js'
    ? []
    : [
        {
          ...shared,
          entry: library,
          format: ['esm', 'cjs'],
          dts: { entry: library, only: true },
          clean: true,
        } satisfies Options,
      ]),
]);
