import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

/**
 * Headless Chromium driven over the Chrome DevTools Protocol, for the dashboard's tests. Node 20
 * has no WebSocket client without a flag, so the protocol's socket is a small RFC 6455 client of
 * its own here (text frames only, which is all CDP sends).
 */

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];

/**
 * The browser's path, installed from Debian's packages when missing and running as root (as
 * scripts/test.sh installs the servers); otherwise a reason to skip.
 */
export function findChromium(): { path: string } | { skip: string } {
  const found = process.env.LEASEHOLD_CHROMIUM ?? CANDIDATES.find((p) => existsSync(p));
  if (found) return { path: found };
  if (process.getuid?.() !== 0) {
    return { skip: 'chromium is not installed and this is not root: run `apt-get install -y chromium` first' };
  }
  try {
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'ignore', env, timeout: 180_000 });
    execFileSync('apt-get', ['install', '-y', '-qq', 'chromium'], { stdio: 'ignore', env, timeout: 600_000 });
  } catch (error) {
    return { skip: `installing chromium failed: ${error instanceof Error ? error.message : String(error)}` };
  }
  const installed = CANDIDATES.find((p) => existsSync(p));
  return installed ? { path: installed } : { skip: 'apt-get installed chromium, but no chromium binary was found' };
}

/** A minimal WebSocket client: connect, send text, receive text messages. */
class Socketish {
  readonly #socket: Socket;
  #buffer = Buffer.alloc(0);
  #fragments: Buffer[] = [];
  onMessage: (text: string) => void = () => {};
  onClose: () => void = () => {};

  private constructor(socket: Socket, head: Buffer) {
    this.#socket = socket;
    socket.on('data', (chunk: Buffer) => this.#read(chunk));
    socket.on('close', () => this.onClose());
    socket.on('error', () => undefined);
    if (head.length > 0) this.#read(head);
  }

  static open(url: string): Promise<Socketish> {
    const target = new URL(url);
    const key = randomBytes(16).toString('base64');
    return new Promise((resolve, reject) => {
      const req = request({
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        headers: {
          Connection: 'Upgrade',
          Upgrade: 'websocket',
          'Sec-WebSocket-Key': key,
          'Sec-WebSocket-Version': '13',
        },
      });
      req.once('upgrade', (res, socket, head) => {
        const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
        if (res.headers['sec-websocket-accept'] !== accept) {
          socket.destroy();
          reject(new Error('the DevTools socket answered the handshake wrongly'));
          return;
        }
        socket.setNoDelay(true);
        resolve(new Socketish(socket, head));
      });
      req.once('response', (res) => reject(new Error(`no WebSocket upgrade: HTTP ${res.statusCode}`)));
      req.once('error', reject);
      req.end();
    });
  }

  send(text: string): void {
    const payload = Buffer.from(text, 'utf8');
    const mask = randomBytes(4);
    const length = payload.length;
    const header =
      length < 126
        ? Buffer.from([0x81, 0x80 | length])
        : length < 65_536
          ? Buffer.from([0x81, 0x80 | 126, length >> 8, length & 0xff])
          : Buffer.concat([Buffer.from([0x81, 0x80 | 127]), bigLength(length)]);
    const masked = Buffer.alloc(length);
    for (let i = 0; i < length; i++) masked[i] = (payload[i] as number) ^ (mask[i % 4] as number);
    this.#socket.write(Buffer.concat([header, mask, masked]));
  }

  close(): void {
    this.#socket.destroy();
  }

  #read(chunk: Buffer): void {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    for (;;) {
      const frame = parseFrame(this.#buffer);
      if (frame === null) return;
      this.#buffer = this.#buffer.subarray(frame.size);
      if (frame.opcode === 0x8) {
        this.#socket.end();
        return;
      }
      if (frame.opcode === 0x9) {
        this.#socket.write(
          Buffer.concat([Buffer.from([0x8a, 0x80 | frame.payload.length]), Buffer.alloc(4), frame.payload]),
        );
        continue;
      }
      if (frame.opcode === 0x1 || frame.opcode === 0x0) {
        this.#fragments.push(frame.payload);
        if (frame.fin) {
          const text = Buffer.concat(this.#fragments).toString('utf8');
          this.#fragments = [];
          this.onMessage(text);
        }
      }
    }
  }
}

function bigLength(length: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(length));
  return b;
}

function parseFrame(b: Buffer): { fin: boolean; opcode: number; payload: Buffer; size: number } | null {
  if (b.length < 2) return null;
  const first = b[0] as number;
  const second = b[1] as number;
  let length = second & 0x7f;
  let offset = 2;
  if (length === 126) {
    if (b.length < 4) return null;
    length = b.readUInt16BE(2);
    offset = 4;
  } else if (length === 127) {
    if (b.length < 10) return null;
    length = Number(b.readBigUInt64BE(2));
    offset = 10;
  }
  const masked = (second & 0x80) !== 0;
  const maskAt = offset;
  if (masked) offset += 4;
  if (b.length < offset + length) return null;
  let payload = b.subarray(offset, offset + length);
  if (masked) {
    const mask = b.subarray(maskAt, maskAt + 4);
    payload = Buffer.from(payload.map((byte, i) => byte ^ (mask[i % 4] as number)));
  }
  return { fin: (first & 0x80) !== 0, opcode: first & 0x0f, payload, size: offset + length };
}

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

