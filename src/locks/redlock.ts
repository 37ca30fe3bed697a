/**
 * Redlock: one lock across N independent Redis masters. The lock is ours while a quorum (default a
 * majority) of the nodes hold it for our owner token and the validity measured on our monotonic
 * clock has not run out.
 *
 * Acquire sends to every node at once, each call bounded by a per-node timeout much smaller than
 * the ttl, and decides as soon as the outcome is certain. Validity = ttl − elapsed − (ttl ×
 * driftFactor + driftConstant), counted from before the first call was sent: each node's lease
 * started after that moment, so the validity ends before any node's lease does (while the nodes'
 * clocks run within driftFactor of ours). A failed attempt gives back whatever it took at once,
 * including grants that land after it gave up, so later attempts never vote against themselves.
 *
 * Fencing tokens across quorums. Each node has its own counter and successive holders may win on
 * different subsets, so one node's counter says little. An acquisition A takes M = the largest token
 * its granting nodes issued, writes M back to them (raiseFence) and counts only once a quorum W of
 * them confirmed the write-back within A's validity. Claim: every acquisition B whose validity
 * begins after A's has a token above M. B was granted by a quorum G; W and G are majorities, so they
 * share a node n. A's write-back ran on n while A's lease on n was live (it was confirmed within A's
 * validity, which ends before that lease), and B's acquire on n succeeded only once that lease was
 * gone; so n's counter was at least M when B's acquire incremented it, n issued B more than M, and
 * B's token, the maximum over G, is above M. (Had B taken n first, B's validity would have ended
 * before A's began.) This assumes a node never loses its counter: persistence (AOF), and a node that
 * restarts empty breaks this as surely as it breaks exclusion. It does not assume synchronised clocks.
 */
import { backoff } from '../core/backoff.js';
import { now } from '../core/clock.js';
import { DEFAULTS } from '../core/defaults.js';
import type { Attempt, ExtendOutcome, LockEngine } from '../core/engine.js';
import { type NodeOutcome, QuorumError, RedisUnavailableError } from '../core/errors.js';
import {
  addVote,
  emptyTally,
  lossKind,
  pending,
  releaseVerdict,
  retryHint,
  type Tally,
  type Vote,
  validity,
  verdict,
} from '../core/quorum.js';
import { withTimeout } from '../core/timeout.js';
import { type LockKeys, lockKeys } from '../store/keys.js';
import type { AcquireReply, ExtendReply, ReleaseReply, Store } from '../store/port.js';

export interface RedlockEngineOptions {
  readonly prefix: string;
  /** Upper bound of the default per-node timeout. */
  readonly commandTimeout: number;
  readonly driftFactor: number;
  readonly driftConstant: number;
  readonly quorum: number;
  /** ms one node has to answer one call. Default min(DEFAULTS.nodeTimeout, ttl × DEFAULTS.nodeTimeoutFraction, commandTimeout). */
  readonly nodeTimeout?: number | undefined;
  /** Backoff base after a split vote, in ms. Default DEFAULTS.retryBase. */
  readonly retryBase?: number | undefined;
  /** Backoff ceiling after a split vote, in ms. Default DEFAULTS.retryCap. */
  readonly retryCap?: number | undefined;
  /** Node failures that no thrown QuorumError carries (late answers, a minority down) are reported here. */
  readonly onBackendError?: ((error: unknown) => void) | undefined;
}

type Outcome = NodeOutcome['outcome'];

type Slot<T> =
  | { readonly state: 'pending' }
  | { readonly state: 'answered'; readonly value: T }
  | { readonly state: 'failed'; readonly error: unknown; readonly timedOut: boolean };

/**
 * One call sent to several nodes at once, each bounded by the per-node timeout. `until` resolves as
 * soon as a condition on the tally holds (or every node is in), so a decision never waits on nodes
 * it does not need. The raw calls keep running: a late answer can still be acted on.
 */
