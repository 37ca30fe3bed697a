import type { Redis, RedisOptions } from 'ioredis';
import { DEFAULTS } from '../core/defaults.js';
import { RedisUnavailableError } from '../core/errors.js';
import { withTimeout } from '../core/timeout.js';
import { Leasehold } from '../leasehold.js';
import type { Store } from '../store/port.js';
import { resolveStore } from '../store/resolve.js';
import { loadOptional } from './redis.js';

/** How long the first connection may take before the command gives up (a black-holed host). */
const CONNECT_TIMEOUT = 2_000;

/** The Store methods the operator commands call; every Redis store has them. */
export type OperatorStore = Store & Required<Pick<Store, 'scanLocks' | 'forceRelease' | 'queued'>>;

function isOperatorStore(store: Store): store is OperatorStore {
  return (
    typeof store.scanLocks === 'function' &&
    typeof store.forceRelease === 'function' &&
    typeof store.queued === 'function'
  );
}

/** One command's connection to Redis: the Store on it, and every call bounded by `commandTimeout`. */
export interface Operator {
  readonly url: string;
  readonly prefix: string;
  readonly store: OperatorStore;
  /** A Leasehold on the same connection, for what the library keeps above the port (job history). */
  locks(): Leasehold;
  /** Settle with `promise`, or fail with RedisUnavailableError after `commandTimeout`. */
  bounded<T>(promise: Promise<T>, action: string): Promise<T>;
  /** Calls `listener` once if the connection to Redis ends before `close()`. Returns a remover. */
  onLost(listener: (error: Error) => void): () => void;
  close(): Promise<void>;
}

interface IORedisModule {
  default: new (url: string, options: RedisOptions) => Redis;
}

function detail(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return detail(error.errors[0]);
  return error instanceof Error && error.message !== '' ? error.message : String(error);
}

export async function openOperator(url: string, prefix: string): Promise<Operator> {
  const ioredis = await loadOptional<IORedisModule>('ioredis');
  if (!ioredis) throw new Error('the operator commands need the ioredis package: npm install ioredis');
  const client = new ioredis.default(url, {
    lazyConnect: true,
    connectTimeout: CONNECT_TIMEOUT,
    // One attempt and no reconnection: a command run by hand should fail at once, not retry
    // behind the operator's back; a watch whose connection ends says so and exits.
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  let lastError: unknown;
  const remember = (error: unknown) => {
    lastError = error;
  };
  client.on('error', remember);
  const connecting = client.connect();
  try {
    await withTimeout(connecting, CONNECT_TIMEOUT, () => new Error(`no answer within ${CONNECT_TIMEOUT} ms`));
  } catch (error) {
    connecting.catch(() => undefined);
    client.disconnect();
    throw new RedisUnavailableError(`cannot connect to Redis at ${url}: ${detail(lastError ?? error)}`, {
      cause: lastError ?? error,
    });
  }
  const { store } = resolveStore(client, remember);
  if (!isOperatorStore(store)) {
    client.disconnect();
    throw new Error(`the ${store.kind} store cannot list, queue-read or force-release locks`);
  }
  let locks: Leasehold | undefined;
  let closing = false;
  const ms = DEFAULTS.commandTimeout;
  return {
    url,
    prefix,
    store,
    locks: () => {
      locks ??= new Leasehold(client, { prefix, commandTimeout: ms });
      return locks;
    },
    bounded: (promise, action) =>
      withTimeout(
        promise,
        ms,
        () => new RedisUnavailableError(`${store.kind}: ${action} got no answer within ${ms} ms (commandTimeout)`),
      ),
    onLost: (listener) => {
      const onEnd = () => {
        if (closing) return;
        const why = lastError === undefined ? 'the server closed it' : detail(lastError);
        listener(new RedisUnavailableError(`lost the connection to Redis at ${url}: ${why}`, { cause: lastError }));
      };
      client.once('end', onEnd);
      return () => client.off('end', onEnd);
    },
    close: async () => {
      closing = true;
      await locks?.close();
      await store.close();
      // Nothing is left to send: dropping the socket cannot hang on a server that stopped answering.
      client.disconnect();
    },
  };
}