/** One tab, attached over the browser's socket (flat sessions). */
export interface Page {
  /** A CDP command in this tab. */
  send<T = unknown>(method: string, params?: Record<string, unknown>): Promise<T>;
  /** Evaluate `expression` (awaiting a promise) and return its value. */
  evaluate<T = unknown>(expression: string): Promise<T>;
  goto(url: string): Promise<void>;
  /** Poll `expression` in the page until it is truthy; resolves its value. */
  waitFor<T = unknown>(expression: string, timeout?: number, what?: string): Promise<T>;
  /** Errors the page threw or logged with console.error, since it opened. */
  readonly errors: string[];
  close(): Promise<void>;
}

export interface Browser {
  newPage(width?: number, height?: number): Promise<Page>;
  close(): Promise<void>;
}

export async function launch(path: string): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'leasehold-chromium-'));
  const child: ChildProcess = spawn(
    path,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
      '--hide-scrollbars',
      '--remote-debugging-address=127.0.0.1',
      '--remote-debugging-port=0',
      `--user-data-dir=${profile}`,
      'about:blank',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // A test worker stopped mid-run (a hook's timeout) must not leave the browser behind.
  const orphaned = () => child.kill('SIGKILL');
  process.once('exit', orphaned);
  void exited.then(() => process.off('exit', orphaned));
  const wsUrl = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('chromium printed no DevTools address within 20 s')), 20_000);
    const lines = createInterface({ input: child.stderr as NonNullable<typeof child.stderr> });
    lines.on('line', (line) => {
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(line);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.once('exit', (code) => reject(new Error(`chromium exited with ${code} before it was ready`)));
  });
  const socket = await Socketish.open(wsUrl);
  let nextId = 1;
  const pending = new Map<number, Pending>();
  const listeners = new Map<string, (method: string, params: Record<string, unknown>) => void>();
  socket.onMessage = (text) => {
    const message = JSON.parse(text) as {
      id?: number;
      result?: unknown;
      error?: { message: string };
      method?: string;
      params?: Record<string, unknown>;
      sessionId?: string;
    };
    if (message.id !== undefined) {
      const waiting = pending.get(message.id);
      pending.delete(message.id);
      if (message.error) waiting?.reject(new Error(message.error.message));
      else waiting?.resolve(message.result);
    } else if (message.method && message.sessionId) {
      listeners.get(message.sessionId)?.(message.method, message.params ?? {});
    }
  };
  socket.onClose = () => {
    for (const waiting of pending.values()) waiting.reject(new Error('the browser closed its DevTools socket'));
    pending.clear();
  };
  const command = <T>(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      socket.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    });

  return {
    async newPage(width = 1360, height = 1000) {
      const { targetId } = await command<{ targetId: string }>('Target.createTarget', { url: 'about:blank' });
      const { sessionId } = await command<{ sessionId: string }>('Target.attachToTarget', { targetId, flatten: true });
      const errors: string[] = [];
      let loaded: (() => void) | null = null;
      listeners.set(sessionId, (method, params) => {
        if (method === 'Runtime.exceptionThrown') {
          const details = params.exceptionDetails as { text?: string; exception?: { description?: string } };
          errors.push(details.exception?.description ?? details.text ?? 'exception');
        } else if (method === 'Runtime.consoleAPICalled' && params.type === 'error') {
          errors.push(JSON.stringify(params.args));
        } else if (method === 'Log.entryAdded') {
          const entry = params.entry as { level?: string; text?: string; url?: string };
          if (entry.level === 'error') errors.push(`${entry.text ?? ''} ${entry.url ?? ''}`.trim());
        } else if (method === 'Page.loadEventFired') {
          loaded?.();
        }
      });
      const send = <T>(method: string, params: Record<string, unknown> = {}) => command<T>(method, params, sessionId);
      await Promise.all([send('Page.enable'), send('Runtime.enable'), send('Log.enable')]);
      await send('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false });
      const evaluate = async <T>(expression: string): Promise<T> => {
        const result = await send<{
          result: { value?: unknown };
          exceptionDetails?: { text: string; exception?: { description?: string } };
        }>('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
        if (result.exceptionDetails) {
          throw new Error(result.exceptionDetails.exception?.description ?? result.exceptionDetails.text);
        }
        return result.result.value as T;
      };
      return {
        send,
        evaluate,
        errors,
        async goto(url) {
          const done = new Promise<void>((resolve) => {
            loaded = resolve;
          });
          await send('Page.navigate', { url });
          await done;
          loaded = null;
        },
        async waitFor<T>(expression: string, timeout = 10_000, what = expression): Promise<T> {
          const deadline = performance.now() + timeout;
          for (;;) {
            const value = await evaluate<T>(expression).catch(() => undefined);
            if (value) return value;
            if (performance.now() > deadline) throw new Error(`the page never showed: ${what}`);
            await new Promise((r) => setTimeout(r, 50));
          }
        },
        async close() {
          listeners.delete(sessionId);
          await command('Target.closeTarget', { targetId }).catch(() => undefined);
        },
      };
    },
    async close() {
      await command('Browser.close').catch(() => undefined);
      socket.close();
      const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
      await exited;
      clearTimeout(timer);
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
