import { describe, expect, it } from 'vitest';
import { backoff } from '../../../src/core/backoff.js';
import { DEFAULTS } from '../../../src/core/defaults.js';
import { ErrorCode, LockError, QuorumError, StoreUnavailableError } from '../../../src/core/errors.js';
import {
  countVote,
  emptyTally,
  lossKind,
  majority,
  pending,
  releaseVerdict,
  retryHint,
  type Tally,
  type Vote,
  validity,
  verdict,
} from '../../../src/core/quorum.js';

/** The tally a round counts, with the same function the rounds use. */
function tally(nodes: number, quorum: number, votes: readonly Vote[]): Tally {
  const counting = emptyTally(nodes, quorum);
  for (const vote of votes) countVote(counting, vote);
  return counting;
}

const y = 'yes' as const;
const n = 'no' as const;
const e = 'error' as const;

/** Every sequence of `length` votes (3^length of them). */
function sequences(length: number): Vote[][] {
  return length === 0 ? [[]] : sequences(length - 1).flatMap((s) => [y, n, e].map((v) => [...s, v]));
}

describe('majority', () => {
  it('is ⌊N/2⌋+1, so any two quorums share a node', () => {
    expect([1, 2, 3, 4, 5, 6, 7].map(majority)).toEqual([1, 2, 2, 3, 3, 4, 4]);
    for (let nodes = 1; nodes <= 9; nodes++) expect(2 * majority(nodes)).toBeGreaterThan(nodes);
  });
});

describe('tally', () => {
  it('counts votes and pending nodes, and refuses more votes than nodes', () => {
    const t = tally(5, 3, [y, n, e]);
    expect(t).toMatchObject({ yes: 1, no: 1, errors: 1 });
    expect(pending(t)).toBe(2);
    expect(() => tally(2, 2, [y, y, y])).toThrow(RangeError);
  });
});

describe('verdict: decides as soon as the outcome is certain', () => {
  it('wins at the quorum-th yes, without waiting for the rest', () => {
    expect(verdict(tally(5, 3, [y, y]))).toBe('open');
    expect(verdict(tally(5, 3, [y, y, y]))).toBe('won');
    expect(verdict(tally(5, 3, [n, e, y, y, y]))).toBe('won');
  });

  it('loses once a quorum of yes is out of reach', () => {
    expect(verdict(tally(5, 3, [n, n]))).toBe('open');
    expect(verdict(tally(5, 3, [n, n, e]))).toBe('lost');
    expect(verdict(tally(5, 3, [y, y, n, e]))).toBe('open');
    expect(verdict(tally(5, 3, [y, y, n, e, n]))).toBe('lost');
    expect(verdict(tally(5, 5, [n]))).toBe('lost');
  });

  it('agrees with brute force on every sequence of votes for N = 5', () => {
    for (let length = 0; length <= 5; length++) {
      for (const sequence of sequences(length)) {
        const t = tally(5, 3, sequence);
        const rest = sequences(5 - length).map((r) => tally(5, 3, [...sequence, ...r]).yes >= 3);
        const expected = rest.every(Boolean) ? 'won' : rest.some(Boolean) ? 'open' : 'lost';
        expect(verdict(t), sequence.join(',')).toBe(expected);
      }
    }
  });
});

describe('lossKind: node failures versus refusals', () => {
  it('is unavailable when failures alone make a quorum impossible', () => {
    expect(lossKind(tally(5, 3, [e, e, e]))).toBe('unavailable');
    expect(lossKind(tally(5, 3, [y, y, e, e, e]))).toBe('unavailable');
  });

  it('is refused when enough nodes answered for a quorum', () => {
    expect(lossKind(tally(5, 3, [n, n, n]))).toBe('refused');
    expect(lossKind(tally(5, 3, [y, n, n, e]))).toBe('refused');
    // A split vote with one node down is contention, not an outage.
    expect(lossKind(tally(5, 3, [y, y, n, n, e]))).toBe('refused');
  });

  it('stays open while pending nodes could tip it', () => {
    expect(lossKind(tally(5, 3, [n, e, e]))).toBe('open');
    expect(lossKind(tally(5, 3, [n, e, e, n]))).toBe('open');
    expect(lossKind(tally(5, 3, [n, e, e, n, n]))).toBe('refused');
    expect(lossKind(tally(5, 3, [n, e, e, e]))).toBe('unavailable');
  });

  it('agrees with brute force: unavailable iff, with every node in, more than N − quorum failed', () => {
    for (const sequence of sequences(5)) {
      for (let length = 0; length <= 5; length++) {
        const prefix = sequence.slice(0, length);
        const finals = sequences(5 - length).map((rest) => tally(5, 3, [...prefix, ...rest]).errors > 2);
        const expected = finals.every(Boolean) ? 'unavailable' : finals.some(Boolean) ? 'open' : 'refused';
        expect(lossKind(tally(5, 3, prefix)), prefix.join(',')).toBe(expected);
      }
    }
  });
});

