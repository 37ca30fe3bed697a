import parallel from './parallel.mjs';

/**
 * The parallel scenario with node on CPU 0 and every redis-server on CPU 1 (placement.mjs's
 * pinSplit), as an application and its Redis on machines of their own: the server can work through
 * one batch of commands while node makes the next, which it cannot when the two share a CPU.
 */
export default {
  ...parallel,
  name: 'parallel-split',
  placement: 'split',
  title: `${parallel.title}, node and the servers on CPUs apart`,
};
