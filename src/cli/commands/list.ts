import type { LockState } from '../../store/port.js';
import type { OperatorCommand } from '../command.js';
import { dateTime, msLeft, printJson, shortToken, table } from '../format.js';

/** Keys SCAN looks at per round trip: large enough to be quick, small enough not to stall Redis. */
const SCAN_COUNT = 500;
/** Locks read at once once found. */
const BATCH = 50;

export const list: OperatorCommand = {
  name: 'list',
  synopsis: 'list [--match GLOB] [--json]',
  summary:
    'List every lock held under the prefix: name, ms left, fencing token, holder, its instance and when it took the lock.',
  details: `
  --match GLOB  only lock names matching this Redis glob (* ? [abc], default *)
  --json        machine output (takenAt: the server's time of the grant, ISO 8601)
Found with SCAN (never KEYS), so a busy Redis is not blocked; a lock taken or released during
the scan may or may not be listed. On a Redis Cluster (any node's URL) every master is scanned.
INSTANCE is the label of the Leasehold that took the lock (default hostname:pid), TAKEN the
local time of the grant by the server's clock.
`,
  options: { match: { type: 'string' }, json: { type: 'boolean' } },
  operands: [],
  async run(op, args) {
    const match = args.string('match') ?? '*';
    const names: string[] = [];
    for await (const name of op.scanLocks(match, SCAN_COUNT)) names.push(name);
    names.sort();
    const held: { name: string; state: LockState }[] = [];
    for (let i = 0; i < names.length; i += BATCH) {
      const batch = names.slice(i, i + BATCH);
      const states = await Promise.all(batch.map((name) => op.bounded(op.lease.inspect(name), 'inspect')));
      // A lock found by the scan may have been released or expired since.
      states.forEach((state, j) => {
        const name = batch[j];
        if (name !== undefined && state.owner !== null) held.push({ name, state });
      });
    }
    if (args.flag('json')) {
      printJson(
        held.map(({ name, state }) => ({
          name,
          owner: state.owner,
          ttl: state.pttl < 0 ? null : state.pttl,
          fence: state.fence,
          instance: state.holder?.instance ?? null,
          takenAt: state.holder ? new Date(state.holder.takenAt).toISOString() : null,
        })),
      );
      return 0;
    }
    const masters = op.topology === 'cluster' ? ` on ${op.scanned} cluster masters` : '';
    const where = `under prefix '${op.prefix}'${match === '*' ? '' : ` matching '${match}'`}${masters}`;
    if (held.length === 0) {
      process.stdout.write(`no locks held ${where}\n`);
      return 0;
    }
    process.stdout.write(
      table([
        ['NAME', 'TTL', 'FENCE', 'HOLDER', 'INSTANCE', 'TAKEN'],
        ...held.map(({ name, state }) => [
          name,
          msLeft(state.pttl),
          String(state.fence),
          shortToken(state.owner ?? ''),
          state.holder?.instance ?? '-',
          state.holder ? dateTime(state.holder.takenAt) : '-',
        ]),
      ]),
    );
    process.stdout.write(`${held.length} ${held.length === 1 ? 'lock' : 'locks'} held ${where}\n`);
    return 0;
  },
};
