import { lockKeys } from '../../store/keys.js';
import type { LockState } from '../../store/port.js';
import type { OperatorCommand } from '../command.js';
import { msLeft, printJson, shortToken, table } from '../format.js';

/** Keys SCAN looks at per round trip: large enough to be quick, small enough not to stall Redis. */
const SCAN_COUNT = 500;
/** Locks read at once once found. */
const BATCH = 50;

export const list: OperatorCommand = {
  name: 'list',
  synopsis: 'list [--match GLOB] [--json]',
  summary: 'List every lock held under the prefix: name, ms left, fencing token, holder.',
  details: `
  --match GLOB  only lock names matching this Redis glob (* ? [abc], default *)
  --json        machine output
Found with SCAN (never KEYS), so a busy Redis is not blocked; a lock taken or released during
the scan may or may not be listed. Standalone Redis only.
`,
  options: { match: { type: 'string' }, json: { type: 'boolean' } },
  operands: [],
  async run(op, args) {
    const match = args.string('match') ?? '*';
    const names: string[] = [];
    const pages = op.store.scanLocks(op.prefix, match, SCAN_COUNT)[Symbol.asyncIterator]();
    for (;;) {
      const next = await op.bounded(pages.next(), 'scan-locks');
      if (next.done) break;
      names.push(next.value);
    }
    names.sort();
    const held: { name: string; state: LockState }[] = [];
    for (let i = 0; i < names.length; i += BATCH) {
      const batch = names.slice(i, i + BATCH);
      const states = await Promise.all(
        batch.map((name) => op.bounded(op.store.inspect(lockKeys(op.prefix, name)), 'inspect')),
      );
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
        })),
      );
      return 0;
    }
    const where = `under prefix '${op.prefix}'${match === '*' ? '' : ` matching '${match}'`}`;
    if (held.length === 0) {
      process.stdout.write(`no locks held ${where}\n`);
      return 0;
    }
    process.stdout.write(
      table([
        ['NAME', 'TTL', 'FENCE', 'HOLDER'],
        ...held.map(({ name, state }) => [
          name,
          msLeft(state.pttl),
          String(state.fence),
          shortToken(state.owner ?? ''),
        ]),
      ]),
    );
    process.stdout.write(`${held.length} ${held.length === 1 ? 'lock' : 'locks'} held ${where}\n`);
    return 0;
  },
};
