import { Inject, SetMetadata } from '@nestjs/common';
import { ErrorCode, type JobRun, LockError, type ScheduleOptions } from '../index.js';
import { cronTickOf, NEST_CRON_OPTIONS } from './cron-tick.js';
import {
  LEASEHOLD_RUNTIME,
  type OnceOptions,
  type OnceSpec,
  RUNTIME_PROPERTY,
  SCHEDULED_JOB,
  type ScheduledJobMetadata,
  type WithLockDecoratorOptions,
  type WithLockSpec,
} from './metadata.js';
import { LEASEHOLD } from './options.js';
import type { LeaseholdRuntime } from './runtime.js';

type Method = (...args: unknown[]) => unknown;

/** What a call resolves with when it did not run: `skipped`, or what `skipped(reason, ...args)` returns. */
export type SkippedValue<S> = S extends (...args: never[]) => infer R ? Awaited<R> : S;

/** Nothing when a method resolving `T`'s value can also resolve the skipped value `S`; else a type error that says so. */
type ResolvesSkipped<T, S> = T extends (...args: never[]) => infer R
  ? [SkippedValue<S>] extends [Awaited<R>]
    ? unknown
    : { readonly 'the method must be able to resolve the skipped value': SkippedValue<S> }
  : unknown;

/**
 * A method decorator (TypeScript's `experimentalDecorators`, as Nest uses) for methods of type `F`
 * whose calls may resolve the skipped value `S` instead (never, for a decorator that never skips).
 */
export type LeaseholdMethodDecorator<F, S = never> = <T extends F>(
  target: object,
  key: string | symbol,
  descriptor: TypedPropertyDescriptor<T> & ResolvesSkipped<T, S>,
) => TypedPropertyDescriptor<T>;

/** The methods `@WithLock(name)` decorates: whatever their arguments, as long as `name` takes them. */
type LockedMethod<A extends unknown[]> = (...args: [...A, ...never[]]) => Promise<unknown>;

/** Options of a `@WithLock` that may skip a call: `onLocked: 'skip'`, or `whenUnavailable: 'skip'`. */
type SkippingOptions<S> = WithLockDecoratorOptions &
  ({ onLocked: 'skip' } | { whenUnavailable: 'skip' }) & { skipped?: S };

function invalid(message: string): LockError {
  return new LockError(ErrorCode.INVALID_ARGUMENT, message);
}

function whereOf(target: object, key: string | symbol): string {
  const owner = typeof target === 'function' ? target : target.constructor;
  return `${owner?.name ?? 'anonymous'}.${String(key)}`;
}

function runtimeOf(instance: unknown, decorator: string, where: string): LeaseholdRuntime {
  const runtime = (instance as { [RUNTIME_PROPERTY]?: LeaseholdRuntime } | undefined)?.[RUNTIME_PROPERTY];
  if (!runtime) {
    throw invalid(
      `${where} is decorated with @${decorator}, but this instance was not created by a Nest application ` +
        'that imports LeaseholdModule (the module reaches the instances it creates by property injection)',
    );
  }
  return runtime;
}

/**
 * Replace the method by `call`, which gets the application's runtime from the instance. The
 * metadata other decorators left on the method (`@Cron`, routes) moves to the wrapper, so the
 * order of the decorators does not matter.
 */
function wrap(
  decorator: string,
  target: object,
  key: string | symbol,
  descriptor: PropertyDescriptor | undefined,
  call: (runtime: LeaseholdRuntime, instance: object, original: Method, args: unknown[], wrapper: Method) => unknown,
): PropertyDescriptor {
  const where = whereOf(target, key);
  const original: unknown = descriptor?.value;
  if (typeof original !== 'function') throw invalid(`@${decorator} decorates a method; ${where} is not one`);
  if (typeof target === 'function') throw invalid(`@${decorator} decorates an instance method; ${where} is static`);
  Inject(LEASEHOLD_RUNTIME)(target, RUNTIME_PROPERTY);
  // The decorated method returns a promise: even a misuse rejects rather than throws.
  const wrapper = async function (this: object, ...args: unknown[]) {
    return call(runtimeOf(this, decorator, where), this, original as Method, args, wrapper);
  };
  Object.defineProperty(wrapper, 'name', { value: original.name });
  for (const metadataKey of Reflect.getOwnMetadataKeys(original)) {
    Reflect.defineMetadata(metadataKey, Reflect.getOwnMetadata(metadataKey, original), wrapper);
  }
  return { ...descriptor, value: wrapper };
}

/**
 * Run the method under the lock `name` (or the name `name(...args)` returns, called with the
 * instance as `this`), as `withLock` does: the lease is extended while it runs and released when
 * it settles. When another owner holds the lock, `onLocked: 'throw'` (the default) waits up to
 * `wait` ms and then rejects with LockTimeoutError; `onLocked: 'skip'` does not call the method and
 * resolves `skipped` (default undefined), as `tryWithLock` does. Inside the method, `heldLock()`
 * is the lock and `lockSignal()` its signal. The decorated method returns a promise; when it may
 * skip, its type must allow the skipped value (`Promise<T | undefined>` by default).
 */
