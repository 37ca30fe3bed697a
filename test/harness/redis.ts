import { connect } from 'node:net';
import { freePort } from './ports.js';
import { makeTempDir, retryOnPortClash, runTool, type ServerControls, ServerProcess } from './process.js';

const HOST = '127.0.0.1';
const READY_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 3_000;
const CLI_TIMEOUT_MS = 10_000;
const OUTPUT_TAIL_CHARS = 4_000;

export interface Endpoint {
  host: string;
  port: number;
}

export interface StartRedisOptions {
  /** Extra `redis-server` arguments, appended after the harness defaults so they win. */
  args?: readonly string[] | undefined;
  /** Port to listen on. Default: a free port chosen by the harness. */
  port?: number | undefined;
  /** Working directory (`--dir`). Default: a fresh temporary directory, removed at process exit. */
  dir?: string | undefined;
  /** A config file, passed first (Sentinel needs one it can rewrite). */
  configFile?: string | undefined;
}

export interface RestartOptions {
  /** Kill with SIGKILL instead of a graceful shutdown. Default false. */
  hard?: boolean | undefined;
}

/** `stop()` sends SIGTERM, then SIGKILL after 3 s. */
export interface RedisServer extends ServerControls {
  readonly host: '127.0.0.1';
  readonly port: number;
  /** `redis://127.0.0.1:PORT` */
  readonly url: string;
  readonly dir: string;
  /** Stop (or kill, with `hard`) and start again on the same port and dir, waiting until ready. */
  restart(opts?: RestartOptions): Promise<void>;
  /** Runs `redis-cli -h 127.0.0.1 -p PORT ...args`; resolves trimmed stdout, rejects on an error reply. */
  command(...args: string[]): Promise<string>;
  /** A string key's value as stored (a lock key's begins with a newline once released), null when missing. */
  get(key: string): Promise<string | null>;
}

/**
 * Sends one RESP `PING` over a fresh socket and resolves with the reply line without its
 * type byte (`PONG`). Rejects on an error reply (e.g. `LOADING`), a closed socket, or when no
 * reply arrives within `timeout` ms (default 1000).
 */
export function ping(target: Endpoint, opts: { timeout?: number | undefined } = {}): Promise<string> {
  const timeout = opts.timeout ?? 1000;
  const where = `${target.host}:${target.port}`;
  return new Promise((resolve, reject) => {
    let received = '';
    let settled = false;
    const socket = connect({ host: target.host, port: target.port });
    const finish = (error: Error | undefined, reply?: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (error !== undefined) reject(error);
      else resolve(reply ?? '');
    };
    const timer = setTimeout(() => finish(new Error(`PING to ${where} got no reply within ${timeout} ms`)), timeout);
    socket.setNoDelay(true);
    socket.once('connect', () => socket.write('*1\r\n$4\r\nPING\r\n'));
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
      const end = received.indexOf('\r\n');
      if (end < 0) return;
      const line = received.slice(0, end);
      if (line.startsWith('+')) finish(undefined, line.slice(1));
      else finish(new Error(`PING to ${where} was answered with ${JSON.stringify(line)}`));
    });
    socket.on('error', (error) => finish(new Error(`PING to ${where} failed: ${error.message}`, { cause: error })));
    socket.on('close', () => finish(new Error(`PING to ${where}: connection closed before a reply`)));
  });
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `redis-cli` with `args`, killing it after `timeout` ms. Never rejects on a non-zero exit. */
export async function runRedisCli(args: readonly string[], timeout = CLI_TIMEOUT_MS): Promise<CliResult> {
  const { code, stdout, stderr } = await runTool('redis-cli', args, { timeout });
  return { code, stdout, stderr };
}

class RedisProcess extends ServerProcess implements RedisServer {
  readonly host = HOST;
  readonly url: string;

  constructor(
    readonly port: number,
    readonly dir: string,
    extraArgs: readonly string[],
    configFile: string | undefined,
  ) {
    super({
      label: `redis-server on port ${port}`,
      command: 'redis-server',
      args: [
        ...(configFile === undefined ? [] : [configFile]),
        '--port',
        String(port),
        '--bind',
        HOST,
        '--save',
        '',
        '--appendonly',
        'no',
        '--protected-mode',
        'no',
        '--daemonize',
        'no',
        '--dir',
        dir,
        ...extraArgs,
      ],
      readyWhat: 'answer PING',
      readyTimeoutMs: READY_TIMEOUT_MS,
      stopSignal: 'SIGTERM',
      stopGraceMs: STOP_GRACE_MS,
      outputTailChars: OUTPUT_TAIL_CHARS,
    });
    this.url = `redis://${HOST}:${port}`;
  }

  protected async ready(): Promise<boolean> {
    return (await ping({ host: HOST, port: this.port }, { timeout: 500 })) === 'PONG';
  }

  async command(...args: string[]): Promise<string> {
    const result = await runRedisCli(['-h', HOST, '-p', String(this.port), '-e', ...args]);
    if (result.code !== 0) {
      const detail = (result.stdout + result.stderr).trim();
      throw new Error(`redis-cli ${args.join(' ')} on port ${this.port} failed (exit ${result.code}): ${detail}`);
    }
    return result.stdout.trim();
  }

  async get(key: string): Promise<string | null> {
    const result = await runRedisCli(['-h', HOST, '-p', String(this.port), '--raw', 'GET', key]);
    if (result.code !== 0) throw new Error(`redis-cli GET ${key} on port ${this.port} failed (exit ${result.code})`);
    const value = result.stdout.replace(/\n$/, '');
    return value === '' ? null : value;
  }
}

/**
 * Starts a `redis-server` on 127.0.0.1 with persistence off and waits until it answers PING.
 * With no `port` given, a free one is chosen (and another tried if it was taken meanwhile).
 */
export async function startRedis(opts: StartRedisOptions = {}): Promise<RedisServer> {
  const dir = opts.dir ?? makeTempDir('leasehold-redis-');
  return retryOnPortClash(
    opts.port === undefined ? 3 : 1,
    async () => new RedisProcess(opts.port ?? (await freePort()), dir, opts.args ?? [], opts.configFile),
    {
      start: (server) => server.start(),
      discard: (server) => server.kill9(),
      portTaken: (server) => /address already in use/i.test(server.logs()),
    },
  );
}
