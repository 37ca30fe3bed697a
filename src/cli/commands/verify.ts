import { writeFileSync } from 'node:fs';
import { type DirectCommand, type Parsed, UsageError } from '../command.js';
import { printJson } from '../format.js';
import { check } from '../verify/checker.js';
import { CLIENT_FAULTS, type FaultKind, type LockKind, SERVER_FAULTS } from '../verify/history.js';
import { humanReport, jsonReport, title, verdictOf } from '../verify/report.js';
import { runVerify } from '../verify/run.js';
import { timelineSvg } from '../verify/svg.js';

const DEFAULT_WORKERS = 5;
const DEFAULT_DURATION = 30_000;
const DEFAULT_TTL = 1_000;

/** `30s`, `1500ms`, `2m`, or a number of seconds. */
export function parseDuration(value: string): number | null {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(value.trim());
  if (!m) return null;
  const amount = Number(m[1]);
  const unit = m[2] ?? 's';
  return Math.round(amount * (unit === 'ms' ? 1 : unit === 's' ? 1_000 : 60_000));
}

interface Settings {
  readonly workers: number;
  readonly durationMs: number;
  readonly ttl: number;
  readonly faults: readonly FaultKind[];
  readonly lock: LockKind;
  readonly local: boolean;
}

function integer(args: Parsed, name: string, min: number, max: number, fallback: number): number {
  const value = args.string(name);
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new UsageError(`--${name} must be an integer from ${min} to ${max}, got ${value}`);
  }
  return n;
}

function settings(args: Parsed): Settings {
  const local = args.flag('local');
  if (local && args.string('redis') !== undefined) {
    throw new UsageError('--local starts its own redis-server: leave out --redis');
  }
  const workers = integer(args, 'workers', 2, 32, DEFAULT_WORKERS);
  const ttl = integer(args, 'ttl', 100, 60_000, DEFAULT_TTL);
  const given = args.string('duration');
  const durationMs = given === undefined ? DEFAULT_DURATION : parseDuration(given);
  if (durationMs === null || durationMs < 1_000 || durationMs > 3_600_000) {
    throw new UsageError(`--duration must be from 1s to 60m (30s, 1500ms, 2m), got ${given}`);
  }
  if (durationMs < 4 * ttl) {
    throw new UsageError(`--duration must be at least 4 × --ttl (${4 * ttl} ms), got ${durationMs} ms`);
  }
  const lock = args.string('lock') ?? 'leasehold';
  if (lock !== 'leasehold' && lock !== 'naive') {
    throw new UsageError(`--lock must be leasehold or naive, got ${lock}`);
  }
  const allowed = local ? [...CLIENT_FAULTS, ...SERVER_FAULTS] : CLIENT_FAULTS;
  const list = args.string('faults');
  let faults: FaultKind[];
  if (list === undefined) faults = [...allowed];
  else if (list === 'none' || list === '') faults = [];
  else {
    faults = [];
    for (const item of list.split(',').map((s) => s.trim())) {
      if (!allowed.includes(item as FaultKind)) {
        const server = SERVER_FAULTS.includes(item as FaultKind) && !local ? ' (server faults need --local)' : '';
        throw new UsageError(`--faults takes ${allowed.join(', ')} or none, got ${item}${server}`);
      }
      if (!faults.includes(item as FaultKind)) faults.push(item as FaultKind);
    }
  }
  return { workers, durationMs, ttl, faults, lock, local };
}

export const verify: DirectCommand = {
  name: 'verify',
  synopsis:
    'verify [--workers N] [--duration 30s] [--faults pause,kill,proxy] [--ttl MS] [--lock leasehold|naive] [--local] [--json] [--svg FILE] [--history FILE]',
  summary:
    'Test the guarantees on your own Redis: worker processes take turns on one lock and write a fenced record while verify pauses, kills and cuts them off; a checker reads what happened.',
  details: `
  --workers N      worker processes (default ${DEFAULT_WORKERS}, 2 to 32)
  --duration D     how long the workers run: 30s, 1500ms, 2m (default 30s)
  --faults LIST    what to inject, in turn (default: all that apply; none for none):
                     pause    SIGSTOP a worker (one mid-work if any, else the holder) for 2 ttl
                     kill     SIGKILL a worker, then start a new process in its place
                     proxy    on the worker's own TCP proxy: a partition for 2 ttl, a delay of
                              ttl/4 each way for 2 ttl, or a reset of its connections
                     restart  (--local) kill -9 the server and start it again (AOF, fsync always)
                     freeze   (--local) SIGSTOP the server for 2 ttl
  --ttl MS         the lease (default ${DEFAULT_TTL}); faults last about twice as long
  --lock KIND      leasehold (default), or naive: SET NX PX to take, DEL to release, no fencing,
                   the negative control, which should be reported UNSAFE
  --local          start a redis-server of verify's own (on the PATH) instead of --redis, and
                   allow the server faults
  --json           machine output: checks, violations, faults with recovery times, per worker
  --svg FILE       write a timeline: who held the lock when, writes, faults, violations
  --history FILE   write every event of the run, one JSON object per line
Each worker loops: acquire, read the record, work (10 to 80 ms, now and then 1.5 ttl), write
the record with its token (leasehold/fencing's fencedUpdate; the naive lock writes plainly),
release. Workers do not stop at a lost lease: they write anyway, the worst case. Faults touch
only verify's own processes and proxies, and with --local its own server, never your server;
the run's keys (under the prefix) are deleted at the end. The checker reports:
  overlap        two workers each believing it held a valid lease at the same instant
  lost-updates   two writes accepted from the same version, a write accepted with a token
                 below one accepted before it, a record that went back
  tokens         a token repeated, or below one granted before it
  starvation     a worker never granted the lock
  recovery       how long after each fault the lock was granted to another worker
The processes are compared on this machine's wall clock (each reads Date.now()); a clock step
during the run would falsify the comparison. A Redis Cluster is refused (its redirects would
bypass the proxies). Exit status 0 when nothing unsafe was found, 3 when something was, 1 when
the run could not be done.
`,
  options: {
    workers: { type: 'string' },
    duration: { type: 'string' },
    faults: { type: 'string' },
    ttl: { type: 'string' },
    lock: { type: 'string' },
    local: { type: 'boolean' },
    json: { type: 'boolean' },
    svg: { type: 'string' },
    history: { type: 'string' },
  },
  operands: [],
  check(args) {
    settings(args);
  },
  async start(args) {
    const s = settings(args);
    const json = args.flag('json');
    const outcome = await runVerify({
      url: args.redis,
      local: s.local,
      workers: s.workers,
      durationMs: s.durationMs,
      faults: s.faults,
      lock: s.lock,
      ttl: s.ttl,
      prefix: args.prefix,
      say: (line) => process.stderr.write(`${line}\n`),
    });
    const result = check(outcome.history);
    const verdict = verdictOf(result, outcome.crashes);
    const svg = args.string('svg');
    if (svg !== undefined) writeFileSync(svg, timelineSvg(outcome.history, result, title(outcome.history, verdict)));
    const history = args.string('history');
    if (history !== undefined) {
      const lines = [...outcome.history.events, ...outcome.history.faults.map((f) => ({ e: 'fault', ...f }))];
      writeFileSync(history, `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
    }
    if (json) printJson(jsonReport(outcome, result, verdict, s.faults));
    else process.stdout.write(humanReport(outcome, result, verdict));
    return verdict.exitCode;
  },
};
