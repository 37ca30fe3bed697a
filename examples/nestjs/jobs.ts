import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable } from '@nestjs/common';
import { Cron, CronExpression } from '@nestjs/schedule';
import { assertLocked } from 'leasehold';
import { heldLock, lockSignal, Once, WithLock } from 'leasehold/nestjs';

const instance = process.env.INSTANCE ?? `pid-${process.pid}`;

@Injectable()
export class ReportsService {
  /** @Cron fires on every instance; @Once lets one of them run each tick. */
  @Cron(CronExpression.EVERY_SECOND, { name: 'reports' })
  @Once('reports:every-second', { lockAtMostFor: 10_000 })
  async sendReport(): Promise<void> {
    const run = assertLocked(); // the job run: its tick and its fencing token
    console.log(`tick ${run.tick?.toISOString()} ran on ${instance} with token ${run.fencingToken}`);
  }
}

@Injectable()
export class InvoicesService {
  /** One instance at a time closes a month; the others wait for the lock, in arrival order. */
  @WithLock((month: string) => `invoices:close:${month}`, { wait: 30_000 })
  async closeMonth(month: string, ms: number): Promise<string> {
    const { fencingToken } = heldLock();
    const started = Date.now();
    console.log(`closing ${month} on ${instance} with token ${fencingToken}`);
    // lockSignal() aborts if the lease is lost or the application shuts down.
    const signal = lockSignal();
    try {
      await sleep(ms, undefined, { signal });
    } catch (error) {
      if (!signal.aborted) throw error;
      console.log(`stopped closing ${month} on ${instance}: ${(signal.reason as Error).message}`);
      return 'stopped';
    }
    console.log(`closed ${month} on ${instance} with token ${fencingToken} from ${started} to ${Date.now()}`);
    return 'closed';
  }
}
