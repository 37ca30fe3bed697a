import { describeError, ErrorCode, invalidArgument, LockError, StoreUnavailableError } from '../../core/errors.js';

/**
 * A pg `Pool` (`new pg.Pool(…)`). Structural, so pg stays an optional peer: these are the members
 * `new Leasehold(…)` recognises a pool by.
 */
export interface PgPoolBackend {
  readonly totalCount: number;
  query(...args: never[]): unknown;
  connect(...args: never[]): unknown;
}

/** A pg `Client` (`new pg.Client(…)`, connected), or a client checked out of a pool. */
export interface PgClientBackend {
  escapeIdentifier(...args: never[]): unknown;
  query(...args: never[]): unknown;
  connect(...args: never[]): unknown;
}

/** What the PostgreSQL store runs on: a pool or a client of pg. */
export type PgBackend = PgPoolBackend | PgClientBackend;

/** One row as pg hands it over. */
export type Row = Readonly<Record<string, unknown>>;

/** A statement's result as pg hands it over: its rows, and how many rows it changed or returned. */
export interface Result {
  readonly rows: Row[];
  readonly rowCount?: number | null;
}

/** A notification as pg delivers it on a client ('notification' event). */
export interface PgNotification {
  readonly channel: string;
  readonly payload?: string | undefined;
}

/** A statement as pg's query() takes it: with a name, pg prepares it once per connection. */
export interface QueryConfig {
  readonly text: string;
  readonly name?: string | undefined;
  readonly values?: readonly unknown[] | undefined;
}

