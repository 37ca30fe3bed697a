/**
 * Redlock: one lock across independent masters, held while a quorum grants it and its validity lasts.
 * How it works, and why its fencing tokens increase across quorums: docs/redlock.md.
 */
import { backoff } from '../core/backoff.js';
import { now } from '../core/clock.js';
import { DEFAULTS } from '../core/defaults.js';
import { channels, type QuorumMessage } from '../core/diagnostics.js';
import type { Attempt, ExtendOutcome, HandOff, LockEngine } from '../core/engine.js';
import { invalidArgument, type NodeOutcome, QuorumError } from '../core/errors.js';
import { lossKind, releaseVerdict, retryHint, type Vote, validity, verdict } from '../core/quorum.js';
import type { Primitive } from '../primitives/primitive.js';
import { timeoutsOf } from '../store/bounded.js';
import type { EvictionCheck } from '../store/eviction-check.js';
import type { AcquireReply, ExtendReply, ReleaseReply } from '../store/port.js';
import { type FenceStore, type LeaseStore, portsOf, type Store } from '../store/port.js';
import { type Outcome, Round, type Test } from './round.js';

export interface QuorumOptions {
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
  /** A node's failure, with the action it failed in: a round's ('acquire', 'raise-fence', 'extend', 'release'), 'subscribe' or 'close'. */
  readonly onBackendError?: ((error: unknown, action: string) => void) | undefined;
  /** The eviction-policy check made before the first acquisition, over every node. */
  readonly eviction?: EvictionCheck | undefined;
}

/** A Redlock node: leases, and the fencing write-back. */
type Node = LeaseStore & FenceStore;

const granted = (reply: AcquireReply): boolean => reply.acquired;
const acquireOutcome = (reply: AcquireReply): Outcome => (reply.acquired ? 'acquired' : 'held');
const extendOutcome = (reply: ExtendReply): Outcome => (reply === 'extended' ? 'extended' : reply);
const releaseOutcome = (reply: ReleaseReply): Outcome => reply;
const acquireVote = (reply: AcquireReply): Vote => (reply.acquired ? 'yes' : 'no');
const extendVote = (reply: ExtendReply): Vote => (reply === 'extended' ? 'yes' : 'no');
const releaseVote = (reply: ReleaseReply): Vote => (reply === 'released' ? 'yes' : 'no');
/** Clean-up counts any answer: its failures are reported, never decided on. */
const anyAnswer = (): Vote => 'yes';
const decided: Test = (t) => verdict(t) !== 'open';
/** An extend is decided once won, or lost for a reason that is certain. */
const extendDecided: Test = (t) => {
  const v = verdict(t);
  return v === 'won' || (v === 'lost' && lossKind(t) !== 'open');
};
/** Wait for every node (or its timeout). */
const everyNode: Test = () => false;

/** The grants an acquire round has so far: how many, their largest token M, and how many of them issued M. */
function grantsOf(round: Round<AcquireReply, Node>): { grants: number; fence: number; atFence: number } {
  let grants = 0;
  let fence = 0;
  let atFence = 0;
  for (const slot of round.slots) {
    if (slot.state !== 'answered' || !slot.value.acquired) continue;
    grants += 1;
    if (slot.value.fence > fence) {
      fence = slot.value.fence;
      atFence = 1;
    } else if (slot.value.fence === fence) {
      atFence += 1;
    }
  }
  return { grants, fence, atFence };
}

/** The fenced Redlock over independent stores, running any primitive; see docs/redlock.md. */
export class Quorum implements LockEngine {
  readonly #primitive: Primitive;
  readonly #nodes: readonly { store: Store; owned: boolean }[];
  readonly #stores: readonly Node[];
  readonly #all: readonly number[];
  readonly #options: QuorumOptions;
  readonly #quorum: number;
  readonly #onError: (error: unknown, action: string) => void;
  /** The highest token seen per lock name: passed as minFence so nodes that fell behind catch up. */
  readonly #fences = new Map<string, number>();

