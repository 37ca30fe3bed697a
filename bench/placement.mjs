import { execFileSync } from 'node:child_process';

/**
 * Put this process and every redis-server on CPU 0.
 *
 * On a small VM a loopback round trip costs about 20 µs when node and redis-server share a CPU
 * and 70–140 µs when they do not (the other vCPU has to be woken), and left alone the kernel
 * flips between the two every few seconds: one library's run lands in the fast case and the
 * next one's in the slow case, 2.5× apart, and even the median of several rounds follows the
 * dice. Sharing one CPU removes that noise; what is left to compare is what each library
 * controls: its own CPU per cycle, the server CPU its commands cost, and its round trips.
 * Without taskset (not Linux) nothing is pinned, and the report says so.
 */
export function pinToOneCpu(serverPids) {
  try {
    for (const pid of [process.pid, ...serverPids]) {
      execFileSync('taskset', ['-a', '-p', '-c', '0', String(pid)], { stdio: 'ignore' });
    }
    return 'node and every redis-server pinned to CPU 0 (taskset)';
  } catch {
    return 'not pinned (taskset unavailable)';
  }
}
