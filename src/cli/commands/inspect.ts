import { type OperatorCommand, operand } from '../command.js';
import { dateTime, msLeft, printJson, shortToken, table } from '../format.js';

/** Waiters named: a few in the text output, more in --json; the count always covers them all. */
const WAITERS_SHOWN = 5;
const WAITERS_JSON = 100;

export const inspect: OperatorCommand = {
  name: 'inspect',
  synopsis: 'inspect <name> [--json]',
  summary:
    "Show a lock's holder (its instance and when it took the lock), ms left, latest fencing token, queued waiters and reservation.",
  details: `
  --json        machine output: full owner tokens (the first 100 waiters), ttl in ms (null when free),
                takenAt as ISO 8601
The instance is the label of the Leasehold that took the lock (its \`instance\` option, default
hostname:pid); the time taken is the server's, shown in local time. On a Redis Cluster (any
node's URL) the lock is read on the master that serves its slot.
`,
  options: { json: { type: 'boolean' } },
  operands: ['name'],
  async run(op, args) {
    const name = operand(args, 0);
    const key = op.keyOf(name);
    const [state, queue] = await Promise.all([
      op.bounded(op.lease.inspect(name), 'inspect'),
      op.bounded(op.admin.queued(name, args.flag('json') ? WAITERS_JSON : WAITERS_SHOWN), 'queued'),
    ]);
    if (args.flag('json')) {
      printJson({
        name,
        key,
        held: state.owner !== null,
        owner: state.owner,
        ttl: state.owner === null || state.pttl < 0 ? null : state.pttl,
        fence: state.fence,
        instance: state.holder?.instance ?? null,
        takenAt: state.holder ? new Date(state.holder.takenAt).toISOString() : null,
        waiters: { count: queue.count, first: queue.first },
        reserved: queue.reserved && { owner: queue.reserved.owner, ttl: queue.reserved.pttl },
      });
      return 0;
    }
    const shown = queue.first.map(shortToken).join(', ');
    const waiters =
      queue.count === 0
        ? 'none queued'
        : `${queue.count} queued${queue.count > queue.first.length ? `, first ${queue.first.length}` : ''}: ${shown}`;
    process.stdout.write(
      table([
        ['lock', `${name} (${key})`],
        ['holder', state.owner === null ? 'none: the lock is free' : `${shortToken(state.owner)} (owner token)`],
        ...(state.owner === null
          ? []
          : [
              ['instance', state.holder?.instance ?? 'not recorded'],
              ['taken', state.holder ? `${dateTime(state.holder.takenAt)} (server time)` : 'not recorded'],
            ]),
        ['ttl', state.owner === null ? '-' : `${msLeft(state.pttl)} left`],
        ['fence', state.fence === 0 ? '0 (never acquired)' : `${state.fence} (latest fencing token issued)`],
        ['waiters', waiters],
        [
          'reserved',
          queue.reserved === null
            ? 'no'
            : `for waiter ${shortToken(queue.reserved.owner)}, ${msLeft(queue.reserved.pttl)} left`,
        ],
      ]),
    );
    return 0;
  },
};
