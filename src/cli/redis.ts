import type { Redis } from 'ioredis';
import { withTimeout } from '../core/timeout.js';
import type { Backend, IORedisBackend, NodeRedisBackend } from '../store/registry.js';

/** A connected client of whichever Redis library is installed (both are optional peers). */
export interface DemoRedis {
  readonly client: Backend;
  readonly library: 'ioredis' | 'redis';
  close(): Promise<void>;
}

interface IORedisModule {
  default: new (
    url: string,
    options: {
      lazyConnect: boolean;
      maxRetriesPerRequest: number;
      retryStrategy: (times: number) => number | null;
    },
  ) => IORedisBackend & {
    connect(): Promise<void>;
    quit(): Promise<unknown>;
    disconnect(): void;
    on(event: 'error', listener: (error: unknown) => void): unknown;
  };
}

interface NodeRedisModule {
  createClient(options: {
    url: string;
    socket: { reconnectStrategy: (retries: number) => number | Error };
  }): NodeRedisBackend & {
    connect(): Promise<unknown>;
    quit(): Promise<unknown>;
    on(event: 'error', listener: (error: unknown) => void): unknown;
  };
}

// A variable specifier keeps bundlers from resolving the optional peers at build time.
export async function loadOptional<T>(name: string): Promise<T | undefined> {
  try {
    return (await import(name)) as T;
  } catch {
    return undefined;
  }
}

function unreachable(url: string, error: unknown): Error {
  return new Error(`cannot connect to ${url}: ${error instanceof Error ? error.message : String(error)}`, {
    cause: error,
  });
}

export async function connectRedis(url: string): Promise<DemoRedis> {
  const ioredis = await loadOptional<IORedisModule>('ioredis');
  if (ioredis) {
    // A demo should say at once that Redis is not there, not retry for ever.
    const client = new ioredis.default(url, {
      lazyConnect: true,
      maxRetriesPerRequest: 1,
      retryStrategy: (times) => (times > 3 ? null : 200),
    });
    let lastError: unknown;
    client.on('error', (error) => {
      lastError = error;
    });
    await client.connect().catch((error: unknown) => {
      client.disconnect();
      throw unreachable(url, lastError ?? error);
    });
    return {
      client,
      library: 'ioredis',
      close: async () => {
        await client.quit().catch(() => client.disconnect());
      },
    };
  }
  const nodeRedis = await loadOptional<NodeRedisModule>('redis');
  if (nodeRedis) {
    const client = nodeRedis.createClient({
      url,
      socket: { reconnectStrategy: (retries) => (retries > 3 ? new Error(`cannot reach ${url}`) : 200) },
    });
    client.on('error', () => {});
    await client.connect().catch((error: unknown) => {
      throw unreachable(url, error);
    });
    return {
      client,
      library: 'redis',
      close: async () => {
        await client.quit().catch(() => undefined);
      },
    };
  }
  throw new Error('--redis needs a Redis client library: npm install ioredis (or redis)');
}

/** Where one Redis server is and how to log in: what a redis:// URL says, as ioredis options. */
export interface ServerAddress {
  readonly host: string;
  readonly port: number;
  readonly username?: string;
  readonly password?: string;
  readonly db?: number;
  /** For rediss://: the name the server's certificate is checked against. */
  readonly tls?: { readonly servername: string };
}

/** The address and credentials in a redis:// or rediss:// URL. */
export function addressOf(url: string): ServerAddress {
  const parsed = new URL(url);
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const db = parsed.pathname.replace(/^\//, '');
  return {
    host,
    port: parsed.port === '' ? 6379 : Number(parsed.port),
    ...(parsed.username === '' ? {} : { username: decodeURIComponent(parsed.username) }),
    ...(parsed.password === '' ? {} : { password: decodeURIComponent(parsed.password) }),
    ...(/^\d+$/.test(db) ? { db: Number(db) } : {}),
    ...(parsed.protocol === 'rediss:' ? { tls: { servername: host } } : {}),
  };
}

/** The URL as it may be printed: the password replaced by ***. */
export function printableUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.password !== '') parsed.password = '***';
  return parsed.toString().replace(/\/$/, '');
}

interface IORedisClient {
  default: new (options: Record<string, unknown>) => Redis;
}

/**
 * A client of one server (no Cluster routing), connected within `connectTimeout` or rejected with
 * the URL and the connection's error. It never reconnects unless `reconnect` is given: a check
 * run by hand fails at once instead of retrying behind the operator's back.
 */
export async function connectServer(
  address: ServerAddress,
  options: { what: string; connectTimeout?: number; reconnect?: (times: number) => number },
): Promise<Redis> {
  const ioredis = await loadOptional<IORedisClient>('ioredis');
  if (!ioredis) throw new Error(`${options.what} needs the ioredis package: npm install ioredis`);
  const connectTimeout = options.connectTimeout ?? 2_000;
  const client = new ioredis.default({
    ...address,
    lazyConnect: true,
    connectTimeout,
    maxRetriesPerRequest: options.reconnect ? 2 : 0,
    retryStrategy: options.reconnect ?? (() => null),
  });
  let lastError: unknown;
  client.on('error', (error: unknown) => {
    lastError = error;
  });
  const where = `${address.host}:${address.port}`;
  const connecting = client.connect();
  try {
    await withTimeout(connecting, connectTimeout + 500, () => new Error(`no answer within ${connectTimeout} ms`));
  } catch (error) {
    connecting.catch(() => undefined);
    client.disconnect();
    throw unreachable(where, lastError ?? error);
  }
  return client;
}
