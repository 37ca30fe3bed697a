import { DEFAULTS } from '../../core/defaults.js';
import type { Finding } from './finding.js';
import type { NodeFacts } from './probe.js';

/**
 * The deployment checks: each reads the facts of one server and says what it means for locks,
 * why, and what to set. Pure functions of the facts, so every branch can be read (and tested)
 * without a server configured that way.
 */

const TOTAL_SLOTS = 16_384;
/** A replica further behind than this (INFO's lag, in seconds) widens the window a failover loses. */
const LAG_WARN_S = 1;
/** Clock offsets below this are noise; above it, scheduled jobs notice. */
const CLOCK_WARN_MS = 100;

function num(value: string | undefined | null): number | undefined {
  if (value === undefined || value === null || value.trim() === '') return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}

function bytes(n: number): string {
  if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(1)} GB`;
  if (n >= 1 << 20) return `${Math.round(n / (1 << 20))} MB`;
  return `${n} bytes`;
}

type Details = Readonly<Record<string, unknown>>;

/** A check that found nothing to fix. */
function ok(check: string, summary: string, details?: Details): Finding {
  return { check, level: 'ok', summary, ...(details === undefined ? {} : { details }) };
}

/** A check that found something: what, why it matters for locks, what to set. */
function found(
  level: 'warn' | 'unsafe',
  check: string,
  summary: string,
  [why, fix]: readonly [string, string],
  details?: Details,
): Finding {
  return { check, level, summary, why, fix, ...(details === undefined ? {} : { details }) };
}

export function version(facts: NodeFacts): Finding {
  const v = facts.info.get('redis_version');
  if (v === undefined) {
    return found(
      'warn',
      'version',
      `cannot read the server's version (INFO: ${facts.infoError ?? 'no redis_version'})`,
      [
        'doctor reads most settings from INFO; without it the checks below are guesses.',
        'run doctor as a user allowed INFO (ACL: +info).',
      ],
    );
  }
  const name =
    facts.info.get('server_name') === 'valkey' ? `Valkey ${facts.info.get('valkey_version') ?? v}` : `Redis ${v}`;
  const [major = 0, minor = 0] = v.split('.').map(Number);
  if (major >= 7) return ok('version', `${name}: Redis Functions available`);
  if (major === 6 && minor >= 2) {
    return ok('version', `${name}: no Redis Functions; leasehold runs its scripts by EVALSHA`);
  }
  return found('unsafe', 'version', `${name} is older than Redis 6.2`, [
    'every acquire issues its fencing token with SET … GET, which Redis 6.2 added: here each one fails with STORE_ERROR.',
    'upgrade to Redis 7 (or Valkey).',
  ]);
}

export function scripts(facts: NodeFacts): Finding {
  const s = facts.scripts;
  const loaded = s.libraries.length > 0 ? `; library ${s.libraries.join(', ')} loaded` : '';
  const functions = s.fcall === 'allowed' && (s.functionLoad === 'allowed' || s.libraries.length > 0);
  const evals = s.evalsha === 'allowed' && s.eval === 'allowed';
  const probes = `FCALL ${s.fcall}, FUNCTION LOAD ${s.functionLoad}, EVALSHA ${s.evalsha}, EVAL ${s.eval}`;
  if (functions) {
    return ok('scripts', `scripts run as functions (FCALL)${loaded}`, { ...s });
  }
  if (evals) {
    const why = s.fcall === 'refused' || s.functionLoad === 'refused' ? 'refused to this user' : 'not available';
    return ok('scripts', `functions ${why}: leasehold runs its scripts by EVALSHA, and EVAL once per script`, { ...s });
  }
  return found(
    'unsafe',
    'scripts',
    `this user cannot run leasehold's scripts (${probes})`,
    [
      'every state change of a lock is one script; refused, every acquire and release fails with STORE_ERROR (NOPERM).',
      'allow the scripting commands to the user leasehold connects as: ACL SETUSER <user> +@scripting (or +fcall +function|load, or +evalsha +eval).',
    ],
    { ...s },
  );
}

