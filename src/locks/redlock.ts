import type { Attempt, ExtendOutcome, LockEngine } from '../core/engine.js';
import { invalidArgument } from '../core/errors.js';
import type { Store } from '../store/port.js';

export interface RedlockEngineOptions {
  readonly prefix: string;
  readonly commandTimeout: number;
  readonly driftFactor: number;
  readonly driftConstant: number;
  readonly quorum: number;
}

export class RedlockEngine implements LockEngine {
  readonly announcesRelease = false;
  constructor(_stores: readonly { store: Store; owned: boolean }[], _options: RedlockEngineOptions) {
    throw invalidArgument('Redlock is not available yet');
  }
  attempt(): Promise<Attempt> {
    throw new Error('unreachable');
  }
  extend(): Promise<ExtendOutcome> {
    throw new Error('unreachable');
  }
  release(): Promise<boolean> {
    throw new Error('unreachable');
  }
  subscribe(): Promise<() => void> {
    throw new Error('unreachable');
  }
  async close(): Promise<void> {}
}
