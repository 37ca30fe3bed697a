import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './ports.js';

const HOST = '127.0.0.1';
const READY_TIMEOUT_MS = 20_000;
const STOP_GRACE_MS = 5_000;
const REQUEST_TIMEOUT_MS = 1_000;
const CLI_TIMEOUT_MS = 10_000;
const OUTPUT_TAIL_CHARS = 8_000;
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

export interface EtcdMember {
  /** `--name`: `m0`, `m1`, ... */
  readonly name: string;
  readonly host: '127.0.0.1';
  readonly clientPort: number;
  readonly peerPort: number;
  /** `http://127.0.0.1:CLIENT_PORT` */
  readonly url: string;
  /** `http://127.0.0.1:PEER_PORT` */
  readonly peerUrl: string;
  /** Pid of the current process; changes after `restart()`. */
  readonly pid: number;
  /** The data directory, kept across restarts. */
  readonly dir: string;
  /** False once the process has exited (after `stop()`, `kill9()` or a crash). */
  readonly running: boolean;
  /** Freeze the process with SIGSTOP: connections stay open, nothing answers, peers elect anew. */
  pause(): void;
  /** Thaw a paused process with SIGCONT. */
  resume(): void;
  /** SIGKILL, resolved once the process has exited. */
  kill9(): Promise<void>;
  /** SIGTERM, then SIGKILL after 5 s. Idempotent; resumes a paused process first. */
  stop(): Promise<void>;
  /** Stop (or kill, with `hard`) and start again with the same ports and data dir: it rejoins. */
  restart(opts?: EtcdRestartOptions): Promise<void>;
  /** `GET /health`: true when the member has a leader and serves requests. Never rejects. */
  healthy(): Promise<boolean>;
  /** `POST /v3/maintenance/status`; rejects when the member does not answer within 1 s. */
  status(): Promise<EtcdStatus>;
  /** The last few kilobytes the member wrote to stdout and stderr. */
  logs(): string;
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

interface Registry {
  readonly members: Set<EtcdProcess>;
  readonly tempDirs: Set<string>;
}

// Every live member is killed when the test process exits, however it exits. The registry sits
// on globalThis because a test runner may evaluate this module more than once in one process.
const REGISTRY: unique symbol = Symbol.for('leasehold.test.harness.etcd');
type GlobalWithRegistry = typeof globalThis & { [REGISTRY]?: Registry };

function registry(): Registry {
  const holder = globalThis as GlobalWithRegistry;
  const existing = holder[REGISTRY];
  if (existing !== undefined) return existing;
  const created: Registry = { members: new Set(), tempDirs: new Set() };
  holder[REGISTRY] = created;
  installCleanup(created);
  return created;
}

function installCleanup(reg: Registry): void {
  const cleanUp = (): void => {
    for (const member of reg.members) member.killNow();
    reg.members.clear();
    for (const dir of reg.tempDirs) {
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
      } catch {
        // Best effort at exit; a leftover temp directory is harmless.
      }
    }
    reg.tempDirs.clear();
  };
  process.once('exit', cleanUp);
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    const onSignal = (): void => {
      cleanUp();
      process.off(signal, onSignal);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

function appendTail(tail: string, chunk: string): string {
  const joined = tail + chunk;
  return joined.length > OUTPUT_TAIL_CHARS ? joined.slice(-OUTPUT_TAIL_CHARS) : joined;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    // ETCD_* variables are read as flags and would override the harness's.
    if (!key.startsWith('ETCD')) env[key] = value;
  }
  return env;
}

/** Runs `etcdctl` (v3 API) against `endpoints`, killing it after `timeout` ms. Never rejects on a non-zero exit. */
export function runEtcdctl(
  endpoints: readonly string[],
  args: readonly string[],
  timeout = CLI_TIMEOUT_MS,
): Promise<EtcdctlResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('etcdctl', [`--endpoints=${endpoints.join(',')}`, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...childEnv(), ETCDCTL_API: '3' },
    });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.setEncoding('utf8').on('data', (text: string) => {
      stdout += text;
    });
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeout);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`could not run etcdctl: ${error.message}`, { cause: error }));
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      if (timedOut) reject(new Error(`etcdctl ${args.join(' ')} did not finish within ${timeout} ms`));
      else resolve({ code, stdout, stderr });
    });
  });
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

