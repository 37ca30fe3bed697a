import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { check } from '../../src/cli/verify/checker.js';
import type { History, HistoryEvent } from '../../src/cli/verify/history.js';
import { type RedisServer, startRedis } from '../harness/index.js';
import { snapshotCli } from './snapshot.js';

/**
 * `leasehold verify`, the built CLI run as a real process: short runs (a few seconds, three
 * workers, pauses and kills) must pass leasehold and must flag the naive lock, the negative
 * control that shows the checker can fail.
 */

/** A copy of the built CLI (snapshot.ts): a build run meanwhile cleans dist/ first. */
let CLI = '';
const run = promisify(execFile);
const PLAIN: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
delete PLAIN.FORCE_COLOR;

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function verify(...args: string[]): Promise<Outcome> {
  const options = { timeout: 60_000, env: PLAIN, maxBuffer: 16 << 20 };
  return run(process.execPath, [CLI, 'verify', ...args], options).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number; stdout: string; stderr: string }) => error,
  );
}

interface Report {
  level: string;
  exitCode: number;
  checks: { check: string; level: string; summary: string }[];
  violations: { kind: string; message: string }[];
  injected: { kind: string; worker: number | null; nextGrantMs: number | null }[];
  perWorker: { worker: number; grants: number }[];
  grants: number;
  writes: { accepted: number; refused: number; unknown: number };
}

function levels(report: Report): Record<string, string> {
  return Object.fromEntries(report.checks.map((c) => [c.check, c.level]));
}

/**
 * The document is well-formed XML: one root, every tag closed in order, attributes quoted, no
 * bare `&` or `<` in text. (No XML parser is a dependency; this is the part of one we need.)
 */
function expectWellFormed(xml: string): void {
  const body = xml.replace(/^<\?xml[^?]*\?>\s*/, '');
  const stack: string[] = [];
  let roots = 0;
  const token = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>|([^<]+)/gy;
  let at = 0;
  for (let m = token.exec(body); m !== null; m = token.exec(body)) {
    at = token.lastIndex;
    const [, closing, name, , selfClosing, text] = m;
    if (text !== undefined) {
      expect(text.replace(/&(amp|lt|gt|quot|apos);/g, ''), 'text with a bare & or <').not.toMatch(/[&<]/);
      if (stack.length === 0) expect(text.trim(), 'text outside the root').toBe('');
      continue;
    }
    if (stack.length === 0) roots += 1;
    if (closing) expect(stack.pop(), `</${name}>`).toBe(name);
    else if (!selfClosing) stack.push(name as string);
  }
  expect(at, `not a tag or text at ${at}: ${body.slice(at, at + 60)}`).toBe(body.length);
  expect(stack).toEqual([]);
  expect(roots).toBe(1);
}

