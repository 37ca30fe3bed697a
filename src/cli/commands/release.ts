import { DEFAULTS } from '../../core/defaults.js';
import { decodeHolder } from '../../store/formats.js';
import { type OperatorCommand, operand, UsageError } from '../command.js';
import { printJson, shortToken } from '../format.js';

const WHY_FORCE =
  'release deletes the lock whoever holds it, which breaks mutual exclusion: the current holder is ' +
  'not stopped and keeps working until its next extension fails, and from then on only resources ' +
  'that check fencing tokens reject its writes. Add --force if that is what you want.';

export const release: OperatorCommand = {
  name: 'release',
  synopsis: 'release <name> --force [--json]',
  summary: 'Delete a held lock whoever owns it, and hand it to the next queued waiter.',
  details: `
  --force       required: this is an operator override. The current holder is not stopped: it
                keeps working until its next extension fails (its signal then aborts), and only
                resources that check fencing tokens reject its writes. The fencing counter is left
                alone, so the next holder's token is above the old holder's.
  --json        machine output
The lock is handed on as a normal release would: the first waiter queued gets it reserved for
${DEFAULTS.reservation} ms and is woken. Exit status 1 if the lock was not held.
`,
  options: { force: { type: 'boolean' }, json: { type: 'boolean' } },
  operands: ['name'],
  check(args) {
    if (!args.flag('force')) throw new UsageError(WHY_FORCE);
  },
  async run(op, args) {
    const name = operand(args, 0);
    const reply = await op.bounded(op.admin.forceRelease(name), 'force-release');
    if (reply.result === 'not-held') {
      if (args.flag('json')) printJson({ name, result: reply.result });
      else process.stderr.write(`leasehold: lock "${name}" is not held: nothing to release\n`);
      return 1;
    }
    const fence = reply.holder?.token ?? null;
    if (args.flag('json')) {
      const instance = reply.holder?.instance ?? null;
      printJson({ name, result: reply.result, owner: reply.owner, instance, fence, woken: reply.woken });
      return 0;
    }
    const by = reply.holder ? ` (${reply.holder.instance})` : '';
    // A lock held by shared holds has no one owner: the reply names their limit (0 for readers).
    const { shared } = decodeHolder(reply.owner);
    const whom =
      shared === null
        ? shortToken(reply.owner)
        : shared === 0
          ? 'shared holders (a read-write lock)'
          : `the holders of a semaphore of ${shared} permits`;
    const was = `was held by ${whom}${by}${fence === null ? '' : `, fencing token ${fence}`}`;
    const next =
      reply.woken === null
        ? 'no waiter queued'
        : `handed to waiter ${shortToken(reply.woken)} (reserved for ${DEFAULTS.reservation} ms)`;
    process.stdout.write(`released "${name}" (${was}); ${next}\n`);
    return 0;
  },
};