class EtcdProcess implements EtcdMember {
  readonly host = HOST;
  readonly name: string;
  readonly clientPort: number;
  readonly peerPort: number;
  readonly url: string;
  readonly peerUrl: string;
  readonly dir: string;
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private alive = false;
  private paused = false;
  private stopping: Promise<void> | undefined;
  private lastPid = 0;
  private output = '';
  private spawnError: Error | undefined;

  constructor(
    spec: MemberSpec,
    private readonly initialCluster: string,
    private readonly token: string,
    private readonly opts: StartEtcdOptions,
  ) {
    this.name = spec.name;
    this.clientPort = spec.clientPort;
    this.peerPort = spec.peerPort;
    this.dir = spec.dir;
    this.url = `http://${HOST}:${spec.clientPort}`;
    this.peerUrl = `http://${HOST}:${spec.peerPort}`;
  }

  get pid(): number {
    return this.lastPid;
  }

  get running(): boolean {
    return this.alive;
  }

  logs(): string {
    return this.output;
  }

  /**
   * Spawns the process and resolves once its client port answers `/version`. The initial-cluster
   * flags only matter on the first start: on a restart etcd reads its membership from the data dir.
   */
  async launch(): Promise<void> {
    const args = [
      '--name',
      this.name,
      '--data-dir',
      this.dir,
      '--listen-client-urls',
      this.url,
      '--advertise-client-urls',
      this.url,
      '--listen-peer-urls',
      this.peerUrl,
      '--initial-advertise-peer-urls',
      this.peerUrl,
      '--initial-cluster',
      this.initialCluster,
      '--initial-cluster-state',
      'new',
      '--initial-cluster-token',
      this.token,
      '--heartbeat-interval',
      String(this.opts.heartbeatMs ?? 100),
      '--election-timeout',
      String(this.opts.electionMs ?? 1000),
      '--logger',
      'zap',
      '--log-level',
      'warn',
      '--log-outputs',
      'stderr',
      ...(this.opts.args ?? []),
    ];
    const child = spawn('etcd', args, { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv() });
    this.child = child;
    this.alive = true;
    this.paused = false;
    this.spawnError = undefined;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.alive = false;
        this.paused = false;
        registry().members.delete(this);
        this.output = appendTail(this.output, `\n[exited: code ${code}, signal ${signal}]\n`);
        resolve();
      });
      child.once('error', (error) => {
        this.spawnError = error;
        this.alive = false;
        registry().members.delete(this);
        resolve();
      });
    });
    const collect = (text: string): void => {
      this.output = appendTail(this.output, text);
    };
    child.stdout?.setEncoding('utf8').on('data', collect);
    child.stderr?.setEncoding('utf8').on('data', collect);
    this.lastPid = child.pid ?? 0;
    registry().members.add(this);

    await this.until(async () => {
      await request(`${this.url}/version`);
      return true;
    }, 'answer /version');
  }

  /** Resolves once the member reports itself healthy. */
  waitHealthy(timeout = READY_TIMEOUT_MS): Promise<void> {
    return this.until(() => this.healthy(), 'report itself healthy', timeout);
  }

  async healthy(): Promise<boolean> {
    if (!this.alive || this.paused) return false;
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

  /** Synchronous SIGKILL, for exit handlers. */
  killNow(): void {
    if (!this.alive || this.child === undefined) return;
    try {
      this.child.kill('SIGKILL');
    } catch {
      // Already gone.
    }
  }

  pause(): void {
    this.signal('SIGSTOP');
    this.paused = true;
  }

  resume(): void {
    this.signal('SIGCONT');
    this.paused = false;
  }

  async kill9(): Promise<void> {
    if (!this.alive) return;
    this.killNow();
    await this.exited;
  }

  stop(): Promise<void> {
    if (!this.alive) return Promise.resolve();
    this.stopping ??= this.gracefulStop().finally(() => {
      this.stopping = undefined;
    });
    return this.stopping;
  }

  async restart(opts: EtcdRestartOptions = {}): Promise<void> {
    if (opts.hard === true) await this.kill9();
    else await this.stop();
    this.output = appendTail(this.output, `\n[restarting${opts.hard === true ? ' after kill -9' : ''}]\n`);
    await this.launch();
    if (opts.healthy !== false) await this.waitHealthy();
  }

  private async until(check: () => Promise<boolean>, what: string, timeout = READY_TIMEOUT_MS): Promise<void> {
    const deadline = performance.now() + timeout;
    let lastProblem = 'no attempt made';
    while (performance.now() < deadline) {
      if (!this.alive) {
        const why = this.spawnError === undefined ? 'exited' : `could not be spawned: ${this.spawnError.message}`;
        throw new Error(`etcd member ${this.name} (${this.url}) ${why}\n--- output tail ---\n${this.output}`);
      }
      try {
        if (await check()) return;
        lastProblem = 'not yet';
      } catch (error) {
        lastProblem = messageOf(error);
      }
      await sleep(50);
    }
    throw new Error(
      `etcd member ${this.name} (${this.url}) did not ${what} within ${timeout} ms ` +
        `(last: ${lastProblem})\n--- output tail ---\n${this.output}`,
    );
  }

  private async gracefulStop(): Promise<void> {
    if (this.paused) this.resume();
    this.child?.kill('SIGTERM');
    const grace = new AbortController();
    const graceful = await Promise.race([
      this.exited.then(() => true),
      sleep(STOP_GRACE_MS, false, { signal: grace.signal }).catch(() => true),
    ]);
    grace.abort();
    if (!graceful) {
      this.killNow();
      await this.exited;
    }
  }

  private signal(signal: NodeJS.Signals): void {
    if (!this.alive || this.child === undefined) {
      throw new Error(`etcd member ${this.name} (${this.url}) is not running; cannot send ${signal}`);
    }
    this.child.kill(signal);
  }
}