/** The members of pg's Client the store uses (the pool's clients are Clients too). */
export interface PgClient {
  query(config: QueryConfig): Promise<Result>;
  on(event: 'notification', listener: (message: PgNotification) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  off(event: string, listener: (...args: never[]) => void): unknown;
  /** Present on a client checked out of a pool: give it back (an argument: destroy it). */
  release?(destroy?: unknown): void;
}

/** The members of pg's Pool the store uses. */
export interface PgPool {
  query(config: QueryConfig): Promise<Result>;
  connect(): Promise<PgClient>;
  readonly options?: Readonly<Record<string, unknown>>;
  /** The Client class the pool makes its connections with (pg-pool). */
  readonly Client?: unknown;
}

/**
 * Statements sent to one pg Client by this process's stores and listeners, in flight or waiting:
 * a Client runs one statement at a time, and pg deprecates (and pg 9 removes) its own queue for a
 * statement sent while another runs.
 */
interface Turns {
  busy: number;
  /** Settles once the last statement sent has. */
  last: Promise<unknown>;
}

const TURNS = new WeakMap<object, Turns>();

/**
 * Send `config` on `client` once every statement sent to it before through here has settled, in
 * the order sent: several stores sharing one caller's client, and a listener on it, never overlap
 * their statements. A client with nothing in flight is sent to at once.
 */
export function inTurn(client: Pick<PgClient, 'query'>, config: QueryConfig): Promise<Result> {
  let turns = TURNS.get(client);
  if (turns === undefined) {
    turns = { busy: 0, last: Promise.resolve() };
    TURNS.set(client, turns);
  }
  const own = turns;
  const send = () => client.query(config);
  let sent: Promise<Result>;
  if (own.busy > 0) sent = own.last.then(send);
  else {
    try {
      sent = send();
    } catch (error) {
      sent = Promise.reject(error);
    }
  }
  own.busy += 1;
  const settled = () => {
    own.busy -= 1;
  };
  own.last = sent.then(settled, settled);
  return sent;
}

/** A pg Client the store makes, connects and ends itself: its listening connection. */
export interface PgSessionClient extends PgClient {
  connect(): Promise<unknown>;
  end(): Promise<unknown>;
}

/**
 * How to make a connection as the pool makes its own: pg-pool keeps its Client class (pg's, or
 * the one given in its options) as `Client` and its settings as `options`, and opens each
 * connection with `new Client(options)`. Undefined for a pool that shows neither.
 */
export function sessionClientOf(pool: PgPool): (() => PgSessionClient) | undefined {
  const { Client, options } = pool;
  if (typeof Client !== 'function' || options === undefined) return undefined;
  return () => new (Client as new (settings: unknown) => PgSessionClient)(options);
}

/**
 * A pool that must also lend the listening session (one that cannot make a connection of its own,
 * see sessionClientOf) needs a second connection for the statements: a release on a pool of one,
 * whose connection a waiter's LISTEN holds, would wait for it for ever.
 */
export function checkListenPool(db: PgBackend, listen: PgBackend): void {
  if (db !== listen || !isPgPool(db)) return;
  const pool = db as unknown as PgPool;
  if (sessionClientOf(pool) !== undefined) return;
  const max = pool.options?.max;
  if (typeof max === 'number' && max < 2) {
    throw invalidArgument(
      `a pg Pool that cannot open a connection of its own for LISTEN (it has no Client class) must have max ≥ 2, one for the statements while a waiter listens, got max ${max}; or give \`listen\` a connection of its own`,
    );
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

export function isPgPool(value: unknown): value is PgPoolBackend {
  return (
    isObject(value) &&
    typeof value.totalCount === 'number' &&
    typeof value.query === 'function' &&
    typeof value.connect === 'function'
  );
}

export function isPgClient(value: unknown): value is PgClientBackend {
  return (
    isObject(value) &&
    typeof value.escapeIdentifier === 'function' &&
    typeof value.query === 'function' &&
    typeof value.connect === 'function' &&
    typeof value.on === 'function'
  );
}

export function isPg(value: unknown): value is PgBackend {
  return isPgPool(value) || isPgClient(value);
}

/** 'host:port' of a pool's or a client's settings, for messages. */
export function addressOf(backend: PgBackend): string {
  const source = isPgPool(backend)
    ? ((backend as unknown as PgPool).options ?? {})
    : (((backend as unknown as { connectionParameters?: Record<string, unknown> }).connectionParameters ??
        {}) as Record<string, unknown>);
  let host = source.host;
  let port = source.port;
  if (typeof source.connectionString === 'string') {
    try {
      const url = new URL(source.connectionString);
      host = url.hostname || host;
      port = url.port || port;
    } catch {
      // Not a URL (a keyword/value string): the fields or the defaults below say enough.
    }
  }
  return `${typeof host === 'string' && host !== '' ? host : 'localhost'}:${String(port ?? 5432)}`;
}

/**
 * SQLSTATE classes and codes that mean the server is there but cannot serve this now, or the
 * connection went away: 08 connection exceptions, 57P01-57P03 shutting down / starting up, 53300
 * too many connections, 25006 a read-only standby (a failover left the pool on the old primary).
 * Trying later or elsewhere is the remedy, as with Redis's LOADING or READONLY.
 */
const UNAVAILABLE_CODES = /^(08...|57P0[123]|53300|25006)$/;

/** A server error (pg's DatabaseError), by its shape: a SQLSTATE code and a severity. */
function sqlState(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && typeof severity === 'string' ? code : undefined;
}

/** True when `error` says the database could not be reached or could not serve the call. */
export function isUnavailable(error: unknown): boolean {
  const state = sqlState(error);
  return state === undefined ? !(error instanceof LockError) : UNAVAILABLE_CODES.test(state);
}

/**
 * Whatever pg threw as a LockError that says what happened: a server error (a SQLSTATE) is a
 * store error, unless it means the server cannot serve now; anything else pg throws (refused,
 * reset, terminated, a pool that could not connect in time) is unavailable.
 */
export function storeError(kind: string, address: string, action: string, error: unknown): LockError {
  if (error instanceof LockError) return error;
  const detail = describeError(error);
  const state = sqlState(error);
  if (state !== undefined && !UNAVAILABLE_CODES.test(state)) {
    return new LockError(ErrorCode.STORE_ERROR, `${kind}: ${action} failed: ${detail} (SQLSTATE ${state})`, {
      cause: error,
    });
  }
  return new StoreUnavailableError(`${kind}: ${action} on ${address} failed: ${detail}`, { cause: error });
}

/** A reply that does not have the shape the statement returns: never guessed at. */
export function badReply(kind: string, action: string, what: string): LockError {
  return new LockError(ErrorCode.STORE_ERROR, `${kind}: ${action}: unexpected reply: ${what}`);
}
