import { describe, expect, it } from 'vitest';
import type { EtcdKeyValue } from '../../src/store/etcd/client.js';
import { decodeMember, EXCLUSIVE_OR_SHARED, encodeMember, type Member } from '../../src/store/etcd/codec.js';

/** A contender's value as etcd would hand it back. */
const kv = (value: Buffer): EtcdKeyValue => ({
  key: Buffer.from('p/q/name/owner'),
  create_revision: '2',
  mod_revision: '2',
  value,
  lease: '1',
});

describe('etcd codec: a contender’s value', () => {
  const base = { owner: 'o', instance: 'pod', ttl: 1_000, takenAt: 5 };
  const kinds: Member[] = [
    base,
    { ...base, limit: 3 },
    { ...base, limit: 0, takenAt: null },
    { ...base, keptUntil: 9 },
  ];

  it('round-trips each kind', () => {
    for (const member of kinds) expect(decodeMember(kv(encodeMember(member)))).toEqual(member);
  });

  it('sorts a semaphore’s value below EXCLUSIVE_OR_SHARED, every other above it (the Value compare a plain acquire joins on)', () => {
    const above = (member: Member) => Buffer.compare(encodeMember(member), EXCLUSIVE_OR_SHARED) > 0;
    expect(above({ ...base, limit: 12 })).toBe(false);
    expect(above(base)).toBe(true);
    expect(above({ ...base, limit: 0 })).toBe(true);
  });

  it('refuses a kind it did not write', () => {
    for (const bad of ['{"n":0,"o":"o","i":"p","t":1,"g":null}', '{"s":2,"o":"o","i":"p","t":1,"g":null}']) {
      expect(() => decodeMember(kv(Buffer.from(bad)))).toThrow(/not one leasehold wrote/);
    }
  });
});
