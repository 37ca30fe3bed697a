import * as validate from '../../core/validate.js';
import { type OperatorCommand, type Parsed, UsageError } from '../command.js';
import { Collector, DETAIL_BUDGET } from '../dashboard/collector.js';
import { isLoopback, newToken } from '../dashboard/guard.js';
import { redactor } from '../dashboard/redact.js';
import { type Dashboard, startServer } from '../dashboard/server.js';

const DEFAULT_HOST = '127.0.0.1';
const DEFAULT_INTERVAL = 1_000;

function port(args: Parsed): number {
  const value = args.string('port');
  if (value === undefined) return 0;
  const n = Number(value);
  if (!/^\d+$/.test(value) || n > 65_535)
    throw new UsageError(`--port must be an integer from 0 to 65535, got ${value}`);
  return n;
}

function interval(args: Parsed): number {
  const value = args.string('interval');
  if (value === undefined) return DEFAULT_INTERVAL;
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms < 250 || ms > 60_000) {
    throw new UsageError(`--interval must be an integer number of ms from 250 to 60000, got ${value}`);
  }
  return ms;
}

function host(args: Parsed): string {
  const value = args.string('host') ?? DEFAULT_HOST;
  if (value.trim() === '') throw new UsageError('--host must name an address to listen on, got an empty string');
  return value;
}

function jobs(args: Parsed): string[] {
  const value = args.string('jobs');
  if (value === undefined) return [];
  const names = value.split(',').filter((name) => name !== '');
  for (const name of names) {
    try {
      validate.lockName(name, 'job name');
    } catch (error) {
      throw new UsageError(`--jobs: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  return [...new Set(names)];
}

/** Resolves on the first Ctrl-C or SIGTERM; the listeners go with it. */
function signalled(): { promise: Promise<string>; dispose(): void } {
  let done: (signal: string) => void = () => {};
  const promise = new Promise<string>((resolve) => {
    done = resolve;
  });
  const onInt = () => done('SIGINT');
  const onTerm = () => done('SIGTERM');
  process.once('SIGINT', onInt);
  process.once('SIGTERM', onTerm);
  return {
    promise,
    dispose: () => {
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
    },
  };
}

export const dashboard: OperatorCommand = {
  name: 'dashboard',
  synopsis: 'dashboard [--port N] [--host ADDR] [--interval MS] [--jobs A,B] [--allow-release]',
  summary:
    'Serve a live page of the locks held, their waiters, the scheduled jobs and their runs, and a timeline of grants, until Ctrl-C.',
  details: `
  --port N          the port to listen on (default: a free one); the URL is printed at start
  --host ADDR       the address to listen on (default ${DEFAULT_HOST}); anything but loopback prints
                    a warning: whoever reaches it sees every lock name and instance
  --interval MS     how often the backend is read, 250 to 60000 (default ${DEFAULT_INTERVAL}); one read
                    serves every open page
  --jobs A,B        scheduled jobs to show from the start; others show up once seen running
  --allow-release   let the page force-release a lock: it asks for confirmation and for the token
                    printed at start, and the server refuses requests from any other origin
The page is read-only without --allow-release. It never receives the connection URL's user or
password, nor whole owner tokens. Each interval the lock names are scanned as \`list\` does and the
details of at most ${DETAIL_BUDGET} locks are read (those on an open page first, then the oldest
readings), so the cost per interval is bounded however many locks or pages there are. See
docs/dashboard.md.
`,
  options: {
    port: { type: 'string' },
    host: { type: 'string' },
    interval: { type: 'string' },
    jobs: { type: 'string' },
    'allow-release': { type: 'boolean' },
  },
  operands: [],
  check(args) {
    port(args);
    interval(args);
    host(args);
    jobs(args);
  },
  async run(op, args) {
    const kind = args.postgres !== undefined ? 'postgres' : args.etcd !== undefined ? 'etcd' : 'redis';
    const connection = args.postgres ?? args.etcd ?? args.redis;
    const { label, redact } = redactor(kind, connection);
    const allowRelease = args.flag('allow-release');
    const token = allowRelease ? newToken() : null;
    const every = interval(args);
    const bind = host(args);
    const stop = signalled();
    let server: Dashboard | undefined;
    const collector = new Collector(op, {
      interval: every,
      jobs: jobs(args),
      redact,
      wanted: () => server?.wanted() ?? [],
      published: () => server?.publish(),
    });
    let lost: (error: Error) => void = () => {};
    const lostPromise = new Promise<Error>((resolve) => {
      lost = resolve;
    });
    const offLost = op.onLost((error) => lost(error));
    try {
      server = await startServer(op, () => collector, {
        host: bind,
        port: port(args),
        token,
        meta: { backend: label, prefix: op.prefix, interval: every, allowRelease },
        redact,
        log: (line) => process.stderr.write(`leasehold dashboard: ${line}\n`),
      });
      const mode = allowRelease ? 'force release enabled' : 'read-only';
      process.stdout.write(`leasehold dashboard for ${label}, prefix '${op.prefix}' (${mode}): ${server.url}\n`);
      if (token !== null) {
        process.stdout.write(`release token (the page asks for it before a forced release): ${token}\n`);
        process.stdout.write(`or open ${server.url}#token=${token}\n`);
      }
      if (!isLoopback(bind)) {
        process.stderr.write(
          `leasehold dashboard: warning: listening on ${bind}, not loopback: anyone who can reach this port sees every lock name, instance and job under the prefix${allowRelease ? ' (force release still needs the token)' : ''}\n`,
        );
      }
      process.stderr.write('leasehold dashboard: Ctrl-C to stop\n');
      const ended = await Promise.race([stop.promise.then(() => null), lostPromise]);
      collector.stop();
      await server.close(ended === null ? 'the dashboard was stopped' : redact(ended.message));
      // A read in flight finishes (each is bounded by commandTimeout) before the connection closes.
      await collector.settled();
      if (ended !== null) {
        process.stderr.write(`leasehold: ${redact(ended.message)}\n`);
        return 1;
      }
      return 0;
    } finally {
      collector.stop();
      offLost();
      stop.dispose();
    }
  },
};
