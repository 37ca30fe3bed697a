import { Module, type OnApplicationShutdown } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Redis } from 'ioredis';
import { MemoryStore } from 'leasehold';
import { LeaseholdModule } from 'leasehold/nestjs';
import { InvoicesService, ReportsService } from './jobs.js';

export const REDIS = Symbol('REDIS');

/** The application's Redis client; it is closed after leasehold has released its locks. */
class RedisConnection implements OnApplicationShutdown {
  readonly client = process.env.REDIS_URL ? new Redis(process.env.REDIS_URL) : null;
  async onApplicationShutdown(): Promise<void> {
    await this.client?.quit();
  }
}

@Module({
  providers: [
    RedisConnection,
    { provide: REDIS, useFactory: (connection: RedisConnection) => connection.client, inject: [RedisConnection] },
  ],
  exports: [REDIS],
})
class RedisModule {}

@Module({
  imports: [
    ScheduleModule.forRoot(),
    LeaseholdModule.forRootAsync({
      imports: [RedisModule],
      inject: [REDIS],
      // Without REDIS_URL, a MemoryStore: the application runs alone, as one instance.
      useFactory: (redis: Redis | null) => ({
        backend: redis ?? new MemoryStore(),
        options: { instance: process.env.INSTANCE ?? `pid-${process.pid}` },
      }),
    }),
  ],
  providers: [ReportsService, InvoicesService],
})
export class AppModule {}
