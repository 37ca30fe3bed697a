import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { portsOf, type Store } from '../../store/port.js';
import type { Operator } from '../operator.js';
import type { Collector } from './collector.js';
import { type Guard, guard } from './guard.js';
import { asset, HEADERS, reply } from './http.js';
import { APP_CSS } from './page/css.js';
import { PAGE_HTML } from './page/html.js';
import { APP_JS } from './page/js.js';
import { type PageRelease, releaseFromPage } from './release.js';
import { Streams } from './streams.js';
import type { PageMeta } from './view.js';

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
  const streams = new Streams(collector, options.meta);
  const routes = new Routes(streams, guard(options.host, options.port), {
    op,
    shared: portsOf(op.lease as Store).shared,
    token: options.token,
    redact: options.redact,
    log: options.log,
    kick: () => collector().kick(),
  });
  const server = createServer((request, response) => {
    routes.handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) reply(response, 500, { error: options.redact(String(error)) });
      else response.destroy();
    });
  });
  await listen(server, options);
  const address = server.address() as AddressInfo;
  routes.check = guard(options.host, address.port);
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  streams.keepAlive();

  return {
    url: `http://${shown}:${address.port}/`,
    address,
    wanted: () => streams.wanted(),
    publish: () => streams.publish(),
    async close(reason) {
      streams.end(options.redact(reason));
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

function listen(server: Server, options: ServerOptions): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

const PATHS = ['/', '/app.js', '/app.css', '/favicon.ico', '/events', '/api/release'];

/** Which request goes where, once the Host and (for the stream and the release) the Origin are right. */
class Routes {
  /** Replaced once the server listens, to know its port. */
  check: Guard;
  readonly #streams: Streams;
  readonly #release: PageRelease;

  constructor(streams: Streams, check: Guard, release: PageRelease) {
    this.#streams = streams;
    this.check = check;
    this.#release = release;
  }

  async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (!this.check.hostAllowed(request)) {
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
        const why = this.check.crossOrigin(request, false);
        if (why !== null) return reply(response, 403, { error: `refused: ${why}` });
        return this.#streams.open(request, response, url);
      }
      case 'POST /api/release': {
        const why = this.check.crossOrigin(request, true);
        if (why !== null) {
          this.#release.log(`refused a release request: ${why}`);
          return reply(response, 403, { error: `refused: ${why}` });
        }
        return releaseFromPage(request, response, this.#release);
      }
    }
    const known = PATHS.includes(url.pathname);
    reply(response, known ? 405 : 404, { error: known ? `${request.method} is not allowed here` : 'not found' });
  }
}
