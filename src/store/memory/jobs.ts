import type { ClaimReply, ClaimRequest, FinishReply, FinishRequest, JobState, StoreSettings } from '../port.js';
import { type LockRecord, left, readLease } from './record.js';

/**
 * Whether the job's lease is only kept by lockAtLeastFor for a run of a tick before `tick`, with
 * nobody queued behind it (lua/claim-tick.lua's kept_for): the grant the counter records is the
 * lease's, and its run finished. A plain lock, shared holds, a run still running or one without a
 * tick: false.
 */
function keptFor(job: LockRecord, tick: number): boolean {
  const lease = job.lease && readLease(job.lease);
  if (!lease || job.reservation || lease.flagged || lease.shared !== null || job.fence === 0) return false;
  const run = job.runs.find((r) => r.fence === job.fence);
  return run !== undefined && run.outcome !== 'running' && run.tick !== null && run.tick < tick;
}

/** Claim one tick of the job whose record this is, as lua/claim-tick.lua does. */
export function claimTick(job: LockRecord, request: ClaimRequest, s: StoreSettings): ClaimReply {
  if (job.ownedBy(request.owner)) {
    const grant = job.holder;
    return { claimed: true, fence: grant?.token ?? 0, startedAt: grant?.takenAt ?? 0 };
  }
  const at = Date.now();
  if (request.tick !== null) {
    if (request.tick > at + request.clockTolerance) return { claimed: false, reason: 'clock-skew', now: at };
    if (job.tick !== null && job.tick >= request.tick)
      return { claimed: false, reason: 'already-ran', lastTick: job.tick };
  }
  const blocker = job.lease ?? job.reservation;
  if (blocker) {
    // A later tick takes over a lock only kept by lockAtLeastFor; the tick check above keeps each tick to one run.
    if (request.tick === null || !keptFor(job, request.tick))
      return { claimed: false, reason: 'locked', pttl: left(blocker) };
    job.free(false);
  }
  const fence = job.grant(request.owner, request.ttl, 0, request.instance, s.fenceRetention);
  const startedAt = job.holder?.takenAt ?? at;
  if (request.tick !== null) job.tick = request.tick;
  const { tick, instance } = request;
  job.runs.push({ fence, tick, instance, startedAt, finishedAt: null, outcome: 'running', error: null });
  if (job.runs.length > request.historyLimit) job.runs.splice(0, job.runs.length - request.historyLimit);
  return { claimed: true, fence, startedAt };
}

/** Record how a run ended and end its lease, or keep it for what lockAtLeastFor has left (lua/finish-tick.lua). */
export function finishTick(job: LockRecord, request: FinishRequest, s: StoreSettings): FinishReply {
  const at = Date.now();
  const i = job.runs.findIndex((r) => r.fence === request.fence);
  const run = job.runs[i];
  if (run?.outcome === 'running') {
    job.runs[i] = { ...run, finishedAt: at, outcome: request.outcome, error: request.error };
  }
  if (job.ownedBy(request.owner)) {
    const remaining = request.startedAt + request.lockAtLeastFor - at;
    if (remaining > 0) {
      job.extend(remaining);
      return { lease: 'kept', remaining };
    }
  }
  return { lease: job.endLease(request.owner, s.handOn) };
}

/** The job's lock state, latest tick and newest `limit` runs (lua/read-job.lua). */
export function readJob(job: LockRecord, limit: number): JobState {
  return {
    held: job.lease !== undefined,
    fence: job.fence,
    lastTick: job.tick,
    runs: job.runs.slice(-limit).reverse(),
  };
}
