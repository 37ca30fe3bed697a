import { now } from './clock.js';
import { DEFAULTS } from './defaults.js';
import { channels, type ExtendContext, type ReleaseContext, trace, traced, tracing } from './diagnostics.js';
import type { ExtendOutcome } from './engine.js';
import { type CurrentHolder, LockLostError, type LostReason } from './errors.js';
import type { Kept, LeaseKeeper } from './lease-keeper.js';
import { ttl as validTtl } from './validate.js';

/** What a Lock handle calls on its way: the engine's extend/release and the instance's events. */
export interface LockContext {
  readonly keeper: LeaseKeeper;
  /** The instance's drift factor: it sets the shortest ttl an extension may ask for. */
  readonly driftFactor: number;
  /** The instance's label, for diagnostics. */
  readonly instance: string;
  extend(name: string, owner: string, ttl: number): Promise<ExtendOutcome>;
  release(lock: Lock): Promise<boolean>;
  onLost(lock: Lock, error: LockLostError): void;
  onExtended(lock: Lock): void;
  onExtendError(lock: Lock, error: unknown): void;
  onDone(lock: Lock): void;
}

export interface LockInit {
  readonly name: string;
  readonly owner: string;
  readonly fencingToken: number;
  readonly ttl: number;
  readonly validUntil: number;
  readonly autoExtend: boolean;
  /** Replicas that confirmed the grant, when replica acknowledgement was asked for. */
  readonly replicas?: number | undefined;
}

type State = 'held' | 'lost' | 'released';

/** Validity below this many ms counts as none: the lease is lost rather than shown as 0 ms left. */
const LEAST_VALIDITY = 1;

/**
 * A held lock: one acquisition, with its owner token and fencing token. While held, the watchdog
 * extends it every ttl/3; it is lost when an extension finds it is not ours, or when its validity
 * ran out on the monotonic clock before an extension was confirmed. Lost is final.
 */
export class Lock implements AsyncDisposable {
  /** The lock's name, as given to acquire. */
  readonly name: string;
  /** This acquisition's random owner token (128 bits, base64url). */
  readonly owner: string;
  /** Strictly increasing per lock name, across all owners, for ever. Hand it to the protected resource. */
  readonly fencingToken: number;
  /**
   * Replicas that confirmed the grant, when `replicas` was asked for (below the count asked only
   * with `whenNotReplicated: 'keep'`); undefined otherwise.
   */
  readonly replicas: number | undefined;
  /** Made on first use of `signal`: most locks are released without anyone listening. */
  #controller: AbortController | undefined;
  readonly #context: LockContext;
  readonly #autoExtend: boolean;
  #ttl: number;
  #validUntil: number;
  #nextExtendAt: number;
  #state: State = 'held';
  #lostError: LockLostError | undefined;
  #extending: Promise<void> | undefined;
  readonly #kept: Kept = { tick: () => this.#tick(), at: 0, slot: -1 };
  /** The handle that acquired the lease; this one, unless this is a reentrant hold of it. */
  readonly #root: Lock;
  /** On the root: handles of this lease not yet released (reentrant holds included). */
  #holds = 1;
  /** This handle was released (its hold given up), whatever became of the lease. */
  #handleReleased = false;
  /** Monotonic time of the grant, for how long the lease was held. */
  readonly #takenAt = now();

  /** @internal Created by Leasehold on acquisition; with `root`, a reentrant hold of root's lease. */
  constructor(init: LockInit, context: LockContext, root?: Lock) {
    this.name = init.name;
    this.owner = init.owner;
    this.fencingToken = init.fencingToken;
    this.replicas = init.replicas;
    this.#ttl = init.ttl;
    this.#validUntil = init.validUntil;
    this.#autoExtend = init.autoExtend;
    this.#context = context;
    this.#nextExtendAt = now() + init.ttl / DEFAULTS.extendDivisor;
    this.#root = root ?? this;
    if (root) root.#holds += 1;
    else this.#schedule();
  }