class Round<T> {
  readonly nodes: readonly number[];
  readonly calls: readonly Promise<T>[];
  readonly slots: Slot<T>[];
  /** Per node: resolves once that node answered, failed or timed out. */
  readonly settled: readonly Promise<void>[];
  #tally: Tally;
  #waiters: { readonly test: (tally: Tally) => boolean; readonly resolve: () => void }[] = [];
  #onLateFailure: ((error: unknown) => void) | undefined;

  constructor(
    nodes: readonly number[],
    quorum: number,
    call: (node: number) => Promise<T>,
    vote: (value: T) => Vote,
    timeout: number,
    describe: (node: number) => string,
  ) {
    this.nodes = nodes;
    this.#tally = emptyTally(nodes.length, quorum);
    this.slots = nodes.map(() => ({ state: 'pending' }));
    const settled: Promise<void>[] = [];
    this.settled = settled;
    this.calls = nodes.map((node, i) => {
      let raw: Promise<T>;
      try {
        raw = call(node);
      } catch (error) {
        raw = Promise.reject(error);
      }
      let timeoutError: Error | undefined;
      const bounded = withTimeout(raw, timeout, () => {
        timeoutError = new RedisUnavailableError(`${describe(node)} got no answer within ${timeout} ms (nodeTimeout)`);
        return timeoutError;
      });
      settled.push(
        bounded.then(
          (value) => this.#settle(i, { state: 'answered', value }, vote(value)),
          (error: unknown) => this.#settle(i, { state: 'failed', error, timedOut: error === timeoutError }, 'error'),
        ),
      );
      return raw;
    });
  }

  get tally(): Tally {
    return this.#tally;
  }

