/**
 * Reference-counted channel subscriptions over one subscriber connection. Many waiters on the
 * same lock share one SUBSCRIBE; the last one to leave sends the UNSUBSCRIBE. `M`: a message as
 * the store delivers it (decoded once, before every listener of the channel hears it).
 */
export interface ChannelTransport {
  subscribe(channel: string): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
}

interface Entry<M> {
  readonly listeners: Set<(message: M) => void>;
  readonly ready: Promise<void>;
}

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

  /** Call every listener of `channel` with the message (the transport calls this on each message). */
  deliver(channel: string, message: M): void {
    const entry = this.#entries.get(channel);
    if (!entry) return;
    for (const listener of [...entry.listeners]) listener(message);
  }

  async subscribe(channel: string, listener: (message: M) => void): Promise<() => void> {
    let entry = this.#entries.get(channel);
    if (!entry) {
      const created: Entry<M> = { listeners: new Set(), ready: this.#transport.subscribe(channel) };
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

  /** Channels with at least one listener. */
  get size(): number {
    return this.#entries.size;
  }

  clear(): void {
    this.#entries.clear();
  }
}
