import { now } from '../../core/clock.js';
import { StoreUnavailableError } from '../../core/errors.js';
import type { EtcdClient } from './client.js';
import { isLeaseGone, unavailable } from './errors.js';

/**
 * Sessions: the etcd leases a store's keys live on, as etcd's own concurrency package keeps a
 * session. A crashed or frozen process stops renewing them, and etcd deletes every key on them
 * when they run out: that is how a dead holder's lock, or a dead waiter's place in line, goes.
 *
 * A store has one session, granted when the store is made and renewed every third of its TTL
 * (`sessionTtl`, 30 s by default): every waiter's key and every lock of a ttl up to it live on it.
 * A longer lock lives on a lease of its own length (whole seconds, shared by the locks of that
 * length), renewed only by its own grants and extensions: the session could end before it.
 *
 * Whatever a lease is on, a grant or an extension is confirmed only once etcd is known to keep it at
 * least `ttl` ms from when the call began, by a keepalive sent since (beside the request when the
 * last is too old; shared by concurrent calls), so the lease on the server always outlasts the
 * validity the caller computes (docs/etcd.md: "The session, and what `ttl` means on etcd").
 */

/** A renewal's outcome, awaited after the request it ran beside. */
export type Renewal = { readonly ok: true } | { readonly ok: false; readonly error: unknown };

/**
 * Make sure etcd keeps `session` at least `ttl` ms from `since`: at once when what is confirmed
 * already covers it, else by a keepalive sent now (beside the request it confirms).
 */
export function renewFor(session: Session, since: number, ttl: number): Promise<Renewal> {
  if (!session.lost && session.coveredUntil >= since + ttl) return Promise.resolve({ ok: true });
  return session.renew(since).then(
    () => ({ ok: true }) as const,
    (error: unknown) => ({ ok: false, error }) as const,
  );
}

/** The session's lease is gone (revoked, or expired unrenewed): every key on it is deleted. */
export class SessionLost extends Error {
  constructor(id: string) {
    super(`etcd lease ${id} is gone (revoked, or it expired unrenewed)`);
  }
}

/** A grant's or extension's lease could not be confirmed alive; `cause` says why. */
export class Unconfirmed extends Error {}

/**
 * Streams a keepalive is tried on before it counts as unanswered. etcd3 opens each on a member
 * picked at random, and one whose member is down fails at once: with one member of three down, 6
 * streams all landed on it about once in 729 renewals (a waiter then failed as unavailable while
 * two members served); 24 do so once in 2.8 × 10^11. With every member down, 24 fail as fast as 6.
 */
const KEEPALIVE_ATTEMPTS = 24;

export class Session {
  /** The lease ID (an int64, as a decimal string). */
  readonly id: string;
  /** The TTL etcd granted, in ms. */
  readonly ttl: number;
  readonly #client: EtcdClient;
  /** Monotonic time at or after which the lease is known renewed (a keepalive's send time, or the grant's). */
  #renewedSince: number;
  #lost = false;
  #inflight: { readonly sentAt: number; readonly done: Promise<void> } | undefined;

  constructor(client: EtcdClient, id: string, ttl: number, grantedSince: number) {
    this.#client = client;
    this.id = id;
    this.ttl = ttl;
    this.#renewedSince = grantedSince;
  }

  get lost(): boolean {
    return this.#lost;
  }

  /** Monotonic time until which etcd keeps the lease at least, by what is confirmed so far. */
  get coveredUntil(): number {
    return this.#renewedSince + this.ttl;
  }

  /**
   * Resolves once etcd confirmed the lease alive by a keepalive sent at or after `since` (one in
   * flight is shared); rejects with SessionLost when etcd says it is gone, or with the error of a
   * keepalive that got no answer.
   */
  renew(since: number): Promise<void> {
    if (this.#lost) return Promise.reject(new SessionLost(this.id));
    if (this.#renewedSince >= since) return Promise.resolve();
    const inflight = this.#inflight;
    if (inflight && inflight.sentAt >= since) return inflight.done;
    const sentAt = now();
    const done = this.#keepAlive().then((ttl) => {
      if (ttl <= 0) {
        this.#lost = true;
        throw new SessionLost(this.id);
      }
      this.#renewedSince = Math.max(this.#renewedSince, sentAt);
    });
    const mine = { sentAt, done };
    this.#inflight = mine;
    const clear = () => {
      if (this.#inflight === mine) this.#inflight = undefined;
    };
    done.then(clear, clear);
    return done;
  }

  /**
   * One keepalive: the TTL etcd answers (0 when the lease is gone). A stream is not retried by
   * etcd3 as a call is: one whose member is down is tried again, on another member.
   */
  async #keepAlive(): Promise<number> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#keepAliveOnce();
      } catch (error) {
        if (attempt >= KEEPALIVE_ATTEMPTS || !unavailable(error)) throw error;
      }
    }
  }

  /** One keepalive on a stream of its own. */
  async #keepAliveOnce(): Promise<number> {
    const stream = await this.#client.leaseClient.leaseKeepAlive();
    return new Promise<number>((resolve, reject) => {
      // An answer slower than the lease itself cannot confirm it: give up on this stream.
      const timer = setTimeout(() => {
        settle();
        stream.cancel();
        reject(new StoreUnavailableError(`etcd3: no keepalive answer for lease ${this.id} within ${this.ttl} ms`));
      }, this.ttl);
      let settled = false;
      const settle = () => {
        settled = true;
        clearTimeout(timer);
      };
      stream.on('data', (response) => {
        if (settled) return;
        settle();
        stream.end();
        resolve(Number(response.TTL));
      });
      stream.on('error', (error) => {
        if (settled) return;
        settle();
        reject(error);
      });
      stream.on('end', () => {
        if (settled) return;
        settle();
        reject(new StoreUnavailableError(`etcd3: the keepalive stream of lease ${this.id} ended unanswered`));
      });
      stream.write({ ID: this.id });
    });
  }
}

