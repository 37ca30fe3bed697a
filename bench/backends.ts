/**
 * leasehold on each backend: starts a PostgreSQL and an etcd cluster of 3 members (through the test
 * harness, on loopback ports), runs a bench with their URLs, and stops them.
 *
 *   npx vite-node bench/backends.ts -- [--rounds N] [--duration MS]
 *     bench/backend-table.mjs: the mutex, a semaphore and a read-write lock on Redis, Redis with
 *     replicas: 1, PostgreSQL and etcd, a table of each figure by backend (bench/results/backends.md)
 *   npx vite-node bench/backends.ts -- --peers --scenario serial,contended --libs leasehold,"leasehold (postgres)",…
 *     bench/run.mjs with the rows `leasehold (postgres)` and `leasehold (etcd)` beside the peers
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startEtcdCluster, startPostgres } from '../test/harness/index.js';

const args = process.argv.slice(2).filter((a) => a !== '--');
const peers = args.includes('--peers');
const script = peers ? './run.mjs' : './backend-table.mjs';
const [postgres, etcd] = await Promise.all([startPostgres(), startEtcdCluster({ members: 3 })]);
let code = 1;
try {
  const run = spawn(
    process.execPath,
    [fileURLToPath(new URL(script, import.meta.url)), ...args.filter((a) => a !== '--peers')],
    {
      stdio: 'inherit',
      env: {
        ...process.env,
        BENCH_POSTGRES_URL: postgres.url,
        // Both runs' etcd clients take every member.
        BENCH_ETCD_URLS: etcd.endpoints.join(','),
      },
    },
  );
  code = await new Promise<number>((resolve) => run.on('exit', (c) => resolve(c ?? 1)));
} finally {
  await Promise.all([postgres.stop(), etcd.stop()]);
}
process.exit(code);
