import { type LockState, portsOf, type SharedState, type Store } from '../../store/port.js';
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
    const held: { name: string; state: LockState; shared?: SharedState }[] = [];
    const sharedPort = portsOf(op.lease as Store).shared;
    for (let i = 0; i < names.length; i += BATCH) {
      const batch = names.slice(i, i + BATCH);
      const states = await Promise.all(batch.map((name) => op.bounded(op.lease.inspect(name), 'inspect')));
      // A lock found by the scan may have been released or expired since. One held by shared
      // holds (a semaphore's permits, a read-write lock's readers) has no single owner.
      await Promise.all(
        states.map(async (state, j) => {
          const name = batch[j];
          if (name === undefined) return;
          if (state.owner !== null) {
            held.push({ name, state });
            return;
          }
          const shared = sharedPort && (await op.bounded(sharedPort.inspectShared(name), 'inspect-shared'));
          if (!shared || shared.holds.length === 0) return;
          // The lock lasts as long as its longest hold; the latest grant is its newest hold's.
          const last = shared.holds.reduce((a, b) => (b.takenAt > a.takenAt ? b : a));
          const pttl = Math.max(...shared.holds.map((h) => h.pttl));
          held.push({ name, state: { ...state, pttl, fence: last.token, holder: last }, shared });
        }),
      );
    }
    held.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    if (args.flag('json')) {
      printJson(
        held.map(({ name, state, shared }) => ({
          name,
          ...(shared ? { mode: shared.mode, limit: shared.limit, holders: shared.holds.length } : {}),
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
        ...held.map(({ name, state, shared }) => [
          name,
          msLeft(state.pttl),
          String(state.fence),
          shared ? holdersOf(shared) : shortToken(state.owner ?? ''),
          state.holder?.instance ?? '-',
          state.holder ? dateTime(state.holder.takenAt) : '-',
        ]),
      ]),
    );
    process.stdout.write(`${held.length} ${held.length === 1 ? 'lock' : 'locks'} held ${where}\n`);
    return 0;
  },
};

/** The HOLDER column of a lock held by shared holds. */
function holdersOf(shared: SharedState): string {
  const n = shared.holds.length;
  if (shared.mode === 'semaphore') return `${n}/${shared.limit ?? '?'} permits`;
  return `${n} shared`;
}
