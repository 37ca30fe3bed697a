import type { RedisConnection } from '../../../src/store/redis/connection.js';
import { SCRIPTS } from '../../../src/store/redis/scripts.js';

/** One script call seen on a connection: the script's name, the keys sent, and its raw reply. */
export interface ScriptCallSeen {
  readonly name: string;
  readonly keys: readonly string[];
  readonly reply: Promise<unknown>;
}

/** The scripts' names by every id a call may carry: function name, SHA1, source (EVAL). */
const NAMES = new Map<string, string>(
  Object.values(SCRIPTS).flatMap((s) => [s.fn, s.sha, s.source].map((id) => [id, s.name] as const)),
);

/** `connection`, with each script call it runs (FCALL, EVALSHA, EVAL) told to `seen` as it is sent. */
export function watchingScripts(connection: RedisConnection, seen: (call: ScriptCallSeen) => void): RedisConnection {
  return new Proxy(connection, {
    get(target, prop) {
      if (prop === 'fcall' || prop === 'evalsha' || prop === 'eval') {
        return (id: string, keys: readonly string[], args: readonly (string | number)[]) => {
          const reply = target[prop](id, keys, args);
          seen({ name: NAMES.get(id) ?? id, keys, reply });
          return reply;
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
