import type { Redis } from 'ioredis';
import { type DirectCommand, UsageError } from '../command.js';
import { bySeverity, count, EXIT_UNSAFE, type Finding, type Level, levelWord, worst } from '../doctor/finding.js';
import { clusterMasters, examine, type NodeFacts } from '../doctor/probe.js';
import { serverFindings } from '../doctor/rules.js';
import { type ScanResult, scanForLocks } from '../doctor/scan.js';
import { printJson } from '../format.js';
import { addressOf, connectServer, printableUrl, type ServerAddress } from '../redis.js';
import { bold, dim } from '../style.js';

const DEFAULT_SCAN_LIMIT = 100_000;
const SCAN_COUNT = 1_000;
/** Least ms between two progress lines of the key scan. */
const PROGRESS_EVERY = 1_000;
/** Width the why and fix lines are wrapped to. */
const WRAP = 100;

function scanLimit(value: string | undefined): number {
  if (value === undefined) return DEFAULT_SCAN_LIMIT;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 100_000_000) {
    throw new UsageError(`--scan-limit must be an integer number of keys from 0 to 100000000, got ${value}`);
  }
  return n;
}

interface Connected {
  readonly client: Redis;
  readonly node: string;
  readonly facts: NodeFacts;
}

/** The server the URL names, and on a cluster every other master, each examined. */
async function examineDeployment(address: ServerAddress): Promise<Connected[]> {
  const first = await connectServer(address, { what: 'doctor' });
  const connected: Connected[] = [];
  try {
    const node = `${address.host}:${address.port}`;
    const facts = await examine(first, node);
    connected.push({ client: first, node, facts });
    if (facts.cluster === null) return connected;
    for (const master of await clusterMasters(first)) {
      if (master.myself) continue;
      const other = `${master.host}:${master.port}`;
      const client = await connectServer({ ...address, host: master.host, port: master.port }, { what: 'doctor' });
      connected.push({ client, node: other, facts: await examine(client, other) });
    }
    return connected;
  } catch (error) {
    for (const { client } of connected) client.disconnect();
    first.disconnect();
    throw error;
  }
}

function serverName(facts: NodeFacts): string {
  const v = facts.info.get('redis_version');
  if (v === undefined) return 'server version unknown';
  return facts.info.get('server_name') === 'valkey' ? `Valkey ${facts.info.get('valkey_version') ?? v}` : `Redis ${v}`;
}

/** Progress of the key scan on stderr: a line at most every second, rewritten in place on a terminal. */
function progressReporter(): { report(scanned: number, total: number): void; done(): void } {
  const tty = process.stderr.isTTY === true;
  let last = Number.NEGATIVE_INFINITY;
  let shown = false;
  return {
    report(scanned, total) {
      const now = performance.now();
      if (now - last < PROGRESS_EVERY) return;
      last = now;
      shown = true;
      const of = total > 0 ? ` of ~${total} (${Math.min(100, Math.round((scanned / total) * 100))}%)` : '';
      process.stderr.write(`${tty ? '\r' : ''}scanning keys: ${scanned}${of}${tty ? '' : '\n'}`);
    },
    done() {
      if (tty && shown) process.stderr.write('\n');
    },
  };
}

function wrap(text: string, indent: string): string {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && indent.length + line.length + word.length + 1 > WRAP) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') lines.push(line);
  return lines.map((l) => `${indent}${l}\n`).join('');
}

function render(finding: Finding, width: number): string {
  const where = finding.node === undefined ? '' : `[${finding.node}] `;
  let text = `${levelWord(finding.level)}  ${finding.check.padEnd(width)}  ${where}${finding.summary}\n`;
  const indent = ' '.repeat(10 + width);
  if (finding.level !== 'ok' && finding.why !== undefined) text += wrap(`why: ${finding.why}`, indent);
  if (finding.level !== 'ok' && finding.fix !== undefined) text += wrap(`fix: ${finding.fix}`, indent);
  return text;
}

function scanLine(scan: ScanResult, prefix: string): string {
  const seconds = (scan.ms / 1_000).toFixed(1);
  const extent = scan.complete
    ? `all ${scan.scanned} keys`
    : `${scan.scanned} of ~${scan.total} keys (stopped at --scan-limit)`;
  const others = Object.entries(scan.leasehold.otherPrefixes).map(([p, n]) => `${n} under prefix '${p}'`);
  const own = [`${scan.leasehold.own} under prefix '${prefix}'`, ...others].join(', ');
  return `keys: scanned ${extent} in ${seconds} s; leasehold's own (not judged): ${own}`;
}

