/**
 * Reference-counted channel subscriptions over one subscriber connection. Many waiters on the
 * same lock share one SUBSCRIBE; the last one to leave sends the UNSUBSCRIBE. `M`: a message as
 * the store delivers it (decoded once, before every listener of the channel hears it).
 */
export interface ChannelTransport {
  subscribe(channel: string): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
}

/** Hears a channel's messages; true when the message is its own (see deliver). */
type Listener<M> = (message: M) => unknown;

interface Entry<M> {
  readonly listeners: Set<Listener<M>>;
  readonly ready: Promise<void>;
  /** Messages heard once by deliverOnce, by their text, with the time they were heard. */
  readonly heard: Map<string, number>;
}

/** ms within which a message's second arrival (by the other path) is taken for its echo. */
const ECHO_WINDOW = 1_000;

export class ChannelHub<M = string> {
  readonly #transport: ChannelTransport;
  readonly #entries = new Map<string, Entry<M>>();
  readonly #onError: (error: unknown) => void;
  readonly #onIdle: () => void;

  /** `onIdle`: called when the last channel is unsubscribed (the owner may close the connection). */
  constructor(
    transport: ChannelTransport,
    onError: (error: unknown) => void = () => {},
    onIdle: () => void = () => {},
  ) {
    this.#transport = transport;
    this.#onError = onError;
    this.#onIdle = onIdle;
  }

  /**
   * Call every listener of `channel` with the message (the transport calls this on each message):
   * true when one of them answered true (a waiter the message names waits there).
   */
  deliver(channel: string, message: M): boolean {
    const entry = this.#entries.get(channel);
    if (!entry) return false;
    let taken = false;
    for (const listener of [...entry.listeners]) if (listener(message) === true) taken = true;
    return taken;
  }

  /**
   * A message that reaches this instance by two paths (a release's reply, which names the waiters
   * it woke, and the publication every instance hears): delivered on its first arrival; the second
   * arrival of the same text on the channel within a second is its echo, and is dropped. Nothing is
   * kept for a channel nobody here listens on. `decode` runs only for a message delivered.
   * `always`: deliver it even when its echo came first (the caller must learn what deliver answers).
   * What deliver answered; false for a message dropped.
   */
  deliverOnce(channel: string, text: string, decode: (text: string) => M, always = false): boolean {
    const entry = this.#entries.get(channel);
    if (!entry) return false;
    const at = performance.now();
    const heard = entry.heard.get(text);
    if (heard !== undefined) {
      entry.heard.delete(text);
      if (at - heard <= ECHO_WINDOW) return always ? this.deliver(channel, decode(text)) : false;
    }
    for (const [old, when] of entry.heard) {
      if (at - when <= ECHO_WINDOW) break;
      entry.heard.delete(old);
    }
    entry.heard.set(text, at);
    return this.deliver(channel, decode(text));
  }

  async subscribe(channel: string, listener: Listener<M>): Promise<() => void> {
    let entry = this.#entries.get(channel);
    if (!entry) {
      const created: Entry<M> = { listeners: new Set(), ready: this.#transport.subscribe(channel), heard: new Map() };
      entry = created;
      this.#entries.set(channel, created);
      created.ready.catch(() => {
        // A failed SUBSCRIBE must not stick: the next waiter tries again.
        if (this.#entries.get(channel) === created) this.#entries.delete(channel);
      });
    }
    const current = entry;
    current.listeners.add(listener);
    try {
      await current.ready;
    } catch (error) {
      current.listeners.delete(listener);
      throw error;
    }
    let active = true;
    return () => {
      if (!active) return;
      active = false;
      current.listeners.delete(listener);
      if (current.listeners.size === 0 && this.#entries.get(channel) === current) {
        this.#entries.delete(channel);
        this.#transport.unsubscribe(channel).catch(this.#onError);
        if (this.#entries.size === 0) this.#onIdle();
      }
    };
  }

  clear(): void {
    this.#entries.clear();
  }
}
