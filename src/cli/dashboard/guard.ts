import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';

/**
 * Who may talk to the dashboard. A page on another site can make a browser send requests here
 * (a form post, a fetch without CORS, a DNS name rebound to 127.0.0.1), so every request must name
 * this server in its Host header, and a request that reads data or acts must come from the
 * dashboard's own page: Origin, when sent, is this server, and Sec-Fetch-Site, when sent, says
 * same-origin. No response carries a CORS header.
 */

/** Whether `host` is a loopback address or name (127.0.0.0/8, ::1, localhost). */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  if (bare === 'localhost' || bare.endsWith('.localhost')) return true;
  if (isIP(bare) === 4) return bare.startsWith('127.');
  if (isIP(bare) === 6) return bare === '::1' || bare === '0:0:0:0:0:0:0:1';
  return false;
}

/** Whether `host` means every interface. */
function isWildcard(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  return bare === '0.0.0.0' || bare === '::' || bare === '';
}

function hostPort(host: string, port: number): string {
  const bare = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  return isIP(bare) === 6 ? `[${bare}]:${port}` : `${bare}:${port}`;
}

export interface Guard {
  /** The Host header names this server (always checked: a rebound DNS name does not). */
  hostAllowed(request: IncomingMessage): boolean;
  /**
   * Why a request that reads the locks or acts on them does not come from the dashboard's own
   * page, or null when it does. `requireOrigin`: a browser sends Origin with every POST, so one
   * without it is not the page.
   */
  crossOrigin(request: IncomingMessage, requireOrigin: boolean): string | null;
}

export function guard(boundHost: string, port: number): Guard {
  const allowed = new Set<string>([hostPort(boundHost, port)]);
  if (isLoopback(boundHost)) {
    for (const alias of ['localhost', '127.0.0.1', '[::1]']) allowed.add(hostPort(alias, port));
  }
  const any = isWildcard(boundHost);
  const hostOf = (request: IncomingMessage) => (request.headers.host ?? '').toLowerCase();
  const hostAllowed = (request: IncomingMessage) => {
    const host = hostOf(request);
    if (host === '') return false;
    // Bound to every interface, the names it is reached by are not known here; Origin still must match Host.
    return any || allowed.has(host);
  };
  return {
    hostAllowed,
    crossOrigin(request, requireOrigin) {
      const site = request.headers['sec-fetch-site'];
      if (site !== undefined && site !== 'same-origin') return `Sec-Fetch-Site is ${site}`;
      const origin = request.headers.origin;
      if (origin === undefined) return requireOrigin ? 'no Origin header' : null;
      if (origin !== `http://${hostOf(request)}`) return `Origin ${origin} is not this dashboard`;
      return null;
    },
  };
}

/** A token for this run: 192 random bits, URL-safe. */
export function newToken(): string {
  return randomBytes(24).toString('base64url');
}

/** Constant-time comparison of a token sent with the run's token (hashed first: equal lengths). */
export function tokenMatches(sent: unknown, expected: string): boolean {
  if (typeof sent !== 'string' || sent.length === 0 || sent.length > 200) return false;
  const a = createHash('sha256').update(sent).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}
