import { DEFAULTS } from '../../core/defaults.js';
import { type OperatorCommand, operand, UsageError } from '../command.js';
import { msLeft, shortToken } from '../format.js';
import { clockTime } from '../style.js';

/** Resolves on Ctrl-C (or SIGTERM); the listeners go with it. */
function interrupted(): { promise: Promise<void>; dispose(): void } {
  let done: () => void = () => {};
  const promise = new Promise<void>((resolve) => {
    done = resolve;
  });
  const onSignal = () => done();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return {
    promise,
    dispose: () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

/** How often the lock's state is read, to see acquisitions and expiries (which publish nothing). */
const DEFAULT_INTERVAL = 100;

type WatchEvent =
  | {
      event: 'acquired';
      owner: string;
      instance: string | null;
      fencingToken: number | null;
      /** The server's time of the grant (ms since the epoch); ISO 8601 in --json. */
      takenAt: number | null;
      ttl: number;
    }
  | { event: 'released'; owner: string }
  | { event: 'expired'; owner: string }
  | { event: 'handed-on'; woken: string; next: string | null };

function line(name: string, e: WatchEvent): string {
  switch (e.event) {
    case 'acquired': {
      const by = e.instance === null ? '' : ` (${e.instance})`;
      const token = e.fencingToken === null ? '' : `, fencing token ${e.fencingToken}`;
      const at = e.takenAt === null ? '' : `, taken at ${clockTime(e.takenAt)}`;
      return `${name}  acquired by ${shortToken(e.owner)}${by}${token}${at}, ${msLeft(e.ttl)} left`;
    }
    case 'released':
      return `${name}  released by ${shortToken(e.owner)}`;
    case 'expired':
      return `${name}  expired: the lease of ${shortToken(e.owner)} ran out without a release`;
    case 'handed-on': {
      const next = e.next === null ? '' : `; next in line ${shortToken(e.next)}`;
      return `${name}  handed to waiter ${shortToken(e.woken)} (reserved for ${DEFAULTS.reservation} ms)${next}`;
    }
  }
}

export const watch: OperatorCommand = {
  name: 'watch',
  synopsis: 'watch <name> [--interval MS] [--json]',
  summary: 'Print each acquisition, release, hand-off and expiry of a lock as it happens, until Ctrl-C.',
  details: `
  --interval MS how often the lock's state is read (default ${DEFAULT_INTERVAL}); releases and
                hand-offs are heard on the lock's channel at once
  --json        one JSON object per line
Each line: the local time, the lock, and what happened: acquired (by which owner and instance,
with its fencing token and the server's time of the grant), released, handed to a waiter (heard at once on the lock's channel),
expired (the holder let its lease run out: crashed, paused or partitioned). A lease taken and
ended within one interval is not seen. Exit status 1 if the connection to Redis ends.
`,
  options: { json: { type: 'boolean' }, interval: { type: 'string' } },
  operands: ['name'],
  check(args) {
    interval(args);
  },
  async run(op, args) {
    const name = operand(args, 0);
    const json = args.flag('json');
    const every = interval(args);
    const print = (e: WatchEvent) => {
      const at = Date.now();
      if (json) {
        const fields = e.event === 'acquired' ? { ...e, takenAt: iso(e.takenAt) } : e;
        process.stdout.write(`${JSON.stringify({ at: new Date(at).toISOString(), name, ...fields })}\n`);
      } else process.stdout.write(`${clockTime(at)}  ${line(name, e)}\n`);
    };
    const stop = interrupted();
    let failed: (error: Error) => void = () => {};
    const lost = new Promise<never>((_, reject) => {
      failed = reject;
    });
    // Raced below; marked handled so a loss while subscribing is not an unhandled rejection.
    lost.catch(() => undefined);
    const offLost = op.onLost((error) => failed(error));
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      // A hand-off announced to nobody in particular (nobody queued) is seen as a release instead.
      const unwatch = await op.bounded(
        op.lease.watch(name, ({ woken, next }) => {
          if (woken !== null) print({ event: 'handed-on', woken, next: next[0] ?? null });
        }),
        'watch',
      );
      // The holder seen last; its release is heard on the channel, its expiry only by reading.
      let holder: string | null = null;
      const look = async () => {
        const state = await op.bounded(op.lease.inspect(name), 'inspect');
        if (holder !== null && state.owner !== holder) {
          // The counter names the owner that released its grant; a holder not named let it expire.
          print({ event: state.releasedBy === holder ? 'released' : 'expired', owner: holder });
        }
        if (state.owner !== null && state.owner !== holder) {
          print({
            event: 'acquired',
            owner: state.owner,
            instance: state.holder?.instance ?? null,
            fencingToken: state.holder?.token ?? null,
            takenAt: state.holder?.takenAt ?? null,
            ttl: state.pttl,
          });
        }
        holder = state.owner;
      };
      await look();
      const polling = new Promise<never>((_, reject) => {
        const tick = () => {
          look().then(() => {
            timer = setTimeout(tick, every);
          }, reject);
        };
        timer = setTimeout(tick, every);
      });
      polling.catch(() => undefined);
      // On stderr, so that stdout carries only events (for a pipe); it also says the watch is live.
      process.stderr.write(`watching "${name}" under prefix '${op.prefix}' (Ctrl-C to stop)\n`);
      try {
        await Promise.race([stop.promise, lost, polling]);
      } finally {
        unwatch();
      }
      return 0;
    } finally {
      if (timer) clearTimeout(timer);
      stop.dispose();
      offLost();
    }
  },
};

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

function interval(args: { string(name: string): string | undefined }): number {
  const value = args.string('interval');
  if (value === undefined) return DEFAULT_INTERVAL;
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms < 10 || ms > 60_000) {
    throw new UsageError(`--interval must be an integer number of ms from 10 to 60000, got ${value}`);
  }
  return ms;
}
