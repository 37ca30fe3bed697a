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
  --redis URL   the Redis to use (default: $LEASEHOLD_REDIS_URL, else
                ${DEFAULT_REDIS_URL}); for a Redis Cluster, the URL of any one
                of its nodes
  --postgres URL, --etcd URL
                the locks of a PostgreSQL or etcd store instead (needs pg or
                etcd3 installed)
  --prefix P    the key prefix the locks were taken under (default '${DEFAULTS.prefix}')
  -h, --help    this text
`;
}

/** The columns help is wrapped to: the terminal's width when `stream` is a terminal, else 80. */
export function helpWidth(stream: NodeJS.WriteStream): number {
  const columns = stream.isTTY ? stream.columns : undefined;
  return columns !== undefined && columns > 0 ? columns : 80;
}

/** Writes help text to `stream`, wrapped to its width (`helpWidth`). */
export function writeHelp(stream: NodeJS.WriteStream, text: string): void {
  stream.write(wrapHelp(text, helpWidth(stream)));
}

const indentOf = (line: string): number => line.length - line.trimStart().length;

/** Where a term's description starts: after the term and a gap of two spaces or more. */
function termColumn(line: string): number | undefined {
  const match = /^(\s*\S+(?: \S+)*\s{2,})\S/.exec(line);
  return match?.[1]?.length;
}

/**
 * The column a paragraph's continuation lines start at: a `usage:` line's operands, a term's
 * description (`--json  machine output…`, or `--interval MS how…` when the next line shows the
 * column), two columns in for a command's synopsis (`verify [--workers N] …`), else the
 * paragraph's own indentation.
 */
function hangingColumn(first: string, next: string | undefined, sibling: number | undefined): number {
  const usage = /^usage: \S+ \S+ /.exec(first);
  if (usage) return usage[0].length;
  const term = termColumn(first);
  if (term !== undefined) return term;
  const indent = indentOf(first);
  // A term as wide as its column, one space before its description: the column of the term
  // above it, or of the line below it.
  const startsAt = (column: number) => column > indent && first[column - 1] === ' ' && /\S/.test(first[column] ?? '');
  if (sibling !== undefined && startsAt(sibling)) return sibling;
  if (next !== undefined && first.trimStart().startsWith('-') && startsAt(indentOf(next))) return indentOf(next);
  if (/^\s*[a-z][\w-]* [[<]/.test(first)) return indent + 2;
  return indent;
}

/** `word` cut into pieces of at most `width` characters. */
function pieces(word: string, width: number): string[] {
  const out: string[] = [];
  for (let at = 0; at < word.length; at += width) out.push(word.slice(at, at + width));
  return out;
}

/**
 * Help text wrapped to `width` columns. A paragraph (a line and the lines after it that start at
 * its hanging column) that fits is left as written; one with a line too long is filled again,
 * its continuation lines at the hanging column, breaking at spaces and never inside `[…]`.
 */
export function wrapHelp(text: string, width: number): string {
  const lines = text.split('\n');
  const out: string[] = [];
  /** The description column of the last term seen, and its indentation. */
  let term: { indent: number; column: number } | undefined;
  for (let i = 0; i < lines.length; ) {
    const first = lines[i] ?? '';
    if (first.trim() === '') {
      out.push(first);
      i++;
      continue;
    }
    const sibling = term !== undefined && term.indent === indentOf(first) ? term.column : undefined;
    const hang = hangingColumn(first, lines[i + 1], sibling);
    const column = termColumn(first);
    term = column !== undefined ? { indent: indentOf(first), column } : hang === sibling ? term : undefined;
    let end = i + 1;
    while (end < lines.length) {
      const line = lines[end] ?? '';
      if (line.trim() === '' || indentOf(line) !== hang || termColumn(line) !== undefined) break;
      end++;
    }
    const paragraph = lines.slice(i, end);
    i = end;
    if (paragraph.every((line) => line.length <= width)) {
      out.push(...paragraph);
      continue;
    }
    // The first line keeps what precedes the hanging column (a term, `usage: leasehold cmd`) when
    // it leaves room for words; the rest is words, filled again.
    const indent = indentOf(first);
    const headFits = hang > indent && hang <= width - 10 && /\S/.test(first[hang] ?? '') && first[hang - 1] === ' ';
    const head = headFits ? first.slice(0, hang) : first.slice(0, Math.min(indent, Math.max(0, width - 10)));
    const body = [headFits ? first.slice(hang) : first.trimStart(), ...paragraph.slice(1).map((l) => l.trim())];
    const words = body.join(' ').match(/\[[^\]]*\]\S*|\S+/g) ?? [];
    const continuation = ' '.repeat(Math.min(hang, Math.max(0, width - 20)));
    let line = head;
    let empty = true;
    for (const word of words) {
      const start = empty ? line : `${line} `;
      if (start.length + word.length <= width) {
        line = start + word;
        empty = false;
        continue;
      }
      if (line.trim() !== '') out.push(line.trimEnd());
      const room = Math.max(1, width - continuation.length);
      const parts = pieces(word, room);
      out.push(...parts.slice(0, -1).map((part) => continuation + part));
      line = continuation + (parts.at(-1) ?? '');
      empty = false;
    }
    out.push(line);
  }
  return out.join('\n');
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
    writeHelp(process.stdout, commandUsage(command));
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
