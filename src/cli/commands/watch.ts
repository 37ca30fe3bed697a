import { lockKeys } from '../../store/keys.js';
import { type OperatorCommand, operand } from '../command.js';
import { shortToken } from '../format.js';
import { clockTime } from '../style.js';

/** Resolves on Ctrl-C (or SIGTERM); the listeners go with it. */
function interrupted(): { promise: Promise<void>; dispose(): void } {
  let done: () => void = () => {};
  const promise = new Promise<void>((resolve) => {
    done = resolve;
  });
  const onSignal = () => done();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return {
    promise,
    dispose: () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

export const watch: OperatorCommand = {
  name: 'watch',
  synopsis: 'watch <name> [--json]',
  summary: "Print each release and hand-off on a lock's channel as it happens, until Ctrl-C.",
  details: `
  --json        one JSON object per line
Each line: the local time, the lock, and the waiter it was handed to (or that nobody was
queued). A lease that simply expires publishes nothing, so it is not shown. Exit status 1 if
the connection to Redis ends.
`,
  options: { json: { type: 'boolean' } },
  operands: ['name'],
  async run(op, args) {
    const name = operand(args, 0);
    const keys = lockKeys(op.prefix, name);
    const json = args.flag('json');
    const stop = interrupted();
    let failed: (error: Error) => void = () => {};
    const lost = new Promise<never>((_, reject) => {
      failed = reject;
    });
    // Raced below; marked handled so a loss while subscribing is not an unhandled rejection.
    lost.catch(() => undefined);
    const offLost = op.onLost((error) => failed(error));
    try {
      const unsubscribe = await op.bounded(
        op.store.subscribe(keys.channel, (message) => {
          const at = Date.now();
          const woken = message === '' ? null : message;
          if (json) {
            process.stdout.write(
              `${JSON.stringify({ at: new Date(at).toISOString(), name, event: 'released', woken })}\n`,
            );
            return;
          }
          const next = woken === null ? 'no waiter queued' : `handed to waiter ${shortToken(woken)}`;
          process.stdout.write(`${clockTime(at)}  ${name}  released, ${next}\n`);
        }),
        'subscribe',
      );
      // On stderr, so that stdout carries only events (for a pipe); it also says the watch is live.
      process.stderr.write(`watching "${name}" on ${keys.channel} (Ctrl-C to stop)\n`);
      try {
        await Promise.race([stop.promise, lost]);
      } finally {
        unsubscribe();
      }
      return 0;
    } finally {
      stop.dispose();
      offLost();
    }
  },
};
