import { randomBytes } from 'node:crypto';
import { DEFAULTS } from './defaults.js';

/** A fresh owner token for one acquisition: 128 random bits from the OS CSPRNG, base64url. */
export function newOwnerToken(): string {
  return randomBytes(DEFAULTS.ownerTokenBytes).toString('base64url');
}
