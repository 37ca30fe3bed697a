import type { Redis } from 'ioredis';
import { BadReply, decodeFence, decodeLockRecord } from '../../store/formats.js';
import { count, type Finding } from './finding.js';

/**
 * The search for hand-rolled locks beside leasehold's: SCAN (never KEYS) over at most `limit`
 * keys, each page's TYPE, PTTL and the head of a string's value read in one pipeline. What looks
 * like a lock is judged by its name (lock, mutex, semaphore, …) or by its value (shaped like a
 * random owner token). leasehold's own keys are recognised by their layout and left out.
 */

export interface ScanOptions {
  /** leasehold's prefix: every key under `<prefix>:` is leasehold's own. */
  readonly prefix: string;
  /** At most this many keys are looked at, over every server. */
  readonly limit: number;
  /** SCAN's COUNT: keys per round trip. */
  readonly count: number;
  /** Called after each page with the keys looked at so far and the servers' total (DBSIZE). */
  readonly onProgress: (scanned: number, total: number) => void;
}

export interface ScanResult {
  readonly scanned: number;
  /** DBSIZE summed over the servers scanned. */
  readonly total: number;
  /** False when the limit stopped the scan before every key was seen. */
  readonly complete: boolean;
  readonly ms: number;
  /** Keys of leasehold under the prefix, and under other prefixes recognised by their layout. */
  readonly leasehold: { readonly own: number; readonly otherPrefixes: Readonly<Record<string, number>> };
  readonly findings: readonly Finding[];
}

/** Names of locks as people write them: order-lock, lock:order:1, mutex_x, job.semaphore, leader… */
const LOCK_NAME = /(?<![bc])lock|mutex|semaphore|(?:^|[^a-z])(?:lease|leader|sema)(?:$|[^a-z])/i;
/** A value shaped like a random owner token: a UUID, 16 or more hex digits, or a long base64 string. */
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;
const HEX = /[0-9a-f]{16,}/i;
const BASE64 = /^[A-Za-z0-9_\-+/]{16,}={0,2}$/;
/** leasehold's key layout (store/redis/keys.ts): `<prefix>:{<name>}` and its companions. */
const LEASEHOLD_KEY = /^(.+?):\{.+\}(?::(?:fence|released|waiters|alive|holds|grants|tick|runs))?$/;
/** A lock key: its value is '<lease>\n<fence record>' (store/redis/keys.ts). */
const LOCK_KEY = /^(.+?):\{.+\}$/;
/** A fencing counter's key as a layout before one key per lock kept it; its value is a fence record. */
const FENCE_KEY = /^(.+?):\{.+\}:fence$/;
/** Bytes of a string's value read: enough for any owner token, and a lock key's lease and record. */
const VALUE_HEAD = 256;
/** Examples shown per finding. */
const EXAMPLES = 10;
/** Keys of one name pattern with one constant value, below which the group is not reported. */
const SHARED_MIN = 20;

export function looksLikeToken(value: string): boolean {
  if (UUID.test(value) || HEX.test(value)) return true;
  return BASE64.test(value) && /\d/.test(value) && /[A-Za-z]/.test(value);
}

export function looksLikeLockName(key: string): boolean {
  return LOCK_NAME.test(key);
}

/** Whether the head of a fencing counter's value is a fence record with a grant, as an acquire writes it. */
export function looksLikeFenceRecord(head: string): boolean {
  try {
    return decodeFence(head).grant !== null;
  } catch (error) {
    if (error instanceof BadReply) return false;
    throw error;
  }
}

/** Whether the head of a lock key's value is a lease (or none) and a fence record with a grant, as an acquire writes it. */
export function looksLikeLockRecord(head: string): boolean {
  try {
    return decodeLockRecord(head).fence?.grant != null;
  } catch (error) {
    if (error instanceof BadReply) return false;
    throw error;
  }
}

/** What one key is, as far as the scan is concerned. */
interface Seen {
  readonly key: string;
  readonly type: string;
  /** PTTL: -1 no expiry. */
  readonly pttl: number;
  /** The head of a string's value (null for other types). */
  readonly value: string | null;
}

