import { describe } from 'vitest';
import { runContract } from './contract/contract.js';
import { postgresClientBackend, postgresPoolBackend } from './contract/postgres.js';

describe('pg.Pool, PostgreSQL', () => runContract(postgresPoolBackend));
describe('pg.Client, PostgreSQL', () => runContract(postgresClientBackend));
