import {
  type DynamicModule,
  type InjectionToken,
  Module,
  type ModuleMetadata,
  type OptionalFactoryDependency,
  type Provider,
} from '@nestjs/common';
import { DiscoveryModule, DiscoveryService } from '@nestjs/core';
import { Leasehold } from '../index.js';
import { LEASEHOLD_RUNTIME } from './metadata.js';
import { createLeasehold, LEASEHOLD, LEASEHOLD_MODULE_OPTIONS, type LeaseholdModuleOptions } from './options.js';
import { LeaseholdRuntime } from './runtime.js';

/** What `LeaseholdModule.forRootAsync()` takes: the options from a factory, with what it injects. */
export interface LeaseholdModuleAsyncOptions {
  /** Modules whose providers the factory injects (a Redis module, ConfigModule). */
  imports?: ModuleMetadata['imports'];
  /** The factory's arguments, by token. */
  inject?: Array<InjectionToken | OptionalFactoryDependency>;
  useFactory: (...args: never[]) => LeaseholdModuleOptions | Promise<LeaseholdModuleOptions>;
}

/**
 * The Leasehold of a Nest application, global to it: inject it by the class `Leasehold` (or
 * `@InjectLeasehold()`), and use `@WithLock`, `@Once` and `@ScheduledJob` on the methods of any
 * provider or controller. On the application's shutdown (`app.close()`, or a signal with
 * `app.enableShutdownHooks()`), decorated work is told to stop, held locks are released as it
 * ends, and the Leasehold is closed; the client it was given is left open.
 */
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest module is a class, and forRoot / forRootAsync are its static factories
export class LeaseholdModule {
  /** The module on a backend given now: `LeaseholdModule.forRoot({ client: redis, options: { prefix } })`. */
  static forRoot(options: LeaseholdModuleOptions): DynamicModule {
    return leaseholdModule({ provide: LEASEHOLD_MODULE_OPTIONS, useValue: options }, []);
  }

  /** The module on a backend from DI: `forRootAsync({ imports, inject: [REDIS], useFactory: (redis) => ({ client: redis }) })`. */
  static forRootAsync(options: LeaseholdModuleAsyncOptions): DynamicModule {
    const factory = options.useFactory as (...args: unknown[]) => LeaseholdModuleOptions;
    const provider: Provider = { provide: LEASEHOLD_MODULE_OPTIONS, useFactory: factory, inject: options.inject ?? [] };
    return leaseholdModule(provider, options.imports ?? []);
  }
}
Module({})(LeaseholdModule);

function leaseholdModule(options: Provider, imports: NonNullable<ModuleMetadata['imports']>): DynamicModule {
  return {
    module: LeaseholdModule,
    global: true,
    imports: [DiscoveryModule, ...imports],
    providers: [
      options,
      {
        provide: LEASEHOLD_RUNTIME,
        useFactory: (given: unknown, discovery: DiscoveryService) => {
          const { locks, settings } = createLeasehold(given);
          return new LeaseholdRuntime(locks, settings, discovery);
        },
        inject: [LEASEHOLD_MODULE_OPTIONS, DiscoveryService],
      },
      { provide: LEASEHOLD, useFactory: (runtime: LeaseholdRuntime) => runtime.locks, inject: [LEASEHOLD_RUNTIME] },
      { provide: Leasehold, useExisting: LEASEHOLD },
    ],
    exports: [LEASEHOLD, Leasehold, LEASEHOLD_RUNTIME],
  };
}
