// One instance of a scheduled job on PostgreSQL, for the multi-process schedule tests.
// Config: a JSON object in argv[2]. Reports JSON lines on stdout; SIGTERM stops it cleanly.
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Leasehold } from '../../dist/index.js';

const { url, prefix, job, every, lockAtMostFor, lockAtLeastFor = 0, taskMs, instance } = JSON.parse(process.argv[2]);
const say = (e, fields) => process.stdout.write(`${JSON.stringify({ e, pid: process.pid, instance, ...fields })}\n`);
const pool = new pg.Pool({ connectionString: url, max: 3 });
pool.on('error', () => {});
const locks = new Leasehold(pool, { prefix });

locks.on('jobSkipped', ({ tick, reason }) => say('skip', { tick: tick?.getTime(), reason }));
const scheduled = locks.schedule(
  job,
  every,
  async (signal, run) => {
    const tick = run.tick?.getTime();
    say('start', { tick, fence: run.fencingToken });
    await sleep(taskMs, undefined, { signal }).then(
      () => say('end', { tick }),
      () => say('aborted', { tick, reason: signal.reason?.reason }),
    );
  },
  { lockAtMostFor, lockAtLeastFor, instance },
);

process.once('SIGTERM', async () => {
  await scheduled.stop();
  await locks.close();
  await pool.end();
  process.exit(0);
});
say('ready', {});
