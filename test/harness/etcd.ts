import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './ports.js';
import { envWithout, makeTempDir, retryOnPortClash, runTool, type ServerControls, ServerProcess } from './process.js';

const HOST = '127.0.0.1';
const READY_TIMEOUT_MS = 20_000;
const STOP_GRACE_MS = 5_000;
const REQUEST_TIMEOUT_MS = 1_000;
const CLI_TIMEOUT_MS = 10_000;
const START_ATTEMPTS = 3;

export interface StartEtcdOptions {
  /** Raft heartbeat interval in ms (`--heartbeat-interval`). Default 100. */
  heartbeatMs?: number | undefined;
  /** Raft election timeout in ms (`--election-timeout`). Default 1000. */
  electionMs?: number | undefined;
  /** Extra `etcd` arguments, appended after the harness defaults so they win. */
  args?: readonly string[] | undefined;
}

export interface StartEtcdClusterOptions extends StartEtcdOptions {
  /** Number of members. Default 3. */
  members?: number | undefined;
}

export interface EtcdRestartOptions {
  /** Kill with SIGKILL instead of SIGTERM. Default false. */
  hard?: boolean | undefined;
  /**
   * Wait until the member reports itself healthy (it has a leader and serves reads), which needs
   * a quorum of its cluster up. Default true; false waits only until its client port answers.
   */
  healthy?: boolean | undefined;
}

/** One member's view, from `/v3/maintenance/status` (ids are uint64, kept as decimal strings). */
export interface EtcdStatus {
  memberId: string;
  leaderId: string;
  raftTerm: number;
  raftIndex: number;
  version: string;
}

/** A paused member's peers elect a new leader; `stop()` sends SIGTERM, then SIGKILL after 5 s. */
export interface EtcdMember extends ServerControls {
  /** `--name`: `m0`, `m1`, ... */
  readonly name: string;
  readonly host: '127.0.0.1';
  readonly clientPort: number;
  readonly peerPort: number;
  /** `http://127.0.0.1:CLIENT_PORT` */
  readonly url: string;
  /** `http://127.0.0.1:PEER_PORT` */
  readonly peerUrl: string;
  /** The data directory, kept across restarts. */
  readonly dir: string;
  /** Stop (or kill, with `hard`) and start again with the same ports and data dir: it rejoins. */
  restart(opts?: EtcdRestartOptions): Promise<void>;
  /** `GET /health`: true when the member has a leader and serves requests. Never rejects. */
  healthy(): Promise<boolean>;
  /** `POST /v3/maintenance/status`; rejects when the member does not answer within 1 s. */
  status(): Promise<EtcdStatus>;
}

/** A single-member cluster. */
export interface EtcdServer extends EtcdMember {
  /** `[url]`, for clients that take a list of hosts. */
  readonly endpoints: string[];
}

export interface EtcdCluster {
  readonly members: EtcdMember[];
  /** Every member's client URL, `http://127.0.0.1:PORT`. */
  readonly endpoints: string[];
  /**
   * The member a majority of the answering members name as leader and that says so itself,
   * waiting up to `timeout` ms (default 10 s) for one to be elected.
   */
  leader(opts?: { timeout?: number | undefined }): Promise<EtcdMember>;
  /** Waits until every running member reports itself healthy. */
  waitHealthy(opts?: { timeout?: number | undefined }): Promise<void>;
  /** Stops every member. Idempotent. */
  stop(): Promise<void>;
}

export interface EtcdctlResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `etcdctl` (v3 API) against `endpoints`, killing it after `timeout` ms. Never rejects on a non-zero exit. */
export async function runEtcdctl(
  endpoints: readonly string[],
  args: readonly string[],
  timeout = CLI_TIMEOUT_MS,
): Promise<EtcdctlResult> {
  const { code, stdout, stderr } = await runTool('etcdctl', [`--endpoints=${endpoints.join(',')}`, ...args], {
    timeout,
    spawn: { env: { ...envWithout('ETCD'), ETCDCTL_API: '3' } },
  });
  return { code, stdout, stderr };
}

