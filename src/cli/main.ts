import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { LockError } from '../core/errors.js';
import { openStoreOperator } from './backends.js';
import { commandUsage, type DirectCommand, type OperatorCommand, parse, UsageError, writeHelp } from './command.js';
import { dashboard } from './commands/dashboard.js';
import { doctor } from './commands/doctor.js';
import { history } from './commands/history.js';
import { inspect } from './commands/inspect.js';
import { list } from './commands/list.js';
import { migrate } from './commands/migrate.js';
import { release } from './commands/release.js';
import { verify } from './commands/verify.js';
import { watch } from './commands/watch.js';
import { demo } from './demo.js';
import { demoPod } from './demo-pod.js';
import { openOperator } from './operator.js';
import type { DemoPlan } from './pod.js';
import type { WorkerPlan } from './verify/history.js';
import { verifyWorker } from './verify/worker.js';
import { PLAN_VARIABLE } from './verify/workers.js';

const OPERATOR: readonly OperatorCommand[] = [inspect, list, release, history, watch, dashboard];
/** Commands that check the deployment rather than its locks; they take --redis and --prefix too. */
const DIRECT: readonly DirectCommand[] = [doctor, verify, migrate];

const DEMO_USAGE = `  demo [--redis redis://host:port] [--ticks N]
      Three pods run the same job every second: each tick runs once, never three
      times; one pod is killed mid-job and the others take over once its lease ends.
      Without --redis the pods share the in-process memory store; with it, each pod
      is its own process against that Redis (needs ioredis or redis installed).
      --ticks N  how many ticks to run, 6 to 120 (default 12)
`;

const USAGE = `usage: leasehold <command> [options]

operator commands (each takes --redis URL, default $LEASEHOLD_REDIS_URL or
redis://127.0.0.1:6379, any node's URL for a Redis Cluster, or --postgres URL, or
--etcd URL, and --prefix P, default 'leasehold'; needs ioredis, pg or etcd3
installed):
${OPERATOR.map((c) => `  ${c.synopsis}\n      ${c.summary}\n`).join('')}
deployment checks (the same --redis and --prefix):
${DIRECT.map((c) => `  ${c.synopsis}\n      ${c.summary}\n`).join('')}
other commands:
${DEMO_USAGE}  help [command]
      This text, or a command's.

options:
  -h, --help      this text, on stdout (a bare \`leasehold\` prints it on stderr
                  and exits 2)
  -V, --version   print leasehold's version (from its package.json) and exit

Run \`leasehold <command> --help\` for a command's options.
`;

/**
 * The version in leasehold's own package.json, read when asked: the nearest package.json named
 * leasehold above this file (dist/cli.js in the package, src/cli/main.ts in a checkout).
 */
function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    let text: string | undefined;
    try {
      text = readFileSync(join(dir, 'package.json'), 'utf8');
    } catch {
      // No package.json here: look further up.
    }
    if (text !== undefined) {
      const pkg = JSON.parse(text) as { name?: unknown; version?: unknown };
      if (pkg.name === 'leasehold' && typeof pkg.version === 'string') return pkg.version;
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error("cannot find leasehold's package.json");
    dir = parent;
  }
}

function ticksOption(value: string | undefined): number {
  if (value === undefined) return 12;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 6 || n > 120)
    throw new UsageError(`--ticks must be an integer from 6 to 120, got ${value}`);
  return n;
}

async function runOperator(command: OperatorCommand, argv: readonly string[]): Promise<number> {
  const args = parse(command, argv);
  if (args === null) return 0;
  const op =
    args.postgres !== undefined
      ? await openStoreOperator('postgres', args.postgres, args.prefix)
      : args.etcd !== undefined
        ? await openStoreOperator('etcd', args.etcd, args.prefix)
        : await openOperator(args.redis, args.prefix);
  try {
    return await command.run(op, args);
  } finally {
    await op.close();
  }
}

async function runDirect(command: DirectCommand, argv: readonly string[]): Promise<number> {
  const args = parse(command, argv);
  return args === null ? 0 : command.start(args);
}

function runVerifyWorker(): Promise<number> {
  // Internal: one worker of `leasehold verify`, started by verify itself with its plan.
  const plan = process.env[PLAN_VARIABLE];
  if (plan === undefined) throw new UsageError('verify-worker is started by `leasehold verify`');
  return verifyWorker(JSON.parse(plan) as WorkerPlan);
}

function runDemo(argv: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: { redis: { type: 'string' }, ticks: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
  });
  if (values.help) {
    writeHelp(process.stdout, `usage: leasehold demo [options]\n\n${DEMO_USAGE}`);
    return Promise.resolve(0);
  }
  if (values.redis !== undefined && !/^rediss?:\/\//.test(values.redis)) {
    throw new UsageError(`--redis must be a redis:// or rediss:// URL, got ${values.redis}`);
  }
  return demo({ redis: values.redis, ticks: ticksOption(values.ticks) });
}

function runDemoPod(argv: readonly string[]): Promise<number> {
  // Internal: one pod of `demo --redis`, started by the demo itself.
  const { values } = parseArgs({
    args: [...argv],
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

function help(topic: string | undefined): number {
  const command = OPERATOR.find((c) => c.name === topic) ?? DIRECT.find((c) => c.name === topic);
  if (topic !== undefined && command === undefined && topic !== 'demo') {
    throw new UsageError(`unknown command: ${topic}`);
  }
  writeHelp(process.stdout, command ? commandUsage(command) : topic === 'demo' ? DEMO_USAGE : USAGE);
  return 0;
}

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined) {
    // Wrong use, like any other: the usage goes to stderr, stdout stays empty.
    writeHelp(process.stderr, USAGE);
    return 2;
  }
  if (command === 'help') return help(rest[0]);
  if (command === '--help' || command === '-h') return help(undefined);
  if (command === '--version' || command === '-V') {
    process.stdout.write(`${packageVersion()}\n`);
    return 0;
  }
  if (command === 'demo') return runDemo(rest);
  if (command === 'demo-pod') return runDemoPod(rest);
  if (command === 'verify-worker') return runVerifyWorker();
  const direct = DIRECT.find((c) => c.name === command);
  if (direct) return runDirect(direct, rest);
  const operator = OPERATOR.find((c) => c.name === command);
  if (operator) return runOperator(operator, rest);
  throw new UsageError(
    command.startsWith('-') ? `unknown option before the command: ${command}` : `unknown command: ${command}`,
  );
}

/** Wrong use of the command line: ours, parseArgs' (a TypeError with a code), or bad library input. */
function isUsage(error: unknown): boolean {
  return (
    error instanceof UsageError ||
    (error instanceof TypeError && 'code' in error) ||
    (error instanceof LockError && error.code === 'INVALID_ARGUMENT')
  );
}

function exit(code: number): void {
  process.exitCode = code;
  // Everything is closed by now; should a handle still hold the event loop, do not hang on it.
  setTimeout(() => process.exit(code), 200).unref();
}

const argv = process.argv.slice(2);
main(argv).then(exit, (error: unknown) => {
  const usage = isUsage(error);
  process.stderr.write(`leasehold: ${error instanceof Error ? error.message : String(error)}\n`);
  if (usage) {
    const named = [...OPERATOR, ...DIRECT].some((c) => c.name === argv[0]) || argv[0] === 'demo';
    process.stderr.write(`run \`leasehold ${named ? `${argv[0]} ` : ''}--help\` for usage\n`);
  }
  exit(usage ? 2 : 1);
});
