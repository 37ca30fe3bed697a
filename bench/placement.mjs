import { execFileSync } from 'node:child_process';

/**
 * Put this process and every redis-server (`servers`, as the report names them) on CPU 0.
 *
 * On a small VM a loopback round trip costs about 20 µs when node and redis-server share a CPU
 * and 70–140 µs when they do not (the other vCPU has to be woken), and left alone the kernel
 * flips between the two every few seconds: one library's run lands in the fast case and the
 * next one's in the slow case, 2.5× apart, and even the median of several rounds follows the
 * dice. Sharing one CPU removes that noise; what is left to compare is what each library
 * controls: its own CPU per cycle, the server CPU its commands cost, and its round trips.
 * Without taskset (not Linux) nothing is pinned, and the report says so.
 * (A server's backends forked later, as PostgreSQL's are, inherit its placement.)
 */
export function pinToOneCpu(serverPids, servers = 'every redis-server') {
  try {
    for (const pid of [process.pid, ...serverPids]) {
      execFileSync('taskset', ['-a', '-p', '-c', '0', String(pid)], { stdio: 'ignore' });
    }
    return `node and ${servers} pinned to CPU 0 (taskset)`;
  } catch {
    return 'not pinned (taskset unavailable)';
  }
}

/**
 * Put this process on CPU 0 and every server on CPU 1: as an application and its database on
 * machines of their own, each keeps its CPU's caches to itself. Every round trip then wakes the
 * other CPU, so a cycle takes longer than when they share one, but the placement is fixed, so
 * rounds agree. On one CPU, or without taskset, it falls back to pinToOneCpu.
 */
export function pinSplit(serverPids, servers = 'every redis-server') {
  try {
    execFileSync('taskset', ['-a', '-p', '-c', '0', String(process.pid)], { stdio: 'ignore' });
    for (const pid of serverPids) execFileSync('taskset', ['-a', '-p', '-c', '1', String(pid)], { stdio: 'ignore' });
    return `node on CPU 0, ${servers} on CPU 1 (taskset)`;
  } catch {
    return pinToOneCpu(serverPids, servers);
  }
}
