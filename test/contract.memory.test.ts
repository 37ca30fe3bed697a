import { describe } from 'vitest';
import { memoryBackend } from './contract/backends.js';
import { runContract } from './contract/contract.js';

describe('MemoryStore', () => runContract(async () => memoryBackend()));
