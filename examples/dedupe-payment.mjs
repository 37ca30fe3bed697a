// Deduplicating a payment webhook by its business key. Payment providers deliver a webhook at least
// once: retries, timeouts and several instances behind a load balancer mean the same event can be
// handled twice at the same moment. The lock on `payment:<id>` lets one delivery charge; the others
// resolve "skipped" at once. A record written under the lock (fenced by the lock's token) turns away
// a redelivery that arrives after the charge.
//
// The program receives webhooks on an HTTP port and, to show it, delivers the same event
// DELIVERIES times at once to itself. Run it with REDIS_URL to share the locks and the records with
// other instances (run it several times at once); without it, it uses an in-process MemoryStore.
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold, MemoryStore } from 'leasehold';
import { fencedRead, fencedWrite } from 'leasehold/fencing';

const PAYMENT_ID = process.env.PAYMENT_ID ?? 'pay_123';
const DELIVERIES = Number(process.env.DELIVERIES ?? 3);
const instance = process.env.INSTANCE ?? `pid-${process.pid}`;

const client = process.env.REDIS_URL ? new Redis(process.env.REDIS_URL) : undefined;
const locks = new Leasehold(client ?? new MemoryStore(), { instance });

/** Where a handled payment is recorded: a fenced Redis key, or a Map without Redis. */
const handled = new Map();
const records = {
  async has(id) {
    return client ? (await fencedRead(client, `payments:${id}:handled`)) !== null : handled.has(id);
  },
  async add(id, token, outcome) {
    if (!client) return handled.set(id, outcome);
    // Refused if a newer holder of the lock already recorded it: this holder's lease ran out.
    const { written } = await fencedWrite(client, `payments:${id}:handled`, token, outcome);
    if (!written) throw new Error(`payment ${id}: a newer holder recorded it first`);
  },
};

/** Run `work` under the lock `key` unless another delivery holds it; "skipped" if so. */
async function executeWithLock(key, work) {
  const result = await locks.tryWithLock(key, { ttl: 30_000 }, work);
  return result.ran ? result.value : 'skipped';
}

/** The webhook's handler: charge once per payment id, whatever the number of deliveries. */
function onPaymentSucceeded(event) {
  return executeWithLock(`payment:${event.paymentId}`, async (signal, lock) => {
    if (await records.has(event.paymentId)) return 'skipped'; // delivered again after it was handled
    await sleep(300, undefined, { signal }); // the side effect: book the order, send the receipt…
    console.log(`${instance} charged ${event.paymentId} (${event.amount} ${event.currency})`);
    await records.add(event.paymentId, lock.fencingToken, 'charged');
    return 'charged';
  });
}

const server = createServer(async (request, response) => {
  let body = '';
  for await (const chunk of request) body += chunk;
  const outcome = await onPaymentSucceeded(JSON.parse(body));
  // A duplicate is acknowledged too: the provider must stop retrying it.
  response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ outcome }));
});
await new Promise((resolve) => server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', resolve));
const url = `http://127.0.0.1:${server.address().port}/webhooks/payment`;

const event = { paymentId: PAYMENT_ID, amount: 4200, currency: 'EUR' };
const deliveries = Array.from({ length: DELIVERIES }, (_, i) =>
  fetch(url, { method: 'POST', body: JSON.stringify(event) })
    .then((response) => response.json())
    .then(({ outcome }) => console.log(`${instance} delivery ${i + 1}: ${outcome}`)),
);
await Promise.all(deliveries);

server.close();
await locks.close();
await client?.quit();