/** How long a gap between keepalives may grow before the loop sends one: a third of the TTL, as etcd's clients do. */
const KEEPALIVE_DIVISOR = 3;

/**
 * The sessions of one store: the main one (kept alive, granted again once lost) and the leases of
 * locks longer than it, by length in whole seconds (granted on first use and again once lost).
 */
export class Sessions {
  readonly #client: EtcdClient;
  /** The main session's TTL as asked for, in whole seconds. */
  readonly #mainSeconds: number;
  readonly #bySeconds = new Map<number, Promise<Session>>();
  readonly #onError: (error: unknown) => void;
  #main: Promise<Session> | undefined;
  #keepalive: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  /** `sessionTtl`: the main session's TTL in ms (whole seconds, rounded up). */
  constructor(client: EtcdClient, sessionTtl: number, onError: (error: unknown) => void) {
    this.#client = client;
    this.#mainSeconds = Sessions.seconds(sessionTtl);
    this.#onError = onError;
  }

  /** ms as etcd's whole seconds (at least 1). */
  static seconds(ms: number): number {
    return Math.max(1, Math.ceil(ms / 1000));
  }

  /** The main session: every waiter's key, and every lock of a ttl up to its TTL. */
  main(): Promise<Session> {
    const pending = this.#main;
    if (!pending) return this.#grantMain();
    return pending.then((s) => {
      if (!s.lost) return s;
      return this.#main === pending ? this.#grantMain() : this.main();
    });
  }

  /** The session a lease of `ms` lives on. */
  get(ms: number): Promise<Session> {
    const seconds = Sessions.seconds(ms);
    return seconds <= this.#mainSeconds ? this.main() : this.#long(seconds);
  }

  #grantMain(): Promise<Session> {
    const granting = this.#grant(this.#mainSeconds);
    this.#main = granting;
    granting.then(
      (session) => this.#keepAlive(session),
      () => {
        if (this.#main === granting) this.#main = undefined;
      },
    );
    return granting;
  }

  /** Renew the main session a third of its TTL after it was last renewed, while it is the main one. */
  #keepAlive(session: Session, failing = false): void {
    clearTimeout(this.#keepalive);
    if (this.#closed) return;
    const due = session.coveredUntil - session.ttl + session.ttl / KEEPALIVE_DIVISOR;
    this.#keepalive = setTimeout(
      () => {
        session.renew(now() - session.ttl / KEEPALIVE_DIVISOR).then(
          () => this.#keepAlive(session),
          (error: unknown) => {
            if (session.lost || this.#closed) return;
            // Unanswered: the locks on it stay confirmed only until coveredUntil. Told once per outage.
            if (!failing) this.#onError(error);
            this.#keepalive = setTimeout(() => this.#keepAlive(session, true), session.ttl / 10).unref();
          },
        );
      },
      Math.max(0, due - now()),
    ).unref();
  }

  #long(seconds: number): Promise<Session> {
    const pending = this.#bySeconds.get(seconds);
    if (pending) {
      return pending.then((s) => {
        if (!s.lost) return s;
        if (this.#bySeconds.get(seconds) === pending) this.#bySeconds.delete(seconds);
        return this.#long(seconds);
      });
    }
    const granting = this.#grant(seconds);
    this.#bySeconds.set(seconds, granting);
    granting.catch(() => {
      if (this.#bySeconds.get(seconds) === granting) this.#bySeconds.delete(seconds);
    });
    return granting;
  }

  /**
   * A new session, once etcd granted it. Never sooner: a request naming a lease etcd has not
   * granted yet fails inside the raft log, and etcd 3.4 may apply that entry again after a crash
   * (when its backend lagged the log), with the lease present by then: the same log would give
   * another state (etcd-io/etcd#12535, where a failed lease revoke did that).
   */
  async #grant(seconds: number): Promise<Session> {
    const sentAt = now();
    const granted = await this.#client.leaseClient.leaseGrant({ TTL: seconds });
    return new Session(this.#client, granted.ID, Number(granted.TTL) * 1000, sentAt);
  }

  /**
   * etcd said a lease a request named is gone: ask etcd which (a keepalive marks a gone one lost;
   * a live one is never taken for lost). Resolves true when the request is worth sending once
   * more, on new sessions; rejects when etcd cannot tell.
   */
  static async recheck(error: unknown, sessions: readonly (Session | undefined)[]): Promise<boolean> {
    if (!isLeaseGone(error)) return false;
    for (const session of sessions) {
      if (!session || session.lost) continue;
      await session.renew(now()).catch((e: unknown) => {
        if (!(e instanceof SessionLost)) throw e;
      });
    }
    return true;
  }

  /** Stop the keepalive and forget every session: their leases run out on the server unrenewed. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#keepalive);
    this.#main = undefined;
    this.#bySeconds.clear();
  }
}
