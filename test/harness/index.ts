export {
  type ClusterNodeInfo,
  type FailMasterOptions,
  type Failover,
  type MigrateSlotOptions,
  type RedisCluster,
  type SlotMigration,
  type StartClusterOptions,
  slotOf,
  startCluster,
} from './cluster.js';
export {
  type EtcdCluster,
  type EtcdctlResult,
  type EtcdMember,
  type EtcdRestartOptions,
  type EtcdServer,
  type EtcdStatus,
  runEtcdctl,
  type StartEtcdClusterOptions,
  type StartEtcdOptions,
  startEtcd,
  startEtcdCluster,
} from './etcd.js';
export { freeClusterPort, freePort } from './ports.js';
export {
  type PostgresRestartOptions,
  type PostgresServer,
  type StartPostgresOptions,
  startPostgres,
} from './postgres.js';
export type { ServerControls } from './process.js';
export { type ProxyTarget, startProxy, type TcpProxy } from './proxy.js';
export {
  type CliResult,
  type Endpoint,
  ping,
  type RedisServer,
  type RestartOptions,
  runRedisCli,
  type StartRedisOptions,
  startRedis,
} from './redis.js';
export { type SentinelGroup, type StartSentinelOptions, startSentinelGroup } from './sentinel.js';
export {
  blockFor,
  commandCalls,
  counterToken,
  lockRecord,
  randomPrefix,
  untilAborted,
  type WaitForOptions,
  waitFor,
} from './util.js';
