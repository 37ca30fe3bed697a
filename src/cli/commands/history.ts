import { type RunRecord, runRecords } from '../../schedule/history.js';
import { type OperatorCommand, operand, UsageError } from '../command.js';
import { dateTime, printJson, table } from '../format.js';

const DEFAULT_LIMIT = 20;
/** The most the store keeps per job is set by each job's historyLimit; this only bounds a query. */
const MAX_LIMIT = 10_000;

function limitOption(value: string | undefined): number {
  if (value === undefined) return DEFAULT_LIMIT;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > MAX_LIMIT) {
    throw new UsageError(`--limit must be an integer from 1 to ${MAX_LIMIT}, got ${value}`);
  }
  return n;
}

function outcome(run: RunRecord): string {
  return run.error === null ? run.outcome : `${run.outcome}: ${run.error}`;
}

export const history: OperatorCommand = {
  name: 'history',
  synopsis: 'history <job> [--limit N] [--json]',
  summary: "Show a scheduled job's runs, newest first: tick, instance, start, duration, outcome.",
  details: `
  --limit N     how many runs, newest first (default ${DEFAULT_LIMIT})
  --json        machine output
Times are the Redis server's clock, shown in local time. A tick of - is a run without tick
identity (runOnce without a tick). A run still marked running whose lease is gone is abandoned.
`,
  options: { limit: { type: 'string' }, json: { type: 'boolean' } },
  operands: ['job'],
  check(args) {
    limitOption(args.string('limit'));
  },
  async run(op, args) {
    const job = operand(args, 0);
    const state = await op.bounded(op.jobs.readJob(job, limitOption(args.string('limit'))), 'read-job');
    const runs = runRecords(job, state);
    if (args.flag('json')) {
      printJson(runs);
      return 0;
    }
    if (runs.length === 0) {
      process.stdout.write(`no runs recorded for job "${job}" under prefix '${op.prefix}'\n`);
      return 0;
    }
    process.stdout.write(
      table([
        ['TICK', 'INSTANCE', 'FENCE', 'STARTED', 'DURATION', 'OUTCOME'],
        ...runs.map((run) => [
          run.tick === null ? '-' : dateTime(run.tick.getTime()),
          run.instance,
          String(run.fencingToken),
          dateTime(run.startedAt.getTime()),
          run.duration === null ? '-' : `${run.duration} ms`,
          outcome(run),
        ]),
      ]),
    );
    return 0;
  },
};
