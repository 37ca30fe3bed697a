import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Finding } from '../../src/cli/doctor/finding.js';
import type { NodeFacts } from '../../src/cli/doctor/probe.js';
import { clock, cluster, latency, persistence, replication, version } from '../../src/cli/doctor/rules.js';
import { looksLikeFenceRecord, looksLikeLockName, looksLikeToken } from '../../src/cli/doctor/scan.js';
import { Leasehold } from '../../src/index.js';
import { type RedisServer, randomPrefix, startCluster, startRedis, waitFor } from '../harness/index.js';
import { snapshotCli } from './snapshot.js';

/** `leasehold doctor`, the built CLI run as a real process against real servers configured safe and unsafe. */

/** A copy of the built CLI where ioredis still resolves: a build started meanwhile cleans dist/ first. */
let CLI = '';

interface Report {
  level: 'ok' | 'warn' | 'unsafe';
  exitCode: number;
  topology: string;
  nodes: string[];
  redis: string;
  findings: Finding[];
  scan: {
    scanned: number;
    total: number;
    complete: boolean;
    leasehold: { own: number; otherPrefixes: Record<string, number> };
  };
}

/** Without colour, whatever the test runner's environment asks for. */
const PLAIN: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
delete PLAIN.FORCE_COLOR;

function doctor(url: string, ...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'doctor', '--redis', url, ...args], {
    encoding: 'utf8',
    timeout: 20_000,
    env: PLAIN,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function report(url: string, ...args: string[]): { code: number | null; json: Report; stderr: string } {
  const r = doctor(url, '--json', ...args);
  return { code: r.code, json: JSON.parse(r.stdout) as Report, stderr: r.stderr };
}

function finding(json: Report, check: string): Finding {
  const found = json.findings.find((f) => f.check === check);
  if (!found) throw new Error(`no ${check} finding in ${json.findings.map((f) => f.check).join(', ')}`);
  return found;
}

describe('leasehold doctor', () => {
  const servers: RedisServer[] = [];
  let safe: RedisServer;
  let unsafe: RedisServer;

  beforeAll(async () => {
    CLI = await snapshotCli('doctor');
    [safe, unsafe] = await Promise.all([
      startRedis({ args: ['--appendonly', 'yes', '--appendfsync', 'always', '--maxmemory-policy', 'noeviction'] }),
      // The tutorials' Redis: a cache's eviction policy and no persistence.
      startRedis({ args: ['--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru', '--appendonly', 'no'] }),
    ]);
    servers.push(safe, unsafe);
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    rmSync(dirname(CLI), { recursive: true, force: true });
  });

  it('finds nothing unsafe on a server configured as leasehold asks, and leaves leasehold’s own keys alone', async () => {
    const prefix = randomPrefix();
    const other = randomPrefix();
    const client = new Redis(safe.url);
    const mine = new Leasehold(client, { prefix });
    const theirs = new Leasehold(client, { prefix: other });
    try {
      // A held lock, a finished job (its tick marker and history have no TTL, by design), and a
      // lock under a prefix doctor is not told about, named like a lock.
      const held = await mine.acquire('order-lock:1');
      await mine.runOnce('nightly', async () => 'done', { tick: new Date(Date.now() - 60_000) });
      const elsewhere = await theirs.acquire('stock-lock:9');
      const { code, json } = report(safe.url, '--prefix', prefix);
      expect(code).toBe(0);
      expect(json.findings.filter((f) => f.level === 'unsafe')).toEqual([]);
      for (const check of ['eviction', 'persistence', 'replication', 'scripts', 'version']) {
        expect(finding(json, check).level, check).toBe('ok');
      }
      expect(finding(json, 'persistence').summary).toContain('appendfsync always');
      const checks = json.findings.map((f) => f.check);
      expect(checks).not.toContain('lock-without-ttl');
      expect(checks).not.toContain('constant-lock-value');
      expect(json.scan.leasehold.own).toBeGreaterThanOrEqual(3);
      expect(json.scan.leasehold.otherPrefixes[other]).toBeGreaterThanOrEqual(1);
      expect(json.scan.complete).toBe(true);
      await held.release();
      await elsewhere.release();
    } finally {
      await mine.close();
      await theirs.close();
      client.disconnect();
    }
  });

  it('flags an eviction policy as unsafe and missing persistence as a warning, with why and what to set; exit 3', () => {
    const { code, stdout } = doctor(unsafe.url, '--scan-limit', '0');
    expect(code).toBe(3);
    expect(stdout).toMatch(/^UNSAFE\s+eviction\s+maxmemory-policy allkeys-lru \(maxmemory 64 MB\)$/m);
    expect(stdout).toMatch(/^\s+fix: maxmemory-policy noeviction/m);
    expect(stdout).toMatch(/^WARN\s+persistence\s+appendonly no/m);
    expect(stdout).toMatch(/^verdict: UNSAFE \(1 unsafe, 1 warning, \d+ ok\): exit status 3$/m);
    const { json } = report(unsafe.url, '--scan-limit', '0');
    expect(json.level).toBe('unsafe');
    expect(json.exitCode).toBe(3);
    expect(finding(json, 'eviction')).toMatchObject({ level: 'unsafe', details: { policy: 'allkeys-lru' } });
    expect(finding(json, 'eviction').why).toContain('held lock');
    expect(finding(json, 'persistence').level).toBe('warn');
    expect(json.scan).toBeNull();
  });

  it('finds hand-rolled locks: no TTL (unsafe), constant values, many keys sharing one value, token-shaped values without TTL', async () => {
    const client = new Redis(unsafe.url);
    try {
      const base = randomPrefix();
      const pipeline = client.pipeline();
      pipeline.set(`${base}:app:lock:orders`, '1'); // the deadlock: no TTL, and a constant
      pipeline.set(`${base}:mutex:payments`, '3f2a1c9e-1111-4222-8333-444455556666'); // no TTL
      pipeline.set(`${base}:nightly.lock`, 'locked', 'PX', 600_000); // the stale delete: a constant
      for (let i = 0; i < 25; i++) pipeline.set(`${base}:order:${1000 + i}:processing`, '1', 'EX', 600);
      pipeline.set(`${base}:session:abc`, 'b1946ac92492d2347c6235b4d2611184'); // token-shaped, no TTL
      // Not locks, whatever their names: no finding may name them.
      pipeline.set(`${base}:clock:offset`, '5');
      pipeline.sadd(`${base}:blocklist:ips`, '10.0.0.1');
      pipeline.set(`${base}:user:1:name`, 'alice');
      await pipeline.exec();
      const { code, json, stderr } = report(unsafe.url);
      expect(code).toBe(3);
      expect(stderr).toMatch(/scanning keys: \d+/);
      const keysOf = (check: string) =>
        ((finding(json, check).details?.examples ?? []) as { key: string }[]).map((e) => e.key).sort();
      expect(finding(json, 'lock-without-ttl').level).toBe('unsafe');
      expect(keysOf('lock-without-ttl')).toEqual([`${base}:app:lock:orders`, `${base}:mutex:payments`]);
      expect(finding(json, 'constant-lock-value').level).toBe('warn');
      expect(keysOf('constant-lock-value')).toEqual([`${base}:app:lock:orders`, `${base}:nightly.lock`]);
      expect(finding(json, 'constant-lock-value').details?.values).toEqual({ '1': 1, locked: 1 });
      const shared = finding(json, 'shared-constant-value');
      expect(shared.summary).toContain(
        `25 keys of the form ${base.replace(/[0-9a-f]{8,}|\d+/g, '*')}:order:*:processing`,
      );
      expect(keysOf('token-without-ttl')).toEqual([`${base}:session:abc`]);
      const named = JSON.stringify(json.findings);
      for (const innocent of ['clock:offset', 'blocklist:ips', 'user:1:name']) expect(named).not.toContain(innocent);

      // Bounded: the scan stops at the limit and says so.
      const bounded = report(unsafe.url, '--scan-limit', '5').json;
      expect(bounded.scan).toMatchObject({ scanned: 5, complete: false });
      expect(doctor(unsafe.url, '--scan-limit', '5').stdout).toContain('(stopped at --scan-limit)');
    } finally {
      client.disconnect();
    }
  });

  it('reports a user refused the scripting commands as unsafe, CONFIG refused as unknown, and never prints the password', async () => {
    await safe.command('ACL', 'SETUSER', 'limited', 'on', '>s3cret-pw', '~*', '&*', '+@all', '-@scripting', '-config');
    const url = `redis://limited:s3cret-pw@127.0.0.1:${safe.port}`;
    const { code, json } = report(url, '--scan-limit', '0');
    expect(code).toBe(3);
    expect(finding(json, 'scripts')).toMatchObject({ level: 'unsafe', details: { eval: 'refused', fcall: 'refused' } });
    expect(finding(json, 'scripts').fix).toContain('+@scripting');
    expect(finding(json, 'persistence')).toMatchObject({ level: 'warn' });
    expect(finding(json, 'persistence').summary).toContain('appendfsync unknown');
    expect(json.redis).toBe(`redis://limited:***@127.0.0.1:${safe.port}`);
    const human = doctor(url, '--scan-limit', '0');
    expect(human.stdout + human.stderr).not.toContain('s3cret-pw');
  });

  it('sees replication: a replica URL is unsafe, a master with an asynchronous replica a warning', async () => {
    const primary = await startRedis({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
    servers.push(primary);
    const replica = await startRedis({ args: ['--replicaof', '127.0.0.1', String(primary.port)] });
    servers.push(replica);
    await waitFor(async () => /connected_slaves:1/.test(await primary.command('INFO', 'replication')), {
      message: 'the replica is connected',
    });
    const onReplica = report(replica.url, '--scan-limit', '0');
    expect(onReplica.code).toBe(3);
    expect(finding(onReplica.json, 'replication')).toMatchObject({ level: 'unsafe' });
    expect(finding(onReplica.json, 'replication').summary).toContain(`replica of 127.0.0.1:${primary.port}`);
    const onPrimary = report(primary.url, '--scan-limit', '0');
    expect(onPrimary.code).toBe(0);
    expect(finding(onPrimary.json, 'replication')).toMatchObject({ level: 'warn' });
    expect(finding(onPrimary.json, 'replication').summary).toMatch(
      /^1 replica \(127\.0\.0\.1:\d+\), replicated asynchronously/,
    );
  });

  it('checks every master of a Cluster and scans each; a slot left uncovered makes it unsafe', async () => {
    const cluster = await startCluster({ masters: 3 });
    const client = new Cluster(cluster.startupNodes);
    try {
      const base = randomPrefix();
      // Hand-rolled locks in slots of different masters: the scan must find each one.
      const names = ['{a}', '{b}', '{c}', '{d}', '{e}', '{f}'].map((tag) => `${base}:lock:${tag}`);
      for (const name of names) await client.set(name, '1');
      const first = cluster.nodes[0] as RedisServer;
      const { code, json } = report(first.url);
      expect(code).toBe(3);
      expect(json.topology).toBe('cluster');
      expect(json.nodes).toHaveLength(3);
      expect(finding(json, 'cluster')).toMatchObject({ level: 'ok' });
      expect(
        json.findings
          .filter((f) => f.check === 'eviction')
          .map((f) => f.node)
          .sort(),
      ).toEqual(cluster.nodes.map((n) => `127.0.0.1:${n.port}`).sort());
      expect(finding(json, 'lock-without-ttl').details?.keys).toBe(names.length);

      // A slot nobody serves: with cluster-require-full-coverage (the default) the cluster stops.
      const slot = String(await client.cluster('KEYSLOT', names[0] as string));
      const owner = (await client.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
      const port = owner.find(([from, to]) => Number(slot) >= from && Number(slot) <= to)?.[2][1];
      const node = cluster.nodes.find((n) => n.port === port) as RedisServer;
      await node.command('CLUSTER', 'DELSLOTS', slot);
      await waitFor(async () => /cluster_state:fail/.test(await node.command('CLUSTER', 'INFO')), {
        message: 'the cluster notices the uncovered slot',
      });
      const broken = report(node.url, '--scan-limit', '0').json;
      expect(finding(broken, 'cluster')).toMatchObject({ level: 'unsafe' });
      expect(finding(broken, 'cluster').summary).toContain('16383 of 16384 slots assigned');
    } finally {
      client.disconnect();
      await cluster.stop();
    }
  });

  it('wrong use exits 2; an unreachable server exits 1', () => {
    const bad = doctor(safe.url, '--scan-limit', 'lots');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--scan-limit must be an integer');
    const gone = doctor('redis://127.0.0.1:1');
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain('cannot connect to 127.0.0.1:1');
  });
});

/** The rules whose inputs no test server can be configured into (a clock offset, a failing cluster, slow links). */
describe('doctor rules on facts', () => {
  const facts = (over: Partial<NodeFacts>): NodeFacts => ({
    node: '10.0.0.1:6379',
    info: new Map(),
    config: { appendfsync: null, 'min-replicas-to-write': null, 'min-replicas-max-lag': null, save: null },
    scripts: { fcall: 'allowed', functionLoad: 'allowed', evalsha: 'allowed', eval: 'allowed', libraries: [] },
    clock: null,
    latency: null,
    cluster: null,
    ...over,
  });

  it('version: Redis 6.2 or later is ok; an older server is unsafe, since every acquire needs SET … GET', () => {
    const on = (v: string) => version(facts({ info: new Map([['redis_version', v]]) }));
    expect(on('7.0.15').level).toBe('ok');
    expect(on('6.2.14')).toMatchObject({
      level: 'ok',
      summary: 'Redis 6.2.14: no Redis Functions; leasehold runs its scripts by EVALSHA',
    });
    expect(on('6.0.16')).toMatchObject({ level: 'unsafe', summary: 'Redis 6.0.16 is older than Redis 6.2' });
    expect(on('5.0.7').level).toBe('unsafe');
  });

  it('clock offset: ok within 100 ms, a warning below clockTolerance, unsafe beyond it (net of half the round trip)', () => {
    expect(clock(facts({ clock: { offsetMs: 3, rttMs: 0.4 } }))?.level).toBe('ok');
    expect(clock(facts({ clock: { offsetMs: -400, rttMs: 2 } }))?.level).toBe('warn');
    const ahead = clock(facts({ clock: { offsetMs: 1_500, rttMs: 10 } }));
    expect(ahead).toMatchObject({ level: 'unsafe' });
    expect(ahead?.summary).toBe("the server's clock is 1500 ms (±5.0 ms) ahead of this machine's");
    // Within the measurement's uncertainty of the threshold, it is not called unsafe.
    expect(clock(facts({ clock: { offsetMs: 1_040, rttMs: 100 } }))?.level).toBe('warn');
  });

  it('latency against commandTimeout; a cluster failing or not covering every slot; AOF fsync; min-replicas-to-write', () => {
    expect(latency(facts({ latency: { samples: 20, medianMs: 0.2, maxMs: 3 } }))?.level).toBe('ok');
    expect(latency(facts({ latency: { samples: 20, medianMs: 40, maxMs: 700 } }))?.level).toBe('warn');
    expect(latency(facts({ latency: { samples: 20, medianMs: 900, maxMs: 2_500 } }))?.level).toBe('unsafe');
    const partial = new Map([
      ['cluster_state', 'fail'],
      ['cluster_slots_assigned', '10000'],
      ['cluster_slots_ok', '10000'],
    ]);
    expect(cluster(facts({ cluster: partial }))?.summary).toContain('6384 not covered');
    const aof = new Map([['aof_enabled', '1']]);
    const everysec = persistence(facts({ info: aof, config: { ...facts({}).config, appendfsync: 'everysec' } }));
    expect(everysec).toMatchObject({ level: 'warn', summary: 'appendonly yes, appendfsync everysec' });
    const refusing = replication(
      facts({
        info: new Map([
          ['role', 'master'],
          ['connected_slaves', '1'],
          ['slave0', 'ip=10.0.0.2,port=6379,state=online,offset=1,lag=9'],
          ['min_slaves_good_slaves', '0'],
        ]),
        config: { ...facts({}).config, 'min-replicas-to-write': '1' },
      }),
    );
    expect(refusing.map((f) => [f.check, f.level])).toEqual([
      ['replication', 'unsafe'],
      ['replica-lag', 'warn'],
    ]);
  });

  it('what the key scan calls a lock name and an owner token', () => {
    for (const name of ['lock:order:1', 'order-lock', 'app_mutex', 'jobs.semaphore', 'leader:election', 'LOCK_X']) {
      expect(looksLikeLockName(name), name).toBe(true);
    }
    for (const name of ['clock:skew', 'blocklist', 'release:notes', 'user:1'])
      expect(looksLikeLockName(name), name).toBe(false);
    for (const v of [
      '3f2a1c9e-1111-4222-8333-444455556666',
      'b1946ac92492d2347c6235b4d2611184',
      'q3Zk9v0_Lw8yXc2mTb4hRA',
    ]) {
      expect(looksLikeToken(v), v).toBe(true);
    }
    for (const v of ['1', 'locked', 'true', 'worker-3', 'alice']) expect(looksLikeToken(v), v).toBe(false);
  });

  it('what the key scan takes for a fencing counter of another prefix: a fence record with a grant', () => {
    for (const v of ['7 1733400000123456 pod-1', '7 1733400000123456 pod 1|q3Zk9v0_Lw8yXc2mTb4hRA', '7 1 ']) {
      expect(looksLikeFenceRecord(v), v).toBe(true);
    }
    // A counter raise-fence lifted alone records no grant; the rest are not fence records.
    for (const v of ['7', '7|A', '7 1', '7 1|A', 'x 1 pod', ' 7 1 pod', '', 'locked']) {
      expect(looksLikeFenceRecord(v), v).toBe(false);
    }
  });
});
