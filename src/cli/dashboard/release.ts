import type { IncomingMessage, ServerResponse } from 'node:http';
import * as validate from '../../core/validate.js';
import type { SharedStore } from '../../store/port.js';
import type { Operator } from '../operator.js';
import { describe } from './collector.js';
import { tokenMatches } from './guard.js';
import { readBody, reply } from './http.js';

/** What a release from the page needs of the dashboard. */
export interface PageRelease {
  readonly op: Operator;
  /** The store's shared holds, if it has them: a lock held shared is held too. */
  readonly shared: SharedStore | undefined;
  /** The run's release token, or null: read-only. */
  readonly token: string | null;
  readonly redact: (text: string) => string;
  readonly log: (line: string) => void;
  /** Read again now: the page should show the release at once. */
  readonly kick: () => void;
}

/** A release the page asked for: the lock, and the fencing token of the grant the page showed. */
interface Asked {
  readonly name: string;
  readonly fence: unknown;
}

/** POST /api/release: force-release one lock, if the token is right and the grant is the one the page showed. */
export async function releaseFromPage(
  request: IncomingMessage,
  response: ServerResponse,
  on: PageRelease,
): Promise<void> {
  const asked = await readRelease(request, response, on);
  if (asked === null) return;
  const { name, fence } = asked;
  try {
    if (typeof fence === 'number' && !(await stillAsShown(response, on, name, fence))) return;
    const result = await on.op.bounded(on.op.admin.forceRelease(name), 'force-release');
    if (result.result === 'not-held') {
      reply(response, 409, { error: `"${name}" is not held: nothing to release` });
      return;
    }
    const by = result.holder ? ` (${result.holder.instance}, fencing token ${result.holder.token})` : '';
    on.log(`released "${name}" from the page${by}`);
    on.kick();
    reply(response, 200, {
      result: 'released',
      name,
      instance: result.holder?.instance ?? null,
      fence: result.holder?.token ?? null,
      handedOn: result.woken !== null,
    });
  } catch (error) {
    reply(response, 502, { error: on.redact(error instanceof Error ? error.message : String(error)) });
  }
}

/** The request's lock name and fence, once its type, body and release token are right; else replies and null. */
async function readRelease(request: IncomingMessage, response: ServerResponse, on: PageRelease): Promise<Asked | null> {
  if (on.token === null) {
    reply(response, 403, { error: 'read-only: start the dashboard with --allow-release to force-release locks' });
    return null;
  }
  const type = request.headers['content-type'] ?? '';
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    reply(response, 415, { error: 'the body must be application/json' });
    return null;
  }
  let body: { name?: unknown; fence?: unknown; token?: unknown };
  try {
    body = JSON.parse(await readBody(request)) as typeof body;
  } catch (error) {
    reply(response, 400, { error: `unreadable body: ${error instanceof Error ? error.message : String(error)}` });
    return null;
  }
  if (!tokenMatches(body?.token, on.token)) {
    on.log('refused a release from the page: wrong release token');
    reply(response, 403, { error: 'wrong release token: use the one printed when the dashboard started' });
    return null;
  }
  try {
    return { name: validate.lockName(body.name), fence: body.fence };
  } catch (error) {
    reply(response, 400, { error: error instanceof Error ? error.message : String(error) });
    return null;
  }
}

/** The page confirmed a release of the grant it showed: refuse (and say so) if the lock changed hands since. */
async function stillAsShown(response: ServerResponse, on: PageRelease, name: string, fence: number): Promise<boolean> {
  const state = await on.op.bounded(on.op.lease.inspect(name), 'inspect');
  const holds =
    state.owner === null && on.shared ? await on.op.bounded(on.shared.inspectShared(name), 'inspect-shared') : null;
  const now = describe(state, holds, 0, [], Date.now());
  if (now.mode === 'free') {
    reply(response, 409, { error: `"${name}" is not held any more` });
    return false;
  }
  if (now.fence !== fence) {
    reply(response, 409, {
      error: `"${name}" changed hands since the page showed it: its fencing token is now ${now.fence}`,
    });
    return false;
  }
  return true;
}
