import { createServer } from 'node:net';

const LOOPBACK = '127.0.0.1';

/** Redis Cluster listens on its client port and on the bus port, client port + 10000. */
const CLUSTER_BUS_OFFSET = 10_000;
const MAX_PORT = 65_535;

/**
 * Ports handed out by this process. The kernel rarely hands the same ephemeral port out
 * twice in a row, but several servers started in parallel must never be given the same one.
 */
const handedOut = new Set<number>();

function listenOnce(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host: LOOPBACK, port, exclusive: true }, () => {
      const address = server.address();
      const bound = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => {
        if (bound > 0) resolve(bound);
        else reject(new Error(`could not read the port bound on ${LOOPBACK}`));
      });
    });
  });
}

async function isFree(port: number): Promise<boolean> {
  try {
    await listenOnce(port);
    return true;
  } catch {
    return false;
  }
}

/** A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close). */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = await listenOnce(0);
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error('freePort: the kernel kept returning ports this process already handed out');
}

/**
 * A port usable by a Redis Cluster node: both `port` and its bus port `port + 10000`
 * are free on 127.0.0.1.
 */
export async function freeClusterPort(): Promise<number> {
  const attempts = 50;
  for (let attempt = 0; attempt < attempts; attempt++) {
    const port = await listenOnce(0);
    const bus = port + CLUSTER_BUS_OFFSET;
    if (handedOut.has(port) || handedOut.has(bus) || bus > MAX_PORT) continue;
    if (await isFree(bus)) {
      handedOut.add(port);
      handedOut.add(bus);
      return port;
    }
  }
  throw new Error(
    `freeClusterPort: found no port P with both P and P+${CLUSTER_BUS_OFFSET} free after ${attempts} attempts`,
  );
}
