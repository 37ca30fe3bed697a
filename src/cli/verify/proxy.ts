import { type AddressInfo, connect, createServer, type Socket } from 'node:net';

/**
 * verify's own TCP proxy: one per worker, on 127.0.0.1, in front of the server under test. The
 * faults it injects touch only the connections of the worker behind it, never the server: a delay
 * on every chunk, a partition (nothing forwarded, sockets left open), and resets.
 */
export interface Link {
  /** The local port the worker connects to. */
  readonly port: number;
  /** Every chunk, both ways, is delivered `ms` later than it arrived (order kept). */
  delay(ms: number): void;
  /**
   * While on, bytes are swallowed both ways and sockets stay open, as a cut cable leaves them.
   * Turned off, connections that lost bytes are reset (their stream is no longer whole).
   */
  partition(on: boolean): void;
  /** Resets every connection through the link at once (RST). */
  reset(): void;
  close(): Promise<void>;
}

interface Settings {
  delayMs: number;
  partitioned: boolean;
}

/** One direction of one connection: chunks wait for their due time, then go out in order. */
class Pipe {
  readonly #pending: { at: number; chunk: Buffer }[] = [];
  #timer: NodeJS.Timeout | undefined;
  #to: Socket | undefined;

  constructor(
    readonly settings: Settings,
    readonly onLoss: () => void,
  ) {}

  attach(to: Socket): void {
    this.#to = to;
    this.#flush();
  }

  push(chunk: Buffer): void {
    if (this.settings.partitioned) {
      this.onLoss();
      return;
    }
    this.#pending.push({ at: performance.now() + this.settings.delayMs, chunk });
    this.#flush();
  }

  #flush(): void {
    if (this.#timer !== undefined || this.#to === undefined) return;
    const to = this.#to;
    while (this.#pending.length > 0) {
      const head = this.#pending[0] as { at: number; chunk: Buffer };
      if (this.settings.partitioned) {
        this.#pending.length = 0;
        this.onLoss();
        return;
      }
      const wait = head.at - performance.now();
      if (wait > 0) {
        this.#timer = setTimeout(() => {
          this.#timer = undefined;
          this.#flush();
        }, wait);
        return;
      }
      this.#pending.shift();
      if (!to.destroyed) to.write(head.chunk);
    }
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#pending.length = 0;
  }
}

/** A worker's socket and the proxy's socket to the server. */
class Pair {
  upstream: Socket | undefined;
  /** Bytes were swallowed by a partition: reset when it lifts. */
  broken = false;
  #ended = false;
  readonly #up: Pipe;
  readonly #down: Pipe;

  constructor(
    readonly client: Socket,
    readonly target: { host: string; port: number },
    readonly settings: Settings,
    readonly onEnd: (pair: Pair) => void,
  ) {
    const lose = () => {
      this.broken = true;
    };
    this.#up = new Pipe(settings, lose);
    this.#down = new Pipe(settings, lose);
    client.setNoDelay(true);
    client.on('error', () => this.end(true));
    client.on('close', () => this.end(false));
    client.on('data', (chunk: Buffer) => this.#up.push(chunk));
    this.#down.attach(client);
    if (!settings.partitioned) this.open();
  }

  /** Connects to the server; while partitioned, not even the handshake gets through. */
  open(): void {
    if (this.upstream !== undefined || this.#ended) return;
    const upstream = connect(this.target);
    this.upstream = upstream;
    upstream.setNoDelay(true);
    upstream.on('error', () => this.end(true));
    upstream.on('close', () => {
      if (this.settings.partitioned) this.broken = true;
      else this.end(false);
    });
    upstream.on('data', (chunk: Buffer) => this.#down.push(chunk));
    this.#up.attach(upstream);
  }

  end(reset: boolean): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#up.stop();
    this.#down.stop();
    if (reset) this.client.resetAndDestroy();
    else this.client.destroy();
    this.upstream?.destroy();
    this.onEnd(this);
  }
}

/** A link on 127.0.0.1 (a random port) to `target`, the server under test. */
export async function openLink(target: { host: string; port: number }): Promise<Link> {
  const settings: Settings = { delayMs: 0, partitioned: false };
  const pairs = new Set<Pair>();
  const server = createServer((socket) => {
    pairs.add(new Pair(socket, target, settings, (pair) => pairs.delete(pair)));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0 }, () => resolve());
  });
  server.on('error', () => {});
  const resetAll = () => {
    for (const pair of [...pairs]) pair.end(true);
  };
  return {
    port: (server.address() as AddressInfo).port,
    delay(ms) {
      settings.delayMs = Math.max(0, ms);
    },
    partition(on) {
      if (settings.partitioned === on) return;
      settings.partitioned = on;
      if (on) return;
      for (const pair of [...pairs]) {
        if (pair.broken) pair.end(true);
        else pair.open();
      }
    },
    reset: resetAll,
    close: () =>
      new Promise<void>((resolve) => {
        resetAll();
        server.close(() => resolve());
      }),
  };
}
