/**
 * Every etcd key the store writes, built in one place. Under the client's namespace and the
 * Leasehold's prefix (`<prefix>/`), lock `name` has:
 *
 * - `q/<name>/<owner>`: one key per contender, holder and waiters alike, on a session lease. Its
 *   create revision is its place in line and, once it holds, the fencing token; its value says
 *   its kind (exclusive, a semaphore's, shared).
 * - `r/<name>`: who released the last grant, and its token (re-sent releases, `inspect`).
 * - `t/<name>/<tick>`: the latest tick claimed, zero-padded so that keys sort as ticks do.
 * - `h/<name>/<owner>`, `e/<name>/<owner>`: a run of the job (its claim, and how it ended).
 *
 * The prefix and the name are escaped (`%` and `/`), so one name's keys never fall inside another
 * name's range, nor one prefix's inside another's.
 */

/** `%` and `/` escaped: a segment that contains no `/`. */
function segment(text: string): string {
  return text.replace(/%/g, '%25').replace(/\//g, '%2F');
}

function unsegment(text: string): string {
  return text.replace(/%2F/g, '/').replace(/%25/g, '%');
}

/** The end of the range of every key that starts with `start` (etcd's `range_end` for a prefix). */
export function prefixEnd(start: Buffer): Buffer {
  const end = Buffer.from(start);
  for (let i = end.length - 1; i >= 0; i--) {
    if ((end[i] as number) < 0xff) {
      end[i] = (end[i] as number) + 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}

/** Digits of a tick in its key: ms since the epoch, zero-padded so that byte order is numeric order. */
const TICK_DIGITS = 16;

export interface LockKeys {
  /** The contenders' keys: `start` up to (not including) `end`. */
  readonly queue: { readonly start: Buffer; readonly end: Buffer };
  member(owner: string): Buffer;
  readonly released: Buffer;
  readonly ticks: { readonly start: Buffer; readonly end: Buffer };
  tick(tick: number): Buffer;
  readonly runs: { readonly start: Buffer; readonly end: Buffer };
  run(owner: string): Buffer;
  readonly ends: { readonly start: Buffer; readonly end: Buffer };
  end(owner: string): Buffer;
}

/** The key layout of one store: a namespace (the client's) and a prefix (the Leasehold's). */
export class KeySpace {
  readonly #root: string;
  readonly #namespace: Buffer;

  constructor(namespace: Buffer, prefix: string) {
    this.#namespace = namespace;
    this.#root = `${segment(prefix)}/`;
  }

  #key(text: string): Buffer {
    return Buffer.concat([this.#namespace, Buffer.from(text)]);
  }

  #range(text: string): { start: Buffer; end: Buffer } {
    const start = this.#key(text);
    return { start, end: prefixEnd(start) };
  }

  /** A key as the client's watch builder takes it: without the namespace, which it adds itself. */
  relative(key: Buffer): Buffer {
    return key.subarray(this.#namespace.length);
  }

  lock(name: string): LockKeys {
    const n = segment(name);
    const r = this.#root;
    const tickKey = (tick: number) => this.#key(`${r}t/${n}/${String(tick).padStart(TICK_DIGITS, '0')}`);
    return {
      queue: this.#range(`${r}q/${n}/`),
      member: (owner) => this.#key(`${r}q/${n}/${owner}`),
      released: this.#key(`${r}r/${n}`),
      ticks: this.#range(`${r}t/${n}/`),
      tick: tickKey,
      runs: this.#range(`${r}h/${n}/`),
      run: (owner) => this.#key(`${r}h/${n}/${owner}`),
      ends: this.#range(`${r}e/${n}/`),
      end: (owner) => this.#key(`${r}e/${n}/${owner}`),
    };
  }

  /** Every contender's key of every lock of this prefix. */
  get queues(): { readonly start: Buffer; readonly end: Buffer } {
    return this.#range(`${this.#root}q/`);
  }

  /** The lock name and owner of a contender's key, or null for a key that is not one. */
  member(key: Buffer): { readonly name: string; readonly owner: string } | null {
    const head = this.#key(`${this.#root}q/`);
    if (!key.subarray(0, head.length).equals(head)) return null;
    const rest = key.subarray(head.length).toString();
    const slash = rest.indexOf('/');
    if (slash < 0) return null;
    return { name: unsegment(rest.slice(0, slash)), owner: rest.slice(slash + 1) };
  }

  /** The owner a run's or end's key names (its last segment). */
  static owner(key: Buffer): string {
    const text = key.toString();
    return text.slice(text.lastIndexOf('/') + 1);
  }

  /** The tick a tick key holds. */
  static tick(key: Buffer): number {
    const text = key.toString();
    return Number(text.slice(text.lastIndexOf('/') + 1));
  }
}
