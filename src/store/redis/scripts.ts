import { createHash } from 'node:crypto';
import acquireSource from './lua/acquire.lua';
import claimTickSource from './lua/claim-tick.lua';
import extendSource from './lua/extend.lua';
import finishTickSource from './lua/finish-tick.lua';
import forceReleaseSource from './lua/force-release.lua';
import handOnSource from './lua/hand-on.lua';
import inspectSource from './lua/inspect.lua';
import leaveSource from './lua/leave.lua';
import queuedSource from './lua/queued.lua';
import raiseFenceSource from './lua/raise-fence.lua';
import readJobSource from './lua/read-job.lua';
import releaseSource from './lua/release.lua';
import scanLocksSource from './lua/scan-locks.lua';

/** A Lua script with its SHA1, so the runner can EVALSHA first. */
export interface Script {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

function script(name: string, source: string): Script {
  return Object.freeze({ name, source, sha: createHash('sha1').update(source).digest('hex') });
}

/** Scripts that hand a freed lock to the next waiter share one Lua function, put in front of them. */
function handingOn(source: string): string {
  return `${handOnSource}\n${source}`;
}

/** One script per state change; see each file's header for KEYS, ARGV and every return code. */
export const SCRIPTS = Object.freeze({
  acquire: script('acquire', acquireSource),
  release: script('release', handingOn(releaseSource)),
  leave: script('leave', handingOn(leaveSource)),
  extend: script('extend', extendSource),
  raiseFence: script('raise-fence', raiseFenceSource),
  inspect: script('inspect', inspectSource),
  claimTick: script('claim-tick', claimTickSource),
  finishTick: script('finish-tick', finishTickSource),
  readJob: script('read-job', readJobSource),
  forceRelease: script('force-release', handingOn(forceReleaseSource)),
  queued: script('queued', queuedSource),
  scanLocks: script('scan-locks', scanLocksSource),
});
