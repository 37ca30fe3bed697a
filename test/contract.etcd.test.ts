import { describe } from 'vitest';
import { runContract } from './contract/contract.js';
import { etcdBackend } from './contract/etcd.js';

describe('etcd3, one etcd member', () => runContract(etcdBackend));
