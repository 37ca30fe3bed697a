// A lock holder in its own process, driven over IPC, so a test can SIGSTOP or kill -9 it.
import { Redis } from 'ioredis';
import { Leasehold } from '../../dist/index.js';

const [url, prefix] = process.argv.slice(2);
const client = new Redis(url, { maxRetriesPerRequest: 1 });
const locks = new Leasehold(client, { prefix });
let lock;

process.on('message', async (msg) => {
  try {
    if (msg.cmd === 'acquire') {
      lock = await locks.acquire(msg.name, { ttl: msg.ttl, autoExtend: msg.autoExtend ?? true });
      lock.signal.addEventListener('abort', () =>
        process.send({ event: 'lost', reason: lock.signal.reason.reason, expiresIn: lock.expiresIn() }),
      );
      process.send({ event: 'acquired', owner: lock.owner, fencingToken: lock.fencingToken });
    } else if (msg.cmd === 'wait') {
      process.send({ event: 'waiting' });
      lock = await locks.acquire(msg.name, { ttl: msg.ttl, wait: msg.wait });
      process.send({ event: 'acquired', owner: lock.owner, fencingToken: lock.fencingToken });
    } else if (msg.cmd === 'lead') {
      const leadership = locks.lead(
        msg.name,
        (signal) =>
          new Promise((resolve) =>
            signal.aborted ? resolve() : signal.addEventListener('abort', resolve, { once: true }),
          ),
        { ttl: msg.ttl },
      );
      leadership.on('elected', (e) => process.send({ event: 'elected', fencingToken: e.fencingToken }));
      leadership.on('deposed', (e) =>
        process.send({ event: 'deposed', reason: e.reason, fencingToken: e.fencingToken }),
      );
    } else if (msg.cmd === 'acquireAll') {
      let rounds = 0;
      for (let i = 0; i < msg.rounds; i++) {
        await locks.withLocks(msg.names, { wait: msg.wait, ttl: msg.ttl }, async (_signal, all) => {
          if (all.locks.some((l) => l.expiresIn() <= 0)) throw new Error('a partial set');
          rounds += 1;
        });
      }
      process.send({ event: 'done', rounds });
    } else if (msg.cmd === 'release') {
      process.send({ event: 'released', released: await lock.release() });
    } else if (msg.cmd === 'exit') {
      await locks.close();
      await client.quit();
      process.exit(0);
    }
  } catch (error) {
    process.send({ event: 'error', message: String(error) });
  }
});
process.send({ event: 'ready' });
