import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { DEFAULTS } from '../../core/defaults.js';
import { fencedRead } from '../../fencing/index.js';
import { lockKeys } from '../../store/index.js';
import { parseInfo } from '../doctor/probe.js';
import { addressOf, connectServer, type ServerAddress } from '../redis.js';
import { injectFaults } from './faults.js';
import type { Fault, FaultKind, History, HistoryEvent, LockKind, RecordValue, WorkerPlan } from './history.js';
import { type LocalServer, startLocalServer } from './local-server.js';
import { type Link, openLink } from './proxy.js';
import { WorkerSlot } from './workers.js';

export interface VerifyOptions {
  /** The server under test; ignored with `local`. */
  readonly url: string;
  /** Start a redis-server of our own (and allow the server faults). */
  readonly local: boolean;
  readonly workers: number;
  readonly durationMs: number;
  readonly faults: readonly FaultKind[];
  readonly lock: LockKind;
  readonly ttl: number;
  readonly prefix: string;
  /** Progress for a person, one line at a time (stderr). */
  readonly say: (line: string) => void;
}

export interface RunOutcome {
  readonly history: History;
  /** `Redis 7.0.15 at 127.0.0.1:6379` and whether verify started it. */
  readonly server: { readonly name: string; readonly address: string; readonly local: boolean };
  /** Workers that exited on their own (not killed by a fault): a problem of the run, not of the lock. */
  readonly crashes: readonly string[];
}

/** Work between reading and writing the record, ms: short beside the default ttl of a run. */
const WORK: readonly [number, number] = [10, 80];
/** One cycle in this many works past its lease (leasehold's watchdog must extend it). */
const LONG_WORK_EVERY = 25;
const READY_WITHIN = 30_000;
/** How long a worker told to stop may take to finish its cycle. */
const STOP_GRACE = 5_000;
/** The run's keys outlive it by this much if verify itself dies before cleaning up. */
const KEY_MARGIN = 10 * 60_000;

/** Refuse what the harness cannot run against: a Cluster (its redirects bypass the links) and a replica. */
async function checkServer(client: Redis, where: string): Promise<string> {
  const info = parseInfo(await client.info());
  if (info.get('cluster_enabled') === '1') {
    throw new Error(
      `${where} is a Redis Cluster node: verify runs against one server (its links cannot follow cluster redirects); run it against a standalone server or with --local`,
    );
  }
  if (info.get('role') === 'slave') throw new Error(`${where} is a replica: point verify at the master`);
  return `Redis ${info.get('redis_version') ?? '?'}`;
}

async function readFinal(client: Redis, lock: LockKind, key: string): Promise<RecordValue | null> {
  const raw = lock === 'leasehold' ? ((await fencedRead(client, key))?.value ?? null) : await client.get(key);
  if (raw === null) return null;
  const value = JSON.parse(raw) as RecordValue;
  return typeof value.n === 'number' ? value : null;
}

/** What one run works on: the lock's name and the keys of the record, and how long they outlive it. */
interface RunTarget {
  readonly lockName: string;
  readonly keys: WorkerPlan['keys'];
  /** The keys' TTL, ms. */
  readonly keep: number;
}

/** One run: start the workers and their links, fault them for the duration, stop, read the record, clean up. */
export async function runVerify(options: VerifyOptions): Promise<RunOutcome> {
  const server: LocalServer | null = options.local ? await startLocalServer() : null;
  const run = new VerifyRun(options, server);
  try {
    return await run.run();
  } finally {
    await run.close();
  }
}

/** The state of one run: its server, the workers and their links, and what they logged. */
class VerifyRun {
  readonly #options: VerifyOptions;
  readonly #server: LocalServer | null;
  readonly #address: ServerAddress;
  /** `host:port`, for people. */
  readonly #where: string;
  readonly #links: Link[] = [];
  readonly #slots: WorkerSlot[] = [];
  #parent: Redis | undefined;
  readonly #events: HistoryEvent[] = [];
  readonly #faults: Fault[] = [];
  readonly #crashes: string[] = [];
  /** Who waits for the next event (the fault injector). */
  #waiters: (() => void)[] = [];

  constructor(options: VerifyOptions, server: LocalServer | null) {
    this.#options = options;
    this.#server = server;
    this.#address = addressOf(server?.url ?? options.url);
    this.#where = `${this.#address.host}:${this.#address.port}`;
  }

