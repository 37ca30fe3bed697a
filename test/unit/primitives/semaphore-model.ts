import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { DEFAULTS, type Leasehold, type Lock } from '../../../src/index.js';

/**
 * The semaphore checked against a model: random sequences of acquisitions (short or long leases,
 * no watchdog), releases, expiries (time passing) and kills (an instance that stops without
 * releasing: its permit stays taken until its lease runs out) by a few workers on one name. The
 * model knows each hold's lease from the client's side: a grant's lease at the server began after
 * the request was sent and before its reply came, so at any moment a hold is surely live, surely
 * over, or in between (within MARGIN). Every step must agree with it: a grant while `limit` holds
 * are surely live is an n+1st holder; a refusal while fewer than `limit` could be live is a permit
 * lost (never reclaimed); and the store never lists more than `limit` live holds.
 */

export type Command =
  | { readonly op: 'acquire'; readonly worker: number; readonly long: boolean }
  | { readonly op: 'release'; readonly worker: number }
  | { readonly op: 'kill'; readonly worker: number }
  | { readonly op: 'expire' };

export interface ModelBackend {
  /** A new Leasehold instance (its own client, on a real server). */
  make(): Promise<Leasehold>;
  /** Live holds the store lists for `name`. */
  holds(name: string): Promise<number>;
}

export const WORKERS = 4;
export const LIMIT = 2;
const SHORT = 80;
const LONG = 5_000;
/** ms of slack for the server's clock against ours, and for rounding to whole ms. */
const MARGIN = 10;

const worker = fc.integer({ min: 0, max: WORKERS - 1 });
export const commands = fc.array(
  fc.oneof(
    { weight: 4, arbitrary: fc.record({ op: fc.constant('acquire' as const), worker, long: fc.boolean() }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('release' as const), worker }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('kill' as const), worker }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('expire' as const) }) },
  ),
  { minLength: 4, maxLength: 16 },
);

/** Sequences every run tries first: each one breaks a semaphore that does not count, or does not reclaim. */
export const EXAMPLES: readonly (readonly Command[])[] = [
  [0, 1, 2].map((w) => ({ op: 'acquire', worker: w, long: true })),
  // One hold outlives the other, so the lock stays held while a permit's lease runs out.
  [
    { op: 'acquire', worker: 0, long: true },
    { op: 'acquire', worker: 1, long: false },
    { op: 'expire' },
    { op: 'acquire', worker: 2, long: true },
  ],
];

interface Held {
  readonly lock: Lock;
  readonly sentAt: number;
  readonly repliedAt: number;
  readonly ttl: number;
}

let runs = 0;

/** Run `sequence`; the first disagreement with the model, or null. */
export async function runSequence(backend: ModelBackend, sequence: readonly Command[]): Promise<string | null> {
  const name = `model:${++runs}:${process.pid}`;
  const workers = await Promise.all(Array.from({ length: WORKERS }, () => backend.make()));
  const held: (Held | undefined)[] = [];
  /** Holds of killed workers: nobody releases them; they count until their lease runs out. */
  const orphans: Held[] = [];
  try {
    for (const [step, command] of sequence.entries()) {
      const at = `step ${step} (${JSON.stringify(command)})`;
      if (command.op === 'expire') {
        await sleep(SHORT + 2 * MARGIN);
      } else if (command.op === 'release') {
        await held[command.worker]?.lock.release();
        held[command.worker] = undefined;
      } else if (command.op === 'kill') {
        const hold = held[command.worker];
        if (hold) orphans.push(hold);
        held[command.worker] = undefined;
        await workers[command.worker]?.close();
        workers[command.worker] = await backend.make();
      } else if (held[command.worker] === undefined) {
        const ttl = command.long ? LONG : SHORT;
        const sentAt = performance.now();
        const lock = await workers[command.worker]?.tryAcquire(name, { limit: LIMIT, ttl, autoExtend: false });
        const repliedAt = performance.now();
        const others = [...held, ...orphans].filter((h): h is Held => h !== undefined);
        const surely = others.filter((h) => repliedAt < h.sentAt + h.ttl - MARGIN).length;
        const maybe = others.filter((h) => sentAt < h.repliedAt + h.ttl + MARGIN).length;
        if (lock && surely >= LIMIT) return `${at}: granted while ${surely} holds were surely live`;
        // A grant whose reply came after its validity (a busy machine) is given back: a refusal then is right.
        const inTime = repliedAt - sentAt < ttl * (1 - DEFAULTS.driftFactor) - DEFAULTS.driftConstant;
        if (!lock && maybe < LIMIT && inTime) return `${at}: refused while at most ${maybe} holds could be live`;
        if (lock) held[command.worker] = { lock, sentAt, repliedAt, ttl };
      }
      const listed = await backend.holds(name);
      if (listed > LIMIT) return `${at}: the store lists ${listed} live holds`;
    }
    return null;
  } finally {
    await Promise.all(held.map((h) => h?.lock.release().catch(() => undefined)));
    await Promise.all(workers.map((w) => w?.close()));
  }
}

/** The property, for fc.assert (the semaphore) and fc.check (its negative controls). */
export function semaphoreProperty(backend: ModelBackend): fc.IAsyncPropertyWithHooks<[Command[]]> {
  return fc.asyncProperty(commands, async (sequence) => {
    const violation = await runSequence(backend, sequence);
    if (violation !== null) throw new Error(violation);
  });
}
