import { describe } from 'vitest';
import { ioredisBackend, nodeRedisBackend } from './contract/backends.js';
import { runContract } from './contract/contract.js';

describe('ioredis, standalone redis-server', () => runContract(ioredisBackend));
describe('node-redis, standalone redis-server', () => runContract(nodeRedisBackend));
