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
