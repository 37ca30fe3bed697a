// A partner API that allows LIMIT requests at a time for the whole account, called from every
// instance of a service. A semaphore (`limit`) shared through Redis hands out LIMIT permits: each
// call holds one for as long as its request is in flight, and the others wait in arrival order.
//
// PARTNER_URL is the partner's endpoint; without it the program starts a stand-in on a local port
// that answers 429 to any request beyond LIMIT at once. Run it with REDIS_URL several times at once
// (against one PARTNER_URL) to share the permits; without REDIS_URL it uses a MemoryStore.
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold, MemoryStore } from 'leasehold';

const LIMIT = Number(process.env.LIMIT ?? 2);
const REQUESTS = Number(process.env.REQUESTS ?? 8);
const instance = process.env.INSTANCE ?? `pid-${process.pid}`;

/** The partner, when none is given: LIMIT requests at a time, 429 beyond, each taking 100 ms. */
async function startStandIn() {
  const seen = { inFlight: 0, most: 0, refused: 0 };
  const server = createServer(async (request, response) => {
    seen.inFlight += 1;
    seen.most = Math.max(seen.most, seen.inFlight);
    if (seen.inFlight > LIMIT) seen.refused += 1;
    const status = seen.inFlight > LIMIT ? 429 : 200;
    await sleep(100);
    seen.inFlight -= 1;
    response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ path: request.url }));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, seen, close: () => server.close() };
}

const standIn = process.env.PARTNER_URL ? undefined : await startStandIn();
const partner = process.env.PARTNER_URL || standIn.url;

const client = process.env.REDIS_URL ? new Redis(process.env.REDIS_URL) : undefined;
const locks = new Leasehold(client ?? new MemoryStore(), { instance });

/** One call to the partner, under one of its LIMIT permits. */
function callPartner(path) {
  return locks.withLock('partner:acme', { limit: LIMIT, wait: 60_000, ttl: 10_000 }, async (signal) => {
    const response = await fetch(new URL(path, partner), { signal });
    if (response.status === 429) throw new Error(`${path}: the partner refused it (429)`);
    return response.json();
  });
}

const results = await Promise.all(Array.from({ length: REQUESTS }, (_, i) => callPartner(`/orders/${instance}-${i}`)));
console.log(`${instance}: ${results.length} calls answered, none refused`);
if (standIn) {
  console.log(`the partner saw at most ${standIn.seen.most} requests at once (limit ${LIMIT})`);
  standIn.close();
}
await locks.close();
await client?.quit();
