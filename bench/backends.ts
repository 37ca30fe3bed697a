/**
 * The bench with PostgreSQL and etcd rows beside Redis: starts a PostgreSQL and an etcd (through
 * the test harness, on loopback ports), runs bench/run.mjs with their URLs, and stops them.
 *   npx vite-node bench/backends.ts -- --scenario serial,contended --libs leasehold,"leasehold (postgres)",…
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startEtcd, startPostgres } from '../test/harness/index.js';

const args = process.argv.slice(2).filter((a) => a !== '--');
const [postgres, etcd] = await Promise.all([startPostgres(), startEtcd()]);
const run = spawn(process.execPath, [fileURLToPath(new URL('./run.mjs', import.meta.url)), ...args], {
  stdio: 'inherit',
  env: { ...process.env, BENCH_POSTGRES_URL: postgres.url, BENCH_ETCD_URL: etcd.url },
});
const code = await new Promise<number>((resolve) => run.on('exit', (c) => resolve(c ?? 1)));
await Promise.all([postgres.stop(), etcd.stop()]);
process.exit(code);
