import { createHash } from 'node:crypto';
import acquireSource from './lua/acquire.lua';
import claimTickSource from './lua/claim-tick.lua';
import extendSource from './lua/extend.lua';
import finishTickSource from './lua/finish-tick.lua';
import forceReleaseSource from './lua/force-release.lua';
import inspectSource from './lua/inspect.lua';
import leaveSource from './lua/leave.lua';
import handOnLib from './lua/lib/hand-on.lua';
import leaseLib from './lua/lib/lease.lua';
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

/** The shared steps a script may include, by the path its `-- include:` line names. */
const LIBRARY: Readonly<Record<string, string>> = {
  'lib/lease.lua': leaseLib,
  'lib/hand-on.lua': handOnLib,
};

const INCLUDE = /^-- include: (\S+)$/gm;

/** A script's source with each `-- include: lib/…` line replaced by that file, as Redis will run it. */
export function resolveIncludes(name: string, source: string): string {
  return source.replace(INCLUDE, (_, path: string) => {
    const lib = LIBRARY[path];
    if (lib === undefined) throw new Error(`${name}.lua includes ${path}, which is not in the Lua library`);
    return lib.trimEnd();
  });
}

function script(name: string, source: string): Script {
  const resolved = resolveIncludes(name, source);
  return Object.freeze({ name, source: resolved, sha: createHash('sha1').update(resolved).digest('hex') });
}

/** One script per state change; see each file's header for KEYS, ARGV and every return code. */
export const SCRIPTS = Object.freeze({
  acquire: script('acquire', acquireSource),
  release: script('release', releaseSource),
  leave: script('leave', leaveSource),
  extend: script('extend', extendSource),
  raiseFence: script('raise-fence', raiseFenceSource),
  inspect: script('inspect', inspectSource),
  claimTick: script('claim-tick', claimTickSource),
  finishTick: script('finish-tick', finishTickSource),
  readJob: script('read-job', readJobSource),
  forceRelease: script('force-release', forceReleaseSource),
  queued: script('queued', queuedSource),
  scanLocks: script('scan-locks', scanLocksSource),
});
