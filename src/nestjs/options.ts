import { type Backend, ErrorCode, Leasehold, type LeaseholdOptions, LockError, type Store } from '../index.js';

/** The injection token of the application's Leasehold (the `Leasehold` class is a token for it too). */
export const LEASEHOLD: unique symbol = Symbol.for('leasehold/nestjs:Leasehold');
/** @internal The token of the module's options. */
export const LEASEHOLD_MODULE_OPTIONS: unique symbol = Symbol.for('leasehold/nestjs:options');

/** Default of `shutdownTimeout`. */
export const DEFAULT_SHUTDOWN_TIMEOUT = 10_000;

/**
 * What `LeaseholdModule.forRoot()` takes, or `forRootAsync()`'s factory returns: exactly one of
 * `backend`, `client` and `store` (they are names for the same thing: what `new Leasehold(…)`
 * takes), and the Leasehold's options.
 */
export interface LeaseholdModuleOptions {
  /** Anything `new Leasehold(…)` takes: a Redis client or cluster, an array of clients (Redlock), a pg pool, a Store. */
  backend?: Backend | readonly Backend[];
  /** A Redis client (ioredis or node-redis), cluster or Sentinel client; an array of clients for Redlock. Never closed by the module. */
  client?: Backend | readonly Backend[];
  /** A Store, such as `new MemoryStore()`. */
  store?: Store;
  /** The Leasehold's options (prefix, ttl, wait, instance, …). */
  options?: LeaseholdOptions;
  /**
   * ms the application's shutdown waits for the work under this Leasehold's locks to finish and
   * release them (decorated methods are told to stop through `lockSignal()`), before it closes
   * the Leasehold; a lock still held then ends by its ttl. Default 10_000.
   */
  shutdownTimeout?: number;
}

function invalid(message: string): LockError {
  return new LockError(ErrorCode.INVALID_ARGUMENT, `LeaseholdModule: ${message}`);
}

/** The backend of the options, refused with a message unless exactly one of the three names gives it. */
function backendOf(options: LeaseholdModuleOptions): Backend | readonly Backend[] {
  const given = (['backend', 'client', 'store'] as const).filter((key) => options[key] !== undefined);
  if (given.length !== 1) {
    const got = given.length === 0 ? 'none' : given.map((key) => `\`${key}\``).join(' and ');
    throw invalid(`give exactly one of \`backend\`, \`client\` or \`store\`, got ${got}`);
  }
  return options[given[0] as 'backend' | 'client' | 'store'] as Backend | readonly Backend[];
}

export interface ResolvedModuleOptions {
  readonly shutdownTimeout: number;
}

/** The module options checked, and the Leasehold they describe. */
export function createLeasehold(options: unknown): { locks: Leasehold; settings: ResolvedModuleOptions } {
  if (typeof options !== 'object' || options === null) {
    throw invalid(`the options must be an object, got ${options === null ? 'null' : typeof options}`);
  }
  const o = options as LeaseholdModuleOptions;
  const timeout = o.shutdownTimeout ?? DEFAULT_SHUTDOWN_TIMEOUT;
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 0) {
    throw invalid(`\`shutdownTimeout\` must be an integer number of milliseconds ≥ 0, got ${String(timeout)}`);
  }
  const locks = new Leasehold(backendOf(o), o.options);
  return { locks, settings: { shutdownTimeout: timeout } };
}
