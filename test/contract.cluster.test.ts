import { describe } from 'vitest';
import { ioredisClusterBackend, nodeRedisClusterBackend } from './contract/backends.js';
import { runContract } from './contract/contract.js';

describe('ioredis Cluster, 3 masters', () => runContract(ioredisClusterBackend));
describe('node-redis cluster, 3 masters', () => runContract(nodeRedisClusterBackend));