function isAddressInUse(members: readonly EtcdProcess[]): boolean {
  return members.some((member) => /address already in use/i.test(member.logs()));
}

/**
 * One member after the other: a leader stopped with SIGTERM hands its leadership over first, and
 * when every member stops at once that hand-over waits for peers that are going away.
 */
async function stopAll(members: readonly EtcdMember[]): Promise<void> {
  for (const member of members) await member.stop().catch(() => {});
}

/** Starts `count` members that form one cluster; retries with fresh ports if one was taken meanwhile. */
async function startMembers(count: number, opts: StartEtcdOptions): Promise<EtcdProcess[]> {
  for (let attempt = 1; ; attempt++) {
    const specs: MemberSpec[] = [];
    for (let i = 0; i < count; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'leasehold-etcd-'));
      registry().tempDirs.add(dir);
      specs.push({ name: `m${i}`, clientPort: await freePort(), peerPort: await freePort(), dir });
    }
    const initialCluster = specs.map((spec) => `${spec.name}=http://${HOST}:${spec.peerPort}`).join(',');
    const token = `leasehold-${randomBytes(4).toString('hex')}`;
    const members = specs.map((spec) => new EtcdProcess(spec, initialCluster, token, opts));
    try {
      // All at once: a member of a multi-member cluster is only healthy once a quorum runs.
      const launched = await Promise.allSettled(members.map((member) => member.launch()));
      const failed = launched.find((result) => result.status === 'rejected');
      if (failed !== undefined) throw failed.reason;
      await Promise.all(members.map((member) => member.waitHealthy()));
      return members;
    } catch (error) {
      await Promise.allSettled(members.map((member) => member.kill9()));
      if (attempt >= START_ATTEMPTS || !isAddressInUse(members)) throw error;
    }
  }
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
