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
  /** Server major version (from INFO server), to decide between PUBLISH and SPUBLISH. */
  serverMajorVersion(): Promise<number>;
  /** A subscriber on its own connection, opened on first use and closed by `close()`. */
  openSubscriber(sharded: boolean, onMessage: (channel: string, message: string) => void): Subscriber;
}

export interface Subscriber {
  subscribe(channel: string): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  close(): Promise<void>;
}

/** True when an error is a Redis error reply (the server answered), as opposed to a connection failure. */
export function isReplyError(error: unknown): error is Error {
  if (!(error instanceof Error)) return false;
  const name = error.name;
  return name === 'ReplyError' || name === 'ErrorReply' || name === 'SimpleError' || name === 'BlobError';
}

/** Replies that mean the server is there but cannot serve now: treat as unavailable, not as a bug. */
const UNAVAILABLE_REPLIES = /^(LOADING|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|READONLY|BUSY|NOREPLICAS|MOVED|ASK)\b/;

export function isUnavailableReply(error: Error): boolean {
  return UNAVAILABLE_REPLIES.test(error.message);
}

export function isNoScript(error: unknown): boolean {
  return error instanceof Error && /NOSCRIPT/.test(error.message);
}
