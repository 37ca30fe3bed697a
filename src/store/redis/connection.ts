import { describeError } from '../../core/errors.js';

export { describeError };

/**
 * What the Redis store needs from a client library. Each library (ioredis, node-redis) is one
 * adapter file that implements this; nothing above it knows which library is in use.
 */
export interface RedisConnection {
  /** 'ioredis' or 'node-redis', for messages. */
  readonly kind: string;
  /** True for a Redis Cluster client. */
  readonly cluster: boolean;
  evalsha(sha: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown>;
  eval(source: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown>;
  /** FCALL of a function of the library, routed by its first key on a cluster. */
  fcall(fn: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown>;
  /** FUNCTION LOAD REPLACE the library on every master behind the client. */
  loadFunctions(source: string): Promise<void>;
  /** Server major version (from INFO server), to decide between PUBLISH and SPUBLISH. */
  serverMajorVersion(): Promise<number>;
  /** INFO `section` of every master behind the client (one for a standalone or Sentinel client). */
  infoOfMasters(section: string): Promise<string[]>;
  /**
   * A keyless command (WAIT, WAITAOF) on the connection that serves `key`: the one that just wrote
   * it (on a Cluster, the node that owns its slot).
   */
  alongside(key: string, args: readonly (string | number)[]): Promise<unknown>;
  /** A Cluster client reads the cluster's topology again (after a call got no answer); others do nothing. */
  refreshTopology?(): void;
  /** A subscriber on its own connection, opened on first use and closed by `close()`. */
  openSubscriber(sharded: boolean, onMessage: (channel: string, message: string) => void): Subscriber;
  /**
   * The client's connection failure while it is down, or undefined while it is up (or it cannot
   * tell): a call made now would only wait for a reconnection that is being refused. Its message
   * names the address.
   */
  down(): Error | undefined;
  /** The last connection error the client reported, if any (the `cause` of an unanswered call). */
  lastError(): unknown;
  /** Where the client connects, for messages: 'host:port' or a list. */
  readonly address: string;
  /** Take off the listeners this connection put on the client (the client stays the caller's). */
  dispose(): void;
}

export interface Subscriber {
  subscribe(channel: string): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  close(): Promise<void>;
}

/** Class names of the error replies of ioredis (redis-errors) and node-redis (whose `name` stays 'Error'). */
const REPLY_CLASSES = new Set(['ReplyError', 'ErrorReply', 'SimpleError', 'BlobError', 'MultiErrorReply']);

/** An error reply's first word is its code in capitals: ERR, WRONGTYPE, OOM, NOPERM, CROSSSLOT… */
const REPLY_TEXT = /^[A-Z][A-Z0-9_-]+ /;

/**
 * True when an error is a Redis error reply (the server answered), as opposed to a connection
 * failure. Decided by the error's class (its prototype chain: node-redis error replies keep
 * `name === 'Error'`) and, for a client that wraps replies otherwise, by the reply's shape.
 */
export function isReplyError(error: unknown): error is Error {
  if (!(error instanceof Error)) return false;
  for (
    let p: object | null = Object.getPrototypeOf(error);
    p !== null && p !== Error.prototype;
    p = Object.getPrototypeOf(p)
  ) {
    const ctor = (p as { constructor?: { name?: unknown } }).constructor;
    if (typeof ctor?.name === 'string' && REPLY_CLASSES.has(ctor.name)) return true;
  }
  return REPLY_CLASSES.has(error.name) || (error.constructor === Error && REPLY_TEXT.test(error.message));
}

/**
 * Replies that mean the server is there but cannot serve this now (loading, failing over, a
 * replica, a moved slot): treated as unavailable, since trying elsewhere or later is the remedy.
 * Every other error reply (OOM, WRONGTYPE, NOPERM, CROSSSLOT, ERR …) is a store error.
 */
const UNAVAILABLE_REPLIES = /^(LOADING|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|READONLY|BUSY|NOREPLICAS|MOVED|ASK)\b/;

export function isUnavailableReply(error: Error): boolean {
  return UNAVAILABLE_REPLIES.test(error.message);
}

export function isNoScript(error: unknown): boolean {
  return error instanceof Error && /NOSCRIPT/.test(error.message);
}

/** Connection errors after which a reconnection is refused outright, rather than slow. */
const REFUSED = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNRESET',
  'EPIPE',
]);

/** ioredis's words for a command failed because its connection closed (or never opened). */
const CLOSED = 'Connection is closed.';

/**
 * ioredis's Cluster and Sentinel clients lose the code of a refused connection: the node's or
 * Sentinel's command fails with "Connection is closed." and they report, with that as the last
 * error, that every startup node or every Sentinel failed (in the message only, for Sentinel).
 */
const NO_SENTINEL = /^All sentinels are unreachable\b.*\bLast error: (.*)$/s;
const REFUSED_WORDS = new RegExp(`\\b(${[...REFUSED].join('|')})\\b`);

function failedForGood(error: unknown): boolean {
  return isRefusal(error) || (error instanceof Error && error.message === CLOSED);
}

export function isRefusal(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && REFUSED.has(code)) return true;
  if (!(error instanceof Error)) return false;
  const { lastNodeError, cause } = error as { lastNodeError?: unknown; cause?: unknown };
  if (error.name === 'ClusterAllFailedError' && lastNodeError !== error && failedForGood(lastNodeError)) return true;
  const sentinel = NO_SENTINEL.exec(error.message)?.[1];
  if (sentinel !== undefined && (sentinel === CLOSED || REFUSED_WORDS.test(sentinel))) return true;
  // node-redis's Sentinel client wraps a node's error ('Master Client (host:port): …', with it as cause).
  if (cause !== undefined && cause !== error && isRefusal(cause)) return true;
  return error instanceof AggregateError && error.errors.some(isRefusal);
}

