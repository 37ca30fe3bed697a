import { type AddressInfo, connect, createServer, isIPv4, type Socket } from 'node:net';

const HOST = '127.0.0.1';

export interface ProxyTarget {
  host: string;
  port: number;
}

/**
 * A TCP proxy in front of one target, for network faults. Faults apply to every connection
 * through it, current and future.
 */
export interface TcpProxy {
  readonly host: '127.0.0.1';
  readonly port: number;
  /** `redis://127.0.0.1:PORT` */
  readonly url: string;
  /** Delays every chunk, in both directions, by `ms`; order within a direction is kept. */
  setLatency(ms: number): void;
  /**
   * While on, connections are accepted but nothing is forwarded either way: data is dropped
   * and sockets stay open, so clients hang. Turning it off resets every connection that lost
   * data meanwhile, because its byte stream is no longer coherent (a reply could otherwise be
   * matched to the wrong request); connections that lost nothing carry on.
   */
  blackhole(on: boolean): void;
  /** While on, existing and new client connections are reset (RST) at once. */
  refuse(on: boolean): void;
  /** Resets every current connection. */
  resetAll(): void;
  /**
   * Arms a one-shot fault: the next client chunk that contains `pattern` reaches the server, but
   * its reply never reaches the client, and that connection is reset `afterMs` later (default 50):
   * a command that ran whose reply was lost, as a client that reconnects and re-sends it sees.
   * Resolves once the connection was cut.
   */
  cutAfter(pattern: string | Buffer, afterMs?: number): Promise<void>;
  /** Number of client connections currently open through the proxy. */
  connections(): number;
  /** Resets every connection and stops listening. Idempotent. */
  close(): Promise<void>;
}

interface Faults {
  latencyMs: number;
  blackholed: boolean;
  /** An armed cutAfter: the pattern, how long after to reset, and whom to tell. */
  cut: { pattern: Buffer; afterMs: number; done: () => void } | undefined;
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIPv4(host) && host.startsWith('127.'));
}

function ignoreErrors(socket: Socket): void {
  // Peers vanish abruptly in fault tests; a socket error only means the connection is over.
  socket.on('error', () => {});
}

/** Bytes flowing one way, held back by the current latency and delivered strictly in order. */
class Direction {
  private readonly queue: { due: number; chunk: Buffer }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private waitingForDrain = false;
  private onFlushed: (() => void) | undefined;

  constructor(
    private readonly source: Socket,
    private readonly sink: () => Socket | undefined,
    private readonly faults: Faults,
    private readonly onDrop: () => void,
    onChunk: (chunk: Buffer) => boolean = () => true,
  ) {
    source.on('data', (chunk: Buffer) => {
      if (faults.blackholed) {
        onDrop();
        return;
      }
      if (!onChunk(chunk)) return;
      this.queue.push({ due: performance.now() + faults.latencyMs, chunk });
      this.pump();
    });
  }

  /** Delivers what is due, then sleeps until the new head of the queue is due. */
  pump(): void {
    if (this.timer !== undefined) return;
    const sink = this.sink();
    if (sink === undefined) return; // Not connected yet; pumped again once it is.
    if (this.faults.blackholed && this.queue.length > 0) {
      // Bytes still in flight when the blackhole opened are lost with it.
      this.queue.length = 0;
      this.onDrop();
    }
    for (let head = this.queue[0]; head !== undefined; head = this.queue[0]) {
      const wait = head.due - performance.now();
      if (wait > 0) {
        this.timer = setTimeout(() => {
          this.timer = undefined;
          this.pump();
        }, wait);
        return;
      }
      this.queue.shift();
      if (!sink.destroyed && !sink.write(head.chunk) && !this.waitingForDrain) {
        this.waitingForDrain = true;
        this.source.pause();
        sink.once('drain', () => {
          this.waitingForDrain = false;
          this.source.resume();
        });
      }
    }
    const flushed = this.onFlushed;
    this.onFlushed = undefined;
    flushed?.();
  }

  /** Calls `callback` once everything queued so far has been handed to the sink. */
  afterFlush(callback: () => void): void {
    if (this.queue.length === 0) {
      callback();
    } else {
      this.onFlushed = callback;
      this.pump();
    }
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
    this.onFlushed = undefined;
  }
}

