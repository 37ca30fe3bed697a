import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import {
  ErrorCode,
  Leasehold,
  LockError,
  QuorumError,
  RedisUnavailableError,
  StoreUnavailableError,
} from '../../../src/index.js';
import { freePort } from '../../harness/index.js';

/** Deprecated keys of ErrorCode, kept for one release: each names a code under its old key. */
const ALIASES: Readonly<Record<string, string>> = {
  TIMEOUT: 'LOCK_TIMEOUT',
  LOST: 'LOCK_LOST',
  UNAVAILABLE: 'STORE_UNAVAILABLE',
  REDIS_UNAVAILABLE: 'STORE_UNAVAILABLE',
  QUORUM: 'LOCK_QUORUM',
  STORE: 'STORE_ERROR',
};

describe('error codes', () => {
  it('every key of ErrorCode but the deprecated aliases is the code it stands for', () => {
    for (const [key, code] of Object.entries(ErrorCode)) {
      expect(code, key).toBe(ALIASES[key] ?? key);
    }
    expect(ErrorCode.LOCK_TIMEOUT).toBe('LOCK_TIMEOUT');
    expect(ErrorCode.STORE_UNAVAILABLE).toBe('STORE_UNAVAILABLE');
  });

  it('StoreUnavailableError is RedisUnavailableError under a backend-neutral name', () => {
    const error = new RedisUnavailableError('no answer');
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(new StoreUnavailableError('no answer')).toBeInstanceOf(RedisUnavailableError);
    expect(error.code).toBe(ErrorCode.STORE_UNAVAILABLE);
    const quorum = new QuorumError('x', 'acquire', 2, []);
    expect(quorum).toBeInstanceOf(StoreUnavailableError);
    expect(quorum.code).toBe(ErrorCode.LOCK_QUORUM);
  });

  it('an unreachable Redis rejects with StoreUnavailableError, which `instanceof RedisUnavailableError` still matches', async () => {
    const client = new Redis(await freePort(), '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0 });
    client.on('error', () => {});
    const locks = new Leasehold(client, { commandTimeout: 500, unsafeConfig: 'ignore' });
    try {
      const error = await locks.acquire('x', { wait: 0 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockError);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(error).toBeInstanceOf(RedisUnavailableError);
      expect((error as LockError).code).toBe('STORE_UNAVAILABLE');
    } finally {
      await locks.close();
      client.disconnect();
    }
  });
});
