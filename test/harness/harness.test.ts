import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import {
  freeClusterPort,
  freePort,
  ping,
  type RedisServer,
  randomPrefix,
  startCluster,
  startProxy,
  startRedis,
  type TcpProxy,
  waitFor,
} from './index.js';

const cleanups: (() => Promise<void>)[] = [];

afterAll(async () => {
  await Promise.allSettled(cleanups.map((cleanup) => cleanup()));
});

async function redis(args?: string[]): Promise<RedisServer> {
  const server = await startRedis({ args });
  cleanups.push(() => server.stop());
  return server;
}

async function proxyTo(server: RedisServer): Promise<TcpProxy> {
  const proxy = await startProxy(server);
  cleanups.push(() => proxy.close());
  return proxy;
}

/** A long-lived raw socket that records what it receives and whether it was closed. */
async function openSocket(port: number): Promise<{ socket: Socket; received: () => string; closed: Promise<void> }> {
  const socket = connect({ host: '127.0.0.1', port });
  socket.on('error', () => {});
  let text = '';
  socket.on('data', (chunk: Buffer) => {
    text += chunk.toString('latin1');
  });
  // Not events.once: it would reject on the 'error' that precedes a reset's 'close'.
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await once(socket, 'connect');
  return { socket, received: () => text, closed };
}

function resp(...args: string[]): string {
  return `*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`;
}

describe('ports', () => {
  it('hands out distinct free ports, cluster ports with a free bus port', async () => {
    const ports = await Promise.all([freePort(), freePort(), freePort()]);
    expect(new Set(ports).size).toBe(3);
    const clusterPort = await freeClusterPort();
    expect(clusterPort + 10_000).toBeLessThanOrEqual(65_535);
  });
});

describe('startRedis', () => {
  it('starts a server that answers PING over a raw socket and through redis-cli', async () => {
    const server = await redis();
    expect(server.url).toBe(`redis://127.0.0.1:${server.port}`);
    expect(server.running).toBe(true);
    expect(await ping(server)).toBe('PONG');
    expect(await server.command('PING')).toBe('PONG');

    const key = `${randomPrefix()}:k`;
    expect(await server.command('SET', key, 'v')).toBe('OK');
    expect(await server.command('GET', key)).toBe('v');
    expect(await server.command('CONFIG', 'GET', 'save')).toBe('save');
    await expect(server.command('NO-SUCH-COMMAND')).rejects.toThrow(/unknown command/);
  });

  it('pause freezes the server and resume thaws it', async () => {
    const server = await redis();
    server.pause();
    await expect(ping(server, { timeout: 300 })).rejects.toThrow(/no reply within 300 ms/);
    server.resume();
    expect(await ping(server, { timeout: 1000 })).toBe('PONG');
  });

  it('kill9 then restart comes back on the same port and dir with a new pid', async () => {
    const server = await redis();
    const { port, dir, pid } = server;
    await server.kill9();
    expect(server.running).toBe(false);
    await expect(ping(server, { timeout: 300 })).rejects.toThrow(/ECONNREFUSED/);

    await server.restart();
    expect(server.port).toBe(port);
    expect(server.dir).toBe(dir);
    expect(server.pid).not.toBe(pid);
    expect(await ping(server)).toBe('PONG');

    // A graceful restart of a live server works too.
    const before = server.pid;
    await server.restart();
    expect(server.pid).not.toBe(before);
    expect(await ping(server)).toBe('PONG');
  });

  it('stop is idempotent and works on a paused server', async () => {
    const server = await redis();
    server.pause();
    await Promise.all([server.stop(), server.stop()]);
    await server.stop();
    expect(server.running).toBe(false);
    expect(() => server.pause()).toThrow(/not running/);
  });

  it('reports why a server could not start', async () => {
    await expect(startRedis({ args: ['--no-such-option', 'x'] })).rejects.toThrow(
      /exited during startup[\s\S]*no-such-option/i,
    );
  });
});

