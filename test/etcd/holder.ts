import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

/** What the holder process (holder.mjs) reports: ready, waiting, acquired, lost, released or error. */
export type HolderEvent = { readonly event: string } & Readonly<Record<string, unknown>>;

export interface EtcdHolder {
  readonly process: ChildProcess;
  send(command: Record<string, unknown>): void;
  /** Its next report, in order; rejects after `timeout` ms without one. */
  next(timeout?: number): Promise<HolderEvent>;
  kill9(): Promise<void>;
}

/** Fork holder.mjs on a Leasehold over `endpoints` under `prefix` (session `sessionTtl` ms), once it says it is ready. */
export async function startHolder(
  endpoints: readonly string[],
  prefix: string,
  sessionTtl: number,
): Promise<EtcdHolder> {
  const script = fileURLToPath(new URL('./holder.mjs', import.meta.url));
  const args = [endpoints.join(','), prefix, String(sessionTtl)];
  const child = fork(script, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const reports: HolderEvent[] = [];
  let wake: (() => void) | undefined;
  child.on('message', (m: HolderEvent) => {
    reports.push(m);
    wake?.();
  });
  const holder: EtcdHolder = {
    process: child,
    send: (command) => child.send(command),
    next: async (timeout = 15_000) => {
      const deadline = performance.now() + timeout;
      while (reports.length === 0) {
        const left = deadline - performance.now();
        if (left <= 0) throw new Error(`the holder reported nothing within ${timeout} ms`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      return reports.shift() as HolderEvent;
    },
    kill9: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
  };
  const ready = await holder.next();
  if (ready.event !== 'ready') throw new Error(`the holder did not start: ${JSON.stringify(ready)}`);
  return holder;
}
