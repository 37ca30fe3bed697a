import { DEFAULTS, minimumTtl, type UnsafeConfig, type WhenUnavailable } from './defaults.js';
import { invalidArgument } from './errors.js';

/** Validation at the edge: each check names the option and shows the value it got. */

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null) return 'null';
  if (typeof value === 'object') return Object.prototype.toString.call(value);
  if (typeof value === 'function') return 'a function';
  return String(value);
}

/** A non-empty array of distinct lock names. */
export function lockNames(names: unknown): string[] {
  if (!Array.isArray(names) || names.length === 0) {
    throw invalidArgument(`lock names must be a non-empty array of strings, got ${show(names)}`);
  }
  const list = names.map((name: unknown) => lockName(name));
  const repeated = list.find((name, i) => list.indexOf(name) !== i);
  if (repeated !== undefined) throw invalidArgument(`lock names must be distinct: "${repeated}" is given twice`);
  return list;
}

/**
 * One rule for names on every backend: a non-empty string of at most `maxNameLength` UTF-16 code
 * units, well-formed (no lone surrogate: it has no UTF-8 form, so PostgreSQL and etcd would store
 * another name), without NUL (PostgreSQL's text cannot hold it), not starting with '}'.
 */
export function lockName(name: unknown, what = 'lock name'): string {
  if (typeof name !== 'string') throw invalidArgument(`${what} must be a string, got ${show(name)}`);
  if (name.length === 0) throw invalidArgument(`${what} must not be empty`);
  if (name.length > DEFAULTS.maxNameLength) {
    throw invalidArgument(`${what} must be at most ${DEFAULTS.maxNameLength} characters, got ${name.length}`);
  }
  // The name is a Redis Cluster hash tag: '{}…' would hash each of the lock's keys on its own.
  if (name.startsWith('}')) throw invalidArgument(`${what} must not start with '}', got ${show(name)}`);
  if (name.includes('\0')) throw invalidArgument(`${what} must not contain the NUL character, got ${show(name)}`);
  if (!isWellFormed(name)) {
    throw invalidArgument(`${what} must be well-formed Unicode (no lone surrogate), got ${show(name)}`);
  }
  return name;
}

/** String.prototype.isWellFormed, which Node 20.0 lacks. */
function isWellFormed(text: string): boolean {
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(text);
}

export function duration(value: unknown, option: string, min: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > DEFAULTS.maxDuration) {
    throw invalidArgument(
      `\`${option}\` must be an integer number of milliseconds ≥ ${min} and ≤ ${DEFAULTS.maxDuration}, got ${show(value)}`,
    );
  }
  return value;
}

/**
 * A lease length: at least the minimum that leaves validity after the drift margin
 * (ttl × driftFactor + driftConstant), which the message names.
 */
export function ttl(value: unknown, option: string, driftFactor: number): number {
  const min = minimumTtl(driftFactor);
  if (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value < min) {
    throw invalidArgument(
      `\`${option}\` must be at least ${min} ms: a shorter lease leaves no validity after the drift margin ` +
        `(${option} × ${driftFactor} + ${DEFAULTS.driftConstant} ms), got ${value}`,
    );
  }
  return duration(value, option, min);
}

export function optionalTtl(value: unknown, option: string, driftFactor: number, fallback: number): number {
  return value === undefined ? fallback : ttl(value, option, driftFactor);
}

export function optionalDuration(value: unknown, option: string, min: number, fallback: number): number {
  return value === undefined ? fallback : duration(value, option, min);
}

export function optionalBoolean(value: unknown, option: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw invalidArgument(`\`${option}\` must be a boolean, got ${show(value)}`);
  return value;
}

export function optionalSignal(value: unknown): AbortSignal | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof AbortSignal)) throw invalidArgument(`\`signal\` must be an AbortSignal, got ${show(value)}`);
  return value;
}

