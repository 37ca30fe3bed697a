import { BadReply, decodeFence, grantOf } from '../formats.js';
import type { HandOff, Holder } from '../port.js';

// The values kept in Redis are decoded in ../formats.ts; scripts.ts reads them through these names.
export { BadReply, decodeRun as storedRun, readLockValue } from '../formats.js';

/**
 * How the scripts' raw replies become the port's replies. Every decoder is strict: a reply its
 * script's header does not document is a store error, never read as the nearest outcome.
 */

/** A reply's decoding. `codes`: the return codes it knows, as the script's header lists them; null for a reply without one. */
export interface Decoder<Reply> {
  readonly codes: readonly number[] | null;
  /** A positive integer alone is a reply of its own, beside the codes (acquire's token). */
  readonly positive?: true;
  /** Throws BadReply for a reply it does not know (the caller names the script). */
  readonly decode: (reply: unknown) => Reply;
}

/** An integer as a client library returns it (a number, or a string for a large one). */
export function integer(reply: unknown): number {
  const n = typeof reply === 'number' ? reply : typeof reply === 'string' && reply !== '' ? Number(reply) : Number.NaN;
  if (!Number.isInteger(n)) throw new BadReply();
  return n;
}

/** A reply of several parts that the decoding reads itself (it throws BadReply where they are not). */
export function shaped<Reply>(decode: (reply: readonly unknown[]) => Reply): Decoder<Reply> {
  return {
    codes: null,
    decode: (reply) => {
      if (!Array.isArray(reply)) throw new BadReply();
      return decode(reply);
    },
  };
}

/** A reply that is one integer. */
export const integerReply: Decoder<number> = { codes: null, decode: integer };

/**
 * A reply that is a positive integer alone (`plain`'s, on the hot path: no array to build on the
 * server and parse here), or else a return code first in an array (`byCode`'s cases, whose codes
 * are not positive).
 */
export function positiveOr<Reply>(plain: (n: number) => Reply, cases: Decoder<Reply>): Decoder<Reply> {
  return {
    codes: cases.codes,
    positive: true,
    decode: (reply) => (Array.isArray(reply) ? cases.decode(reply) : positiveInteger(reply, plain)),
  };
}

function positiveInteger<Reply>(reply: unknown, plain: (n: number) => Reply): Reply {
  const n = integer(reply);
  if (n <= 0) throw new BadReply();
  return plain(n);
}

/**
 * A reply that is a return code, alone (`1`) or first in an array (`{1, token}`): one decoding per
 * code, each given the whole reply as an array. A code not listed is a BadReply.
 */
export function byCode<Reply>(cases: Readonly<Record<number, (reply: readonly unknown[]) => Reply>>): Decoder<Reply> {
  const table = new Map(Object.entries(cases).map(([code, decode]) => [Number(code), decode]));
  return {
    codes: [...table.keys()],
    decode: (reply) => {
      const parts = Array.isArray(reply) ? reply : [reply];
      const decode = table.get(integer(parts[0]));
      if (decode === undefined) throw new BadReply();
      return decode(parts);
    },
  };
}

/**
 * A fencing counter's value (formats.ts): its token (also when raise-fence wrote the token alone),
 * the grant it records, and the owner that released it.
 */
export function parseCounter(counter: string): { token: number; holder: Holder | null; releasedBy: string | null } {
  const record = decodeFence(counter);
  return { token: record.token, holder: grantOf(record), releasedBy: record.releasedBy };
}

const ANYONE: HandOff = Object.freeze({ woken: null, next: Object.freeze([]) as readonly string[] });

/** Whether a channel message asks a waiter whether it is alive ('?<waiter>', lib/shared.lua's challenge). */
export function isChallenge(message: string): boolean {
  return message.startsWith('?');
}

/**
 * A hand-off as lib/hand-on.lua publishes it: '<woken> <next> [<then> <then>]', with ' =<ttl>'
 * after the names when the lock was granted to `woken` outright, or '' for a lock announced to any
 * waiter. Owner tokens are base64url, so neither a space nor '=' occurs inside one. A challenge
 * ('?<waiter>') wakes the waiter it names, as a hand-off naming it does: it tries again, which
 * tells the server it is alive.
 */
export function decodeHandOff(message: string): HandOff {
  if (message === '') return ANYONE;
  const [woken, ...next] = (isChallenge(message) ? message.slice(1) : message).split(' ');
  const last = next[next.length - 1];
  if (last?.startsWith('=')) {
    next.pop();
    const grantedFor = Number(last.slice(1));
    if (Number.isSafeInteger(grantedFor)) return { woken: woken as string, next, grantedFor };
  }
  return { woken: woken as string, next };
}
