import { describe } from 'vitest';
import { ioredisBackend, nodeRedisBackend } from './backends.js';
import { runContract } from './contract.js';

describe('ioredis, standalone redis-server', () => runContract(ioredisBackend));
describe('node-redis, standalone redis-server', () => runContract(nodeRedisBackend));
