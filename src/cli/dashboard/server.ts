import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEFAULTS } from '../../core/defaults.js';
import * as validate from '../../core/validate.js';
import { portsOf, type Store } from '../../store/port.js';
import type { Operator } from '../operator.js';
import { type Collector, describe } from './collector.js';
import { type Guard, guard, tokenMatches } from './guard.js';
import { APP_CSS } from './page/css.js';
import { PAGE_HTML } from './page/html.js';
import { APP_JS } from './page/js.js';
import { heldNames, type PageMeta, pageOf, snapshot, type ViewQuery, viewQuery } from './view.js';

/** Open pages at once; more are refused, so the cost of serving them stays bounded. */
const MAX_STREAMS = 32;
/** A comment line now and then keeps proxies and idle timers from closing a quiet stream. */
const KEEPALIVE_MS = 15_000;
/** The largest request body read (a release names one lock). */
const MAX_BODY = 16_384;

/**
 * No script, style or connection from anywhere but this server; no framing; no referrer. The page
 * keeps its script and styles in files of their own so that no inline code is allowed.
 */
const HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Cache-Control': 'no-store',
};

export interface ServerOptions {
  readonly host: string;
  readonly port: number;
  /** The run's release token, or null: read-only. */
  readonly token: string | null;
  readonly meta: PageMeta;
  /** Every text from the backend that goes to a page (error messages) passes through this. */
  readonly redact: (text: string) => string;
  /** One line for the operator's terminal. */
  readonly log: (line: string) => void;
}

interface Stream {
  readonly response: ServerResponse;
  readonly query: ViewQuery;
  /** The socket's buffer is full: skip updates until it drains, then send the latest. */
  blocked: boolean;
  pending: boolean;
}

export interface Dashboard {
  /** `http://127.0.0.1:PORT/` */
  readonly url: string;
  readonly address: AddressInfo;
  /** The names on the open pages' tables, for the collector to read first. */
  wanted(): Iterable<string>;
  /** Send every open page the latest scan. */
  publish(): void;
  /** Tell every page why the dashboard stops, end the streams and stop listening. */
  close(reason: string): Promise<void>;
}

