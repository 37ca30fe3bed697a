import type { RedisConnection } from './connection.js';
import { isNoScript } from './connection.js';
import type { Script } from './scripts.js';

/**
 * Run a script by SHA; on NOSCRIPT (a restarted or flushed server, a new cluster node) send the
 * source with EVAL, which also caches it for the next EVALSHA. One place for this, for every script.
 * Written as one promise chain, not an async function: this is on every lock operation's path.
 */
export function runScript(
  connection: RedisConnection,
  script: Script,
  keys: readonly string[],
  args: readonly (string | number)[],
): Promise<unknown> {
  return connection
    .evalsha(script.sha, keys, args)
    .catch((error: unknown) =>
      isNoScript(error) ? connection.eval(script.source, keys, args) : Promise.reject(error),
    );
}
