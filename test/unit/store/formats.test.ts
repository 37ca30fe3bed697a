import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/core/errors.js';
import {
  BadReply,
  decodeFence,
  decodeHolder,
  decodeLockRecord,
  decodeLockValue,
  decodeRun,
  decodeWaiter,
  encodeFence,
  encodeLockRecord,
  encodeLockValue,
  encodeRun,
  encodeWaiter,
  type FenceRecord,
  grantOf,
  heldBy,
  holderOf,
  type LockRecord,
  type LockValue,
  readLockValue,
  reservedFor,
  sharedBy,
  type WaiterEntry,
} from '../../../src/store/formats.js';
import type { StoredOutcome, StoredRun } from '../../../src/store/port.js';
import { decodeHandOff } from '../../../src/store/redis/replies.js';

/** Each kept value decodes to what was encoded, for every form of it (see src/store/formats.ts). */

const token = fc.stringMatching(/^[A-Za-z0-9_-]{1,22}$/);
const ms = fc.maxSafeNat();
// Any text, and text made of the marks the formats use.
const marks = fc.constantFrom('a', 'Z', '0', '9', ' ', '|', '~', '^', '*', '=', ':', '"', '\\', '\n', 'é', '😀');
const text = fc.oneof(fc.string({ unit: 'binary', maxLength: 40 }), fc.string({ unit: marks, maxLength: 40 }));
// A label never holds '|' (validate.instance refuses it): in the fence record it marks a release.
const label = text.filter((s) => !s.includes('|'));

const lockValue: fc.Arbitrary<LockValue> = fc.oneof(
  fc.tuple(token, fc.boolean()).map(([owner, flagged]) => heldBy(owner, flagged)),
  fc
    .tuple(fc.array(token, { minLength: 1, maxLength: 6 }), fc.boolean())
    .map(([w, flagged]) => reservedFor(w, flagged)),
  fc.tuple(fc.nat({ max: 1_000_000 }), fc.boolean()).map(([limit, flagged]) => sharedBy(limit, flagged)),
);

const fence: fc.Arbitrary<FenceRecord> = fc.record({
  token: ms,
  grant: fc.option(fc.record({ takenAtUs: ms, instance: label }), { nil: null }),
  releasedBy: fc.option(token, { nil: null }),
});

// A grant taken at its token's µs, the usual case, is kept in the folded form '<token>=<instance>'.
const foldedFence: fc.Arbitrary<FenceRecord> = fc
  .record({ token: ms, instance: label, releasedBy: fc.option(token, { nil: null }) })
  .map(({ token, instance, releasedBy }) => ({ token, grant: { takenAtUs: token, instance }, releasedBy }));

const lockRecord: fc.Arbitrary<LockRecord> = fc.record({
  lease: fc.option(fc.record({ end: ms, value: lockValue }), { nil: null }),
  fence: fc.option(fc.oneof(fence, foldedFence), { nil: null }),
});

const waiter: fc.Arbitrary<WaiterEntry> = fc.oneof(
  fc.record({ deadline: ms, shared: fc.constant(null), direct: fc.constant(null) }),
  fc.record({ deadline: ms, shared: fc.nat({ max: 1_000_000 }), direct: fc.constant(null) }),
  fc.record({
    deadline: ms,
    shared: fc.constant(null),
    direct: fc.record({ ttl: ms, retention: ms, room: token, instance: text }),
  }),
);

const OUTCOMES: readonly StoredOutcome[] = ['running', 'ok', 'failed', 'done', 'lost', 'abandoned'];

const run: fc.Arbitrary<StoredRun> = fc.record({
  fence: ms,
  tick: fc.option(ms, { nil: null }),
  instance: text,
  startedAt: ms,
  finishedAt: fc.option(ms, { nil: null }),
  outcome: fc.constantFrom(...OUTCOMES),
  error: fc.option(text, { nil: null }),
});

/** Encode then decode is the identity on every value `arbitrary` makes. */
function roundTrips<T>(arbitrary: fc.Arbitrary<T>, encode: (value: T) => string, decode: (kept: string) => T): void {
  fc.assert(
    fc.property(arbitrary, (value) => {
      expect(decode(encode(value))).toEqual(value);
    }),
  );
}

describe('kept values: encode then decode is the identity', () => {
  it('the lock value, held, reserved or shared, flagged or not', () => {
    roundTrips(lockValue, encodeLockValue, decodeLockValue);
  });

  it('the holder a lock value names (held or shared; force-release replies it)', () => {
    const holder = fc.oneof(
      token.map((owner) => heldBy(owner)),
      fc.nat({ max: 1_000_000 }).map((n) => sharedBy(n)),
    );
    roundTrips(holder, (v) => holderOf(v) as string, decodeHolder);
  });

  it('the fence record, with and without a grant and a release mark, its grant folded or not', () => {
    roundTrips(fc.oneof(fence, foldedFence), encodeFence, decodeFence);
  });

  it('the lock key’s whole value: the lease or none, the fence record or none', () => {
    roundTrips(lockRecord, encodeLockRecord, decodeLockRecord);
  });

  it('the waiter entry: exclusive, shared, and one that may be granted outright', () => {
    roundTrips(waiter, encodeWaiter, decodeWaiter);
  });

  it('the run record', () => {
    roundTrips(run, encodeRun, decodeRun);
  });
});