  /**
   * @internal Another hold of this lease (reentrant acquisition): the same owner, fencing token,
   * signal and watchdog; the lease ends once every hold is released.
   */
  reenter(): Lock {
    const root = this.#root;
    // Validity is checked here, not only by the timer: after a blocked event loop the lease may be
    // over before any timer ran, and a lease with no validity left is never handed out again.
    root.#checkValidity();
    root.#throwIfNotHeld();
    const init = { name: root.name, owner: root.owner, fencingToken: root.fencingToken, ttl: root.#ttl };
    return new Lock({ ...init, validUntil: root.#validUntil, autoExtend: false }, root.#context, root);
  }

  /** Holds of this lease not yet released: 1, or more while reentrant acquisitions hold it too. */
  get holdCount(): number {
    return this.#root.#holds;
  }

  /** Aborted, with a LockLostError as its reason, the moment the lease is lost. */
  get signal(): AbortSignal {
    if (this.#root !== this) return this.#root.signal;
    this.#checkValidity();
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#lostError) this.#controller.abort(this.#lostError);
    }
    return this.#controller.signal;
  }

  /** ms of validity left by this client's monotonic clock, drift already subtracted; 0 once lost or released. */
  expiresIn(): number {
    if (this.#root !== this) return this.#handleReleased ? 0 : this.#root.expiresIn();
    this.#checkValidity();
    if (this.#state !== 'held') return 0;
    return Math.floor(this.#validUntil - now());
  }

  /**
   * A lease whose validity ran out is lost now, not when its timer fires (timers run late): so no
   * caller ever sees a held lock with no validity left and a signal not yet aborted.
   */
  #checkValidity(): void {
    if (this.#state === 'held' && this.#validUntil - now() < LEAST_VALIDITY) this.#lose('validity-elapsed');
  }

  /**
   * Reset the lease to `ttl` ms (default: the ttl it was acquired with; later watchdog extensions
   * use the new one). Rejects with LockLostError if the lease is no longer ours, and with
   * StoreUnavailableError if the backend did not confirm (the lease is then not lost yet).
   */
  async extend(ttl?: number): Promise<void> {
    if (this.#root !== this) {
      if (this.#handleReleased) throw new LockLostError(this.name, 'released', this.fencingToken);
      return this.#root.extend(ttl);
    }
    const next = ttl === undefined ? this.#ttl : validTtl(ttl, 'ttl', this.#context.driftFactor);
    while (this.#extending) await this.#extending.catch(() => {});
    this.#throwIfNotHeld();
    this.#ttl = next;
    const run = this.#runExtend(true);
    this.#extending = run;
    try {
      await run;
    } finally {
      if (this.#extending === run) this.#extending = undefined;
      this.#schedule();
    }
    this.#throwIfNotHeld();
  }

  /**
   * Release the lock. True if this call deleted our lock; false if it had already expired or passed
   * to another owner (it never deletes another owner's lock) or was already released. Rejects with
   * StoreUnavailableError when the backend could not be asked; the lease then ends by its ttl.
   * While reentrant holds of the lease remain, it only gives up this hold: true while the lease is
   * still held; the last hold released ends the lease.
   */
  release(): Promise<boolean> {
    // Not an async function: a release is on every lock's path, and the backend's promise is
    // handed back as it is (the lease's end turns anything thrown into a rejection).
    if (this.#handleReleased) return Promise.resolve(false);
    this.#handleReleased = true;
    const root = this.#root;
    root.#holds -= 1;
    if (root.#holds > 0) return Promise.resolve(root.#state === 'held' && root.expiresIn() > 0);
    return root.#end();
  }

  /** The lease's end: stop keeping it and release it on the backend. Rejects, never throws. */
  #end(): Promise<boolean> {
    if (this.#state === 'released') return Promise.resolve(false);
    this.#state = 'released';
    try {
      this.#context.keeper.cancel(this.#kept);
      this.#context.onDone(this);
      return this.#released();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #released(): Promise<boolean> {
    if (!traced(tracing.release)) return this.#context.release(this);
    return trace(
      tracing.release,
      (): ReleaseContext => ({ ...this.#message(), heldFor: Math.round(now() - this.#takenAt) }),
      () => this.#context.release(this),
      (ctx, released) => {
        ctx.released = released;
      },
    );
  }

  /** Who this lease is, for diagnostics. */
  #message() {
    return { name: this.name, instance: this.#context.instance, owner: this.owner, fencingToken: this.fencingToken };
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** @internal Stop keeping this lease without releasing it (Leasehold.close). */
  abandon(): void {
    this.#root.#lose('closed');
  }

  #throwIfNotHeld(): void {
    if (this.#state === 'lost' && this.#lostError) throw this.#lostError;
    if (this.#state === 'released') throw new LockLostError(this.name, 'released', this.fencingToken);
  }

  #schedule(): void {
    if (this.#state !== 'held') return;
    const end = this.#validUntil - LEAST_VALIDITY;
    const at = this.#autoExtend && !this.#extending ? Math.min(this.#nextExtendAt, end) : end;
    this.#context.keeper.schedule(this.#kept, at);
  }

  #tick(): void {
    if (this.#state !== 'held') return;
    this.#checkValidity();
    if (this.#state !== 'held') return;
    if (this.#autoExtend && !this.#extending && now() >= this.#nextExtendAt) {
      const run = this.#runExtend(false);
      this.#extending = run;
      // #runExtend(false) never rejects: a watchdog failure becomes a retry or a lost lease.
      void run.then(() => {
        if (this.#extending === run) this.#extending = undefined;
        this.#schedule();
      });
      // While the extension is in flight, the timer guards the validity deadline alone.
    }
    this.#schedule();
  }

  /** One extension. `explicit`: the caller awaits it and sees backend errors; the watchdog never throws. */
  async #runExtend(explicit: boolean): Promise<void> {
    const deadline = this.#validUntil;
    const ttl = this.#ttl;
    let outcome: ExtendOutcome;
    try {
      outcome = await trace(
        tracing.extend,
        (): ExtendContext => ({ ...this.#message(), ttl }),
        () => this.#context.extend(this.name, this.owner, ttl),
        (ctx, o) => {
          ctx.outcome = o.extended ? 'extended' : 'lost';
        },
        (ctx) => {
          ctx.outcome = 'failed';
        },
      );
    } catch (error) {
      if (this.#state !== 'held') return;
      this.#nextExtendAt = now() + Math.max(1, ttl * DEFAULTS.extendRetryFraction);
      this.#context.onExtendError(this, error);
      if (explicit) throw error;
      return;
    }
    if (this.#state !== 'held') return;
    // A confirmation that arrives after our validity ran out does not revive the lease.
    if (deadline - now() < LEAST_VALIDITY) {
      this.#lose('validity-elapsed');
      return;
    }
    if (!outcome.extended) {
      this.#lose(outcome.reason, outcome.holder);
      return;
    }
    this.#validUntil = outcome.validUntil;
    this.#nextExtendAt = now() + ttl / DEFAULTS.extendDivisor;
    this.#context.onExtended(this);
  }

  #lose(reason: LostReason, holder?: CurrentHolder): void {
    if (this.#state !== 'held') return;
    this.#state = 'lost';
    this.#context.keeper.cancel(this.#kept);
    const error = new LockLostError(this.name, reason, this.fencingToken, { holder });
    this.#lostError = error;
    this.#context.onDone(this);
    this.#controller?.abort(error);
    if (channels.lost.hasSubscribers) {
      channels.lost.publish({ ...this.#message(), reason, heldFor: Math.round(now() - this.#takenAt) });
    }
    this.#context.onLost(this, error);
  }

  /** @internal The error the lease was lost with, if it was. */
  get lostError(): LockLostError | undefined {
    return this.#root.#lostError;
  }

  /** @internal Whether the lease is still held with validity left (and, for a reentrant hold, this hold too). */
  get held(): boolean {
    this.#root.#checkValidity();
    return !this.#handleReleased && this.#root.#state === 'held';
  }

  /** @internal Whether this handle was released (its hold given up), whatever became of the lease. */
  get handleReleased(): boolean {
    return this.#handleReleased;
  }
}
