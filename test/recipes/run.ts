import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import { type RedisServer, startRedis } from '../harness/index.js';

/**
 * A recipe of examples/ run as a user runs it: plain Node on the file, `leasehold` resolved
 * through the package's exports to the dist/ the test setup built, the server's URL in the
 * environment. Nothing it opened may keep it alive: it must exit by itself.
 */

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface Running {
  readonly child: ChildProcess;
  /** Everything printed so far on stdout. */
  stdout(): string;
  /** Resolves with the first stdout line matching `pattern`; rejects if the process exits first. */
  line(pattern: RegExp): Promise<string>;
  /** Resolves when the process has exited (killed after `killAfterMs` if it did not exit by itself). */
  exited: Promise<Exit>;
}

/** Start `examples/<file>` (or any path below the root) with `env` added to this process's. */
export function startRecipe(file: string, env: Record<string, string> = {}, killAfterMs = 30_000): Running {
  const child = spawn(process.execPath, [join(ROOT, file)], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const waiting: { pattern: RegExp; resolve: (line: string) => void; reject: (error: Error) => void }[] = [];
  const look = () => {
    for (const w of [...waiting]) {
      const found = stdout.split('\n').find((line) => w.pattern.test(line));
      if (found !== undefined) {
        waiting.splice(waiting.indexOf(w), 1);
        w.resolve(found);
      }
    }
  };
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    look();
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
  const exited = new Promise<Exit>((resolve) => {
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      // Let the pipes drain before reporting what was printed.
      setImmediate(() => {
        for (const w of waiting.splice(0)) {
          w.reject(new Error(`${file} exited (${code ?? signal}) before printing ${w.pattern}:\n${stdout}${stderr}`));
        }
        resolve({ code, signal, stdout, stderr });
      });
    });
  });
  return {
    child,
    stdout: () => stdout,
    line: (pattern) =>
      new Promise((resolve, reject) => {
        waiting.push({ pattern, resolve, reject });
        look();
      }),
    exited,
  };
}

/** Run a recipe to its end. */
export function runRecipe(file: string, env: Record<string, string> = {}, killAfterMs = 30_000): Promise<Exit> {
  return startRecipe(file, env, killAfterMs).exited;
}

/** The lines of `text` that match `pattern`, as their capture groups. */
export function matches(text: string, pattern: RegExp): string[][] {
  return text
    .split('\n')
    .map((line) => pattern.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => m.slice(1));
}

/** A redis-server of its own for the calling test file: started before its tests, stopped after. */
export function redisForThisFile(): { readonly url: string; readonly server: RedisServer } {
  let server: RedisServer | undefined;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });
  const started = () => {
    if (!server) throw new Error('the redis-server starts in beforeAll');
    return server;
  };
  return {
    get url() {
      return started().url;
    },
    get server() {
      return started();
    },
  };
}