describe('kept values read as an operator reads them', () => {
  it('each form of the lock value', () => {
    expect(encodeLockValue(heldBy('A'))).toBe('A');
    expect(encodeLockValue(heldBy('A', true))).toBe('A*');
    expect(encodeLockValue(reservedFor(['W']))).toBe('~W');
    expect(encodeLockValue(reservedFor(['W', 'V'], true))).toBe('~W V*');
    expect(encodeLockValue(sharedBy(3))).toBe('^3');
    expect(encodeLockValue(sharedBy(0, true))).toBe('^0*');
    expect(readLockValue(false)).toEqual({
      owner: null,
      reservedFor: null,
      reserved: [],
      shared: null,
      flagged: false,
    });
    expect(holderOf(decodeLockValue('^2*'))).toBe('^2');
    expect(holderOf(decodeLockValue('A*'))).toBe('A');
    expect(holderOf(decodeLockValue('~W'))).toBeNull();
    expect(decodeHolder('^3')).toEqual(sharedBy(3));
    expect(decodeHolder('A')).toEqual(heldBy('A'));
  });

  it('each form of the lock key’s whole value', () => {
    const grant = { token: 42, grant: { takenAtUs: 42, instance: 'pod 1' }, releasedBy: null };
    expect(encodeLockRecord({ lease: { end: 1000, value: heldBy('A', true) }, fence: grant })).toBe(
      '1000 A*\n42=pod 1',
    );
    expect(encodeLockRecord({ lease: null, fence: { ...grant, releasedBy: 'A' } })).toBe('\n42=pod 1|A');
    expect(encodeLockRecord({ lease: { end: 1000, value: reservedFor(['W']) }, fence: null })).toBe('1000 ~W\n');
    expect(decodeLockRecord('\n')).toEqual({ lease: null, fence: null });
  });

  it('the fence record and the grant it names', () => {
    const record = decodeFence('1733400000123456 1733400000123456 pod 1|A');
    expect(record).toEqual({
      token: 1733400000123456,
      grant: { takenAtUs: 1733400000123456, instance: 'pod 1' },
      releasedBy: 'A',
    });
    expect(grantOf(record)).toEqual({ token: 1733400000123456, takenAt: 1733400000123, instance: 'pod 1' });
    // Taken at its token's µs: the grant's time is the token's, written once.
    expect(decodeFence('1733400000123456=pod 1')).toEqual({ ...record, releasedBy: null });
    expect(encodeFence(record)).toBe('1733400000123456=pod 1|A');
    // raise-fence.lua lifting a counter that was gone keeps the token alone.
    expect(decodeFence('42')).toEqual({ token: 42, grant: null, releasedBy: null });
    expect(grantOf(decodeFence('42|A'))).toBeNull();
  });

  it('each form of the waiter entry', () => {
    expect(decodeWaiter('1000')).toEqual({ deadline: 1000, shared: null, direct: null });
    expect(decodeWaiter('1000 ^0')).toEqual({ deadline: 1000, shared: 0, direct: null });
    expect(decodeWaiter('1000 =30000:60000:room pod 1')).toEqual({
      deadline: 1000,
      shared: null,
      direct: { ttl: 30_000, retention: 60_000, room: 'room', instance: 'pod 1' },
    });
  });

  it('the run record keeps its fencing token as a string, and reads a number too', () => {
    const stored = encodeRun({
      fence: 2 ** 53 - 1,
      tick: null,
      instance: 'i',
      startedAt: 1,
      finishedAt: null,
      outcome: 'running',
      error: null,
    });
    expect(JSON.parse(stored).fence).toBe(String(2 ** 53 - 1));
    expect(decodeRun(stored.replace(`"${2 ** 53 - 1}"`, '7')).fence).toBe(7);
  });

  it('a value in no form of its format is refused, never read as the nearest one', () => {
    expect(() => decodeLockValue('^x')).toThrow(BadReply);
    expect(() => decodeHolder('^')).toThrow(BadReply);
    expect(() => decodeHolder('^3*')).toThrow(BadReply);
    expect(() => decodeFence('x 1 i')).toThrow(BadReply);
    expect(() => decodeFence('')).toThrow(BadReply);
    expect(() => decodeLockRecord('1733400000123 A')).toThrow(BadReply);
    expect(() => decodeLockRecord('soon A\n42')).toThrow(BadReply);
    expect(() => decodeWaiter('soon')).toThrow(BadReply);
    expect(() => decodeWaiter('1000 *3')).toThrow(BadReply);
    expect(() => decodeRun('{"fence":"1"}')).toThrow(expect.objectContaining({ code: ErrorCode.STORE_ERROR }));
    expect(() => decodeRun('not json')).toThrow(expect.objectContaining({ code: ErrorCode.STORE_ERROR }));
  });

  it('the hand-off message: woken, the waiters next, and the lease of a grant outright', () => {
    expect(decodeHandOff('')).toEqual({ woken: null, next: [] });
    expect(decodeHandOff('A')).toEqual({ woken: 'A', next: [] });
    expect(decodeHandOff('A B C D')).toEqual({ woken: 'A', next: ['B', 'C', 'D'] });
    expect(decodeHandOff('A B C =600')).toEqual({ woken: 'A', next: ['B', 'C'], grantedFor: 600 });
    expect(decodeHandOff('?A')).toEqual({ woken: 'A', next: [] });
  });
});
