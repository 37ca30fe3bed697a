import { freeClusterPort } from './ports.js';
import { type RedisServer, runRedisCli, startRedis } from './redis.js';
import { waitFor } from './util.js';

const TOTAL_SLOTS = 16_384;
const CLUSTER_READY_TIMEOUT_MS = 20_000;
/** A kill -9 is noticed after the node timeout, then the replica waits 0.5–1 s (more by rank) to be elected. */
const FAILOVER_TIMEOUT_MS = 30_000;
/** `redis-cli --cluster create` refuses fewer masters than this. */
const MIN_MASTERS = 3;
const DEFAULT_NODE_TIMEOUT_MS = 2_000;
/** Keys moved per MIGRATE, as `redis-cli --cluster reshard` does by default (`--cluster-pipeline 10`). */
const DEFAULT_MIGRATE_BATCH = 10;
const MIGRATE_TIMEOUT_MS = 5_000;

export interface StartClusterOptions {
  /** Number of masters. Default 3, at least 3. */
  masters?: number | undefined;
  /** Replicas of each master. Default 0: masters only. */
  replicas?: number | undefined;
  /** `cluster-node-timeout`: ms a node may not answer before it is taken for failing. Default 2000. */
  nodeTimeout?: number | undefined;
}

/** One node as `CLUSTER NODES` describes it, from one node's point of view. */
export interface ClusterNodeInfo {
  readonly id: string;
  /** The harness's server on that node's port, when there is one. */
  readonly server: RedisServer | undefined;
  readonly port: number;
  readonly role: 'master' | 'replica';
  /** A replica's master, by id. */
  readonly masterId: string | undefined;
  /** Flagged `fail` or `fail?` by the node asked. */
  readonly failing: boolean;
  /** Slots it serves, as inclusive ranges. */
  readonly slots: readonly (readonly [number, number])[];
}

export interface MigrateSlotOptions {
  /** Keys per MIGRATE. Default 10. */
  batch?: number | undefined;
  /** ms to pause between two MIGRATEs, which keeps the slot half-moved (ASK redirects) for longer. Default 0. */
  pause?: number | undefined;
}

export interface SlotMigration {
  readonly slot: number;
  readonly from: RedisServer;
  readonly to: RedisServer;
  /** Keys handed to MIGRATE (a batch whose keys had all expired by then is not counted). */
  readonly keys: number;
  /** ms from IMPORTING to the last SETSLOT NODE. */
  readonly elapsed: number;
}

export interface Failover {
  readonly killed: RedisServer;
  /** The replica that took over the killed master's slots. */
  readonly promoted: RedisServer;
  readonly slots: readonly (readonly [number, number])[];
  /** ms from the kill until every live node saw `cluster_state:ok` with the replica owning the slots. */
  readonly elapsed: number;
}

export interface FailMasterOptions {
  /** ms to wait for the failover. Default 30000. */
  timeout?: number | undefined;
  /** Runs right after the kill, before the wait (e.g. to resume a replica paused to lose the last writes). */
  afterKill?: (() => void | Promise<void>) | undefined;
}

export interface RedisCluster {
  /** Every node, in the order they were started: with replicas, masters and replicas alike. */
  readonly nodes: RedisServer[];
  readonly startupNodes: { host: string; port: number }[];
  /** The nodes that were masters when the cluster was created (all of `nodes` without replicas). */
  readonly masters: readonly RedisServer[];
  /** The nodes that were replicas when the cluster was created. */
  readonly replicas: readonly RedisServer[];
  /** The node's cluster id (`CLUSTER MYID`). */
  nodeId(server: RedisServer): Promise<string>;
  /** Every node as a live node sees it now (`CLUSTER NODES`). */
  topology(): Promise<ClusterNodeInfo[]>;
  /** The master serving `slot` now, as a live node sees it. */
  masterOfSlot(slot: number): Promise<RedisServer>;
  /** The master serving `key`'s slot now. */
  masterOfKey(key: string): Promise<RedisServer>;
  /** The replicas of `master` now. */
  replicasOf(master: RedisServer): Promise<RedisServer[]>;
  /**
   * Moves `slot` with its keys to the master `to`, while clients keep running, as
   * `redis-cli --cluster reshard` does: SETSLOT IMPORTING on the target, MIGRATING on the source,
   * MIGRATE … KEYS in batches until the slot is empty on the source, then SETSLOT NODE on the
   * target, the source and every other master. MIGRATE runs without REPLACE: a key already on the
   * target is an error, not overwritten. Keys must not contain a newline (redis-cli lists them).
   */
  migrateSlot(slot: number, to: RedisServer, opts?: MigrateSlotOptions): Promise<SlotMigration>;
  /**
   * kill -9 a master and wait until one of its replicas serves its slots and every live node
   * reports `cluster_state:ok` and agrees on who serves every slot.
   */
  failMaster(master: RedisServer, opts?: FailMasterOptions): Promise<Failover>;
  /** Until every live node reports `cluster_state:ok`, all slots assigned, and they agree on each slot's master. */
  waitUntilOk(opts?: { timeout?: number | undefined }): Promise<void>;
  /** Stops every node. Idempotent. */
  stop(): Promise<void>;
}