export function eviction(facts: NodeFacts): Finding {
  const policy = facts.info.get('maxmemory_policy');
  const maxmemory = num(facts.info.get('maxmemory')) ?? 0;
  if (policy === undefined) {
    return found('warn', 'eviction', 'cannot read maxmemory-policy (INFO memory)', [
      'an eviction policy other than noeviction lets Redis delete held locks under memory pressure.',
      'check that maxmemory-policy is noeviction.',
    ]);
  }
  if (policy === 'noeviction') {
    return ok(
      'eviction',
      'maxmemory-policy noeviction: nothing is evicted; at the memory limit writes fail with OOM, never silently',
    );
  }
  const limit = maxmemory > 0 ? `maxmemory ${bytes(maxmemory)}` : 'no maxmemory set yet';
  const whatGoes = policy.startsWith('allkeys')
    ? "any key: a held lock (a second owner takes it), a job's tick marker (a tick can run again) and its run history"
    : 'keys that have a TTL, and every lease has one: a held lock can vanish and a second owner take it';
  return found(
    maxmemory > 0 ? 'unsafe' : 'warn',
    'eviction',
    `maxmemory-policy ${policy} (${limit})`,
    [
      `under memory pressure Redis evicts ${whatGoes}.${maxmemory > 0 ? '' : ' Nothing is evicted until a maxmemory is set; managed services set one.'}`,
      'maxmemory-policy noeviction (redis.conf, CONFIG SET maxmemory-policy noeviction, or the parameter group of a managed service); keep data that needs eviction on another server.',
    ],
    { policy, maxmemory },
  );
}

export function persistence(facts: NodeFacts): Finding {
  const aof = facts.info.get('aof_enabled');
  const fsync = facts.config.appendfsync;
  const fenced =
    'fence the resource in every case (leasehold/fencing): tokens stay above every earlier one after a restart';
  if (aof === undefined) {
    return found('warn', 'persistence', 'cannot read appendonly (INFO persistence)', [
      'without persistence a restart ends every held lease early.',
      'check appendonly yes and appendfsync always.',
    ]);
  }
  if (aof !== '1') {
    const save = facts.config.save;
    const rdb = save !== null && save.trim() !== '' ? `RDB snapshots only (save ${save})` : 'no RDB snapshots either';
    return found(
      'warn',
      'persistence',
      `appendonly no, ${rdb}`,
      [
        'a restart (or a crash) forgets the leases granted since the last snapshot: a second owner can take a lock while the first still works.',
        `appendonly yes and appendfsync always where a lock must survive a restart; ${fenced}.`,
      ],
      { appendonly: false, save },
    );
  }
  if (facts.info.get('aof_last_write_status') === 'err') {
    return found('warn', 'persistence', 'appendonly yes, but the last AOF write failed (aof_last_write_status:err)', [
      'grants that are not written to the AOF are lost in a restart.',
      'look at the server log: disk full, permissions.',
    ]);
  }
  if (fsync === 'always') {
    return ok('persistence', 'appendonly yes, appendfsync always: an acknowledged grant survives a restart');
  }
  const window =
    fsync === 'everysec'
      ? 'up to the last second'
      : fsync === 'no'
        ? 'up to ~30 s (the OS decides)'
        : 'an unknown window';
  return found(
    'warn',
    'persistence',
    fsync === null
      ? `appendonly yes; appendfsync unknown (CONFIG: ${facts.configError ?? 'not reported'})`
      : `appendonly yes, appendfsync ${fsync}`,
    [
      `a crash loses ${window} of grants: a lock granted just before it can be granted again to a second owner after the restart.`,
      `appendfsync always (writes wait for the disk), or accept the window and ${fenced}.`,
    ],
    { appendonly: true, appendfsync: fsync },
  );
}

interface Replica {
  readonly address: string;
  readonly state: string;
  readonly lag: number | undefined;
}

function replicasOf(info: ReadonlyMap<string, string>): Replica[] {
  const replicas: Replica[] = [];
  for (const [key, value] of info) {
    if (!/^slave\d+$/.test(key)) continue;
    const fields = new Map(value.split(',').map((kv) => kv.split('=') as [string, string]));
    replicas.push({
      address: `${fields.get('ip') ?? '?'}:${fields.get('port') ?? '?'}`,
      state: fields.get('state') ?? '?',
      lag: num(fields.get('lag')),
    });
  }
  return replicas;
}

