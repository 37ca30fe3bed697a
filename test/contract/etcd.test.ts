import { describe } from 'vitest';
import { runContract } from './contract.js';
import { etcdBackend } from './etcd.js';

describe('etcd3, one etcd member', () => runContract(etcdBackend));
