// A lock holder on PostgreSQL in its own process, so a test can SIGSTOP or kill -9 it. Driven over
// IPC: each message names a command; each reply is an event (as test/faults/child.ts reads them).
import pg from 'pg';
import { Leasehold } from '../../dist/index.js';

const [url, prefix] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: url, max: 2 });
pool.on('error', () => {});
const locks = new Leasehold(pool, { prefix });
const tell = (event, fields = {}) => process.send({ event, ...fields });
let held;

/** Hold `lock`, and say so when it is lost. */
function hold(lock) {
  held = lock;
  lock.signal.addEventListener('abort', () =>
    tell('lost', { reason: lock.signal.reason.reason, expiresIn: lock.expiresIn() }),
  );
  tell('acquired', { owner: lock.owner, fencingToken: lock.fencingToken });
}

/** The kind of lock a command asks for: `limit` (a semaphore) or `mode` (a read-write lock), else a mutex. */
const kindOf = ({ limit, mode }) => ({
  ...(limit === undefined ? {} : { limit }),
  ...(mode === undefined ? {} : { mode }),
});

const commands = {
  acquire: async ({ name, ttl, autoExtend = true, ...kind }) =>
    hold(await locks.acquire(name, { ttl, autoExtend, ...kindOf(kind) })),
  wait: async ({ name, ttl, wait, ...kind }) => {
    tell('waiting');
    hold(await locks.acquire(name, { ttl, wait, ...kindOf(kind) }));
  },
  release: async () => tell('released', { released: await held.release() }),
  exit: async () => {
    await locks.close();
    await pool.end();
    process.exit(0);
  },
};

process.on('message', (message) => {
  commands[message.cmd](message).catch((error) => tell('error', { message: String(error) }));
});
tell('ready');
