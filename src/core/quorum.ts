/**
 * Quorum decisions for Redlock, as pure functions of a tally of node answers.
 *
 * Every node's answer to one round (acquire, fence write-back, extend, release) is a vote:
 * - `yes`: the node did what was asked (acquired, raised its fence, extended, released);
 * - `no`: the node answered, and refused (held by another owner, not ours, expired);
 * - `error`: the node failed or did not answer within its timeout.
 * Nodes that have not answered yet are pending. A round is decided as soon as its outcome is
 * certain whichever way the pending nodes answer, so one slow or frozen node never delays it.
 */

export type Vote = 'yes' | 'no' | 'error';

export interface Tally {
  /** Nodes asked in this round. */
  readonly nodes: number;
  /** Votes needed for the round to succeed. */
  readonly quorum: number;
  readonly yes: number;
  readonly no: number;
  readonly errors: number;
}

/** The default quorum: a strict majority, so that any two quorums share a node. */
export function majority(nodes: number): number {
  return Math.floor(nodes / 2) + 1;
}

/** A tally being counted: one object per round, updated in place as votes come in. */
export type Counting = { -readonly [K in keyof Tally]: Tally[K] };

export function emptyTally(nodes: number, quorum: number): Counting {
  return { nodes, quorum, yes: 0, no: 0, errors: 0 };
}

/** Count one node's vote into `tally` (in place, so a round allocates nothing per vote). */
export function countVote(tally: Counting, vote: Vote): void {
  if (pending(tally) <= 0) throw new RangeError('every node of this round has already voted');
  if (vote === 'yes') tally.yes += 1;
  else if (vote === 'no') tally.no += 1;
  else tally.errors += 1;
}

export function pending(tally: Tally): number {
  return tally.nodes - tally.yes - tally.no - tally.errors;
}

/**
 * `won` once a quorum said yes; `lost` once a quorum of yes is out of reach even if every pending
 * node says yes; `open` otherwise.
 */
export function verdict(tally: Tally): 'won' | 'lost' | 'open' {
  if (tally.yes >= tally.quorum) return 'won';
  if (tally.yes + pending(tally) < tally.quorum) return 'lost';
  return 'open';
}

/**
 * Why a lost round was lost, once that is certain:
 * - `unavailable` when the failed nodes alone make a quorum impossible (fewer than a quorum of
 *   nodes could be reached at all): the backend is down, not busy;
 * - `refused` when the nodes that answered were enough for a quorum, so refusals decided it
 *   (contention for an acquire, a lost lease for an extend);
 * - `open` while pending nodes could still tip it either way.
 */
export function lossKind(tally: Tally): 'unavailable' | 'refused' | 'open' {
  const spare = tally.nodes - tally.quorum;
  if (tally.errors > spare) return 'unavailable';
  if (tally.errors + pending(tally) <= spare) return 'refused';
  return 'open';
}

/**
 * Whether a release found our lock on a quorum:
 * - `released`: a quorum deleted it, so it was ours until this call;
 * - `gone`: even counting every failed and pending node as ours, no quorum held it: it had expired
 *   or passed to another owner before this call;
 * - `unknown`: every node is in, and the failed ones could have held the quorum;
 * - `open`: pending nodes could still decide it.
 */
export function releaseVerdict(tally: Tally): 'released' | 'gone' | 'unknown' | 'open' {
  if (tally.yes >= tally.quorum) return 'released';
  if (tally.yes + tally.errors + pending(tally) < tally.quorum) return 'gone';
  if (pending(tally) === 0) return 'unknown';
  return 'open';
}

/**
 * ms of validity left for a lease asked for at `sentAt`, at time `at` (both monotonic):
 * ttl − elapsed − (ttl × driftFactor + driftConstant). Not positive means the lease cannot be used.
 */
export function validity(sentAt: number, at: number, ttl: number, driftFactor: number, driftConstant: number): number {
  return ttl - (at - sentAt) - (ttl * driftFactor + driftConstant);
}

/**
 * When a quorum of nodes may next be free for a contender that holds none of them: the time until
 * enough of the held nodes' leases run out, given `free` nodes already free. `pttls` are the held
 * nodes' remaining leases in ms (negative: a key without expiry). -1 when it cannot be told (too few
 * nodes answered, or a needed lease never expires): the caller then waits for a release message.
 */
export function retryHint(pttls: readonly number[], free: number, quorum: number): number {
  const needed = quorum - free;
  if (needed <= 0) return 0;
  const sorted = pttls.map((p) => (p < 0 ? Number.POSITIVE_INFINITY : p)).sort((a, b) => a - b);
  const at = sorted[needed - 1];
  return at === undefined || at === Number.POSITIVE_INFINITY ? -1 : at;
}