// CRC16/XMODEM (polynomial 0x1021), the hash of Redis Cluster's key slots.
const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
})();

function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ (CRC16_TABLE[((crc >> 8) ^ byte) & 0xff] ?? 0);
  return crc;
}

/**
 * The hash slot of `key`, computed here as Redis does (`CLUSTER KEYSLOT`): the CRC16 of the first
 * non-empty `{…}` hash tag if there is one, else of the whole key, modulo 16384.
 */
export function slotOf(key: string): number {
  const bytes = Buffer.from(key, 'utf8');
  const open = bytes.indexOf(0x7b);
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) return crc16(bytes.subarray(open + 1, close)) % TOTAL_SLOTS;
  }
  return crc16(bytes) % TOTAL_SLOTS;
}

function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

/** `CLUSTER NODES`: `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>…` per line. */
function parseNodes(text: string, byPort: ReadonlyMap<number, RedisServer>): ClusterNodeInfo[] {
  const nodes: ClusterNodeInfo[] = [];
  for (const line of text.split(/\r?\n/)) {
    const fields = line.trim().split(' ');
    const [id, address, flagText, master] = fields;
    if (id === undefined || address === undefined || flagText === undefined || master === undefined) continue;
    const port = Number(address.slice(address.lastIndexOf(':') + 1).split('@')[0]);
    const flags = flagText.split(',');
    const slots: [number, number][] = [];
    // Entries in brackets are slots being imported or migrated, not served.
    for (const entry of fields.slice(8)) {
      if (entry.startsWith('[')) continue;
      const [first, last] = entry.split('-');
      slots.push([Number(first), Number(last ?? first)]);
    }
    nodes.push({
      id,
      server: byPort.get(port),
      port,
      role: flags.includes('master') ? 'master' : 'replica',
      masterId: master === '-' ? undefined : master,
      failing: flags.includes('fail') || flags.includes('fail?'),
      slots,
    });
  }
  return nodes;
}

function serves(node: ClusterNodeInfo, slot: number): boolean {
  return node.slots.some(([first, last]) => first <= slot && slot <= last);
}

/** Slot ranges as one comparable string, e.g. '0-5460,10923-16383'. */
function rangesKey(slots: readonly (readonly [number, number])[]): string {
  return [...slots]
    .sort((a, b) => a[0] - b[0])
    .map(([a, b]) => `${a}-${b}`)
    .join(',');
}

/** The lowest slot a node serves. */
function firstSlot(node: ClusterNodeInfo): number {
  const range = node.slots[0];
  if (range === undefined) throw new Error(`the master on port ${node.port} serves no slot`);
  return range[0];
}

/** A key of `slot`, with no hash tag of a lock name: `harness:ready:<n>`. */
function keyInSlot(slot: number): string {
  for (let i = 0; ; i++) {
    const key = `harness:ready:${i}`;
    if (slotOf(key) === slot) return key;
  }
}

