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
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    globalSetup: ['test/global-setup.ts'],
  },
});
