import { describe } from 'vitest';
import { memoryBackend } from './backends.js';
import { runContract } from './contract.js';

describe('MemoryStore', () => runContract(async () => memoryBackend()));
