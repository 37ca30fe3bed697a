import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * A measurement in a child process of its own (--expose-gc, a heap no other scenario shares): the
 * scenario module at `url` forks itself with `args`, and answers through `serveChild`.
 */
export function runChild(url, args, label) {
  return new Promise((resolve, reject) => {
    const proc = fork(fileURLToPath(url), ['--child', ...args.map(String)], {
      execArgv: ['--expose-gc'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let result;
    proc.once('message', (message) => {
      result = message;
    });
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code === 0 && result) resolve(result);
      else reject(new Error(`${label} exited with code ${code}`));
    });
  });
}

/** In the module at `url`, when it runs as that child: `measure(...args)`, its result sent back. */
export function serveChild(url, measure) {
  if (process.argv[1] !== fileURLToPath(url) || process.argv[2] !== '--child') return;
  measure(...process.argv.slice(3)).then(
    (result) => process.send(result, () => process.exit(0)),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
}
