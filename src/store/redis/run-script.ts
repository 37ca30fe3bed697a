import type { RedisConnection } from './connection.js';
import { isNoScript } from './connection.js';
import { LIBRARY_SOURCE, type Script } from './scripts.js';

/** The server has no such function: its library was never loaded, flushed, or lost in a restart. */
const MISSING = /Function not found/i;
/** The server cannot or may not run functions (before Redis 7, an ACL, a renamed command). */
const REFUSED = /unknown command|NOPERM|not allowed|disabled/i;
/**
 * A reply about the server's state, not about functions: out of memory, a failing snapshot, a
 * replica, a busy or loading server. It refuses this call only ("OOM command not allowed", "MISCONF
 * … are disabled"); switching to EVAL for good would lose the functions' flags (allow-oom lets a
 * release run at the memory limit).
 */
const STATE = /^(OOM|MISCONF|READONLY|BUSY|LOADING|MASTERDOWN|NOREPLICAS)\b/;

const message = (error: unknown) => (error instanceof Error ? error.message : '');

const refused = (error: unknown): boolean => {
  const text = message(error);
  return REFUSED.test(text) && !STATE.test(text);
};

/**
 * Runs the scripts on one connection: as functions (FCALL) while the server has them, loading the
 * library on every master when a function is missing; by EVALSHA, and EVAL on NOSCRIPT, on a
 * server that refuses functions. One place for this, for every script. Written as promise chains,
 * not async functions: this is on every lock operation's path.
 */
export class ScriptRunner {
  readonly #connection: RedisConnection;
  /** False once the server refused FCALL or FUNCTION LOAD: every script then goes by EVALSHA. */
  #functions: boolean;
  #loading: Promise<boolean> | undefined;

  constructor(connection: RedisConnection, { functions = true }: { functions?: boolean } = {}) {
    this.#connection = connection;
    this.#functions = functions;
  }

  /** 'functions' or 'eval': how scripts run now, for diagnostics. */
  get mode(): 'functions' | 'eval' {
    return this.#functions ? 'functions' : 'eval';
  }

  run(script: Script, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    if (!this.#functions) return this.#eval(script, keys, args);
    return this.#connection.fcall(script.fn, keys, args).catch((error: unknown) => {
      if (MISSING.test(message(error))) {
        return this.#load().then((loaded) =>
          loaded ? this.#connection.fcall(script.fn, keys, args) : this.#eval(script, keys, args),
        );
      }
      if (refused(error)) {
        this.#functions = false;
        return this.#eval(script, keys, args);
      }
      return Promise.reject(error);
    });
  }

  /** Load the library on every master, once for every call that found a function missing meanwhile. */
  #load(): Promise<boolean> {
    this.#loading ??= this.#connection
      .loadFunctions(LIBRARY_SOURCE)
      .then(
        () => true,
        (error: unknown) => {
          // Refused for good (no FUNCTION command, an ACL): scripts go by EVALSHA from now on.
          // Anything else (OOM, a master away): this call goes by EVAL, the next tries again.
          if (refused(error)) this.#functions = false;
          return false;
        },
      )
      .finally(() => {
        this.#loading = undefined;
      });
    return this.#loading;
  }

  #eval(script: Script, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    const connection = this.#connection;
    return connection
      .evalsha(script.sha, keys, args)
      .catch((error: unknown) =>
        isNoScript(error) ? connection.eval(script.source, keys, args) : Promise.reject(error),
      );
  }
}
