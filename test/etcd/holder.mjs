// A Leasehold on etcd in a process of its own, driven over IPC, so a test can SIGSTOP or kill -9 it.
import { Etcd3 } from 'etcd3';
import { Leasehold } from '../../dist/index.js';

const [hosts, prefix, sessionTtl] = process.argv.slice(2);
const client = new Etcd3({ hosts: hosts.split(',') });
const locks = new Leasehold({ etcd: client, sessionTtl: Number(sessionTtl) }, { prefix });
let lock;

function tell(event, fields = {}) {
  process.send({ event, ...fields });
}

process.on('message', async (msg) => {
  try {
    if (msg.cmd === 'acquire') {
      if (msg.wait) tell('waiting');
      // `limit` (a semaphore) and `mode` (a read-write lock) pass through when given.
      const kind = {
        ...(msg.limit === undefined ? {} : { limit: msg.limit }),
        ...(msg.mode ? { mode: msg.mode } : {}),
      };
      lock = await locks.acquire(msg.name, { ttl: msg.ttl, wait: msg.wait ?? 0, ...kind });
      lock.signal.addEventListener('abort', () =>
        tell('lost', { reason: lock.signal.reason.reason, expiresIn: lock.expiresIn() }),
      );
      tell('acquired', { owner: lock.owner, fencingToken: lock.fencingToken });
    } else if (msg.cmd === 'extend') {
      const extended = await lock.extend().then(
        () => true,
        (error) => error.reason ?? String(error),
      );
      tell('extended', { extended, aborted: lock.signal.aborted });
    } else if (msg.cmd === 'release') {
      tell('released', { released: await lock.release() });
    }
  } catch (error) {
    tell('error', { message: String(error) });
  }
});
tell('ready');
