import { describe, expect, it } from 'vitest';
import type { JobRun } from '../../src/index.js';
import { Once, ScheduledJob, WithLock } from '../../src/nestjs/index.js';

/**
 * The decorators' types, as TypeScript checks them where a method is decorated: the call below is
 * what `experimentalDecorators` makes of `@WithLock(…)` above a method. `tsc -p .` checks this file
 * (each `@ts-expect-error` must be an error); examples/nestjs/ checks the decorator syntax itself.
 */

const method = <F>(value: F): TypedPropertyDescriptor<F> => ({ value, writable: true, configurable: true });
const target = {};

function typeChecks(): void {
  const closeWithMs = method(async (_month: string, _ms: number) => 'closed');
  const closeByNumber = method(async (_n: number) => 'closed');
  const sync = method(() => 'done');
  const maybePaid = method(async (): Promise<string | undefined> => 'paid');
  const paid = method(async (): Promise<string> => 'paid');
  const paidOrSkipped = method(async (): Promise<'paid' | 'skipped'> => 'paid');
  const byMonth = (month: string) => `close:${month}`;
  const counted = method(async (): Promise<number> => 1);

  // The lock's name from the method's first arguments; the method may take more.
  WithLock(byMonth)(target, 'close', closeWithMs);
  // @ts-expect-error the name function takes a string; the method's first argument is a number
  WithLock(byMonth)(target, 'close', closeByNumber);
  // @ts-expect-error a decorated method returns a promise
  WithLock('report')(target, 'sync', sync);

  // A call that may skip resolves undefined unless `skipped` says otherwise: the method's type allows it.
  WithLock('pay', { onLocked: 'skip' })(target, 'pay', maybePaid);
  // @ts-expect-error it may resolve undefined, which Promise<string> does not allow
  WithLock('pay', { onLocked: 'skip' })(target, 'pay', paid);
  WithLock('pay', { onLocked: 'skip', skipped: 'skipped' })(target, 'pay', paidOrSkipped);
  WithLock('pay', { whenUnavailable: 'skip', skipped: (reason: string) => `skipped: ${reason}` })(target, 'pay', paid);

  // @Once on a @Cron method: skipped calls resolve undefined, which void allows.
  Once('report')(
    target,
    'report',
    method(async (): Promise<void> => {}),
  );
  // @ts-expect-error skipped calls resolve undefined, which Promise<number> does not allow
  Once('report')(target, 'report', counted);

  // @ScheduledJob methods are called as a job's task.
  ScheduledJob('rates', '*/5 * * * *')(
    target,
    'rates',
    method(async (_signal: AbortSignal, _run: JobRun) => {}),
  );
  // @ts-expect-error the first argument is the signal
  ScheduledJob('rates', 60_000)(target, 'rates', closeByNumber);
}

describe('decorator types', () => {
  it('are checked by tsc (this file compiles)', () => {
    expect(typeof typeChecks).toBe('function');
  });
});