/** The events of a client library's client that ClientConnection listens to. */
export interface EventSource {
  on(event: string, listener: (...args: never[]) => void): unknown;
  off(event: string, listener: (...args: never[]) => void): unknown;
}

/** What an adapter is built with, besides its client. */
export interface ClientConnectionOptions {
  readonly cluster: boolean;
  readonly address: string;
  /** Where background failures go (a subscriber connection's errors). */
  readonly onError: (error: unknown) => void;
  /** What the adapter does with a connection error of the client, besides remembering it. */
  readonly onConnectionError?: (error: unknown) => void;
  /**
   * True while a call may go to the client at once: it is ready, or it would not queue the call
   * anyway (closed for good, or told by its owner not to queue while disconnected).
   */
  readonly flowing: () => boolean;
  /** Start the connection of a client that connects on its first command (ioredis `lazyConnect`). */
  readonly start?: () => void;
}

/** A call made while the client was not ready, kept until it is (or says it cannot be reached). */
interface Held {
  readonly send: () => Promise<unknown>;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * What every adapter keeps of its client: where it connects, and what the client's own events
 * tell of its connection (the last connection error, and whether the client has been ready since).
 * The listeners go on the caller's client and come off at `dispose()`.
 */
export abstract class ClientConnection {
  readonly cluster: boolean;
  readonly address: string;
  protected readonly onError: (error: unknown) => void;
  #lastError: unknown;
  /** A connection error since the client was last ready: calls made now only wait for a reconnection. */
  #failed = false;
  readonly #flowing: () => boolean;
  readonly #start: (() => void) | undefined;
  /** Calls made while the client was not ready, in the order they were made. */
  #held: Held[] = [];
  readonly #dispose: () => void;

  constructor(client: EventSource, options: ClientConnectionOptions) {
    this.cluster = options.cluster;
    this.address = options.address;
    this.onError = options.onError;
    this.#flowing = options.flowing;
    this.#start = options.start;
    const onError = (error: unknown) => {
      this.#lastError = error;
      this.#failed = true;
      options.onConnectionError?.(error);
      // Refused: the held calls fail now rather than at commandTimeout, never having been sent. Any
      // other failure (a timeout, an authentication error) is the client's to handle, as before;
      // what is not an Error (node-redis's Sentinel reports some in words) only informs.
      if (isRefusal(error)) this.#settleHeld((held) => held.reject(error));
      else if (error instanceof Error) this.#sendHeld();
    };
    const onReady = () => {
      this.#failed = false;
      this.#sendHeld();
    };
    // Closed for good (ioredis 'end'): the client rejects what it is given.
    const onEnd = () => this.#sendHeld();
    client.on('error', onError as (...args: never[]) => void);
    client.on('ready', onReady as (...args: never[]) => void);
    client.on('end', onEnd as (...args: never[]) => void);
    this.#dispose = () => {
      client.off('error', onError as (...args: never[]) => void);
      client.off('ready', onReady as (...args: never[]) => void);
      client.off('end', onEnd as (...args: never[]) => void);
      this.#sendHeld();
    };
  }

  /** Take off the listeners this connection put on the client (the client stays the caller's). */
  dispose(): void {
    this.#dispose();
  }

  /**
   * Run `send` (one command to the client) now if the client is ready; else keep it until the
   * client is ready (then sent in the order made) or reports a refused connection (then rejected
   * with the client's error, never sent). Handed to the client's own offline queue, a call would
   * wait there for the whole commandTimeout while the client retries a port nobody listens on;
   * and one rejected from there would still run on the reconnection, taking a lock nobody holds.
   */
  protected admit<T>(send: () => Promise<T>): Promise<T> {
    if (this.#held.length === 0 && this.#flowing()) return send();
    this.#start?.();
    return new Promise<T>((resolve, reject) => {
      this.#held.push({ send, resolve: resolve as (value: unknown) => void, reject });
    });
  }

  #settleHeld(settle: (held: Held) => void): void {
    if (this.#held.length === 0) return;
    for (const held of this.#held.splice(0)) settle(held);
  }

  /** Hand every held call to the client, in order: it sends them, or queues and fails them by its own rules. */
  #sendHeld(): void {
    this.#settleHeld((held) => {
      let sent: Promise<unknown>;
      try {
        sent = held.send();
      } catch (error) {
        sent = Promise.reject(error);
      }
      sent.then(held.resolve, held.reject);
    });
  }

  /** The last connection error while the client has not been ready since, else undefined. */
  lastError(): unknown {
    return this.#failed ? this.#lastError : undefined;
  }

  /** The failure a call made now would wait on: a refused reconnection, naming the address; else undefined. */
  protected refusal(): Error | undefined {
    if (!this.#failed || !isRefusal(this.#lastError)) return undefined;
    return new Error(`cannot reach ${this.address}: ${describeError(this.#lastError)}`, { cause: this.#lastError });
  }
}
