import { freeClusterPort } from './ports.js';
import { type RedisServer, runRedisCli, startRedis } from './redis.js';
import { waitFor } from './util.js';

const TOTAL_SLOTS = 16_384;
const CLUSTER_READY_TIMEOUT_MS = 20_000;
/** `redis-cli --cluster create` refuses fewer masters than this. */
const MIN_MASTERS = 3;

export interface StartClusterOptions {
  /** Number of masters (no replicas). Default 3, at least 3. */
  masters?: number | undefined;
}

export interface RedisCluster {
  readonly nodes: RedisServer[];
  readonly startupNodes: { host: string; port: number }[];
  /** Stops every node. Idempotent. */
  stop(): Promise<void>;
}

function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

async function stopAll(nodes: readonly RedisServer[]): Promise<void> {
  await Promise.allSettled(nodes.map((node) => node.stop()));
}

/**
 * Starts a Redis Cluster of `masters` nodes without replicas, each on 127.0.0.1 in its own
 * temporary directory, and waits until every node sees `cluster_state:ok`, all 16384 slots
 * assigned and every other node.
 */
export async function startCluster(opts: StartClusterOptions = {}): Promise<RedisCluster> {
  const masters = opts.masters ?? MIN_MASTERS;
  if (!Number.isInteger(masters) || masters < MIN_MASTERS) {
    throw new Error(`\`masters\` must be an integer ≥ ${MIN_MASTERS}, got ${masters}`);
  }

  // Ports are taken one by one so that no two nodes can be given the same one.
  const ports: number[] = [];
  for (let i = 0; i < masters; i++) ports.push(await freeClusterPort());

  const started = await Promise.allSettled(
    ports.map((port) =>
      startRedis({
        port,
        args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'],
      }),
    ),
  );
  const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const failure = started.find((result) => result.status === 'rejected');
  if (failure !== undefined) {
    await stopAll(nodes);
    throw new Error('startCluster: a node failed to start', { cause: failure.reason });
  }

  try {
    const create = await runRedisCli(
      [
        '--cluster',
        'create',
        ...nodes.map((node) => `${node.host}:${node.port}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ],
      CLUSTER_READY_TIMEOUT_MS,
    );
    if (create.code !== 0) {
      throw new Error(`redis-cli --cluster create failed (exit ${create.code}):\n${create.stdout}${create.stderr}`);
    }

    const lastInfo = new Map<number, string>();
    try {
      await waitFor(
        async () => {
          const infos = await Promise.all(nodes.map((node) => node.command('CLUSTER', 'INFO')));
          let ready = true;
          infos.forEach((text, i) => {
            const node = nodes[i];
            if (node !== undefined) lastInfo.set(node.port, text);
            const info = parseInfo(text);
            ready &&=
              info.get('cluster_state') === 'ok' &&
              info.get('cluster_slots_assigned') === String(TOTAL_SLOTS) &&
              info.get('cluster_known_nodes') === String(masters);
          });
          return ready;
        },
        { timeout: CLUSTER_READY_TIMEOUT_MS, interval: 100, message: 'cluster ready' },
      );
    } catch (error) {
      const report = [...lastInfo].map(([port, text]) => `--- node ${port} ---\n${text}`).join('\n');
      throw new Error(
        `startCluster: the cluster did not reach cluster_state:ok with ${TOTAL_SLOTS} slots assigned ` +
          `on all ${masters} nodes within ${CLUSTER_READY_TIMEOUT_MS} ms\n${report}`,
        { cause: error },
      );
    }
  } catch (error) {
    await stopAll(nodes);
    throw error;
  }

  return {
    nodes,
    startupNodes: nodes.map((node) => ({ host: node.host, port: node.port })),
    stop: () => stopAll(nodes),
  };
}
