// A lock holder in its own process that writes to a protected resource, driven over IPC, so a
// test can SIGSTOP it past its lease and let it write with its (by then stale) token on waking.
// argv: <redis url> <prefix> <ioredis | node-redis> [postgres url]
import { Redis } from 'ioredis';
import pg from 'pg';
import { createClient } from 'redis';
import { fencedUpdatePg, fencedWrite } from '../../../dist/fencing.js';
import { Leasehold } from '../../../dist/index.js';

const [url, prefix, kind, pgUrl] = process.argv.slice(2);

let client;
if (kind === 'node-redis') {
  client = createClient({ url });
  client.on('error', () => {});
  await client.connect();
} else {
  client = new Redis(url, { maxRetriesPerRequest: 1 });
}
let db;
if (pgUrl) {
  db = new pg.Client({ connectionString: pgUrl });
  db.on('error', () => {});
  await db.connect();
}
const locks = new Leasehold(client, { prefix });
let lock;

async function write(msg) {
  const token = lock.fencingToken;
  if (msg.target === 'redis') {
    if (msg.fenced) return fencedWrite(client, msg.key, token, msg.value);
    // The unfenced write: a plain HSET, whatever token the hash holds.
    if (kind === 'node-redis') await client.hSet(msg.key, { value: msg.value, fence: String(token) });
    else await client.hset(msg.key, 'value', msg.value, 'fence', String(token));
    return { written: true };
  }
  if (msg.fenced) return fencedUpdatePg(db, { table: msg.table, set: { note: msg.value }, id: msg.id, token });
  const result = await db.query(`UPDATE ${msg.table} SET note = $1, fence = $2 WHERE id = $3`, [
    msg.value,
    String(token),
    msg.id,
  ]);
  return { written: result.rowCount === 1 };
}

process.on('message', async (msg) => {
  try {
    if (msg.cmd === 'acquire') {
      lock = await locks.acquire(msg.name, { ttl: msg.ttl });
      lock.signal.addEventListener('abort', () => process.send({ event: 'lost', reason: lock.signal.reason.reason }));
      process.send({ event: 'acquired', fencingToken: lock.fencingToken });
    } else if (msg.cmd === 'write') {
      // A holder that has decided to write sends it, whatever happened while it was paused.
      const aborted = lock.signal.aborted;
      process.send({ event: 'wrote', result: await write(msg), abortedBefore: aborted });
    } else if (msg.cmd === 'exit') {
      await locks.close();
      await db?.end();
      if (kind === 'node-redis') client.destroy();
      else client.disconnect();
      process.exit(0);
    }
  } catch (error) {
    process.send({ event: 'error', message: String(error?.stack ?? error) });
  }
});
process.send({ event: 'ready' });
