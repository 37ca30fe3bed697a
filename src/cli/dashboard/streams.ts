import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Collector } from './collector.js';
import { HEADERS, reply } from './http.js';
import { heldNames, type PageMeta, pageOf, snapshot, type ViewQuery, viewQuery } from './view.js';

/** Open pages at once; more are refused, so the cost of serving them stays bounded. */
const MAX_STREAMS = 32;
/** A comment line now and then keeps proxies and idle timers from closing a quiet stream. */
const KEEPALIVE_MS = 15_000;

interface Stream {
  readonly response: ServerResponse;
  readonly query: ViewQuery;
  /** The socket's buffer is full: skip updates until it drains, then send the latest. */
  blocked: boolean;
  pending: boolean;
}

/** The open pages' event streams (server-sent events): each gets the latest snapshot of its own view. */
export class Streams {
  readonly #open = new Set<Stream>();
  readonly #collector: () => Collector;
  readonly #meta: PageMeta;
  #keepalive: NodeJS.Timeout | undefined;

  constructor(collector: () => Collector, meta: PageMeta) {
    this.#collector = collector;
    this.#meta = meta;
  }

  /** GET /events: a page's stream, with the collector subscribed while it is open. */
  open(request: IncomingMessage, response: ServerResponse, url: URL): void {
    if (this.#open.size >= MAX_STREAMS) {
      reply(response, 503, { error: `at most ${MAX_STREAMS} pages may be open at once` });
      return;
    }
    response.writeHead(200, {
      ...HEADERS,
      'Content-Type': 'text/event-stream; charset=utf-8',
      Connection: 'keep-alive',
      'X-Accel-Buffering': 'no',
    });
    response.write('retry: 2000\n\n');
    const stream: Stream = { response, query: viewQuery(url.searchParams), blocked: false, pending: false };
    this.#open.add(stream);
    const c = this.#collector();
    c.subscribe();
    if (c.ready) this.#send(stream);
    request.socket.setNoDelay(true);
    const done = () => {
      if (!this.#open.delete(stream)) return;
      c.unsubscribe();
    };
    request.once('close', done);
    response.once('close', done);
  }

  /** Start the keep-alive comments. */
  keepAlive(): void {
    this.#keepalive = setInterval(() => {
      for (const stream of this.#open) if (!stream.blocked) stream.response.write(': keep-alive\n\n');
    }, KEEPALIVE_MS);
    this.#keepalive.unref();
  }

  /** The names on the open pages' tables. */
  *wanted(): Generator<string> {
    const c = this.#collector();
    const filtered = new Map<string, string[]>();
    for (const stream of this.#open) {
      let names = filtered.get(stream.query.filter);
      if (!names) {
        names = heldNames(c, stream.query.filter);
        filtered.set(stream.query.filter, names);
      }
      yield* pageOf(names, stream.query).names;
    }
  }

  publish(): void {
    for (const stream of this.#open) this.#send(stream);
  }

  /** Stop the keep-alive, and end every stream with a last event saying why. */
  end(reason: string): void {
    clearInterval(this.#keepalive);
    for (const stream of this.#open) {
      stream.response.end(`event: bye\ndata: ${JSON.stringify({ reason })}\n\n`);
    }
    this.#open.clear();
  }

  #send(stream: Stream): void {
    if (stream.blocked) {
      stream.pending = true;
      return;
    }
    const data = JSON.stringify(snapshot(this.#collector(), stream.query, this.#meta));
    if (!stream.response.write(`event: snapshot\ndata: ${data}\n\n`)) {
      stream.blocked = true;
      stream.response.once('drain', () => {
        stream.blocked = false;
        if (stream.pending) {
          stream.pending = false;
          this.#send(stream);
        }
      });
    }
  }
}