function example(seen: Seen): Record<string, unknown> {
  return { key: seen.key, type: seen.type, ttl: seen.pttl < 0 ? null : seen.pttl, value: seen.value };
}

function shown(value: string | null): string {
  if (value === null) return '';
  const v = value.length > 24 ? `${value.slice(0, 24)}…` : value;
  return ` = ${JSON.stringify(v)}`;
}

function exampleList(items: readonly Seen[]): string {
  const head = items.slice(0, 3).map((s) => `${s.key}${shown(s.value)}`);
  return head.join(', ') + (items.length > 3 ? `, … (${items.length - 3} more)` : '');
}

/** The shape of a key with its ids taken out: order:1001:processing → order:*:processing. */
function pattern(key: string): string {
  return key.replace(/[0-9a-f]{8,}|\d+/gi, '*');
}

async function readPage(client: Redis, keys: readonly string[]): Promise<Seen[]> {
  const pipeline = client.pipeline();
  for (const key of keys) {
    pipeline.type(key);
    pipeline.pttl(key);
    pipeline.getrange(key, 0, VALUE_HEAD);
  }
  const replies = (await pipeline.exec()) ?? [];
  return keys.map((key, i) => {
    const [, type] = replies[i * 3] ?? [];
    const [, pttl] = replies[i * 3 + 1] ?? [];
    const [valueError, value] = replies[i * 3 + 2] ?? [];
    return {
      key,
      type: typeof type === 'string' ? type : '?',
      pttl: typeof pttl === 'number' ? pttl : -2,
      value: valueError === null && typeof value === 'string' && type === 'string' ? value : null,
    };
  });
}

/** Scan `servers` (the masters of a cluster, or the one server) and judge what was seen. */
export async function scanForLocks(
  servers: readonly { readonly client: Redis; readonly node: string }[],
  options: ScanOptions,
): Promise<ScanResult> {
  const started = performance.now();
  const totals = await Promise.all(servers.map(({ client }) => client.dbsize().catch(() => 0)));
  const total = totals.reduce((a, b) => a + b, 0);
  const own = `${options.prefix}:`;
  let ownKeys = 0;
  let scanned = 0;
  let complete = true;
  /** Keys that may be another prefix's leasehold keys, kept until the prefixes are known. */
  const shaped: Seen[] = [];
  const candidates: Seen[] = [];
  const prefixes = new Set<string>();
  for (const { client } of servers) {
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'COUNT', options.count);
      cursor = next;
      const page = keys.slice(0, Math.max(0, options.limit - scanned));
      scanned += page.length;
      for (const seen of await readPage(client, page)) {
        if (seen.key.startsWith(own)) {
          ownKeys += 1;
          continue;
        }
        const lock = LOCK_KEY.exec(seen.key);
        if (lock?.[1] !== undefined && seen.value !== null && looksLikeLockRecord(seen.value)) prefixes.add(lock[1]);
        const fence = FENCE_KEY.exec(seen.key);
        if (fence?.[1] !== undefined && seen.value !== null && looksLikeFenceRecord(seen.value)) prefixes.add(fence[1]);
        (LEASEHOLD_KEY.test(seen.key) ? shaped : candidates).push(seen);
      }
      options.onProgress(scanned, total);
      if (scanned >= options.limit && (cursor !== '0' || page.length < keys.length)) {
        complete = false;
        break;
      }
    } while (cursor !== '0');
    if (!complete) break;
  }
  const otherPrefixes: Record<string, number> = {};
  for (const seen of shaped) {
    const p = LEASEHOLD_KEY.exec(seen.key)?.[1];
    if (p !== undefined && prefixes.has(p)) otherPrefixes[p] = (otherPrefixes[p] ?? 0) + 1;
    else candidates.push(seen);
  }
  return {
    scanned,
    total,
    complete,
    ms: performance.now() - started,
    leasehold: { own: ownKeys, otherPrefixes },
    findings: judge(candidates),
  };
}

