import { type LockState, portsOf, type SharedState, type Store } from '../../store/port.js';
import { type OperatorCommand, operand } from '../command.js';
import { dateTime, msLeft, printJson, shortToken, table } from '../format.js';

/** Waiters named: a few in the text output, more in --json; the count always covers them all. */
const WAITERS_SHOWN = 5;
const WAITERS_JSON = 100;

export const inspect: OperatorCommand = {
  name: 'inspect',
  synopsis: 'inspect <name> [--json]',
  summary:
    "Show a lock's mode and holder or holders (each one's instance and when it took the lock), ms left, latest fencing token, queued waiters and reservation.",
  details: `
  --json        machine output: full owner tokens (the first 100 waiters), ttl in ms (null when free),
                takenAt as ISO 8601
The instance is the label of the Leasehold that took the lock (its \`instance\` option, default
hostname:pid); the time taken is the server's, shown in local time. A semaphore (limit: n) or a
read-write lock's shared holders show their mode, the permits held and one line per holder. On a
Redis Cluster (any node's URL) the lock is read on the master that serves its slot.
`,
  options: { json: { type: 'boolean' } },
  operands: ['name'],
  async run(op, args) {
    const name = operand(args, 0);
    const key = op.keyOf(name);
    const shared = portsOf(op.lease as Store).shared;
    const [state, queue, holds] = await Promise.all([
      op.bounded(op.lease.inspect(name), 'inspect'),
      op.bounded(op.admin.queued(name, args.flag('json') ? WAITERS_JSON : WAITERS_SHOWN), 'queued'),
      shared ? op.bounded(shared.inspectShared(name), 'inspect-shared') : undefined,
    ]);
    const several = holds !== undefined && (holds.mode === 'semaphore' || holds.mode === 'shared');
    if (args.flag('json')) {
      printJson({
        name,
        key,
        held: state.owner !== null || several,
        mode: holds?.mode ?? (state.owner === null ? 'free' : 'exclusive'),
        ...(holds?.limit ? { limit: holds.limit } : {}),
        ...(several
          ? {
              holders: holds.holds.map((h) => ({
                owner: h.owner,
                fence: h.token,
                instance: h.instance,
                takenAt: new Date(h.takenAt).toISOString(),
                ttl: h.pttl,
              })),
            }
          : {}),
        owner: state.owner,
        ttl: state.owner === null || state.pttl < 0 ? null : state.pttl,
        fence: state.fence,
        instance: state.holder?.instance ?? null,
        takenAt: state.holder ? new Date(state.holder.takenAt).toISOString() : null,
        waiters: { count: queue.count, first: queue.first },
        reserved: queue.reserved && { owner: queue.reserved.owner, ttl: queue.reserved.pttl },
        ...(holds && holds.reserved.length > 0 ? { reservedFor: holds.reserved } : {}),
      });
      return 0;
    }
    const shown = queue.first.map(shortToken).join(', ');
    const waiters =
      queue.count === 0
        ? 'none queued'
        : `${queue.count} queued${queue.count > queue.first.length ? `, first ${queue.first.length}` : ''}: ${shown}`;
    const reserved =
      queue.reserved === null
        ? 'no'
        : `for waiter ${shortToken(queue.reserved.owner)}, ${msLeft(queue.reserved.pttl)} left`;
    process.stdout.write(
      table([
        ['lock', `${name} (${key})`],
        ...(several ? sharedRows(holds) : exclusiveRows(state, holds !== undefined)),
        ['fence', state.fence === 0 ? '0 (never acquired)' : `${state.fence} (latest fencing token issued)`],
        ['waiters', waiters],
        [
          'reserved',
          several && holds.reserved.length > 0 ? `for waiters ${holds.reserved.map(shortToken).join(', ')}` : reserved,
        ],
      ]),
    );
    return 0;
  },
};

/** The rows of a lock held by one owner, or free: `mode` where the store has shared holds too. */
function exclusiveRows(state: LockState, withMode: boolean): string[][] {
  const held = state.owner !== null;
  return [
    ...(withMode ? [['mode', held ? 'exclusive (one holder)' : 'free']] : []),
    ['holder', state.owner === null ? 'none: the lock is free' : `${shortToken(state.owner)} (owner token)`],
    ...(held
      ? [
          ['instance', state.holder?.instance ?? 'not recorded'],
          ['taken', state.holder ? `${dateTime(state.holder.takenAt)} (server time)` : 'not recorded'],
        ]
      : []),
    ['ttl', held ? `${msLeft(state.pttl)} left` : '-'],
  ];
}

/** The rows of a lock held by shared holds: its mode and permits, and one line per holder. */
function sharedRows(holds: SharedState): string[][] {
  const count = holds.holds.length;
  const mode =
    holds.mode === 'semaphore'
      ? `semaphore: ${count} of ${holds.limit} permits held`
      : `shared: ${count} holder${count === 1 ? '' : 's'} (read-write lock)`;
  return [
    ['mode', mode],
    ...holds.holds.map((h) => [
      'holder',
      `${shortToken(h.owner)} (owner token), ${h.instance}, token ${h.token}, taken ${dateTime(h.takenAt)}, ${msLeft(h.pttl)} left`,
    ]),
  ];
}