export async function startServer(
  op: Operator,
  collector: () => Collector,
  options: ServerOptions,
): Promise<Dashboard> {
  const streams = new Set<Stream>();
  let check: Guard = guard(options.host, options.port);
  const shared = portsOf(op.lease as Store).shared;

  function send(stream: Stream): void {
    if (stream.blocked) {
      stream.pending = true;
      return;
    }
    const data = JSON.stringify(snapshot(collector(), stream.query, options.meta));
    if (!stream.response.write(`event: snapshot\ndata: ${data}\n\n`)) {
      stream.blocked = true;
      stream.response.once('drain', () => {
        stream.blocked = false;
        if (stream.pending) {
          stream.pending = false;
          send(stream);
        }
      });
    }
  }

  function events(request: IncomingMessage, response: ServerResponse, url: URL): void {
    if (streams.size >= MAX_STREAMS) {
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
    streams.add(stream);
    const c = collector();
    c.subscribe();
    if (c.ready) send(stream);
    request.socket.setNoDelay(true);
    const done = () => {
      if (!streams.delete(stream)) return;
      c.unsubscribe();
    };
    request.once('close', done);
    response.once('close', done);
  }

  async function release(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (options.token === null) {
      reply(response, 403, { error: 'read-only: start the dashboard with --allow-release to force-release locks' });
      return;
    }
    const type = request.headers['content-type'] ?? '';
    if (!/^application\/json\s*(;|$)/i.test(type)) {
      reply(response, 415, { error: 'the body must be application/json' });
      return;
    }
    let body: { name?: unknown; fence?: unknown; token?: unknown };
    try {
      body = JSON.parse(await readBody(request)) as typeof body;
    } catch (error) {
      reply(response, 400, { error: `unreadable body: ${error instanceof Error ? error.message : String(error)}` });
      return;
    }
    if (!tokenMatches(body?.token, options.token)) {
      options.log('refused a release from the page: wrong release token');
      reply(response, 403, { error: 'wrong release token: use the one printed when the dashboard started' });
      return;
    }
    let name: string;
    try {
      name = validate.lockName(body.name);
    } catch (error) {
      reply(response, 400, { error: error instanceof Error ? error.message : String(error) });
      return;
    }
    try {
      // The page confirmed a release of the grant it showed: refuse if the lock changed hands since.
      if (typeof body.fence === 'number') {
        const state = await op.bounded(op.lease.inspect(name), 'inspect');
        const holds =
          state.owner === null && shared ? await op.bounded(shared.inspectShared(name), 'inspect-shared') : null;
        const now = describe(state, holds, 0, [], Date.now());
        if (now.mode === 'free') {
          reply(response, 409, { error: `"${name}" is not held any more` });
          return;
        }
        if (now.fence !== body.fence) {
          reply(response, 409, {
            error: `"${name}" changed hands since the page showed it: its fencing token is now ${now.fence}`,
          });
          return;
        }
      }
      const handOn = { reservation: DEFAULTS.reservation, announce: true };
      const result = await op.bounded(op.admin.forceRelease(name, handOn), 'force-release');
      if (result.result === 'not-held') {
        reply(response, 409, { error: `"${name}" is not held: nothing to release` });
        return;
      }
      const by = result.holder ? ` (${result.holder.instance}, fencing token ${result.holder.token})` : '';
      options.log(`released "${name}" from the page${by}`);
      collector().kick();
      reply(response, 200, {
        result: 'released',
        name,
        instance: result.holder?.instance ?? null,
        fence: result.holder?.token ?? null,
        handedOn: result.woken !== null,
      });
    } catch (error) {
      reply(response, 502, { error: options.redact(error instanceof Error ? error.message : String(error)) });
    }
  }

  const server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) reply(response, 500, { error: options.redact(String(error)) });
      else response.destroy();
    });
  });

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (!check.hostAllowed(request)) {
      reply(response, 421, { error: 'this dashboard does not answer to that Host name' });
      return;
    }
    const url = new URL(request.url ?? '/', 'http://dashboard.invalid');
    const route = `${request.method} ${url.pathname}`;
    switch (route) {
      case 'GET /':
        return asset(response, 'text/html; charset=utf-8', PAGE_HTML);
      case 'GET /app.js':
        return asset(response, 'text/javascript; charset=utf-8', APP_JS);
      case 'GET /app.css':
        return asset(response, 'text/css; charset=utf-8', APP_CSS);
      case 'GET /favicon.ico':
        response.writeHead(204, HEADERS).end();
        return;
      case 'GET /events': {
        const why = check.crossOrigin(request, false);
        if (why !== null) return reply(response, 403, { error: `refused: ${why}` });
        return events(request, response, url);
      }
      case 'POST /api/release': {
        const why = check.crossOrigin(request, true);
        if (why !== null) {
          options.log(`refused a release request: ${why}`);
          return reply(response, 403, { error: `refused: ${why}` });
        }
        return release(request, response);
      }
    }
    const known = ['/', '/app.js', '/app.css', '/favicon.ico', '/events', '/api/release'].includes(url.pathname);
    reply(response, known ? 405 : 404, { error: known ? `${request.method} is not allowed here` : 'not found' });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  check = guard(options.host, address.port);
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const keepalive = setInterval(() => {
    for (const stream of streams) if (!stream.blocked) stream.response.write(': keep-alive\n\n');
  }, KEEPALIVE_MS);
  keepalive.unref();

  return {
    url: `http://${shown}:${address.port}/`,
    address,
    *wanted() {
      const c = collector();
      const filtered = new Map<string, string[]>();
      for (const stream of streams) {
        let names = filtered.get(stream.query.filter);
        if (!names) {
          names = heldNames(c, stream.query.filter);
          filtered.set(stream.query.filter, names);
        }
        yield* pageOf(names, stream.query).names;
      }
    },
    publish() {
      for (const stream of streams) send(stream);
    },
    async close(reason) {
      clearInterval(keepalive);
      for (const stream of streams) {
        stream.response.end(`event: bye\ndata: ${JSON.stringify({ reason: options.redact(reason) })}\n\n`);
      }
      streams.clear();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

function asset(response: ServerResponse, type: string, body: string): void {
  response.writeHead(200, { ...HEADERS, 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
  response.end(body);
}

function reply(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    ...HEADERS,
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(text),
  });
  response.end(text);
}

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY) {
        reject(new Error(`larger than ${MAX_BODY} bytes`));
        request.destroy();
        return;
      }
      chunks.push(chunk);
    });
    request.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.once('error', reject);
  });
}
