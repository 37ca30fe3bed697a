import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';

/**
 * What doctor reads from one server: INFO, the few CONFIG values INFO does not show, whether it
 * lets this user run scripts, its clock against this machine's, and round trips. Every read is
 * allowed to fail (managed services rename CONFIG, ACLs refuse commands): a failure is a fact too.
 */
export interface NodeFacts {
  /** host:port of the server. */
  readonly node: string;
  /** INFO (every default section), field by field; empty when INFO was refused. */
  readonly info: ReadonlyMap<string, string>;
  readonly infoError?: string;
  /** CONFIG GET of the settings INFO does not report; null where CONFIG was refused or unknown. */
  readonly config: Readonly<Record<ConfigName, string | null>>;
  readonly configError?: string;
  readonly scripts: ScriptFacts;
  /** This machine's clock against the server's TIME, from the sample with the shortest round trip. */
  readonly clock: { readonly offsetMs: number; readonly rttMs: number } | null;
  readonly latency: { readonly samples: number; readonly medianMs: number; readonly maxMs: number } | null;
  /** CLUSTER INFO, when the server is a cluster node. */
  readonly cluster: ReadonlyMap<string, string> | null;
}

export const CONFIG_NAMES = ['appendfsync', 'min-replicas-to-write', 'min-replicas-max-lag', 'save'] as const;
export type ConfigName = (typeof CONFIG_NAMES)[number];

/** What the server said to one harmless command: ran it (any reply), refused it (ACL), or knows no such command. */
export type Probe = 'allowed' | 'refused' | 'missing';

export interface ScriptFacts {
  /** FCALL of a function that does not exist: "Function not found" means FCALL may run. */
  readonly fcall: Probe;
  /** FUNCTION LOAD of a body without a library header: refused for the header, not for the user. */
  readonly functionLoad: Probe;
  readonly evalsha: Probe;
  readonly eval: Probe;
  /** The names of leasehold's function libraries already loaded (each build loads its own). */
  readonly libraries: readonly string[];
}

const PING_SAMPLES = 20;
const TIME_SAMPLES = 5;

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

/** A refusal by ACL (or a command disabled by the provider), told apart from any other reply. */
function classify(error: unknown): Probe {
  const text = message(error);
  if (/NOPERM|not allowed|disabled|no permissions/i.test(text)) return 'refused';
  if (/unknown command|unknown subcommand/i.test(text)) return 'missing';
  // Any other error reply (Function not found, NOSCRIPT, Missing library metadata) ran the command.
  return 'allowed';
}

async function probe(call: () => Promise<unknown>): Promise<Probe> {
  try {
    await call();
    return 'allowed';
  } catch (error) {
    return classify(error);
  }
}

async function scriptFacts(client: Redis): Promise<ScriptFacts> {
  const one = 'return 1';
  const sha = createHash('sha1').update(one).digest('hex');
  const [fcall, functionLoad, evalsha, evalProbe] = await Promise.all([
    probe(() => client.call('FCALL', 'leasehold_doctor_probe_missing', '0')),
    probe(() => client.call('FUNCTION', 'LOAD', one)),
    probe(() => client.call('EVALSHA', sha, '0')),
    probe(() => client.call('EVAL', one, '0')),
  ]);
  let libraries: string[] = [];
  if (fcall === 'allowed') {
    const listed = await client.call('FUNCTION', 'LIST', 'LIBRARYNAME', 'leasehold_').catch(() => []);
    libraries = (Array.isArray(listed) ? listed : []).flatMap((entry) => {
      if (!Array.isArray(entry)) return [];
      const at = entry.indexOf('library_name');
      const name = at >= 0 ? entry[at + 1] : undefined;
      return typeof name === 'string' ? [name] : [];
    });
  }
  return { fcall, functionLoad, evalsha, eval: evalProbe, libraries };
}

async function clockFacts(client: Redis): Promise<NodeFacts['clock']> {
  let best: { offsetMs: number; rttMs: number } | null = null;
  for (let i = 0; i < TIME_SAMPLES; i++) {
    const sent = performance.now();
    const [seconds, micros] = (await client.time()) as [string | number, string | number];
    const received = performance.now();
    // This machine's wall clock at the middle of the round trip, where the server most likely read its own.
    const local = performance.timeOrigin + (sent + received) / 2;
    const server = Number(seconds) * 1_000 + Number(micros) / 1_000;
    const sample = { offsetMs: server - local, rttMs: received - sent };
    if (best === null || sample.rttMs < best.rttMs) best = sample;
  }
  return best;
}

async function latencyFacts(client: Redis): Promise<NodeFacts['latency']> {
  const rtts: number[] = [];
  for (let i = 0; i < PING_SAMPLES; i++) {
    const sent = performance.now();
    await client.ping();
    rtts.push(performance.now() - sent);
  }
  rtts.sort((a, b) => a - b);
  return {
    samples: rtts.length,
    medianMs: rtts[Math.floor(rtts.length / 2)] ?? 0,
    maxMs: rtts[rtts.length - 1] ?? 0,
  };
}

async function configFacts(client: Redis): Promise<{ config: NodeFacts['config']; error?: string }> {
  const config: Record<ConfigName, string | null> = {
    appendfsync: null,
    'min-replicas-to-write': null,
    'min-replicas-max-lag': null,
    save: null,
  };
  for (const name of CONFIG_NAMES) {
    try {
      const reply = (await client.config('GET', name)) as string[];
      config[name] = reply[1] ?? null;
    } catch (error) {
      // One refusal (an ACL, a renamed CONFIG) means the same for the rest: stop asking.
      return { config, error: message(error) };
    }
  }
  return { config };
}

/** Everything doctor looks at on one server, through `client`. */
export async function examine(client: Redis, node: string): Promise<NodeFacts> {
  let info = new Map<string, string>();
  let infoError: string | undefined;
  try {
    info = parseInfo(await client.info());
  } catch (error) {
    infoError = message(error);
  }
  const { config, error: configError } = await configFacts(client);
  const scripts = await scriptFacts(client);
  const clock = await clockFacts(client).catch(() => null);
  const latency = await latencyFacts(client).catch(() => null);
  let cluster: Map<string, string> | null = null;
  if (info.get('cluster_enabled') === '1') {
    cluster = parseInfo(String(await client.call('CLUSTER', 'INFO').catch(() => '')));
  }
  return {
    node,
    info,
    ...(infoError === undefined ? {} : { infoError }),
    config,
    ...(configError === undefined ? {} : { configError }),
    scripts,
    clock,
    latency,
    cluster,
  };
}

/**
 * The masters a cluster node knows (CLUSTER NODES), failing ones left out; `myself` is the node
 * asked, whatever address the URL gave it.
 */
export async function clusterMasters(client: Redis): Promise<{ host: string; port: number; myself: boolean }[]> {
  const text = String(await client.call('CLUSTER', 'NODES'));
  return text.split('\n').flatMap((line) => {
    const [, address, flags] = line.split(' ');
    if (!address || !flags) return [];
    const marks = flags.split(',');
    if (!marks.includes('master') || marks.includes('fail') || marks.includes('noaddr')) return [];
    const hostPort = address.split('@')[0] ?? '';
    const colon = hostPort.lastIndexOf(':');
    if (colon <= 0) return [];
    return [
      { host: hostPort.slice(0, colon), port: Number(hostPort.slice(colon + 1)), myself: marks.includes('myself') },
    ];
  });
}
