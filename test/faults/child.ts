import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

export interface HolderMessage {
  event: 'ready' | 'waiting' | 'acquired' | 'lost' | 'released' | 'elected' | 'deposed' | 'done' | 'error';
  [field: string]: unknown;
}

/** A holder process (holder.mjs) and a queue of the messages it sent, read in order. */
export class Holder {
  readonly process: ChildProcess;
  readonly #inbox: HolderMessage[] = [];
  readonly #waiting: Array<(m: HolderMessage) => void> = [];

  private constructor(child: ChildProcess) {
    this.process = child;
    child.on('message', (m: HolderMessage) => {
      const next = this.#waiting.shift();
      if (next) next(m);
      else this.#inbox.push(m);
    });
  }

  static async start(url: string, prefix: string): Promise<Holder> {
    const script = fileURLToPath(new URL('./holder.mjs', import.meta.url));
    const holder = new Holder(fork(script, [url, prefix], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
    const ready = await holder.next(10_000);
    if (ready.event !== 'ready') throw new Error(`holder did not start: ${JSON.stringify(ready)}`);
    return holder;
  }

  send(message: Record<string, unknown>): void {
    this.process.send(message);
  }

  /** The next message, or a rejection after `timeout` ms. */
  next(timeout = 10_000): Promise<HolderMessage> {
    const queued = this.#inbox.shift();
    if (queued) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no message from holder within ${timeout} ms`)), timeout);
      this.#waiting.push((m) => {
        clearTimeout(timer);
        resolve(m);
      });
    });
  }

  async kill9(): Promise<void> {
    if (this.process.exitCode !== null || this.process.signalCode !== null) return;
    const exited = once(this.process, 'exit');
    this.process.kill('SIGKILL');
    await exited;
  }
}
