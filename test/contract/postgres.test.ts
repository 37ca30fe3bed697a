import { describe } from 'vitest';
import { runContract } from './contract.js';
import { postgresClientBackend, postgresPoolBackend } from './postgres.js';

describe('pg.Pool, PostgreSQL', () => runContract(postgresPoolBackend));
describe('pg.Client, PostgreSQL', () => runContract(postgresClientBackend));