describe('releaseVerdict', () => {
  it('is released once a quorum deleted the lock', () => {
    expect(releaseVerdict(tally(5, 3, [y, y, y]))).toBe('released');
  });

  it('is gone when no quorum could have held it', () => {
    expect(releaseVerdict(tally(5, 3, [n, n, n]))).toBe('gone');
    expect(releaseVerdict(tally(5, 3, [y, n, n, n, e]))).toBe('gone');
  });

  it('is unknown when the failed nodes could have held the quorum', () => {
    expect(releaseVerdict(tally(5, 3, [y, y, n, n, e]))).toBe('unknown');
    expect(releaseVerdict(tally(5, 3, [n, n, e, e, e]))).toBe('unknown');
    expect(releaseVerdict(tally(5, 3, [y, y, n, e]))).toBe('open');
  });
});

describe('validity', () => {
  it('is ttl − elapsed − (ttl × driftFactor + driftConstant)', () => {
    expect(validity(1_000, 1_050, 10_000, 0.01, 2)).toBe(10_000 - 50 - 102);
    expect(validity(0, 0, 1_000, DEFAULTS.driftFactor, DEFAULTS.driftConstant)).toBe(988);
  });

  it('is not positive once the acquisition took the whole lease', () => {
    expect(validity(0, 988, 1_000, 0.01, 2)).toBe(0);
    expect(validity(0, 1_500, 1_000, 0.01, 2)).toBeLessThan(0);
  });
});

describe('retryHint', () => {
  it('waits until enough held leases run out for a quorum', () => {
    expect(retryHint([300, 100, 200], 0, 3)).toBe(300);
    expect(retryHint([300, 100, 200], 1, 3)).toBe(200);
    expect(retryHint([300, 100, 200], 2, 3)).toBe(100);
    expect(retryHint([300], 3, 3)).toBe(0);
  });

  it('cannot tell when too few nodes answered or a needed lease never expires', () => {
    expect(retryHint([100, 200], 0, 3)).toBe(-1);
    expect(retryHint([100, -1, 200], 0, 3)).toBe(-1);
    expect(retryHint([100, -1, 200, 50], 0, 3)).toBe(200);
  });
});

describe('backoff', () => {
  it('stays within [0, min(cap, base × 2^tries)] and reaches both ends', () => {
    expect(backoff(0, 50, 1_000, () => 0)).toBe(0);
    expect(backoff(0, 50, 1_000, () => 0.999_999)).toBe(49);
    expect(backoff(3, 50, 1_000, () => 0.999_999)).toBe(399);
    expect(backoff(10, 50, 1_000, () => 0.999_999)).toBe(999);
    for (let tries = 0; tries < 40; tries++) {
      const delay = backoff(tries, 50, 1_000);
      expect(delay).toBeGreaterThanOrEqual(0);
      expect(delay).toBeLessThan(Math.min(1_000, 50 * 2 ** tries));
    }
  });
});

describe('QuorumError', () => {
  it('is a StoreUnavailableError with its own code and every node outcome', () => {
    const cause = new Error('ECONNREFUSED');
    const error = new QuorumError('job', 'acquire', 3, [
      { node: 0, outcome: 'acquired' },
      { node: 1, outcome: 'error', cause },
      { node: 2, outcome: 'no-answer' },
    ]);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error).toBeInstanceOf(LockError);
    expect(error.code).toBe(ErrorCode.LOCK_QUORUM);
    expect(error.name).toBe('QuorumError');
    expect(error.message).toBe('acquire "job" reached no quorum of 3: #0:acquired #1:error #2:no-answer');
    expect(error.nodes[1]?.cause).toBe(cause);
    expect(new QuorumError('job', 'release', 3, [], 'could not be confirmed').message).toBe(
      'release "job" could not be confirmed: ',
    );
  });
});