  async run(): Promise<RunOutcome> {
    const options = this.#options;
    const parent = await connectServer(this.#address, { what: 'verify' });
    this.#parent = parent;
    const name = await checkServer(parent, this.#where);
    const target = await this.#seed(parent);
    await this.#openWorkers(target);
    await this.#startWorkers();
    const { start, stopped } = await this.#runWithFaults();
    await this.#stopWorkers();
    const final = await readFinal(parent, options.lock, target.keys.record).catch(() => null);
    await this.#cleanUp(parent, target);
    return {
      history: {
        lock: options.lock,
        workers: options.workers,
        ttl: options.ttl,
        start,
        end: stopped,
        events: this.#events,
        faults: this.#faults,
        final,
      },
      server: { name, address: this.#where, local: this.#server !== null },
      crashes: this.#crashes,
    };
  }

  async close(): Promise<void> {
    await Promise.all(this.#slots.map((s) => s.stop(0)));
    await Promise.all(this.#links.map((l) => l.close()));
    this.#parent?.disconnect();
    await this.#server?.stop();
  }

  /** Name the run's lock and keys, and write the record's version 0. */
  async #seed(parent: Redis): Promise<RunTarget> {
    const options = this.#options;
    const run = randomBytes(4).toString('hex');
    const lockName = `verify:${run}`;
    const base = `${options.prefix}:verify:${run}`;
    const keys = { record: `${base}:record`, naiveLock: `${base}:naive-lock`, naiveGrants: `${base}:naive-grants` };
    const keep = options.durationMs + KEY_MARGIN;
    const initial = JSON.stringify({ n: 0, token: 0, worker: 0 });
    // The record starts at version 0 with a TTL, so a run that dies leaves nothing for ever.
    if (options.lock === 'leasehold')
      await parent.multi().hset(keys.record, 'value', initial).pexpire(keys.record, keep).exec();
    else await parent.set(keys.record, initial, 'PX', keep);
    await parent.set(keys.naiveGrants, '0', 'PX', keep);
    return { lockName, keys, keep };
  }

  #onEvent = (event: HistoryEvent): void => {
    this.#events.push(event);
    const woken = this.#waiters;
    this.#waiters = [];
    for (const wake of woken) wake();
  };

  /** Resolves at the next event logged. */
  #changed = (): Promise<void> => new Promise<void>((resolve) => this.#waiters.push(resolve));

  /** A link (a proxy the faults can cut) and a worker slot behind it, for every worker. */
  async #openWorkers(target: RunTarget): Promise<void> {
    const options = this.#options;
    const { host, port } = this.#address;
    for (let worker = 1; worker <= options.workers; worker++) {
      const link = await openLink({ host, port });
      this.#links.push(link);
      const plan: WorkerPlan = {
        worker,
        lock: options.lock,
        redis: { ...this.#address, host: '127.0.0.1', port: link.port },
        prefix: options.prefix,
        name: target.lockName,
        keys: target.keys,
        ttl: options.ttl,
        work: WORK,
        longWorkEvery: LONG_WORK_EVERY,
        commandTimeout: DEFAULTS.commandTimeout,
        fenceRetention: target.keep,
      };
      this.#slots.push(new WorkerSlot(plan, link, this.#onEvent, (_slot, why) => this.#crashes.push(why)));
    }
  }

  /** Start every worker; fails on the first that crashes, or if they are not all ready in time. */
  async #startWorkers(): Promise<void> {
    const { workers, lock, ttl } = this.#options;
    this.#options.say(`starting ${workers} workers (${lock} lock, ttl ${ttl} ms) against ${this.#where}`);
    const crashes = this.#crashes;
    const ready = Promise.all(this.#slots.map((s) => s.start()));
    const failedStart = (async () => {
      const until = Date.now() + READY_WITHIN;
      while (crashes.length === 0 && Date.now() < until) await sleep(50);
      throw new Error(crashes[0] ?? `the workers were not ready within ${READY_WITHIN} ms`);
    })();
    failedStart.catch(() => undefined);
    await Promise.race([ready, failedStart]);
    if (crashes.length > 0) throw new Error(crashes[0]);
  }

  /** Let the workers go, inject faults until the end (or Ctrl-C), and stop injecting. */
  async #runWithFaults(): Promise<{ start: number; stopped: number }> {
    const options = this.#options;
    const start = Date.now();
    const end = start + options.durationMs;
    for (const s of this.#slots) s.go();
    const kinds = options.faults.length === 0 ? 'no faults' : `faults ${options.faults.join(', ')}`;
    options.say(`running for ${(options.durationMs / 1_000).toFixed(1)} s with ${kinds}`);
    const stopFaults = new AbortController();
    const injecting = injectFaults({
      kinds: options.faults,
      slots: this.#slots,
      server: this.#server,
      ttl: options.ttl,
      end,
      changed: this.#changed,
      record: (fault) => this.#recordFault(fault),
      signal: stopFaults.signal,
    });
    await this.#sleepUntil(end);
    stopFaults.abort();
    await injecting;
    return { start, stopped: Date.now() };
  }

  #recordFault(fault: Fault): void {
    this.#faults.push(fault);
    const on =
      fault.worker === null ? 'the server' : `worker ${fault.worker}${fault.holder ? ' (holding the lock)' : ''}`;
    this.#options.say(
      `fault: ${fault.kind}${fault.action === fault.kind ? '' : ` (${fault.action})`} on ${on}, ${fault.until - fault.at} ms`,
    );
  }

  /** Ctrl-C ends the run early, and it is still checked and reported; a second one is the default. */
  async #sleepUntil(end: number): Promise<void> {
    const interrupted = new AbortController();
    const interrupt = () => {
      this.#options.say('interrupted: stopping the workers and checking what ran');
      interrupted.abort();
    };
    process.once('SIGINT', interrupt);
    process.once('SIGTERM', interrupt);
    await sleep(Math.max(0, end - Date.now()), undefined, { signal: interrupted.signal }).catch(() => undefined);
    process.off('SIGINT', interrupt);
    process.off('SIGTERM', interrupt);
  }

  /** Heal every link and the server, then let each worker finish its cycle. */
  async #stopWorkers(): Promise<void> {
    for (const link of this.#links) {
      link.partition(false);
      link.delay(0);
    }
    this.#server?.thaw();
    await Promise.all(this.#slots.map((s) => s.stop(STOP_GRACE)));
  }

  /** Leave nothing behind: the record, the naive lock's keys, and every key of leasehold's lock. */
  async #cleanUp(parent: Redis, target: RunTarget): Promise<void> {
    const { keys } = target;
    const lk = lockKeys(this.#options.prefix, target.lockName);
    await parent
      .del(keys.record, keys.naiveLock, keys.naiveGrants)
      .then(() => parent.del(lk.lock, lk.waiters, lk.alive, lk.holds, lk.grants))
      .catch(() => undefined);
  }
}