export function replication(facts: NodeFacts): Finding[] {
  const role = facts.info.get('role');
  if (role === undefined) return [];
  if (role === 'slave') {
    const master = `${facts.info.get('master_host') ?? '?'}:${facts.info.get('master_port') ?? '?'}`;
    return [
      found(
        'unsafe',
        'replication',
        `this server is a replica of ${master} (link ${facts.info.get('master_link_status') ?? '?'})`,
        [
          "leasehold's writes fail here with READONLY, or, on a writable replica, never reach the master.",
          'point leasehold (and --redis) at the master, or at Sentinel, which follows it.',
        ],
      ),
    ];
  }
  const replicas = replicasOf(facts.info);
  if (replicas.length === 0) {
    return [
      ok(
        'replication',
        'no replicas: no failover can hand a lock to a second owner (nor take over if this server stops)',
      ),
    ];
  }
  const findings: Finding[] = [];
  const minToWrite = num(facts.config['min-replicas-to-write']) ?? 0;
  const good = num(facts.info.get('min_slaves_good_slaves'));
  const list = replicas.map((r) => r.address).join(', ');
  if (minToWrite > 0 && good !== undefined && good < minToWrite) {
    findings.push(
      found(
        'unsafe',
        'replication',
        `min-replicas-to-write ${minToWrite}, but only ${good} of ${replicas.length} replicas are in time`,
        [
          'the master refuses every write (NOREPLICAS): no lock can be taken or released until the replicas catch up.',
          'bring the replicas back, or lower min-replicas-to-write.',
        ],
      ),
    );
  } else {
    const bound =
      minToWrite > 0
        ? `min-replicas-to-write ${minToWrite}, min-replicas-max-lag ${facts.config['min-replicas-max-lag'] ?? '?'}`
        : 'min-replicas-to-write 0';
    findings.push(
      found(
        'warn',
        'replication',
        `${replicas.length} ${replicas.length === 1 ? 'replica' : 'replicas'} (${list}), replicated asynchronously; ${bound}`,
        [
          'a grant is acknowledged before any replica has it: a failover in that window loses the lock, and a second owner can take it (its higher token lets a fenced resource refuse the first).',
          'fence the resource (leasehold/fencing); the option replicas: 1 makes a grant count only once a replica has it (WAIT); min-replicas-to-write 1 with min-replicas-max-lag 10 stops writes when replicas fall behind; see docs/deployments.md.',
        ],
        { replicas, minReplicasToWrite: minToWrite },
      ),
    );
  }
  const behind = replicas.filter((r) => r.state !== 'online' || (r.lag ?? 0) > LAG_WARN_S);
  if (behind.length > 0) {
    findings.push(
      found(
        'warn',
        'replica-lag',
        behind.map((r) => `${r.address} ${r.state}, lag ${r.lag ?? '?'} s`).join('; '),
        [
          'a replica behind the master loses more recent grants if it is promoted.',
          'look at the replica link (master_link_status on the replica, network, load); min-replicas-max-lag stops writes past a bound.',
        ],
        { behind },
      ),
    );
  }
  return findings;
}

export function cluster(facts: NodeFacts): Finding | null {
  const c = facts.cluster;
  if (c === null) return null;
  const state = c.get('cluster_state') ?? '?';
  const assigned = num(c.get('cluster_slots_assigned')) ?? 0;
  const slotsOk = num(c.get('cluster_slots_ok')) ?? 0;
  const pfail = num(c.get('cluster_slots_pfail')) ?? 0;
  const fail = num(c.get('cluster_slots_fail')) ?? 0;
  const size = c.get('cluster_size') ?? '?';
  const details = { state, assigned, ok: slotsOk, pfail, fail, size, knownNodes: num(c.get('cluster_known_nodes')) };
  if (state !== 'ok' || assigned < TOTAL_SLOTS || fail > 0) {
    const uncovered = TOTAL_SLOTS - assigned;
    return found(
      'unsafe',
      'cluster',
      `cluster_state ${state}: ${assigned} of ${TOTAL_SLOTS} slots assigned, ${fail} failing${uncovered > 0 ? `, ${uncovered} not covered` : ''}`,
      [
        'a lock whose name hashes to a slot nobody serves fails with CLUSTERDOWN; with cluster_state fail every command is refused.',
        'assign every slot to a reachable master (redis-cli --cluster check / fix) and bring failed masters back or fail them over.',
      ],
      details,
    );
  }
  if (pfail > 0 || slotsOk < TOTAL_SLOTS) {
    return found(
      'warn',
      'cluster',
      `cluster_state ok, but ${pfail} slots are on masters other nodes suspect (pfail)`,
      [
        'a master about to be failed over can lose the grants it has not replicated.',
        'look at the suspected masters (CLUSTER NODES): network, load.',
      ],
      details,
    );
  }
  return ok('cluster', `cluster_state ok: all ${TOTAL_SLOTS} slots covered, ${size} masters`, details);
}