  /** Resolves once `test` holds for the tally, or every node has answered, failed or timed out. */
  until(test: (tally: Tally) => boolean): Promise<void> {
    if (test(this.#tally) || pending(this.#tally) === 0) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ test, resolve }));
  }

  /**
   * From now on, hand every node failure to `onFailure`: the ones already in when `existing` is set
   * (they are reported nowhere else), and every later one (they come after the decision).
   */
  reportFailures(onFailure: (error: unknown) => void, existing: boolean): void {
    if (existing) {
      for (const slot of this.slots) if (slot.state === 'failed') onFailure(slot.error);
    }
    this.#onLateFailure = onFailure;
  }

  #settle(i: number, slot: Slot<T>, vote: Vote): void {
    this.slots[i] = slot;
    this.#tally = addVote(this.#tally, vote);
    if (slot.state === 'failed') this.#onLateFailure?.(slot.error);
    const done = pending(this.#tally) === 0;
    this.#waiters = this.#waiters.filter((w) => {
      if (!done && !w.test(this.#tally)) return true;
      w.resolve();
      return false;
    });
  }

  /** Each node's outcome, with `answer` naming what an answer means. */
  outcomes(answer: (value: T) => Outcome): NodeOutcome[] {
    return this.nodes.map((node, i): NodeOutcome => {
      const slot = this.slots[i] ?? { state: 'pending' };
      if (slot.state === 'answered') return { node, outcome: answer(slot.value) };
      if (slot.state === 'failed') return { node, outcome: slot.timedOut ? 'no-answer' : 'error', cause: slot.error };
      return { node, outcome: 'no-answer' };
    });
  }
}

const granted = (reply: AcquireReply): boolean => reply.acquired;
const acquireOutcome = (reply: AcquireReply): Outcome => (reply.acquired ? 'acquired' : 'held');
const extendOutcome = (reply: ExtendReply): Outcome => (reply === 'extended' ? 'extended' : reply);
const releaseOutcome = (reply: ReleaseReply): Outcome => reply;

/** The fenced Redlock over independent stores; see the top of this file and docs/redlock.md. */
export class RedlockEngine implements LockEngine {
  readonly announcesRelease = true;
  readonly #nodes: readonly { store: Store; owned: boolean }[];
  readonly #all: readonly number[];
  readonly #options: RedlockEngineOptions;
  readonly #quorum: number;
  readonly #onError: (error: unknown) => void;
  /** The highest token seen per lock name: passed as minFence so nodes that fell behind catch up. */
  readonly #fences = new Map<string, number>();

  constructor(stores: readonly { store: Store; owned: boolean }[], options: RedlockEngineOptions) {
    this.#nodes = stores;
    this.#all = stores.map((_, i) => i);
    this.#options = options;
    this.#quorum = options.quorum;
    this.#onError = options.onBackendError ?? (() => {});
  }

  keys(name: string): LockKeys {
    return lockKeys(this.#options.prefix, name);
  }

  /** The per-node timeout for calls on a lease of `ttl` ms (release and subscribe know no ttl). */
  nodeTimeout(ttl?: number): number {
    if (this.#options.nodeTimeout !== undefined) return this.#options.nodeTimeout;
    const bound = Math.min(DEFAULTS.nodeTimeout, this.#options.commandTimeout);
    if (ttl === undefined) return bound;
    return Math.max(1, Math.min(bound, Math.floor(ttl * DEFAULTS.nodeTimeoutFraction)));
  }

  /**
   * When a lease a quorum granted, asked for at `sentAt`, stops being ours on this client's clock.
   * A separate method so a test can build the broken variant that trusts a slow quorum.
   */
  protected validUntil(sentAt: number, ttl: number): number {
    const { driftFactor, driftConstant } = this.#options;
    const at = now();
    return at + validity(sentAt, at, ttl, driftFactor, driftConstant);
  }

  #round<T>(
    nodes: readonly number[],
    action: string,
    timeout: number,
    call: (store: Store) => Promise<T>,
    vote: (value: T) => Vote,
  ): Round<T> {
    const store = (node: number): Store => {
      const entry = this.#nodes[node];
      if (!entry) throw new RangeError(`no Redlock node #${node}`);
      return entry.store;
    };
    return new Round(
      nodes,
      this.#quorum,
      (node) => call(store(node)),
      vote,
      timeout,
      (node) => `node #${node} (${store(node).kind}): ${action}`,
    );
  }

  async attempt(name: string, owner: string, ttl: number, tries = 0): Promise<Attempt> {
    const keys = this.keys(name);
    const timeout = this.nodeTimeout(ttl);
    const seen = this.#fences.get(name);
    const minFence = seen === undefined ? 0 : seen + 1;
    const sentAt = now();
    const acquire = this.#round(
      this.#all,
      'acquire',
      timeout,
      (store) => store.acquire(keys, owner, ttl, minFence),
      (reply) => (reply.acquired ? 'yes' : 'no'),
    );
    await acquire.until((t) => verdict(t) !== 'open');
    const grants = this.#grants(acquire);
    for (const grant of grants) this.#noteFence(name, grant.fence);

    if (verdict(acquire.tally) === 'lost') {
      // Every node has answered or timed out once this resolves, so the loss is classified for sure.
      await this.#giveBack(keys, owner, acquire, granted);
      if (lossKind(acquire.tally) === 'unavailable') {
        acquire.reportFailures(this.#onError, false);
        throw new QuorumError(name, 'acquire', this.#quorum, acquire.outcomes(acquireOutcome));
      }
      acquire.reportFailures(this.#onError, true);
      return this.#refused(acquire, grants.length, tries);
    }
    acquire.reportFailures(this.#onError, true);

    const fail = async (reason: string, fenced?: Round<number>): Promise<never> => {
      await this.#giveBack(keys, owner, acquire, granted);
      throw new QuorumError(name, 'acquire', this.#quorum, this.#merge(acquire, fenced), reason);
    };
    const noValidity = () =>
      `took ${Math.round(now() - sentAt)} ms of its ${ttl} ms lease: no validity left (driftFactor ${this.#options.driftFactor})`;
    if (this.validUntil(sentAt, ttl) <= now()) return fail(noValidity());

    // The quorum's token is the largest any granting node issued, written back before it counts.
    const fence = Math.max(...grants.map((g) => g.fence));
    const writeBack = this.#round(
      grants.map((g) => g.node),
      'raise-fence',
      timeout,
      (store) => store.raiseFence(keys, fence),
      (after) => (after >= fence ? 'yes' : 'no'),
    );
    await writeBack.until((t) => verdict(t) !== 'open');
    if (verdict(writeBack.tally) === 'lost') {
      writeBack.reportFailures(this.#onError, false);
      return fail(`could not write fencing token ${fence} back to a quorum of ${this.#quorum}`, writeBack);
    }
    writeBack.reportFailures(this.#onError, true);
    const validUntil = this.validUntil(sentAt, ttl);
    if (validUntil <= now()) return fail(noValidity(), writeBack);
    return { acquired: true, fencingToken: fence, validUntil };
  }

  #grants(round: Round<AcquireReply>): { node: number; fence: number }[] {
    const grants: { node: number; fence: number }[] = [];
    round.nodes.forEach((node, i) => {
      const slot = round.slots[i];
      if (slot?.state === 'answered' && slot.value.acquired) grants.push({ node, fence: slot.value.fence });
    });
    return grants;
  }

  #noteFence(name: string, fence: number): void {
    const seen = this.#fences.get(name);
    if (seen !== undefined && seen >= fence) return;
    // Re-inserting keeps the map in least-recently-raised order, so the oldest entry goes first.
    this.#fences.delete(name);
    this.#fences.set(name, fence);
    if (this.#fences.size > DEFAULTS.fenceHints) {
      const oldest = this.#fences.keys().next();
      if (!oldest.done) this.#fences.delete(oldest.value);
    }
  }

  /**
   * Give back what a failed round took (`took` says which answers left our lock on a node), so the
   * next attempt does not vote against it: release on each node as soon as its answer is known, and
   * resolve once every node that answered in time has been released. An answer that lands after its
   * node's timeout is acted on when it lands.
   */
  async #giveBack<T>(keys: LockKeys, owner: string, round: Round<T>, took: (value: T) => boolean): Promise<void> {
    await Promise.all(
      round.nodes.map(async (node, i) => {
        await round.settled[i];
        const slot = round.slots[i];
        if (slot?.state === 'answered') {
          if (took(slot.value)) await this.#releaseOne(node, keys, owner);
        } else if (slot?.state === 'failed' && slot.timedOut) {
          round.calls[i]?.then(
            (late) => (took(late) ? this.#releaseOne(node, keys, owner) : undefined),
            () => undefined,
          );
        }
      }),
    );
  }

  /** One node's release during clean-up; its failure is reported, never thrown. */
  #releaseOne(node: number, keys: LockKeys, owner: string): Promise<void> {
    const round = this.#round(
      [node],
      'release',
      this.nodeTimeout(),
      (store) => store.release(keys, owner),
      () => 'yes',
    );
    round.reportFailures(this.#onError, true);
    return round.until(() => false);
  }

  /**
   * A refused attempt. Without a grant we only wait for holders: until enough of their leases run
   * out, or a release wakes us. With grants, contenders split the vote: each backs off a random,
   * growing delay (and holds off even when woken by the others' clean-up) so one gets ahead.
   */
  #refused(round: Round<AcquireReply>, granted: number, tries: number): Attempt {
    const pttls: number[] = [];
    for (const slot of round.slots) {
      if (slot.state === 'answered' && !slot.value.acquired) pttls.push(slot.value.pttl);
    }
    const hint = retryHint(pttls, granted, this.#quorum);
    if (granted === 0) return { acquired: false, retryIn: hint };
    const holdOff = backoff(
      tries,
      this.#options.retryBase ?? DEFAULTS.retryBase,
      this.#options.retryCap ?? DEFAULTS.retryCap,
    );
    return { acquired: false, retryIn: hint < 0 ? -1 : Math.max(hint, holdOff), holdOff };
  }

  /** The acquire round's outcomes, with the write-back's where there was one. */
  #merge(acquire: Round<AcquireReply>, fenced: Round<number> | undefined): NodeOutcome[] {
    const outcomes = acquire.outcomes(acquireOutcome);
    if (!fenced) return outcomes;
    const written = new Map(fenced.outcomes(() => 'fenced').map((o) => [o.node, o]));
    return outcomes.map((o) => written.get(o.node) ?? o);
  }

  async extend(name: string, owner: string, ttl: number): Promise<ExtendOutcome> {
    const keys = this.keys(name);
    const sentAt = now();
    const round = this.#round(
      this.#all,
      'extend',
      this.nodeTimeout(ttl),
      (store) => store.extend(keys, owner, ttl),
      (reply) => (reply === 'extended' ? 'yes' : 'no'),
    );
    await round.until((t) => verdict(t) === 'won' || (verdict(t) === 'lost' && lossKind(t) !== 'open'));
    if (verdict(round.tally) === 'won') {
      round.reportFailures(this.#onError, true);
      const validUntil = this.validUntil(sentAt, ttl);
      return validUntil > now() ? { extended: true, validUntil } : { extended: false, reason: 'validity-elapsed' };
    }
    if (lossKind(round.tally) === 'unavailable') {
      round.reportFailures(this.#onError, false);
      throw new QuorumError(name, 'extend', this.#quorum, round.outcomes(extendOutcome));
    }
    round.reportFailures(this.#onError, true);
    // Lost for good: the nodes that did (or still will) extend would only keep a minority lock alive.
    void this.#giveBack(keys, owner, round, (reply) => reply === 'extended');
    const notOwner = round.slots.some((s) => s.state === 'answered' && s.value === 'not-owner');
    return { extended: false, reason: notOwner ? 'not-owner' : 'expired' };
  }

  /**
   * Release on every node, waiting for each (or its timeout). True when a quorum deleted our lock;
   * false when no quorum could have held it any more (it had expired or passed to another owner);
   * QuorumError when the nodes that failed could have held the quorum.
   */
  async release(name: string, owner: string): Promise<boolean> {
    const keys = this.keys(name);
    const round = this.#round(
      this.#all,
      'release',
      this.nodeTimeout(),
      (store) => store.release(keys, owner),
      (reply) => (reply === 'released' ? 'yes' : 'no'),
    );
    await round.until(() => false);
    const decided = releaseVerdict(round.tally);
    if (decided === 'unknown') {
      throw new QuorumError(
        name,
        'release',
        this.#quorum,
        round.outcomes(releaseOutcome),
        `could not be confirmed on a quorum of ${this.#quorum}`,
      );
    }
    round.reportFailures(this.#onError, true);
    return decided === 'released';
  }

  /**
   * Listen on every node: a release on any node wakes. Resolves once enough nodes listen that every
   * quorum includes one of them (N − quorum + 1), or every node is in; a node that fails to subscribe
   * is reported and skipped, and one that answers late still joins.
   */
  async subscribe(name: string, onRelease: () => void): Promise<() => void> {
    const channel = this.keys(name).channel;
    const timeout = this.nodeTimeout();
    const needed = this.#nodes.length - this.#quorum + 1;
    const stops: (() => void)[] = [];
    let stopped = false;
    let live = 0;
    let settled = 0;
    await new Promise<void>((resolve) => {
      const count = (ok: boolean) => {
        settled += 1;
        if (ok) live += 1;
        if (live >= needed || settled === this.#nodes.length) resolve();
      };
      for (const { store } of this.#nodes) {
        let subscribing: Promise<() => void>;
        try {
          subscribing = store.subscribe(channel, onRelease);
        } catch (error) {
          subscribing = Promise.reject(error);
        }
        subscribing.then(
          (stop) => {
            if (stopped) stop();
            else stops.push(stop);
          },
          (error: unknown) => this.#onError(error),
        );
        withTimeout(subscribing, timeout, () => new Error('subscribe timed out')).then(
          () => count(true),
          () => count(false),
        );
      }
    });
    return () => {
      stopped = true;
      for (const stop of stops.splice(0)) stop();
    };
  }

  async close(): Promise<void> {
    const closing = this.#nodes.filter((n) => n.owned).map((n) => n.store.close());
    for (const result of await Promise.allSettled(closing)) {
      if (result.status === 'rejected') this.#onError(result.reason);
    }
  }
}
