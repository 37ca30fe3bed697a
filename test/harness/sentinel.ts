import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startProxy, type TcpProxy } from './proxy.js';
import { type RedisServer, startRedis } from './redis.js';
import { waitFor } from './util.js';

export interface SentinelGroup {
  readonly name: string;
  readonly master: RedisServer;
  /** The first replica. */
  readonly replica: RedisServer;
  readonly replicas: readonly RedisServer[];
  /** The first Sentinel. */
  readonly sentinel: RedisServer;
  readonly sentinels: readonly RedisServer[];
  /** With `cuttable`: the proxy every replica reaches the master through (refuse it to cut replication). */
  readonly link: TcpProxy | undefined;
  /** The address Sentinel reports for the master right now. */
  masterPort(): Promise<number>;
  stop(): Promise<void>;
}

export interface StartSentinelOptions {
  /** Default 'leasehold'. */
  readonly name?: string;
  /** Default 1. */
  readonly replicas?: number;
  /** Default 1 (quorum 1); with more, the quorum is a majority of them. */
  readonly sentinels?: number;
  /** Replicas reach the master through a TCP proxy of ours, so a test can cut replication alone. */
  readonly cuttable?: boolean;
}

/**
 * A master, its replicas and Sentinels watching them, on loopback ports. Failure detection is fast
 * (1 s) so a failover fits in a test.
 */
export async function startSentinelGroup(options: StartSentinelOptions | string = {}): Promise<SentinelGroup> {
  const o = typeof options === 'string' ? { name: options } : options;
  const name = o.name ?? 'leasehold';
  const master = await startRedis();
  const link = o.cuttable ? await startProxy({ host: master.host, port: master.port }) : undefined;
  const upstream = link ?? master;
  const replicas = await Promise.all(
    Array.from({ length: o.replicas ?? 1 }, () =>
      startRedis({ args: ['--replicaof', upstream.host, String(upstream.port)] }),
    ),
  );
  for (const replica of replicas) {
    await waitFor(async () => /master_link_status:up/.test(await replica.command('INFO', 'replication')), {
      timeout: 10_000,
      message: 'replica never synced with its master',
    });
  }
  const count = o.sentinels ?? 1;
  const quorum = Math.floor(count / 2) + 1;
  const dirs: string[] = [];
  const sentinels = await Promise.all(
    Array.from({ length: count }, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'leasehold-sentinel-'));
      dirs.push(dir);
      const config = join(dir, 'sentinel.conf');
      writeFileSync(
        config,
        [
          `sentinel monitor ${name} ${master.host} ${master.port} ${quorum}`,
          `sentinel down-after-milliseconds ${name} 1000`,
          `sentinel failover-timeout ${name} 5000`,
          '',
        ].join('\n'),
      );
      return startRedis({ configFile: config, args: ['--sentinel'], dir });
    }),
  );
  const sentinel = sentinels[0] as RedisServer;
  const masterPort = async () => {
    const reply = await sentinel.command('SENTINEL', 'get-master-addr-by-name', name);
    return Number(reply.split('\n')[1]);
  };
  const expected = new RegExp(`slaves=${replicas.length},sentinels=${count}`);
  await waitFor(async () => expected.test(await sentinel.command('INFO', 'sentinel')), {
    timeout: 15_000,
    message: 'sentinels never discovered the replicas and each other',
  });
  return {
    name,
    master,
    replica: replicas[0] as RedisServer,
    replicas,
    sentinel,
    sentinels,
    link,
    masterPort,
    stop: async () => {
      await Promise.all([...sentinels, ...replicas, master].map((s) => s.stop()));
      await link?.close();
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    },
  };
}