async function request(url: string, init: RequestInit = {}): Promise<unknown> {
  const response = await fetch(url, { ...init, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  const text = await response.text();
  if (!response.ok) throw new Error(`${url} answered ${response.status}: ${text}`);
  return JSON.parse(text) as unknown;
}

function field(record: unknown, key: string): unknown {
  return typeof record === 'object' && record !== null ? (record as Record<string, unknown>)[key] : undefined;
}

interface MemberSpec {
  name: string;
  clientPort: number;
  peerPort: number;
  dir: string;
}

class EtcdProcess extends ServerProcess implements EtcdMember {
  readonly host = HOST;
  readonly name: string;
  readonly clientPort: number;
  readonly peerPort: number;
  readonly url: string;
  readonly peerUrl: string;
  readonly dir: string;

  /**
   * The initial-cluster flags only matter on the first start: on a restart etcd reads its
   * membership from the data dir.
   */
  constructor(spec: MemberSpec, initialCluster: string, token: string, opts: StartEtcdOptions) {
    const url = `http://${HOST}:${spec.clientPort}`;
    const peerUrl = `http://${HOST}:${spec.peerPort}`;
    super({
      label: `etcd member ${spec.name} (${url})`,
      command: 'etcd',
      args: [
        '--name',
        spec.name,
        '--data-dir',
        spec.dir,
        '--listen-client-urls',
        url,
        '--advertise-client-urls',
        url,
        '--listen-peer-urls',
        peerUrl,
        '--initial-advertise-peer-urls',
        peerUrl,
        '--initial-cluster',
        initialCluster,
        '--initial-cluster-state',
        'new',
        '--initial-cluster-token',
        token,
        '--heartbeat-interval',
        String(opts.heartbeatMs ?? 100),
        '--election-timeout',
        String(opts.electionMs ?? 1000),
        '--logger',
        'zap',
        '--log-level',
        'warn',
        '--log-outputs',
        'stderr',
        ...(opts.args ?? []),
      ],
      // ETCD_* variables are read as flags and would override the harness's.
      spawn: { env: envWithout('ETCD') },
      readyWhat: 'answer /version',
      readyTimeoutMs: READY_TIMEOUT_MS,
      stopSignal: 'SIGTERM',
      stopGraceMs: STOP_GRACE_MS,
    });
    this.name = spec.name;
    this.clientPort = spec.clientPort;
    this.peerPort = spec.peerPort;
    this.dir = spec.dir;
    this.url = url;
    this.peerUrl = peerUrl;
  }

  /** Its client port answers `/version` (it need not have a leader yet). */
  protected async ready(): Promise<boolean> {
    await request(`${this.url}/version`);
    return true;
  }

  /** Resolves once the member reports itself healthy. */
  waitHealthy(timeout = READY_TIMEOUT_MS): Promise<void> {
    return this.waitUntil(() => this.healthy(), 'report itself healthy', timeout);
  }

  async healthy(): Promise<boolean> {
    if (!this.running || this.frozen) return false;
    try {
      const health = field(await request(`${this.url}/health`), 'health');
      return health === 'true' || health === true;
    } catch {
      return false;
    }
  }

  async status(): Promise<EtcdStatus> {
    const body = await request(`${this.url}/v3/maintenance/status`, { method: 'POST', body: '{}' });
    return {
      memberId: String(field(field(body, 'header'), 'member_id')),
      leaderId: String(field(body, 'leader')),
      raftTerm: Number(field(body, 'raftTerm')),
      raftIndex: Number(field(body, 'raftIndex')),
      version: String(field(body, 'version')),
    };
  }

  override async restart(opts: EtcdRestartOptions = {}): Promise<void> {
    await super.restart(opts);
    if (opts.healthy !== false) await this.waitHealthy();
  }
}

/**
 * One member after the other: a leader stopped with SIGTERM hands its leadership over first, and
 * when every member stops at once that hand-over waits for peers that are going away.
 */
async function stopAll(members: readonly EtcdMember[]): Promise<void> {
  for (const member of members) await member.stop().catch(() => {});
}

async function makeMembers(count: number, opts: StartEtcdOptions): Promise<EtcdProcess[]> {
  const specs: MemberSpec[] = [];
  for (let i = 0; i < count; i++) {
    // Every write is fsynced before etcd answers: on a disk shared with a busy machine that alone
    // can take longer than a commandTimeout. The data dir only has to outlive a member's restart.
    const dir = makeTempDir('leasehold-etcd-', { inMemory: true });
    specs.push({ name: `m${i}`, clientPort: await freePort(), peerPort: await freePort(), dir });
  }
  const initialCluster = specs.map((spec) => `${spec.name}=http://${HOST}:${spec.peerPort}`).join(',');
  const token = `leasehold-${randomBytes(4).toString('hex')}`;
  return specs.map((spec) => new EtcdProcess(spec, initialCluster, token, opts));
}

/** Starts `count` members that form one cluster; retries with fresh ports if one was taken meanwhile. */
function startMembers(count: number, opts: StartEtcdOptions): Promise<EtcdProcess[]> {
  return retryOnPortClash(START_ATTEMPTS, () => makeMembers(count, opts), {
    start: async (members) => {
      // All at once: a member of a multi-member cluster is only healthy once a quorum runs.
      const launched = await Promise.allSettled(members.map((member) => member.start()));
      const failed = launched.find((result) => result.status === 'rejected');
      if (failed !== undefined) throw failed.reason;
      await Promise.all(members.map((member) => member.waitHealthy()));
    },
    discard: (members) => Promise.allSettled(members.map((member) => member.kill9())),
    portTaken: (members) => members.some((member) => /address already in use/i.test(member.logs())),
  });
}

/** Starts a single-member etcd on 127.0.0.1 in a fresh temporary data dir and waits until it is healthy. */
export async function startEtcd(opts: StartEtcdOptions = {}): Promise<EtcdServer> {
  const [member] = await startMembers(1, opts);
  if (member === undefined) throw new Error('startEtcd: no member started');
  return Object.assign(member, { endpoints: [member.url] });
}

/**
 * Starts an etcd cluster of `members` members (default 3) on 127.0.0.1, each with its own client
 * and peer ports and data dir, and waits until every member is healthy.
 */
export async function startEtcdCluster(opts: StartEtcdClusterOptions = {}): Promise<EtcdCluster> {
  const count = opts.members ?? 3;
  if (!Number.isInteger(count) || count < 1) throw new Error(`\`members\` must be a positive integer, got ${count}`);
  const members = await startMembers(count, opts);
  const quorum = Math.floor(count / 2) + 1;

  const leader = async (leaderOpts: { timeout?: number | undefined } = {}): Promise<EtcdMember> => {
    const timeout = leaderOpts.timeout ?? 10_000;
    const deadline = performance.now() + timeout;
    let last = 'no member answered';
    for (;;) {
      const running = members.filter((member) => member.running);
      const answers = await Promise.allSettled(running.map((member) => member.status()));
      const byId = new Map<string, { member: EtcdProcess; leaderId: string }>();
      const votes = new Map<string, number>();
      answers.forEach((answer, i) => {
        const member = running[i];
        if (answer.status !== 'fulfilled' || member === undefined) return;
        byId.set(answer.value.memberId, { member, leaderId: answer.value.leaderId });
        if (answer.value.leaderId !== '0') {
          votes.set(answer.value.leaderId, (votes.get(answer.value.leaderId) ?? 0) + 1);
        }
      });
      last = [...votes].map(([id, n]) => `${byId.get(id)?.member.name ?? id}: ${n} vote(s)`).join(', ') || last;
      for (const [id, n] of votes) {
        const candidate = byId.get(id);
        // It must answer and name itself too: a member that was paused while it led still
        // thinks it leads until it hears of the newer term.
        if (candidate !== undefined && candidate.leaderId === id && n >= quorum) return candidate.member;
      }
      if (performance.now() >= deadline) break;
      await sleep(100);
    }
    throw new Error(`etcd cluster: no leader agreed by ${quorum} of ${count} members within ${timeout} ms (${last})`);
  };

  const waitHealthy = async (waitOpts: { timeout?: number | undefined } = {}): Promise<void> => {
    await Promise.all(members.filter((member) => member.running).map((member) => member.waitHealthy(waitOpts.timeout)));
  };

  return {
    members,
    endpoints: members.map((member) => member.url),
    leader,
    waitHealthy,
    stop: () => stopAll(members),
  };
}
