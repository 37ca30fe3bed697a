// One instance of a scheduled job on etcd, for the multi-process schedule test.
// Config: a JSON object in argv[2]. Reports JSON lines on stdout; SIGTERM stops it cleanly.
import { setTimeout as sleep } from 'node:timers/promises';
import { Etcd3 } from 'etcd3';
import { Leasehold } from '../../dist/index.js';

const { url, prefix, job, every, lockAtMostFor, lockAtLeastFor = 0, taskMs, instance } = JSON.parse(process.argv[2]);
const say = (e, fields) => process.stdout.write(`${JSON.stringify({ e, pid: process.pid, instance, ...fields })}\n`);
const etcd = new Etcd3({ hosts: url });
const locks = new Leasehold(etcd, { prefix });

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
  etcd.close();
  process.exit(0);
});
say('ready', {});