/** Until each of `master`'s `replicas` replicas has acknowledged a write made now (a key that expires in 1 s). */
async function streamed(master: ClusterNodeInfo, replicas: number): Promise<void> {
  const server = master.server;
  if (server === undefined || replicas === 0) return;
  await server.command('SET', keyInSlot(firstSlot(master)), '1', 'PX', '1000');
  const target = Number(parseInfo(await server.command('INFO', 'replication')).get('master_repl_offset'));
  await waitFor(
    async () => {
      const info = parseInfo(await server.command('INFO', 'replication'));
      const acked = [...info]
        .filter(([key]) => /^slave\d+$/.test(key))
        .map(([, value]) => Number(/offset=(\d+)/.exec(value)?.[1] ?? -1));
      return acked.length === replicas && acked.every((offset) => offset >= target);
    },
    {
      timeout: CLUSTER_READY_TIMEOUT_MS,
      interval: 50,
      message: `the replicas of port ${server.port} acknowledged a write`,
    },
  );
}

async function stopAll(nodes: readonly RedisServer[]): Promise<void> {
  await Promise.allSettled(nodes.map((node) => node.stop()));
}

/**
 * Starts a Redis Cluster of `masters` nodes, each with `replicas` replicas, every node on
 * 127.0.0.1 in its own temporary directory, and waits until every node sees `cluster_state:ok`,
 * all 16384 slots assigned and every other node, and every replica has synced with its master.
 */
