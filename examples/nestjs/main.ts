// A Nest application of several instances (run it three times against one Redis: REDIS_URL=…):
// a @Cron job that runs once per tick across them (@Once), and a method under a lock (@WithLock)
// that each instance calls once at start, one at a time. On SIGTERM or SIGINT (or after
// RUN_FOR_MS), the application closes: the method under the lock is told to stop, its lock is
// released for the next instance at once, and leasehold is closed before the Redis client.
//
// Build and run: npx tsc -p examples/nestjs && node examples/nestjs/dist/main.js
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';
import { InvoicesService } from './jobs.js';

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks(['SIGTERM', 'SIGINT']);
await app.init();

const closing = app.get(InvoicesService).closeMonth('2026-11', Number(process.env.CLOSE_MS ?? 500));
const runFor = Number(process.env.RUN_FOR_MS ?? 0);
if (runFor > 0) setTimeout(() => void app.close(), runFor);
await closing;