export const doctor: DirectCommand = {
  name: 'doctor',
  synopsis: 'doctor [--json] [--scan-limit N] [--strict]',
  summary:
    'Check the deployment for what breaks locks (eviction, persistence, replication, cluster, scripts, clock, latency) and look for hand-rolled locks beside leasehold’s.',
  details: `
  --json          machine output: every finding with its level, why and fix
  --scan-limit N  look at no more than N keys in the search for hand-rolled locks (default
                  ${DEFAULT_SCAN_LIMIT}; 0 skips it); SCAN with COUNT ${SCAN_COUNT}, never KEYS; progress on stderr
  --strict        exit 3 on warnings too
Each finding is ok, WARN or UNSAFE, with why it matters for locks and what to set:
  version, scripts      the server's version; whether this user may run leasehold's scripts
                        (FCALL, FUNCTION LOAD, EVALSHA, EVAL, each tried harmlessly)
  eviction              maxmemory-policy: anything but noeviction can evict a held lock
  persistence           appendonly and appendfsync: what a restart forgets
  replication           a replica URL; asynchronous replicas, min-replicas-to-write, lag
  cluster               cluster_state and slot coverage (every master is checked)
  clock                 the server's TIME against this machine's clock, with the round trip
  latency               round trips against commandTimeout and the default ttl
  lock-without-ttl      keys named like locks (lock, mutex, semaphore, lease, leader) with no TTL
  token-without-ttl     values shaped like owner tokens (UUID, hex, base64) with no TTL
  constant-lock-value   lock keys holding a constant ("1", "locked") instead of a per-owner token
  shared-constant-value many keys of one name pattern sharing one short constant value
Keys under --prefix, and leasehold's keys under other prefixes (recognised by their layout), are
leasehold's own and are not judged. The clock is this machine's: run doctor where your
application runs. Exit status 0 when nothing is unsafe, 3 when something is (with --strict, or a
warning), 1 when the checks could not run.
`,
  options: { json: { type: 'boolean' }, 'scan-limit': { type: 'string' }, strict: { type: 'boolean' } },
  operands: [],
  check(args) {
    scanLimit(args.string('scan-limit'));
  },
  async start(args) {
    const json = args.flag('json');
    const limit = scanLimit(args.string('scan-limit'));
    const connected = await examineDeployment(addressOf(args.redis));
    try {
      const [first] = connected as [Connected, ...Connected[]];
      const several = connected.length > 1;
      const findings: Finding[] = connected.flatMap(({ facts, node }, i) =>
        serverFindings(facts, i === 0).map((f) => (several && f.check !== 'cluster' ? { ...f, node } : f)),
      );
      let scan: ScanResult | null = null;
      if (limit > 0) {
        // A cluster's keys live on its masters; the node the URL names may be a replica.
        const masters = connected.filter(({ facts }) => facts.info.get('role') !== 'slave' || !several);
        const progress = progressReporter();
        scan = await scanForLocks(masters, {
          prefix: args.prefix,
          limit,
          count: SCAN_COUNT,
          onProgress: progress.report,
        });
        progress.done();
        findings.push(...scan.findings);
      }
      const level: Level = worst(findings.map((f) => f.level));
      const failing = level === 'unsafe' || (args.flag('strict') && level === 'warn');
      const code = failing ? EXIT_UNSAFE : 0;
      const tally = { ok: 0, warn: 0, unsafe: 0 };
      for (const f of findings) tally[f.level] += 1;
      if (json) {
        printJson({
          redis: printableUrl(args.redis),
          server: serverName(first.facts),
          topology: first.facts.cluster === null ? 'standalone' : 'cluster',
          nodes: connected.map((c) => c.node),
          level,
          exitCode: code,
          counts: tally,
          findings: bySeverity(findings),
          scan:
            scan === null
              ? null
              : {
                  scanned: scan.scanned,
                  total: scan.total,
                  complete: scan.complete,
                  ms: Math.round(scan.ms),
                  leasehold: scan.leasehold,
                },
        });
        return code;
      }
      const topology = several
        ? `cluster of ${connected.length} masters`
        : first.facts.cluster
          ? 'cluster'
          : 'standalone';
      const out = (text: string) => process.stdout.write(text);
      out(bold(`leasehold doctor: ${printableUrl(args.redis)} (${serverName(first.facts)}, ${topology})\n\n`));
      const width = Math.max(...findings.map((f) => f.check.length));
      for (const f of bySeverity(findings)) out(render(f, width));
      out('\n');
      if (scan !== null) out(`${dim(scanLine(scan, args.prefix))}\n`);
      const counts = `${tally.unsafe} unsafe, ${count(tally.warn, 'warning')}, ${tally.ok} ok`;
      out(
        bold(
          `verdict: ${level === 'ok' ? 'OK' : level === 'warn' ? 'WARN' : 'UNSAFE'} (${counts}): exit status ${code}\n`,
        ),
      );
      return code;
    } finally {
      for (const { client } of connected) client.disconnect();
    }
  },
};