/** One client socket and its upstream socket. */
class Connection {
  private upstream: Socket | undefined;
  private fromUpstream: Direction | undefined;
  private readonly fromClient: Direction;
  private closed = false;
  /** Something was dropped by a blackhole, so the byte stream can no longer be trusted. */
  lostData = false;
  /** cutAfter fired on this connection: nothing more reaches the client. */
  private cut = false;
  private readonly markLost = (): void => {
    this.lostData = true;
  };

  constructor(
    private readonly client: Socket,
    private readonly target: ProxyTarget,
    private readonly faults: Faults,
    private readonly onClosed: (connection: Connection) => void,
  ) {
    ignoreErrors(client);
    client.setNoDelay(true);
    this.fromClient = new Direction(
      client,
      () => this.upstream,
      faults,
      this.markLost,
      (chunk) => {
        const armed = faults.cut;
        if (armed === undefined || this.cut || !chunk.includes(armed.pattern)) return true;
        faults.cut = undefined;
        this.cut = true;
        setTimeout(() => {
          this.destroy(true);
          armed.done();
        }, armed.afterMs);
        return true;
      },
    );
    // The client's last bytes still travel with the current latency before upstream is closed.
    client.on('close', () => this.fromClient.afterFlush(() => this.destroy(false)));
    if (!faults.blackholed) this.connectUpstream();
  }

  /** Opens the upstream side. Deferred while blackholed: a partition stalls the handshake too. */
  connectUpstream(): void {
    if (this.upstream !== undefined || this.closed) return;
    const upstream = connect({ host: this.target.host, port: this.target.port });
    this.upstream = upstream;
    ignoreErrors(upstream);
    upstream.setNoDelay(true);
    const fromUpstream = new Direction(
      upstream,
      () => this.client,
      this.faults,
      this.markLost,
      () => !this.cut,
    );
    this.fromUpstream = fromUpstream;
    upstream.on('close', () => {
      // Inside a blackhole the close is lost like any data; the client hangs until it lifts.
      if (this.faults.blackholed) this.markLost();
      else fromUpstream.afterFlush(() => this.destroy(false));
    });
    this.fromClient.pump();
  }

  /** Tears both sides down; `reset` sends the client an RST rather than a FIN. */
  destroy(reset: boolean): void {
    if (this.closed) return;
    this.closed = true;
    this.fromClient.dispose();
    this.fromUpstream?.dispose();
    if (!this.client.destroyed) {
      if (reset) this.client.resetAndDestroy();
      else this.client.destroy();
    }
    this.upstream?.destroy();
    this.onClosed(this);
  }
}

/** Starts a TCP proxy on 127.0.0.1 (random port) forwarding to a loopback `target`. */
export async function startProxy(target: ProxyTarget): Promise<TcpProxy> {
  if (!isLoopback(target.host)) {
    throw new Error(`startProxy: the target must be a loopback address, got ${JSON.stringify(target.host)}`);
  }
  const faults: Faults = { latencyMs: 0, blackholed: false, cut: undefined };
  const live = new Set<Connection>();
  let refusing = false;
  let closing: Promise<void> | undefined;

  const resetAll = (): void => {
    for (const connection of [...live]) connection.destroy(true);
  };
  const server = createServer((client) => {
    if (refusing || closing !== undefined) {
      ignoreErrors(client);
      client.resetAndDestroy();
      return;
    }
    live.add(new Connection(client, target, faults, (connection) => live.delete(connection)));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: HOST, port: 0 }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', () => {});
  const port = (server.address() as AddressInfo).port;

  return {
    host: HOST,
    port,
    url: `redis://${HOST}:${port}`,
    setLatency(ms: number): void {
      if (!Number.isFinite(ms) || ms < 0) {
        throw new Error(`setLatency: \`ms\` must be a finite number ≥ 0, got ${ms}`);
      }
      faults.latencyMs = ms;
    },
    blackhole(on: boolean): void {
      if (faults.blackholed === on) return;
      faults.blackholed = on;
      if (on) return;
      for (const connection of [...live]) {
        if (connection.lostData) connection.destroy(true);
        else connection.connectUpstream();
      }
    },
    refuse(on: boolean): void {
      refusing = on;
      if (on) resetAll();
    },
    resetAll,
    cutAfter(pattern: string | Buffer, afterMs = 50): Promise<void> {
      return new Promise<void>((done) => {
        faults.cut = { pattern: Buffer.isBuffer(pattern) ? pattern : Buffer.from(pattern), afterMs, done };
      });
    },
    connections: () => live.size,
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        resetAll();
        server.close(() => resolve());
      });
      return closing;
    },
  };
}
