import { describe, expect, it } from 'vitest';
import { type Exit, matches, redisForThisFile, runRecipe } from './run.js';

/**
 * The once-per-tick recipes: locks.schedule (examples/cron-once.mjs), node-cron with the
 * coordinator (examples/node-cron.mjs) and croner with runOnce (examples/croner.mjs). Each runs as
 * three processes against one real redis-server, and once alone on its MemoryStore (three
 * instances in one process). Whatever the instances, each tick runs once.
 */

const RECIPES = [
  {
    file: 'examples/cron-once.mjs',
    ran: /^tick (\S+) ran on (\S+) with token (\d+)$/,
    skipped: /^tick (\S+) skipped on (\S+): (\S+)$/,
  },
  {
    file: 'examples/node-cron.mjs',
    ran: /^fire (\S+) ran on (\S+) with token (\d+)$/,
    skipped: /^fire (\S+) skipped on (\S+): (\S+)$/,
  },
  {
    file: 'examples/croner.mjs',
    ran: /^tick (\S+) ran on (\S+) with token (\d+)$/,
    skipped: /^tick (\S+) skipped on (\S+): (\S+)$/,
  },
] as const;

type Recipe = (typeof RECIPES)[number];

/** Each tick ran once, tokens rising with the ticks; every refusal names a tick that ran elsewhere. */
function checkOncePerTick(recipe: Recipe, exits: Exit[], instances: number): void {
  for (const exit of exits) {
    expect(exit.stderr, recipe.file).toBe('');
    expect(exit.code, `${recipe.file} exited by itself`).toBe(0);
  }
  const output = exits.map((e) => e.stdout).join('\n');
  const ran = matches(output, recipe.ran).sort(([a], [b]) => Date.parse(a ?? '') - Date.parse(b ?? ''));
  const ticks = ran.map(([tick]) => tick);
  expect(ticks.length, output).toBeGreaterThanOrEqual(2);
  expect(new Set(ticks).size, `a tick ran twice:\n${output}`).toBe(ticks.length);
  for (const tick of ticks) expect(Date.parse(tick ?? '') % 1_000).toBe(0);
  const tokens = ran.map(([, , token]) => Number(token));
  expect(tokens).toEqual([...tokens].sort((a, b) => a - b));
  const skipped = matches(output, recipe.skipped);
  expect(skipped.length, `the other instances fired too:\n${output}`).toBeGreaterThanOrEqual(ticks.length - 1);
  for (const [tick, , reason] of skipped) {
    expect(['already-ran', 'locked', 'not-elected']).toContain(reason);
    expect(ticks, `skipped ${tick} (${reason}), which ran nowhere`).toContain(tick);
  }
  expect(new Set(ran.map(([, instance]) => instance)).size).toBeLessThanOrEqual(instances);
}

describe('once-per-tick recipes', () => {
  const server = redisForThisFile();

  it('three processes of each recipe on one redis-server: each tick runs in one of them', async () => {
    const runs = RECIPES.map((recipe) =>
      Promise.all(
        ['pod-1', 'pod-2', 'pod-3'].map((instance) =>
          runRecipe(recipe.file, { REDIS_URL: server.url, INSTANCE: instance, RUN_FOR_MS: '4500' }),
        ),
      ),
    );
    const results = await Promise.all(runs);
    RECIPES.forEach((recipe, i) => {
      checkOncePerTick(recipe, results[i] ?? [], 3);
    });
  });

  it('each recipe without REDIS_URL: three instances on a MemoryStore, each tick once', async () => {
    const results = await Promise.all(
      RECIPES.map((recipe) => runRecipe(recipe.file, { REDIS_URL: '', RUN_FOR_MS: '2500' })),
    );
    RECIPES.forEach((recipe, i) => {
      const exit = results[i] as Exit;
      checkOncePerTick(recipe, [exit], 3);
      // In one process all three instances fire every tick: two refusals per tick that ran. The
      // first and last ticks may come as the instances start or stop (one after another, slowly
      // on a busy machine), so they may have fewer.
      const ticks = matches(exit.stdout, recipe.ran)
        .map(([tick]) => tick)
        .sort((a, b) => Date.parse(a ?? '') - Date.parse(b ?? ''));
      const skipped = matches(exit.stdout, recipe.skipped).map(([tick]) => tick);
      ticks.forEach((tick, t) => {
        const refusals = skipped.filter((s) => s === tick).length;
        if (t === 0 || t === ticks.length - 1) expect(refusals, exit.stdout).toBeLessThanOrEqual(2);
        else expect(refusals, `tick ${tick}:\n${exit.stdout}`).toBe(2);
      });
    });
  });
});
