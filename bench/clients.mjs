import { Redis } from 'ioredis';
import { HOST } from './server.mjs';

/**
 * Commands sent by every ioredis client of this process except admin ones. ioredis routes every
 * command through Redis.prototype.sendCommand (pipelines and duplicated subscriber connections
 * too), so counting there sees what each library sends; INFO commandstats cannot tell those apart
 * from the commands a Lua script runs inside the server.
 */
let sent = 0;
const ADMIN = Symbol('bench admin client');
const sendCommand = Redis.prototype.sendCommand;
Redis.prototype.sendCommand = function countedSendCommand(command, stream) {
  if (!this[ADMIN]) sent++;
  return sendCommand.call(this, command, stream);
};

export function commandsSent() {
  return sent;
}

/** A fresh client with ioredis defaults (what each peer's README constructs), connected. */
export async function connect(port) {
  const client = new Redis({ host: HOST, port, lazyConnect: true });
  await client.connect();
  return client;
}

/** A client for the harness itself (FLUSHALL, CONFIG RESETSTAT, INFO): its commands are not counted. */
export async function connectAdmin(port) {
  const client = new Redis({ host: HOST, port, lazyConnect: true });
  client[ADMIN] = true;
  await client.connect();
  return client;
}

export async function closeAll(clients) {
  await Promise.all(clients.map((c) => c.quit().catch(() => c.disconnect())));
}

/** `INFO commandstats` as { command: calls }, without the harness's own INFO and CONFIG calls. */
export async function commandStats(admin) {
  const text = await admin.info('commandstats');
  const stats = {};
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const [, name, calls] = match;
    if (name === 'info' || name.startsWith('config')) continue;
    stats[name] = Number(calls);
  }
  return stats;
}

export async function serverVersion(admin) {
  const info = await admin.info('server');
  return /redis_version:([^\r\n]+)/.exec(info)?.[1] ?? 'unknown';
}

/** CPU seconds (user + system) the server has used so far, from INFO cpu. */
export async function serverCpuSeconds(admin) {
  const info = await admin.info('cpu');
  const read = (name) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? Number.NaN);
  return read('used_cpu_user') + read('used_cpu_sys');
}
