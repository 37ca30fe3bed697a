/**
 * `node:timers/promises` over the global timers, whichever they are when called: a file that
 * mocks the module with this (vi.mock) puts the library's sleeps on the virtual clock during a
 * run, and on the real one otherwise. Only what the library uses: setTimeout.
 */
function abortError(reason: unknown): Error {
  return Object.assign(new Error('The operation was aborted', { cause: reason }), {
    name: 'AbortError',
    code: 'ABORT_ERR',
  });
}

function setTimeout<T = void>(ms?: number, value?: T, options?: { signal?: AbortSignal; ref?: boolean }): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const signal = options?.signal;
    if (signal?.aborted) {
      reject(abortError(signal.reason));
      return;
    }
    const onAbort = () => {
      globalThis.clearTimeout(timer);
      reject(abortError(signal?.reason));
    };
    const timer = globalThis.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(value as T);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export const timersPromises = { setTimeout, default: { setTimeout } };
