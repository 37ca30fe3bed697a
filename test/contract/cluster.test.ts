import { describe } from 'vitest';
import { ioredisClusterBackend, nodeRedisClusterBackend } from './backends.js';
import { runContract } from './contract.js';

describe('ioredis Cluster, 3 masters', () => runContract(ioredisClusterBackend));
describe('node-redis cluster, 3 masters', () => runContract(nodeRedisClusterBackend));