export function WithLock<A extends unknown[] = [], const S = undefined>(
  name: string | ((...args: A) => string),
  options: SkippingOptions<S>,
): LeaseholdMethodDecorator<LockedMethod<A>, S>;
export function WithLock<A extends unknown[] = []>(
  name: string | ((...args: A) => string),
  options?: WithLockDecoratorOptions,
): LeaseholdMethodDecorator<LockedMethod<A>>;
export function WithLock(
  name: string | ((...args: never[]) => string),
  options: WithLockDecoratorOptions = {},
): LeaseholdMethodDecorator<LockedMethod<[]>, unknown> {
  if (typeof name !== 'string' && typeof name !== 'function') {
    throw invalid(`@WithLock takes a lock name or a function of the arguments that returns one, got ${typeof name}`);
  }
  if (typeof options !== 'object' || options === null) throw invalid('@WithLock options must be an object');
  const { onLocked = 'throw', skipped, ...lockOptions } = options;
  if (onLocked !== 'throw' && onLocked !== 'skip') {
    throw invalid(`@WithLock \`onLocked\` must be 'throw' or 'skip', got ${String(onLocked)}`);
  }
  if (onLocked === 'skip' && lockOptions.wait !== undefined) {
    throw invalid("@WithLock with onLocked: 'skip' never waits: remove `wait`");
  }
  return ((target: object, key: string | symbol, descriptor: PropertyDescriptor) => {
    const spec: WithLockSpec = {
      where: whereOf(target, key),
      name: name as WithLockSpec['name'],
      skip: onLocked === 'skip',
      options: lockOptions,
      skipped,
    };
    return wrap('WithLock', target, key, descriptor, (runtime, instance, original, args) =>
      runtime.withLock(spec, instance, original, args),
    );
  }) as unknown as LeaseholdMethodDecorator<LockedMethod<[]>, unknown>;
}

/**
 * Run each call of the method once across every instance of the application, under the job lock
 * `name` (default `ClassName.methodName`), as `runOnce` does. With `@nestjs/schedule`'s `@Cron`
 * on the same method, a call's tick is the scheduled time of the fire that made it, so each tick
 * runs on one instance only and the others resolve `skipped` (default undefined); without
 * `@Cron` there is no tick, and only the lock (and `lockAtLeastFor`) keeps calls apart. Inside
 * the method, `heldLock()`, `lockSignal()` and `assertLocked()` work. Calls made once the
 * application is shutting down do not run. The method's type must allow the skipped value.
 */
export function Once<const S = undefined>(
  name?: string,
  options: OnceOptions & { skipped?: S } = {},
): LeaseholdMethodDecorator<(...args: never[]) => Promise<unknown>, S> {
  if (name !== undefined && typeof name !== 'string') throw invalid(`@Once takes a job name, got ${typeof name}`);
  if (typeof options !== 'object' || options === null) throw invalid('@Once options must be an object');
  const { skipped, ...runOptions } = options;
  return ((target: object, key: string | symbol, descriptor: PropertyDescriptor) => {
    const where = whereOf(target, key);
    const spec: OnceSpec = { where, name, options: runOptions, skipped };
    let tickOf: { readonly at: ((now: number) => number) | null } | undefined;
    return wrap('Once', target, key, descriptor, (runtime, instance, original, args, wrapper) => {
      // Read on the first call: @Cron may be applied before or after @Once.
      tickOf ??= {
        at: cronTickOf(
          Reflect.getOwnMetadata(NEST_CRON_OPTIONS, wrapper) ?? Reflect.getOwnMetadata(NEST_CRON_OPTIONS, original),
          where,
        ),
      };
      return runtime.once(spec, instance, original, args, tickOf.at);
    });
  }) as unknown as LeaseholdMethodDecorator<(...args: never[]) => Promise<unknown>, S>;
}

/**
 * Schedule the method as a job on leasehold's own scheduler (`locks.schedule(name, when, …)`),
 * from the application's bootstrap until its shutdown: at each tick of `when` (a cron expression,
 * 5 or 6 fields, or an interval in ms) it runs on one instance only. It is called as a job's task,
 * with `(signal, run)`; the signal also aborts when the application shuts down. Needs no
 * `@nestjs/schedule`. Only static (singleton) providers and controllers are scheduled.
 */
export function ScheduledJob(
  name: string,
  when: string | number,
  options?: ScheduleOptions,
): LeaseholdMethodDecorator<(signal: AbortSignal, run: JobRun) => unknown> {
  if (typeof name !== 'string' || name.length === 0) throw invalid('@ScheduledJob takes a job name first');
  if (typeof when !== 'string' && typeof when !== 'number') {
    throw invalid(`@ScheduledJob takes a cron expression or an interval in ms, got ${typeof when}`);
  }
  const metadata: ScheduledJobMetadata = { name, when, options };
  return SetMetadata(SCHEDULED_JOB, metadata) as unknown as LeaseholdMethodDecorator<
    (signal: AbortSignal, run: JobRun) => unknown
  >;
}

/** Inject the application's Leasehold: `constructor(@InjectLeasehold() locks: Leasehold)`; or inject by the class `Leasehold`. */
export function InjectLeasehold(): PropertyDecorator & ParameterDecorator {
  return Inject(LEASEHOLD);
}