export function optionalFraction(value: unknown, option: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value >= 1) {
    throw invalidArgument(`\`${option}\` must be a number ≥ 0 and < 1, got ${show(value)}`);
  }
  return value;
}

export function optionalWhenUnavailable(value: unknown, allowed: readonly WhenUnavailable[]): WhenUnavailable {
  if (value === undefined) return DEFAULTS.whenUnavailable;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw invalidArgument(
      `\`whenUnavailable\` must be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${show(value)}`,
    );
  }
  return value as WhenUnavailable;
}

export function optionalChoice<T extends string>(
  value: unknown,
  option: string,
  allowed: readonly T[],
  fallback: T,
): T {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw invalidArgument(
      `\`${option}\` must be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${show(value)}`,
    );
  }
  return value as T;
}

export function optionalText(value: unknown, option: string, maxLength: number, fallback: string): string {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || value.length === 0 || value.length > maxLength) {
    throw invalidArgument(
      `\`${option}\` must be a non-empty string of at most ${maxLength} characters, got ${show(value)}`,
    );
  }
  return value;
}

export function optionalInteger(value: unknown, option: string, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalidArgument(`\`${option}\` must be an integer from ${min} to ${max}, got ${show(value)}`);
  }
  return value;
}

export function optionalFn<F>(value: unknown, option: string): F | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw invalidArgument(`\`${option}\` must be a function, got ${show(value)}`);
  return value as F;
}

/** An IANA time zone name the runtime knows (`'Asia/Seoul'`, `'UTC'`). */
export function optionalTimezone(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'string' && value.length > 0) {
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: value });
      return value;
    } catch {
      // Falls through to the message below.
    }
  }
  throw invalidArgument(`\`timezone\` must be an IANA time zone name such as 'Asia/Seoul', got ${show(value)}`);
}

/** A point in time as a valid Date or integer ms since the epoch; returned as ms. */
export function optionalInstant(value: unknown, option: string): number | undefined {
  if (value === undefined) return undefined;
  const ms = value instanceof Date ? value.getTime() : value;
  if (typeof ms !== 'number' || !Number.isSafeInteger(ms) || ms < 0) {
    throw invalidArgument(`\`${option}\` must be a valid Date or integer ms since the epoch ≥ 0, got ${show(value)}`);
  }
  return ms;
}

/** An instance label: recorded with every grant, where '|' marks a release (store/formats.ts). */
export function instance(value: unknown, fallback: string): string {
  const label = optionalText(value, 'instance', DEFAULTS.maxInstanceLength, fallback);
  if (label.includes('|')) throw invalidArgument(`\`instance\` may not contain '|', got ${show(label)}`);
  return label;
}

const UNSAFE_CONFIG: readonly UnsafeConfig[] = ['warn', 'refuse', 'ignore'];

export function unsafeConfig(value: unknown): UnsafeConfig {
  return optionalChoice(value, 'unsafeConfig', UNSAFE_CONFIG, DEFAULTS.unsafeConfig);
}

export function prefix(value: unknown): string {
  if (value === undefined) return DEFAULTS.prefix;
  if (typeof value !== 'string' || value.length === 0 || /[{}]/.test(value)) {
    throw invalidArgument(`\`prefix\` must be a non-empty string without braces, got ${show(value)}`);
  }
  return value;
}

/**
 * An options object; with `known`, every key it sets must be one of them (a misspelt option is
 * refused, never silently ignored). A key set to undefined counts as not set.
 */
export function options(value: unknown, what: string, known?: readonly string[]): Record<string, unknown> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalidArgument(`${what} must be an object, got ${show(value)}`);
  }
  const o = value as Record<string, unknown>;
  if (known !== undefined) {
    for (const key of Object.keys(o)) {
      if (o[key] !== undefined && !known.includes(key)) {
        throw invalidArgument(`\`${key}\` is not one of the ${what}: ${known.map((k) => `\`${k}\``).join(', ')}`);
      }
    }
  }
  return o;
}

/** The second argument of withLock / tryWithLock: the options (an object) or the work (a function). */
export function optionsOrWork(value: unknown, what: string): void {
  if (typeof value === 'function' || (typeof value === 'object' && value !== null && !Array.isArray(value))) return;
  throw invalidArgument(
    `${what}'s second argument must be the options (an object) or the work (a function), got ${show(value)}`,
  );
}

