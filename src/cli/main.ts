import { parseArgs } from 'node:util';
import { demo } from './demo.js';
import { demoPod } from './demo-pod.js';
import type { DemoPlan } from './pod.js';

const USAGE = `usage: leasehold <command> [options]

commands:
  demo [--redis redis://host:port] [--ticks N]
      Three pods run the same job every second: each tick runs once, never three times;
      one pod is killed mid-job and the others take over once its lease ends.
      Without --redis the pods share the in-process memory store; with it, each pod is
      its own process against that Redis (needs ioredis or redis installed).
      --ticks: how many ticks to run, 6 to 120 (default 12).
  help
      This text.
`;

class UsageError extends Error {}

function ticksOption(value: string | undefined): number {
  if (value === undefined) return 12;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 6 || n > 120)
    throw new UsageError(`--ticks must be an integer from 6 to 120, got ${value}`);
  return n;
}

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
    process.stdout.write(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command === 'demo') {
    const { values } = parseArgs({
      args: [...rest],
      options: { redis: { type: 'string' }, ticks: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
    });
    if (values.help) {
      process.stdout.write(USAGE);
      return 0;
    }
    if (values.redis !== undefined && !/^rediss?:\/\//.test(values.redis)) {
      throw new UsageError(`--redis must be a redis:// or rediss:// URL, got ${values.redis}`);
    }
    return demo({ redis: values.redis, ticks: ticksOption(values.ticks) });
  }
  if (command === 'demo-pod') {
    // Internal: one pod of `demo --redis`, started by the demo itself.
    const { values } = parseArgs({
      args: [...rest],
      options: {
        redis: { type: 'string' },
        pod: { type: 'string' },
        prefix: { type: 'string' },
        plan: { type: 'string' },
      },
      strict: true,
    });
    if (!values.redis || !values.pod || !values.prefix || !values.plan) {
      throw new UsageError('demo-pod is started by `leasehold demo --redis`');
    }
    return demoPod(values.redis, values.pod, values.prefix, JSON.parse(values.plan) as DemoPlan);
  }
  throw new UsageError(`unknown command: ${command}`);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    const usage = error instanceof UsageError || (error instanceof TypeError && 'code' in error);
    process.stderr.write(`leasehold: ${error instanceof Error ? error.message : String(error)}\n`);
    if (usage) process.stderr.write(`run \`leasehold help\` for usage\n`);
    process.exitCode = usage ? 2 : 1;
  },
);
