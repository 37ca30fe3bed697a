/**
 * Run `emit` (an EventEmitter's emit) without letting a throwing listener break the caller's state
 * machine or timer: the listener's error is rethrown on the next tick, as an uncaught exception of
 * its own, exactly as if nobody had caught it.
 */
export function emitSafely(emit: () => unknown): void {
  try {
    emit();
  } catch (error) {
    process.nextTick(() => {
      throw error;
    });
  }
}
