import { once } from 'node:events';
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

/** Commands that run a script (their time includes every command the script runs). */
const SCRIPT_COMMANDS = new Set(['fcall', 'fcall_ro', 'evalsha', 'evalsha_ro', 'eval', 'eval_ro']);

/** µs the server has spent so far inside scripts (INFO commandstats `usec` of the script commands). */
export async function scriptMicros(admin) {
  const text = await admin.info('commandstats');
  let usec = 0;
  for (const [, name, spent] of text.matchAll(/^cmdstat_([^:]+):calls=\d+,usec=(\d+)/gm)) {
    if (SCRIPT_COMMANDS.has(name)) usec += Number(spent);
  }
  return usec;
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

/** How long to wait for the end marker of a counting pass to come back through MONITOR. */
const MONITOR_DRAIN_MS = 5_000;
let passes = 0;

/**
 * What the server received from the benchmark's clients while `body` runs, read from MONITOR on
 * a connection of its own. MONITOR shows each command a client sent, once, in the order the
 * server ran it (a blocking command when it is first called), and each command a Lua script or
 * function runs as a line from "lua": those are counted apart (`scripted`), so that `commands`
 * is what came over the wire, however each library batches it. The window is fenced by two
 * ECHO markers from `admin`, whose own lines are left out. MONITOR slows the server down: run
 * this only in a pass of its own, never around a timed one.
 * Resolves `{ result, commands, scripted, calls }`, `calls` being what ioredis sent in the same
 * pass (a cross-check: it differs from `commands` only by what a library sends outside ioredis's
 * sendCommand, or what the server had not run yet when the end marker came back).
 */
export async function countAtServer(admin, body) {
  const monitor = admin.duplicate({ monitor: true, lazyConnect: false });
  monitor[ADMIN] = true;
  const marker = `bench-count-${process.pid}-${++passes}`;
  let state = 'before';
  let commands = 0;
  let scripted = 0;
  let ended;
  const drained = new Promise((resolve) => {
    ended = resolve;
  });
  try {
    await once(monitor, 'monitoring');
    const own = new Set([
      `${admin.stream.localAddress}:${admin.stream.localPort}`,
      `${monitor.stream.localAddress}:${monitor.stream.localPort}`,
    ]);
    monitor.on('monitor', (_time, args, source) => {
      if (own.has(source)) {
        if (args[1] === `${marker}:start`) state = 'counting';
        else if (args[1] === `${marker}:end`) {
          state = 'after';
          ended();
        }
        return;
      }
      if (state !== 'counting') return;
      if (source === 'lua') scripted++;
      else commands++;
    });
    await admin.echo(`${marker}:start`);
    const sentBefore = sent;
    const result = await body();
    const calls = sent - sentBefore;
    await admin.echo(`${marker}:end`);
    let timer;
    await Promise.race([
      drained,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('MONITOR did not show the end marker')), MONITOR_DRAIN_MS);
      }),
    ]).finally(() => clearTimeout(timer));
    return { result, commands, scripted, calls };
  } finally {
    monitor.disconnect();
  }
}