describe('leasehold verify', () => {
  let server: RedisServer;
  let dir: string;

  beforeAll(async () => {
    [server, CLI] = await Promise.all([startRedis(), snapshotCli('verify')]);
    dir = mkdtempSync(join(tmpdir(), 'leasehold-verify-test-'));
  });
  afterAll(async () => {
    await server.stop();
    rmSync(dirname(CLI), { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  });

  // The same short run, pauses and kills aimed at the holder mid-work, on both locks at once.
  const SHORT = ['--workers', '3', '--duration', '5s', '--ttl', '400', '--faults', 'pause,kill'];

  it.concurrent('passes leasehold (the SVG timeline written and well-formed) and flags the naive lock as unsafe', async () => {
    const svg = join(dir, 'leasehold.svg');
    const [leasehold, naive] = await Promise.all([
      verify('--redis', server.url, ...SHORT, '--json', '--svg', svg),
      verify('--redis', server.url, ...SHORT, '--json', '--lock', 'naive'),
    ]);

    expect(leasehold.code, leasehold.stderr).toBe(0);
    const passed = JSON.parse(leasehold.stdout) as Report;
    expect(passed.violations).toEqual([]);
    expect(levels(passed)).toMatchObject({ overlap: 'ok', 'lost-updates': 'ok', tokens: 'ok' });
    expect(passed.injected.map((f) => f.kind)).toEqual(expect.arrayContaining(['pause', 'kill']));
    expect(passed.writes.accepted).toBeGreaterThan(10);
    expect(passed.perWorker).toHaveLength(3);
    expect(leasehold.stderr).toMatch(/^fault: pause on worker \d/m);

    expect(naive.code, naive.stderr).toBe(3);
    const caught = JSON.parse(naive.stdout) as Report;
    expect(caught.level).toBe('unsafe');
    const l = levels(caught);
    expect([l.overlap, l['lost-updates']]).toContain('unsafe');
    expect(caught.violations.map((v) => v.kind)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^(overlap|lost-update|stale-write|regressed-record)$/)]),
    );

    const text = readFileSync(svg, 'utf8');
    expectWellFormed(text);
    expect(text).toMatch(/^<\?xml version="1\.0" encoding="UTF-8"\?>\n<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    for (const row of ['worker 1', 'worker 2', 'worker 3']) expect(text).toContain(`>${row}</text>`);
    expect(text).toContain('<title>pause of worker');
    expect(text).toContain('<title>kill of worker');
    expect(text).toContain('leasehold verify: leasehold lock, 3 workers');
  });

  it.concurrent('prints a summary table and the verdict; the naive lock’s violations are named', async () => {
    const { code, stdout } = await verify('--redis', server.url, ...SHORT, '--lock', 'naive');
    expect(code).toBe(3);
    expect(stdout).toMatch(/^WORKER\s+GRANTS\s+ACCEPTED\s+REFUSED\s+NO REPLY\s+LOST\s+PAUSED\s+KILLED\s+ERRORS$/m);
    expect(stdout).toMatch(/^FAULT\s+ON\s+HOLDING\s+AT\s+LASTED\s+NEXT GRANT AFTER$/m);
    expect(stdout).toMatch(/^UNSAFE\s+(overlap|lost-updates)\s+\d+ (overlaps?|lost updates?)/m);
    expect(stdout).toMatch(/^violations:$/m);
    expect(stdout).toMatch(/^verdict: UNSAFE \(naive lock\): exit status 3$/m);
  });

  it('--local starts its own redis-server and restarts and freezes it; leasehold still passes', async () => {
    const { code, stdout, stderr } = await verify(
      '--local',
      '--workers',
      '3',
      '--duration',
      '5s',
      '--ttl',
      '400',
      '--faults',
      'restart,freeze',
      '--json',
    );
    expect(code, stderr).toBe(0);
    const report = JSON.parse(stdout) as Report & { server: { local: boolean } };
    expect(report.server.local).toBe(true);
    expect(report.violations).toEqual([]);
    expect(report.injected.map((f) => f.kind).slice(0, 2)).toEqual(['restart', 'freeze']);
    expect(report.injected.every((f) => f.worker === null)).toBe(true);
    expect(report.writes.accepted).toBeGreaterThan(0);
  });

  it('wrong use exits 2 before anything starts', async () => {
    const [serverFault, both, short, lock] = await Promise.all([
      verify('--redis', server.url, '--faults', 'pause,restart'),
      verify('--local', '--redis', server.url),
      verify('--redis', server.url, '--duration', '1s', '--ttl', '1000'),
      verify('--redis', server.url, '--lock', 'redlock'),
    ]);
    expect(serverFault).toMatchObject({ code: 2 });
    expect(serverFault.stderr).toContain('got restart (server faults need --local)');
    expect(both.stderr).toContain('--local starts its own redis-server: leave out --redis');
    expect(short.stderr).toContain('--duration must be at least 4 × --ttl (4000 ms)');
    expect(lock.stderr).toContain('--lock must be leasehold or naive, got redlock');
    for (const r of [both, short, lock]) expect(r.code).toBe(2);
  });
});