describe('startCluster', () => {
  it('forms a 3-master cluster with every slot assigned', async () => {
    const cluster = await startCluster();
    cleanups.push(() => cluster.stop());
    expect(cluster.nodes).toHaveLength(3);
    expect(cluster.startupNodes).toEqual(cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })));
    for (const node of cluster.nodes) {
      const info = await node.command('CLUSTER', 'INFO');
      expect(info).toMatch(/cluster_state:ok/);
      expect(info).toMatch(/cluster_slots_assigned:16384/);
    }
    await cluster.stop();
    expect(cluster.nodes.every((node) => !node.running)).toBe(true);
  });
});

describe('startProxy', () => {
  it('forwards traffic and counts connections', async () => {
    const proxy = await proxyTo(await redis());
    expect(await ping(proxy)).toBe('PONG');

    const client = await openSocket(proxy.port);
    client.socket.write(resp('PING'));
    await waitFor(() => client.received() === '+PONG\r\n', { message: 'PONG through the proxy' });
    expect(proxy.connections()).toBe(1);
    client.socket.destroy();
    await waitFor(() => proxy.connections() === 0, { message: 'connection closed' });
  });

  it('adds latency in both directions', async () => {
    const proxy = await proxyTo(await redis());
    proxy.setLatency(200);
    const started = performance.now();
    expect(await ping(proxy)).toBe('PONG');
    // 200 ms out and 200 ms back; a little slack for millisecond timer granularity.
    expect(performance.now() - started).toBeGreaterThanOrEqual(395);
    proxy.setLatency(0);
    expect(await ping(proxy)).toBe('PONG');
  });

  it('keeps bytes in order while the latency changes', async () => {
    const proxy = await proxyTo(await redis());
    const client = await openSocket(proxy.port);
    const count = 40;
    for (let i = 0; i < count; i++) {
      // Lowering the latency midway must not let later chunks overtake earlier ones.
      proxy.setLatency(i < count / 2 ? 100 - i * 5 : 0);
      client.socket.write(resp('ECHO', String(i)));
    }
    await waitFor(() => (client.received().match(/\r\n/g)?.length ?? 0) >= count * 2, {
      message: 'all echoes',
    });
    const echoed = [...client.received().matchAll(/\$\d+\r\n(\d+)\r\n/g)].map((match) => Number(match[1]));
    expect(echoed).toEqual([...Array(count).keys()]);
    client.socket.destroy();
  });

  it('blackhole makes PING hang, and resets connections that lost data when lifted', async () => {
    const proxy = await proxyTo(await redis());
    const idle = await openSocket(proxy.port);
    proxy.blackhole(true);
    await expect(ping(proxy, { timeout: 300 })).rejects.toThrow(/no reply within 300 ms/);

    const victim = await openSocket(proxy.port);
    victim.socket.write(resp('PING'));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(victim.received()).toBe('');
    expect(victim.socket.destroyed).toBe(false);

    proxy.blackhole(false);
    await victim.closed;
    expect(await ping(proxy)).toBe('PONG');
    // A connection that lost nothing carries on.
    idle.socket.write(resp('PING'));
    await waitFor(() => idle.received() === '+PONG\r\n', { message: 'PONG on the idle connection' });
    idle.socket.destroy();
  });

  it('refuse resets existing and new connections', async () => {
    const proxy = await proxyTo(await redis());
    const existing = await openSocket(proxy.port);
    proxy.refuse(true);
    await existing.closed;
    await expect(ping(proxy, { timeout: 1000 })).rejects.toThrow(/ECONNRESET|closed before a reply/);
    expect(proxy.connections()).toBe(0);
    proxy.refuse(false);
    expect(await ping(proxy)).toBe('PONG');
  });

  it('resetAll drops every current connection', async () => {
    const proxy = await proxyTo(await redis());
    const first = await openSocket(proxy.port);
    const second = await openSocket(proxy.port);
    await waitFor(() => proxy.connections() === 2, { message: 'two connections' });
    proxy.resetAll();
    expect(proxy.connections()).toBe(0);
    await Promise.all([first.closed, second.closed]);
    expect(await ping(proxy)).toBe('PONG');
  });

  it('only proxies to loopback addresses', async () => {
    await expect(startProxy({ host: '10.0.0.1', port: 6379 })).rejects.toThrow(/loopback/);
  });
});