export function clock(facts: NodeFacts): Finding | null {
  const c = facts.clock;
  if (c === null) return null;
  const tolerance = DEFAULTS.clockTolerance;
  const offset = Math.abs(c.offsetMs) < 10 ? Number(c.offsetMs.toFixed(1)) : Math.round(c.offsetMs);
  const plusMinus = Math.max(0.1, c.rttMs / 2).toFixed(1);
  // The true offset lies within half a round trip of the measured one.
  const least = Math.max(0, Math.abs(c.offsetMs) - c.rttMs / 2);
  const which = offset > 0 ? 'ahead of' : 'behind';
  const summary =
    Math.abs(c.offsetMs) <= c.rttMs / 2
      ? `the server's clock agrees with this machine's within the round trip (±${plusMinus} ms)`
      : `the server's clock is ${Math.abs(offset)} ms (±${plusMinus} ms) ${which} this machine's`;
  const details = { offsetMs: c.offsetMs, rttMs: c.rttMs, clockToleranceMs: tolerance };
  if (least < CLOCK_WARN_MS) {
    return ok('clock', `${summary}: leases do not depend on it; the scheduler tolerates ${tolerance} ms`, details);
  }
  return found(
    least >= tolerance ? 'unsafe' : 'warn',
    'clock',
    summary,
    [
      `leases are timed on the server and on each client's monotonic clock, but scheduled jobs claim ticks by the server's TIME: an instance ahead of it by more than clockTolerance (${tolerance} ms) has every claim skipped as clock-skew (jobs stop), one ahead by less may claim a tick that early.`,
      'run NTP (chrony) on the application hosts and the Redis host, slewing rather than stepping; run doctor from the application hosts, whose clocks are the ones that count.',
    ],
    details,
  );
}

export function latency(facts: NodeFacts): Finding | null {
  const l = facts.latency;
  if (l === null) return null;
  const timeout = DEFAULTS.commandTimeout;
  const ttl = DEFAULTS.ttl;
  const median = l.medianMs.toFixed(1);
  const max = l.maxMs.toFixed(1);
  const summary = `round trip median ${median} ms, max ${max} ms over ${l.samples} PINGs`;
  const details = { ...l, commandTimeoutMs: timeout, ttlMs: ttl };
  if (l.maxMs >= timeout) {
    return found(
      'unsafe',
      'latency',
      `${summary}: above commandTimeout (${timeout} ms)`,
      [
        'a call slower than commandTimeout fails with StoreUnavailableError: acquisitions fail and held leases stop being extended.',
        'run the application near its Redis; if the network is this slow, raise commandTimeout and the ttl with it.',
      ],
      details,
    );
  }
  if (l.medianMs >= timeout / 10 || l.maxMs >= timeout / 4) {
    return found(
      'warn',
      'latency',
      `${summary}: a large part of commandTimeout (${timeout} ms)`,
      [
        `every grant loses a round trip of its validity, and the watchdog's extensions (every ttl/3) must land in time; with ttl ${ttl} ms and spikes like these, calls near the timeout fail.`,
        'run the application near its Redis; raise commandTimeout above the spikes, and keep the ttl well above it.',
      ],
      details,
    );
  }
  return ok(
    'latency',
    `${summary}: well inside commandTimeout (${timeout} ms) and the default ttl (${ttl} ms)`,
    details,
  );
}

/**
 * Every deployment check of one server, in the order they are shown; the cluster's health is
 * judged once, on the node the URL names (`withCluster`), not again on every master.
 */
export function serverFindings(facts: NodeFacts, withCluster: boolean): Finding[] {
  const all = [
    version(facts),
    scripts(facts),
    eviction(facts),
    persistence(facts),
    ...replication(facts),
    withCluster ? cluster(facts) : null,
    clock(facts),
    latency(facts),
  ];
  return all.filter((f): f is Finding => f !== null);
}