  constructor(primitive: Primitive, stores: readonly { store: Store; owned: boolean }[], options: QuorumOptions) {
    this.#primitive = primitive;
    this.#nodes = stores;
    this.#stores = stores.map(({ store }, i) => {
      const fence = portsOf(store).fence;
      if (!fence || !primitive.supports(store)) {
        throw invalidArgument(`Redlock node #${i} (${store.kind}) cannot run a ${primitive.kind} with fencing`);
      }
      return store as Node;
    });
    this.#all = stores.map((_, i) => i);
    this.#options = options;
    this.#quorum = options.quorum;
    this.#onError = options.onBackendError ?? (() => {});
  }

  /** The per-node timeout for calls on a lease of `ttl` ms (release and subscribe know no ttl). */
  nodeTimeout(ttl?: number): number {
    if (this.#options.nodeTimeout !== undefined) return this.#options.nodeTimeout;
    const bound = Math.min(DEFAULTS.nodeTimeout, this.#options.commandTimeout);
    if (ttl === undefined) return bound;
    return Math.max(1, Math.min(bound, Math.floor(ttl * DEFAULTS.nodeTimeoutFraction)));
  }

  /** When a lease a quorum granted, asked for at `sentAt`, stops being ours on this client's clock. */
  #validUntil(sentAt: number, ttl: number): number {
    const { driftFactor, driftConstant } = this.#options;
    const at = now();
    return at + validity(sentAt, at, ttl, driftFactor, driftConstant);
  }

  #round<T>(
    nodes: readonly number[],
    action: string,
    timeout: number,
    call: (store: Node) => Promise<T>,
    vote: (value: T) => Vote,
  ): Round<T, Node> {
    return new Round(this.#stores, nodes, this.#quorum, action, timeout, call, vote);
  }

  async attempt(name: string, acquisition: string, ttl: number, tries = 0): Promise<Attempt> {
    // Each attempt holds under an owner token of its own: a grant of an earlier attempt that lands
    // late is given back by that attempt's clean-up, and must not be counted as a vote for this one.
    const owner = tries === 0 ? acquisition : `${acquisition}.${tries}`;
    const gate = this.#options.eviction?.gate();
    if (gate) await gate;
    const timeout = this.nodeTimeout(ttl);
    const minFence = this.#proposal(name);
    const sentAt = now();
    const acquire = this.#round(
      this.#all,
      'acquire',
      timeout,
      (store) => this.#primitive.acquire(store, name, { owner, ttl, minFence }),
      acquireVote,
    );
    await acquire.until(decided);
    this.#told(name, 'acquire', acquire, acquireOutcome);
    const { grants, fence, atFence } = grantsOf(acquire);
    if (grants > 0) this.#noteFence(name, fence);
    if (verdict(acquire.tally) === 'lost') return this.#lost(name, owner, acquire, grants, tries);
    acquire.reportFailures(this.#onError, true);
    // A quorum of the granting nodes issued M themselves: their counters are M already, under our
    // lease, and a write-back would change nothing. Otherwise M is written back before it counts.
    let fenced: Round<number, Node> | undefined;
    if (atFence < this.#quorum) {
      if (this.#validUntil(sentAt, ttl) <= now()) {
        return this.#fail(name, owner, acquire, undefined, this.#noValidity(sentAt, ttl));
      }
      fenced = await this.#writeBack(name, owner, acquire, fence, timeout);
    }
    const validUntil = this.#validUntil(sentAt, ttl);
    if (validUntil - now() < 1) return this.#fail(name, owner, acquire, fenced, this.#noValidity(sentAt, ttl));
    return { acquired: true, fencingToken: fence, validUntil, owner };
  }

  /**
   * The token to propose for `name`: this client's clock in µs, a little ahead, or one above the
   * last token seen if that is higher. Each node issues the highest of the proposal, its own
   * counter + 1 and its own clock, so nodes whose counters and clocks lag the proposal all issue
   * exactly it: the quorum agrees at once and no write-back is needed. Only a floor: the order of
   * tokens never rests on this clock (docs/redlock.md).
   */
  #proposal(name: string): number {
    const seen = this.#fences.get(name);
    const proposal = Math.floor((performance.timeOrigin + now() + DEFAULTS.fenceLead) * 1000);
    return Math.max(seen === undefined ? 0 : seen + 1, proposal);
  }

  /** A lost acquire round: give back what it took, then throw if the nodes were unreachable, else refuse. */
  async #lost(
    name: string,
    owner: string,
    acquire: Round<AcquireReply, Node>,
    grants: number,
    tries: number,
  ): Promise<Attempt> {
    // Every node has answered or timed out once this resolves, so the loss is classified for sure.
    await this.#giveBack(name, owner, acquire, granted);
    if (lossKind(acquire.tally) === 'unavailable') {
      acquire.reportFailures(this.#onError, false);
      throw new QuorumError(name, 'acquire', this.#quorum, acquire.outcomes(acquireOutcome));
    }
    acquire.reportFailures(this.#onError, true);
    return this.#refused(acquire, grants, tries);
  }

  /** Write token `fence` back to the nodes that granted: the round, once a quorum confirmed it; else give back and throw. */
  async #writeBack(
    name: string,
    owner: string,
    acquire: Round<AcquireReply, Node>,
    fence: number,
    timeout: number,
  ): Promise<Round<number, Node>> {
    const writeTo: number[] = [];
    acquire.slots.forEach((slot, i) => {
      const node = acquire.nodes[i];
      if (slot.state === 'answered' && slot.value.acquired && node !== undefined) writeTo.push(node);
    });
    const writeBack = this.#round(
      writeTo,
      'raise-fence',
      timeout,
      (store) => store.raiseFence(name, fence),
      (after) => (after >= fence ? 'yes' : 'no'),
    );
    await writeBack.until(decided);
    if (verdict(writeBack.tally) === 'lost') {
      writeBack.reportFailures(this.#onError, false);
      const reason = `could not write fencing token ${fence} back to a quorum of ${this.#quorum}`;
      return this.#fail(name, owner, acquire, writeBack, reason);
    }
    writeBack.reportFailures(this.#onError, true);
    return writeBack;
  }

  /** Tell diagnostics how a round was decided (each node's outcome so far); nothing while nobody listens. */
  #told<T>(
    name: string,
    operation: QuorumMessage['operation'],
    round: Round<T, Node>,
    answer: (value: T) => Outcome,
  ): void {
    if (!channels.quorum.hasSubscribers) return;
    const outcomes = round.outcomes(answer).map(({ node, outcome }) => ({ node, outcome }));
    channels.quorum.publish({ name, operation, quorum: this.#quorum, verdict: verdict(round.tally), outcomes });
  }

  /** A won vote that cannot be used after all: give back what it took, then throw. */
  async #fail(
    name: string,
    owner: string,
    acquire: Round<AcquireReply, Node>,
    fenced: Round<number, Node> | undefined,
    reason: string,
  ): Promise<never> {
    await this.#giveBack(name, owner, acquire, granted);
    throw new QuorumError(name, 'acquire', this.#quorum, this.#merge(acquire, fenced), reason);
  }

  #noValidity(sentAt: number, ttl: number): string {
    const took = Math.round(now() - sentAt);
    return `took ${took} ms of its ${ttl} ms lease: no validity left (driftFactor ${this.#options.driftFactor})`;
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
  async #giveBack<T>(name: string, owner: string, round: Round<T, Node>, took: (value: T) => boolean): Promise<void> {
    await Promise.all(
      round.nodes.map(async (node, i) => {
        await round.settled(i);
        const slot = round.slots[i];
        if (slot?.state === 'answered') {
          if (took(slot.value)) await this.#releaseOne(node, name, owner);
        } else if (slot?.state === 'failed' && slot.timedOut) {
          round.calls[i]?.then(
            (late) => (took(late) ? this.#releaseOne(node, name, owner) : undefined),
            () => undefined,
          );
        }
      }),
    );
  }

  /** One node's release during clean-up; its failure is reported, never thrown. */
  #releaseOne(node: number, name: string, owner: string): Promise<void> {
    const round = this.#round(
      [node],
      'release',
      this.nodeTimeout(),
      (store) => this.#primitive.release(store, name, owner),
      anyAnswer,
    );
    round.reportFailures(this.#onError, true);
    return round.until(everyNode);
  }

  /**
   * A refused attempt. Without a grant we only wait for holders: until enough of their leases run
   * out, or a release wakes us. With grants, contenders split the vote: each backs off a random,
   * growing delay (and holds off even when woken by the others' clean-up) so one gets ahead.
   */
  #refused(round: Round<AcquireReply, Node>, granted: number, tries: number): Attempt {
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
  #merge(acquire: Round<AcquireReply, Node>, fenced: Round<number, Node> | undefined): NodeOutcome[] {
    const outcomes = acquire.outcomes(acquireOutcome);
    if (!fenced) return outcomes;
    const written = new Map(fenced.outcomes(() => 'fenced').map((o) => [o.node, o]));
    return outcomes.map((o) => written.get(o.node) ?? o);
  }

  async extend(name: string, owner: string, ttl: number): Promise<ExtendOutcome> {
    const sentAt = now();
    const round = this.#round(
      this.#all,
      'extend',
      this.nodeTimeout(ttl),
      (store) => this.#primitive.extend(store, name, owner, ttl),
      extendVote,
    );
    await round.until(extendDecided);
    this.#told(name, 'extend', round, extendOutcome);
    if (verdict(round.tally) === 'won') {
      round.reportFailures(this.#onError, true);
      const validUntil = this.#validUntil(sentAt, ttl);
      return validUntil - now() >= 1 ? { extended: true, validUntil } : { extended: false, reason: 'validity-elapsed' };
    }
    if (lossKind(round.tally) === 'unavailable') {
      round.reportFailures(this.#onError, false);
      throw new QuorumError(name, 'extend', this.#quorum, round.outcomes(extendOutcome));
    }
    round.reportFailures(this.#onError, true);
    // Lost for good: the nodes that did (or still will) extend would only keep a minority lock alive.
    void this.#giveBack(name, owner, round, (reply) => reply === 'extended');
    const notOwner = round.slots.some((s) => s.state === 'answered' && s.value === 'not-owner');
    return { extended: false, reason: notOwner ? 'not-owner' : 'expired' };
  }

  /**
   * Release on every node, waiting for each (or its timeout). True when a quorum deleted our lock;
   * false when no quorum could have held it any more (it had expired or passed to another owner);
   * QuorumError when the nodes that failed could have held the quorum.
   */
  async release(name: string, owner: string): Promise<boolean> {
    const round = this.#round(
      this.#all,
      'release',
      this.nodeTimeout(),
      (store) => this.#primitive.release(store, name, owner),
      releaseVote,
    );
    await round.until(everyNode);
    this.#told(name, 'release', round, releaseOutcome);
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
  async watch(name: string, onHandOff: (handOff: HandOff) => void): Promise<() => void> {
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
          subscribing = store.watch(name, onHandOff);
        } catch (error) {
          subscribing = Promise.reject(error);
        }
        subscribing.then(
          (stop) => {
            if (stopped) stop();
            else stops.push(stop);
          },
          (error: unknown) => this.#onError(error, 'subscribe'),
        );
        timeoutsOf(store)
          .bound(subscribing, timeout, () => new Error('subscribe timed out'))
          .then(
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
      if (result.status === 'rejected') this.#onError(result.reason, 'close');
    }
    for (const { store } of this.#nodes) timeoutsOf(store).stopIdle();
  }
}