export function fn(value: unknown, what: string): void {
  if (typeof value !== 'function') throw invalidArgument(`${what} must be a function, got ${show(value)}`);
}

export function invalidBackends(): Error {
  return invalidArgument('an array of backends (Redlock) must hold at least one client or store');
}

/** Redlock's nodes must be independent: the same client twice would count one master as two votes. */
export function distinctBackends(backends: readonly unknown[]): void {
  const seen = new Set<unknown>();
  for (const [i, backend] of backends.entries()) {
    if (seen.has(backend)) {
      throw invalidArgument(`an array of backends (Redlock) must not hold the same client or store twice (index ${i})`);
    }
    seen.add(backend);
  }
}

export function quorum(value: unknown, nodes: number): number {
  const majority = Math.floor(nodes / 2) + 1;
  if (value === undefined) return majority;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < majority || value > nodes) {
    throw invalidArgument(
      `\`quorum\` must be an integer from ${majority} (a majority) to ${nodes}, got ${show(value)}`,
    );
  }
  return value;
}

export { show };

/** Most permits a semaphore may have. */
const MAX_LIMIT = 1_000_000;

const MODES: readonly LockMode[] = ['exclusive', 'shared'];

export type LockMode = 'exclusive' | 'shared';

/**
 * Which lock a call asks for: `limit` (a semaphore of that many permits), `mode` (a read-write
 * lock's; 'exclusive' is the mutex), neither (the mutex). They exclude each other, and reentrancy
 * is for exclusive holds only.
 */
export function lockKind(limit: unknown, mode: unknown, reentrant: boolean): { limit?: number; mode: LockMode } {
  if (
    limit !== undefined &&
    (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT)
  ) {
    throw invalidArgument(`\`limit\` must be an integer from 1 to ${MAX_LIMIT}, got ${show(limit)}`);
  }
  const chosen = optionalChoice(mode, 'mode', MODES, 'exclusive');
  if (limit !== undefined && mode !== undefined) {
    throw invalidArgument(`\`limit\` (a semaphore) and \`mode\` (a read-write lock) cannot be combined, got both`);
  }
  if (reentrant && (limit !== undefined || chosen === 'shared')) {
    throw invalidArgument(
      `\`reentrant\` holds are exclusive: it cannot be combined with ${limit === undefined ? "`mode: 'shared'`" : '`limit`'}`,
    );
  }
  return limit === undefined ? { mode: chosen } : { limit, mode: chosen };
}

/** Replica acknowledgement from a Leasehold's options: undefined when `replicas` is not set (or 0). */
export function replication(
  o: Record<string, unknown>,
): { replicas: number; timeout: number; durability: 'replicas' | 'aof'; whenShort: 'fail' | 'keep' } | undefined {
  const replicas = optionalInteger(o.replicas, 'replicas', 0, 64, 0);
  const timeout = optionalDuration(o.replicaTimeout, 'replicaTimeout', 1, DEFAULTS.replicaTimeout);
  const durability = oneOfValues(o.durability, 'durability', ['replicas', 'aof'] as const, DEFAULTS.durability);
  const whenShort = oneOfValues(
    o.whenNotReplicated,
    'whenNotReplicated',
    ['fail', 'keep'] as const,
    DEFAULTS.whenNotReplicated,
  );
  if (replicas === 0) return undefined;
  return { replicas, timeout, durability, whenShort };
}

function oneOfValues<T extends string>(value: unknown, option: string, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw invalidArgument(
      `\`${option}\` must be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${show(value)}`,
    );
  }
  return value as T;
}
