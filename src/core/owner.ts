import { randomBytes } from 'node:crypto';
import { DEFAULTS } from './defaults.js';

/** Random bytes drawn from the OS CSPRNG in one call and sliced into tokens, 256 at a time. */
const POOL_SIZE = 256 * DEFAULTS.ownerTokenBytes;
let pool = Buffer.alloc(0);
let offset = 0;

/**
 * A fresh owner token for one acquisition: 128 random bits from the OS CSPRNG, base64url.
 * One `randomBytes` call per token cost more than the rest of an acquisition's client work;
 * drawing a pool and slicing it keeps every bit of every token just as unpredictable.
 */
export function newOwnerToken(): string {
  const size = DEFAULTS.ownerTokenBytes;
  if (offset + size > pool.length) {
    pool = randomBytes(POOL_SIZE);
    offset = 0;
  }
  const token = pool.toString('base64url', offset, offset + size);
  offset += size;
  return token;
}
