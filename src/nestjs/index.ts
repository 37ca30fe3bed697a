/**
 * `leasehold/nestjs`: leasehold in a Nest application. `LeaseholdModule.forRoot()` /
 * `forRootAsync()` provide the application's Leasehold and close it on shutdown, releasing held
 * locks; `@WithLock` runs a method under a lock; `@Once` makes `@nestjs/schedule`'s `@Cron` run each
 * tick on one instance; `@ScheduledJob` schedules a method on leasehold's own scheduler. Loads
 * `@nestjs/common` and `@nestjs/core` (optional peers), which the main entry never does.
 * See docs/nestjs.md.
 */
export { heldLock, lockSignal } from './context.js';
export {
  InjectLeasehold,
  type LeaseholdMethodDecorator,
  Once,
  ScheduledJob,
  type SkippedValue,
  WithLock,
} from './decorators.js';
export type { OnceOptions, Skipped, SkippedReason, WithLockDecoratorOptions } from './metadata.js';
export { LeaseholdModule, type LeaseholdModuleAsyncOptions } from './module.js';
export { DEFAULT_SHUTDOWN_TIMEOUT, LEASEHOLD, type LeaseholdModuleOptions } from './options.js';