/** The checker on histories written by hand: each violation it reports can be produced, and a clean history passes. */
describe('verify checker', () => {
  const T = 1_000_000;
  const base = { lock: 'leasehold' as const, workers: 2, ttl: 100, start: T, end: T + 1_000, faults: [] };
  const at = (t: number, w: number, event: Record<string, unknown>) =>
    ({ t: T + t, w, pid: 100 + w, ...event }) as HistoryEvent;
  /** One cycle: granted with validity to `until`, read version n − 1, write n, release. */
  const cycle = (w: number, from: number, until: number, token: number, n: number) => [
    at(from, w, { e: 'granted', token, until: T + until }),
    at(from + 1, w, { e: 'read', token, n: n - 1, fence: null }),
    at(from + 2, w, { e: 'write', token, n }),
    at(from + 3, w, { e: 'wrote', token, ok: true }),
    at(from + 4, w, { e: 'release' }),
    at(from + 5, w, { e: 'released', ok: true }),
  ];
  const history = (events: HistoryEvent[], final: History['final']): History => ({ ...base, events, final });

  it('passes turns taken one after the other', () => {
    const clean = check(
      history([...cycle(1, 0, 90, 10, 1), ...cycle(2, 10, 100, 11, 2)], { n: 2, token: 11, worker: 2 }),
    );
    expect(clean.violations).toEqual([]);
    expect(clean.level).toBe('ok');
  });

  it('reports overlapping valid leases, lost updates, a lower token accepted later, a token going back', () => {
    // Worker 2 is granted, with a lower token, while worker 1 still believes its lease valid; both
    // write version 1 from version 0; then worker 2 writes version 2 with a token below worker 1's.
    const events = [
      at(0, 1, { e: 'granted', token: 20, until: T + 90 }),
      at(1, 1, { e: 'read', token: 20, n: 0, fence: null }),
      ...cycle(2, 30, 120, 15, 1),
      at(60, 1, { e: 'write', token: 20, n: 1 }),
      at(61, 1, { e: 'wrote', token: 20, ok: true }),
      at(62, 1, { e: 'release' }),
      at(63, 1, { e: 'released', ok: true }),
      ...cycle(2, 70, 160, 16, 2),
    ];
    // The record ends below the highest version accepted: overwritten with an older state.
    const result = check(history(events, { n: 1, token: 20, worker: 1 }));
    expect(result.level).toBe('unsafe');
    expect(new Set(result.violations.map((v) => v.kind))).toEqual(
      new Set(['overlap', 'lost-update', 'stale-write', 'decreasing-token', 'regressed-record']),
    );
    expect(result.violations.find((v) => v.kind === 'overlap')?.message).toBe(
      'worker 1 (token 20) and worker 2 (token 15) both held a valid lease for 4 ms from 0.030 s',
    );
    expect(result.checks.map((c) => [c.check, c.level])).toEqual([
      ['overlap', 'unsafe'],
      ['lost-updates', 'unsafe'],
      ['tokens', 'unsafe'],
      ['starvation', 'ok'],
      ['recovery', 'ok'],
    ]);
  });

  it('ends a killed holder’s lease at its death, and leaves a grant logged with no validity out of the token order', () => {
    const events = [
      at(0, 1, { e: 'granted', token: 30, until: T + 90 }),
      { e: 'exited', t: T + 20, w: 1, pid: 101, code: null, signal: 'SIGKILL' } as HistoryEvent,
      // Paused between the reply and its log: no validity left when logged, after a newer grant.
      ...cycle(2, 95, 190, 31, 1),
      at(200, 1, { e: 'granted', token: 29, until: T + 200 }),
    ];
    const result = check(history(events, { n: 1, token: 31, worker: 2 }));
    expect(result.violations).toEqual([]);
  });
});
