import { contended, WORKERS } from './contended.mjs';

/**
 * The same contest across 16 app processes: every worker has its own client and library
 * instance, so nothing in one process can order the waiters; only Redis and the library's
 * protocol can. This is where wake-one across instances, or its absence, shows.
 */
export default contended({
  name: 'contended-apart',
  title: `Contended apart: ${WORKERS} workers on one key, each with its own client and library instance`,
  instances: WORKERS,
});
