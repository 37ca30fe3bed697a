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

/**
 * What a script may do, as Redis Functions flags: `read` runs no write command; `free` only ends or
 * shortens leases, so it must run even when the server is out of memory (release, leave, extend).
 */
type Access = 'write' | 'read' | 'free';

/**
 * A Lua script: its source and SHA1 for EVALSHA/EVAL, and its name in the function library for
 * FCALL (see LIBRARY below).
 */
export interface Script {
  readonly name: string;
  /** The script as EVAL runs it, includes resolved. */
  readonly source: string;
  readonly sha: string;
  /** Its function's name in the library: `leasehold_<version>_<name>`. */
  readonly fn: string;
  readonly access: Access;
  /** The script's own text, includes left out (the library defines them once). */
  readonly body: string;
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

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');

/** What every script's source hashes to together: the library's version, in its name. */
const SOURCES: readonly (readonly [string, string, Access])[] = [
  ['acquire', acquireSource, 'write'],
  ['release', releaseSource, 'free'],
  ['leave', leaveSource, 'free'],
  ['extend', extendSource, 'free'],
  ['raise-fence', raiseFenceSource, 'write'],
  ['inspect', inspectSource, 'read'],
  ['claim-tick', claimTickSource, 'write'],
  ['finish-tick', finishTickSource, 'free'],
  ['read-job', readJobSource, 'read'],
  ['force-release', forceReleaseSource, 'free'],
  ['queued', queuedSource, 'read'],
  ['scan-locks', scanLocksSource, 'read'],
];

const VERSION = sha1(SOURCES.map(([, source]) => source).join('\0') + Object.values(LIBRARY).join('\0')).slice(0, 10);

/** The function library's name on the server; a different build of leasehold loads its own. */
export const LIBRARY_NAME = `leasehold_${VERSION}`;

function script(name: string, source: string, access: Access): Script {
  const resolved = resolveIncludes(name, source);
  return Object.freeze({
    name,
    source: resolved,
    sha: sha1(resolved),
    fn: `${LIBRARY_NAME}_${name.replace(/-/g, '_')}`,
    access,
    body: source.replace(INCLUDE, '').trim(),
  });
}

const ALL = SOURCES.map(([name, source, access]) => script(name, source, access));
const byName = (name: string): Script => ALL.find((s) => s.name === name) as Script;

/** One script per state change; see each file's header for KEYS, ARGV and every return code. */
export const SCRIPTS = Object.freeze({
  acquire: byName('acquire'),
  release: byName('release'),
  leave: byName('leave'),
  extend: byName('extend'),
  raiseFence: byName('raise-fence'),
  inspect: byName('inspect'),
  claimTick: byName('claim-tick'),
  finishTick: byName('finish-tick'),
  readJob: byName('read-job'),
  forceRelease: byName('force-release'),
  queued: byName('queued'),
  scanLocks: byName('scan-locks'),
});

const FLAGS: Readonly<Record<Access, string>> = {
  write: '{}',
  read: "{'no-writes'}",
  free: "{'allow-oom'}",
};

/**
 * Every script as one Redis Functions library (Redis 7 and later): the shared steps defined once,
 * each script a function of (KEYS, ARGV) with its own text as the body. FCALL skips what EVALSHA
 * does on every call (look the script up, build the KEYS and ARGV globals), and a function library
 * is replicated and persisted with the data, so a promoted replica or a restarted server has it.
 */
export const LIBRARY_SOURCE = [
  `#!lua name=${LIBRARY_NAME}`,
  ...Object.values(LIBRARY).map((lib) => lib.trimEnd()),
  ...ALL.map(
    (s) =>
      `redis.register_function{function_name='${s.fn}', flags=${FLAGS[s.access]}, callback=function(KEYS, ARGV)\n${s.body}\nend}`,
  ),
].join('\n');
