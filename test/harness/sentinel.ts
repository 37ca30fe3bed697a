import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type RedisServer, startRedis } from './redis.js';
import { waitFor } from './util.js';

export interface SentinelGroup {
  readonly name: string;
  readonly master: RedisServer;
  readonly replica: RedisServer;
  readonly sentinel: RedisServer;
  /** The address Sentinel reports for the master right now. */
  masterPort(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * A master, one replica and one Sentinel (quorum 1) watching them, on loopback ports. Failure
 * detection is fast (1 s) so a failover fits in a test.
 */
export async function startSentinelGroup(name = 'leasehold'): Promise<SentinelGroup> {
  const master = await startRedis();
  const replica = await startRedis({ args: ['--replicaof', master.host, String(master.port)] });
  await waitFor(async () => /master_link_status:up/.test(await replica.command('INFO', 'replication')), {
    timeout: 10_000,
    message: 'replica never synced with its master',
  });
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-sentinel-'));
  const config = join(dir, 'sentinel.conf');
  writeFileSync(
    config,
    [
      `sentinel monitor ${name} ${master.host} ${master.port} 1`,
      `sentinel down-after-milliseconds ${name} 1000`,
      `sentinel failover-timeout ${name} 5000`,
      '',
    ].join('\n'),
  );
  const sentinel = await startRedis({ configFile: config, args: ['--sentinel'], dir });
  const masterPort = async () => {
    const reply = await sentinel.command('SENTINEL', 'get-master-addr-by-name', name);
    return Number(reply.split('\n')[1]);
  };
  await waitFor(async () => /slaves=1/.test(await sentinel.command('INFO', 'sentinel')), {
    timeout: 10_000,
    message: 'sentinel never discovered the replica',
  });
  return {
    name,
    master,
    replica,
    sentinel,
    masterPort,
    stop: async () => {
      await Promise.all([sentinel.stop(), replica.stop(), master.stop()]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
