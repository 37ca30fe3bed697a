import { defineConfig } from 'vitest/config';

export default defineConfig({
  plugins: [
    {
      name: 'lua-as-text',
      transform(code, id) {
        if (!id.endsWith('.lua')) return null;
        return { code: `export default ${JSON.stringify(code)};`, map: null };
      },
    },
  ],
  test: {
    include: ['test/**/*.test.ts'],
    // Compile-time checks of the public types (test/types/*.test-d.ts): run by tsc, nothing executes.
    typecheck: { enabled: true, include: ['test/types/**/*.test-d.ts'], tsconfig: './test/types/tsconfig.json' },
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    globalSetup: ['test/global-setup.ts'],
  },
});