export async function startCluster(opts: StartClusterOptions = {}): Promise<RedisCluster> {
  const masters = opts.masters ?? MIN_MASTERS;
  if (!Number.isInteger(masters) || masters < MIN_MASTERS) {
    throw new Error(`\`masters\` must be an integer ≥ ${MIN_MASTERS}, got ${masters}`);
  }
  const replicasEach = opts.replicas ?? 0;
  if (!Number.isInteger(replicasEach) || replicasEach < 0) {
    throw new Error(`\`replicas\` must be an integer ≥ 0, got ${replicasEach}`);
  }
  const nodeTimeout = opts.nodeTimeout ?? DEFAULT_NODE_TIMEOUT_MS;
  if (!Number.isInteger(nodeTimeout) || nodeTimeout < 100) {
    throw new Error(`\`nodeTimeout\` must be an integer number of ms ≥ 100, got ${nodeTimeout}`);
  }
  const total = masters * (1 + replicasEach);

  // Ports are taken one by one so that no two nodes can be given the same one.
  const ports: number[] = [];
  for (let i = 0; i < total; i++) ports.push(await freeClusterPort());

  const started = await Promise.allSettled(
    ports.map((port) =>
      startRedis({
        port,
        args: [
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          'nodes.conf',
          '--cluster-node-timeout',
          String(nodeTimeout),
        ],
      }),
    ),
  );
  const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const failure = started.find((result) => result.status === 'rejected');
  if (failure !== undefined) {
    await stopAll(nodes);
    throw new Error('startCluster: a node failed to start', { cause: failure.reason });
  }
  const byPort = new Map(nodes.map((node) => [node.port, node]));

  let created: ClusterNodeInfo[];
  try {
    const create = await runRedisCli(
      [
        '--cluster',
        'create',
        ...nodes.map((node) => `${node.host}:${node.port}`),
        '--cluster-replicas',
        String(replicasEach),
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
              info.get('cluster_known_nodes') === String(total);
          });
          if (!ready || replicasEach === 0) return ready;
          // Each node learns by gossip which of the others became replicas: wait until all know.
          const views = await Promise.all(nodes.map((node) => node.command('CLUSTER', 'NODES')));
          return views.every(
            (view) =>
              parseNodes(view, byPort).filter((node) => node.role === 'replica').length === masters * replicasEach,
          );
        },
        { timeout: CLUSTER_READY_TIMEOUT_MS, interval: 100, message: 'cluster ready' },
      );
    } catch (error) {
      const report = [...lastInfo].map(([port, text]) => `--- node ${port} ---\n${text}`).join('\n');
      throw new Error(
        `startCluster: the cluster did not reach cluster_state:ok with ${TOTAL_SLOTS} slots assigned ` +
          `on all ${total} nodes within ${CLUSTER_READY_TIMEOUT_MS} ms\n${report}`,
        { cause: error },
      );
    }

    created = parseNodes(await (nodes[0] as RedisServer).command('CLUSTER', 'NODES'), byPort);
    const replicaNodes = created.filter((node) => node.role === 'replica');
    if (replicaNodes.length !== masters * replicasEach) {
      throw new Error(
        `startCluster: expected ${masters * replicasEach} replicas, CLUSTER NODES shows ${replicaNodes.length}`,
      );
    }
    // A replica that has not finished its first sync cannot be promoted, and one its master has not
    // put online yet confirms no WAIT: wait until each side says the link is up.
    const masterNodes = created.filter((node) => node.role === 'master');
    await waitFor(
      async () => {
        const [fromReplicas, fromMasters] = await Promise.all([
          Promise.all(replicaNodes.map((node) => node.server?.command('INFO', 'replication') ?? Promise.resolve(''))),
          Promise.all(masterNodes.map((node) => node.server?.command('INFO', 'replication') ?? Promise.resolve(''))),
        ]);
        const synced = fromReplicas.every((text) => {
          const info = parseInfo(text);
          return info.get('master_link_status') === 'up' && info.get('master_sync_in_progress') === '0';
        });
        const online = fromMasters.every((text) => {
          const info = parseInfo(text);
          const states = [...info].filter(([key]) => /^slave\d+$/.test(key)).map(([, value]) => value);
          return states.length === replicasEach && states.every((value) => value.includes('state=online'));
        });
        return synced && online;
      },
      { timeout: CLUSTER_READY_TIMEOUT_MS, interval: 100, message: 'every replica synced with its master' },
    );
    // After a full sync a master streams writes to a replica only once the replica's first ACK came
    // (up to a second later): until then WAIT counts none. Write once to each master and wait until
    // every replica has acknowledged it.
    await Promise.all(masterNodes.map((node) => streamed(node, replicasEach)));
  } catch (error) {
    await stopAll(nodes);
    throw error;
  }

  const ids = new Map<RedisServer, string>();
  for (const node of created) if (node.server !== undefined) ids.set(node.server, node.id);
  const rolesAtStart = (role: ClusterNodeInfo['role']) =>
    nodes.filter((server) => created.some((node) => node.server === server && node.role === role));

  const nodeId = async (server: RedisServer): Promise<string> => {
    const known = ids.get(server);
    if (known !== undefined) return known;
    const id = await server.command('CLUSTER', 'MYID');
    ids.set(server, id);
    return id;
  };

  const live = () => nodes.filter((node) => node.running);

  const topologyFrom = async (server: RedisServer) => parseNodes(await server.command('CLUSTER', 'NODES'), byPort);

  const topology = async (): Promise<ClusterNodeInfo[]> => {
    let lastError: unknown;
    for (const server of live()) {
      try {
        return await topologyFrom(server);
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error('topology: no live node answered CLUSTER NODES', { cause: lastError });
  };

  const masterOfSlot = async (slot: number): Promise<RedisServer> => {
    const owner = (await topology()).find((node) => node.role === 'master' && !node.failing && serves(node, slot));
    if (owner?.server === undefined) throw new Error(`masterOfSlot: no live master serves slot ${slot}`);
    return owner.server;
  };

  const replicasOf = async (master: RedisServer): Promise<RedisServer[]> => {
    const id = await nodeId(master);
    return (await topology()).flatMap((node) =>
      node.role === 'replica' && node.masterId === id && node.server !== undefined ? [node.server] : [],
    );
  };

  /** Every live node: state ok, all slots assigned, and the same map of slots to masters; `check` on the topology. */
  const settled = async (check: (nodes: ClusterNodeInfo[]) => boolean): Promise<boolean> => {
    const servers = live();
    const views = await Promise.all(
      servers.map(async (server) => ({
        info: parseInfo(await server.command('CLUSTER', 'INFO')),
        nodes: await topologyFrom(server),
      })),
    );
    const maps = views.map((view) =>
      view.nodes
        .filter((node) => node.role === 'master' && node.slots.length > 0)
        .map((node) => `${node.id}:${rangesKey(node.slots)}`)
        .sort()
        .join(' '),
    );
    return (
      views.every(
        (view) =>
          view.info.get('cluster_state') === 'ok' && view.info.get('cluster_slots_assigned') === String(TOTAL_SLOTS),
      ) &&
      maps.every((map) => map === maps[0]) &&
      views.every((view) => check(view.nodes))
    );
  };

  const waitUntilOk = async (o: { timeout?: number | undefined } = {}): Promise<void> => {
    await waitFor(() => settled(() => true), {
      timeout: o.timeout ?? CLUSTER_READY_TIMEOUT_MS,
      interval: 200,
      message: 'every live node sees cluster_state:ok and the same slot map',
    });
  };

  const migrateSlot = async (slot: number, to: RedisServer, o: MigrateSlotOptions = {}): Promise<SlotMigration> => {
    if (!Number.isInteger(slot) || slot < 0 || slot >= TOTAL_SLOTS) {
      throw new Error(`migrateSlot: \`slot\` must be an integer from 0 to ${TOTAL_SLOTS - 1}, got ${slot}`);
    }
    const batch = o.batch ?? DEFAULT_MIGRATE_BATCH;
    const from = await masterOfSlot(slot);
    if (from === to) throw new Error(`migrateSlot: slot ${slot} is already on port ${to.port}`);
    const [fromId, toId] = await Promise.all([nodeId(from), nodeId(to)]);
    const started = performance.now();
    await to.command('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
    await from.command('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
    let keys = 0;
    for (;;) {
      const listed = await from.command('CLUSTER', 'GETKEYSINSLOT', String(slot), String(batch));
      const batchKeys = listed === '' ? [] : listed.split('\n');
      if (batchKeys.length === 0) break;
      const reply = await from.command(
        'MIGRATE',
        to.host,
        String(to.port),
        '',
        '0',
        String(MIGRATE_TIMEOUT_MS),
        'KEYS',
        ...batchKeys,
      );
      // NOKEY: every key listed expired before it could be moved.
      if (reply !== 'NOKEY') keys += batchKeys.length;
      if (o.pause !== undefined && o.pause > 0) await new Promise((resolve) => setTimeout(resolve, o.pause));
    }
    // The target first, so it serves the slot before the source starts sending clients there.
    const masters = (await topology()).filter((node) => node.role === 'master' && !node.failing);
    const others = masters.flatMap((node) =>
      node.server !== undefined && node.server !== to && node.server !== from ? [node.server] : [],
    );
    for (const server of [to, from, ...others]) {
      await server.command('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
    }
    return { slot, from, to, keys, elapsed: performance.now() - started };
  };

  const failMaster = async (master: RedisServer, o: FailMasterOptions = {}): Promise<Failover> => {
    const id = await nodeId(master);
    const before = await topologyFrom(master);
    const self = before.find((node) => node.id === id);
    if (self?.role !== 'master') throw new Error(`failMaster: the node on port ${master.port} is not a master`);
    const replicaIds = new Set(before.filter((node) => node.masterId === id).map((node) => node.id));
    if (replicaIds.size === 0) throw new Error(`failMaster: the master on port ${master.port} has no replica`);
    const slots = self.slots;
    const started = performance.now();
    await master.kill9();
    await o.afterKill?.();
    let promoted: RedisServer | undefined;
    await waitFor(
      () =>
        settled((view) => {
          const heir = view.find(
            (node) => replicaIds.has(node.id) && node.role === 'master' && rangesKey(node.slots) === rangesKey(slots),
          );
          promoted = heir?.server;
          return promoted !== undefined;
        }),
      {
        timeout: o.timeout ?? FAILOVER_TIMEOUT_MS,
        interval: 200,
        message: `a replica of the master on port ${master.port} took over its slots and the cluster is ok`,
      },
    );
    return { killed: master, promoted: promoted as RedisServer, slots, elapsed: performance.now() - started };
  };

  return {
    nodes,
    startupNodes: nodes.map((node) => ({ host: node.host, port: node.port })),
    masters: rolesAtStart('master'),
    replicas: rolesAtStart('replica'),
    nodeId,
    topology,
    masterOfSlot,
    masterOfKey: (key) => masterOfSlot(slotOf(key)),
    replicasOf,
    migrateSlot,
    failMaster,
    waitUntilOk,
    stop: () => stopAll(nodes),
  };
}