/** The hand-rolled-lock findings from the keys that are not leasehold's. */
export function judge(keys: readonly Seen[]): Finding[] {
  const findings: Finding[] = [];
  const named = keys.filter((s) => looksLikeLockName(s.key));
  const noTtl = named.filter((s) => s.pttl === -1);
  if (noTtl.length > 0) {
    findings.push({
      check: 'lock-without-ttl',
      level: 'unsafe',
      summary: `${count(noTtl.length, 'key')} named like a lock with no TTL: ${exampleList(noTtl)}`,
      why: 'a holder that crashes (or a SET NX followed by an EXPIRE that never ran) leaves the lock for ever: every later acquirer waits for ever, a deadlock.',
      fix: 'take the lock with one command, SET <key> <random token> NX PX <ttl> (never SET then EXPIRE), or use leasehold, whose every lock is a lease.',
      details: { keys: noTtl.length, examples: noTtl.slice(0, EXAMPLES).map(example) },
    });
  }
  const tokens = keys.filter(
    (s) => !looksLikeLockName(s.key) && s.type === 'string' && s.pttl === -1 && looksLikeToken(s.value ?? ''),
  );
  if (tokens.length > 0) {
    findings.push({
      check: 'token-without-ttl',
      level: 'warn',
      summary: `${count(tokens.length, 'key')} with a value shaped like an owner token and no TTL: ${exampleList(tokens)}`,
      why: 'if these are locks (a random owner token is what a lock stores), a crashed holder leaves them for ever: a deadlock.',
      fix: 'if they are locks, give them a TTL at the moment they are taken (SET … NX PX <ttl>); if not, ignore this.',
      details: { keys: tokens.length, examples: tokens.slice(0, EXAMPLES).map(example) },
    });
  }
  const constant = named.filter((s) => s.value !== null && !looksLikeToken(s.value));
  if (constant.length > 0) {
    findings.push(constantFinding('constant-lock-value', constant, 'named like a lock'));
  }
  const groups = new Map<string, Seen[]>();
  for (const s of keys) {
    if (looksLikeLockName(s.key) || s.value === null || s.value.length > 16 || looksLikeToken(s.value)) continue;
    const group = `${pattern(s.key)}\u0000${s.value}`;
    groups.set(group, [...(groups.get(group) ?? []), s]);
  }
  for (const [group, members] of groups) {
    if (members.length < SHARED_MIN) continue;
    const [shape] = group.split('\u0000');
    findings.push(constantFinding('shared-constant-value', members, `of the form ${shape}`, SHARED_WHY));
  }
  return findings;
}

const CONSTANT_WHY =
  "a constant value cannot tell one holder from the next: a holder that overruns its TTL deletes the next holder's lock when it finishes (the stale delete), and then a third runs beside the second.";
const SHARED_WHY = `many keys of one shape holding one constant value is how SET <key> 1 NX EX <ttl> locks look; if these are locks, ${CONSTANT_WHY}`;

function constantFinding(check: string, keys: readonly Seen[], what: string, why = CONSTANT_WHY): Finding {
  const values = new Map<string, number>();
  for (const s of keys) values.set(s.value ?? '', (values.get(s.value ?? '') ?? 0) + 1);
  const top = [...values]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 5)
    .map(([v, n]) => `${JSON.stringify(v)} ×${n}`)
    .join(', ');
  const withoutTtl = keys.filter((s) => s.pttl === -1).length;
  return {
    check,
    level: 'warn',
    summary: `${count(keys.length, 'key')} ${what} ${keys.length === 1 ? 'holds' : 'share'} a constant value (${top})${withoutTtl > 0 ? `, ${withoutTtl} without a TTL` : ''}: ${exampleList(keys)}`,
    why,
    fix: 'store a random token per acquisition (SET <key> <token> NX PX <ttl>) and release with a compare-and-delete script that deletes only your own token, or use leasehold.',
    details: { keys: keys.length, values: Object.fromEntries(values), examples: keys.slice(0, EXAMPLES).map(example) },
  };
}
