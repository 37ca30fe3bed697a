import { type ParseArgsConfig, parseArgs } from 'node:util';
import { DEFAULTS } from '../core/defaults.js';
import { LockError } from '../core/errors.js';
import * as validate from '../core/validate.js';
import type { Operator } from './operator.js';

/** Wrong use of the command line: exit status 2, with a pointer to the usage text. */
export class UsageError extends Error {}

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

type Options = NonNullable<ParseArgsConfig['options']>;

/** The parsed command line of one command. */
export interface Parsed {
  readonly operands: readonly string[];
  readonly redis: string;
  /** --postgres URL: the operator commands on a PostgreSQL store instead of Redis. */
  readonly postgres?: string | undefined;
  /** --etcd URL (comma-separated endpoints): the operator commands on an etcd store instead of Redis. */
  readonly etcd?: string | undefined;
  readonly prefix: string;
  string(name: string): string | undefined;
  flag(name: string): boolean;
}

/** What every command declares: what it takes and its help text. */
export interface CommandSpec {
  readonly name: string;
  /** After `leasehold `: the operands and the command's own options. */
  readonly synopsis: string;
  /** One line for `leasehold --help`. */
  readonly summary: string;
  /** The rest of `leasehold <command> --help`: options and what the output means. */
  readonly details: string;
  readonly options: Options;
  /** Names of the operands, in order; each is required. */
  readonly operands: readonly string[];
  /** Checks made before connecting, so a refused command never touches Redis. */
  readonly check?: (args: Parsed) => void;
}

/** One operator command: it acts on the locks through an open operator connection. */
export interface OperatorCommand extends CommandSpec {
  /** Resolves the exit status. */
  readonly run: (op: Operator, args: Parsed) => Promise<number>;
}

/**
 * A command that opens what it needs itself rather than the store's ports: `doctor` reads the
 * server's own settings, `verify` starts processes and proxies of its own.
 */
export interface DirectCommand extends CommandSpec {
  /** Resolves the exit status. */
  readonly start: (args: Parsed) => Promise<number>;
}

const COMMON: Options = {
  redis: { type: 'string' },
  postgres: { type: 'string' },
  etcd: { type: 'string' },
  prefix: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
};

export function commandUsage(command: CommandSpec): string {
  return `usage: leasehold ${command.synopsis} [--redis URL] [--prefix P]

${command.summary}
${command.details}
  --redis URL   the Redis to use (default: $LEASEHOLD_REDIS_URL, else ${DEFAULT_REDIS_URL});
                for a Redis Cluster, the URL of any one of its nodes
  --postgres URL, --etcd URL
                the locks of a PostgreSQL or etcd store instead (needs pg or etcd3 installed)
  --prefix P    the key prefix the locks were taken under (default '${DEFAULTS.prefix}')
  -h, --help    this text
`;
}

function redisUrl(value: string | undefined): string {
  const url = value ?? process.env.LEASEHOLD_REDIS_URL ?? DEFAULT_REDIS_URL;
  if (!/^rediss?:\/\//.test(url)) throw new UsageError(`--redis must be a redis:// or rediss:// URL, got ${url}`);
  return url;
}

/** Library validation at the edge, reported as wrong use of the command line. */
function asUsage<T>(check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (error instanceof LockError) throw new UsageError(error.message);
    throw error;
  }
}

/** Parse `argv` for `command`, or null when it asked for help (printed here). */
export function parse(command: CommandSpec, argv: readonly string[]): Parsed | null {
  const { values, positionals } = parseArgs({
    args: [...argv],
    options: { ...COMMON, ...command.options },
    strict: true,
    allowPositionals: true,
  });
  if (values.help === true) {
    process.stdout.write(commandUsage(command));
    return null;
  }
  const wanted = command.operands;
  if (positionals.length !== wanted.length) {
    const expected = wanted.length === 0 ? 'no operands' : wanted.map((w) => `<${w}>`).join(' ');
    throw new UsageError(
      `${command.name} takes ${expected}, got ${positionals.length === 0 ? 'none' : positionals.join(' ')}`,
    );
  }
  for (const [i, operand] of positionals.entries()) {
    asUsage(() => validate.lockName(operand, wanted[i]));
  }
  const prefix = values.prefix;
  const given = (['redis', 'postgres', 'etcd'] as const).filter((b) => typeof values[b] === 'string');
  if (given.length > 1) throw new UsageError(`give one of --redis, --postgres, --etcd, not ${given.join(' and ')}`);
  const postgres = typeof values.postgres === 'string' ? values.postgres : undefined;
  if (postgres !== undefined && !/^postgres(ql)?:\/\//.test(postgres)) {
    throw new UsageError(`--postgres must be a postgres:// URL, got ${postgres}`);
  }
  const parsed: Parsed = {
    operands: positionals,
    redis: redisUrl(typeof values.redis === 'string' ? values.redis : undefined),
    postgres,
    etcd: typeof values.etcd === 'string' ? values.etcd : undefined,
    prefix: asUsage(() => validate.prefix(prefix)),
    string: (name) => {
      const value = values[name];
      return typeof value === 'string' ? value : undefined;
    },
    flag: (name) => values[name] === true,
  };
  command.check?.(parsed);
  return parsed;
}

/** The operand at `index`; `parse` has checked that every operand is there. */
export function operand(args: Parsed, index: number): string {
  const value = args.operands[index];
  if (value === undefined) throw new UsageError(`missing operand ${index + 1}`);
  return value;
}
