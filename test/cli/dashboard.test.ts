import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLoopback, tokenMatches } from '../../src/cli/dashboard/guard.js';
import { redactor } from '../../src/cli/dashboard/redact.js';
import { Leasehold, type Lock } from '../../src/index.js';
import {
  type EtcdServer,
  type PostgresServer,
  type RedisServer,
  randomPrefix,
  startEtcd,
  startPostgres,
  startRedis,
  waitFor,
} from '../harness/index.js';
import { type Browser, findChromium, launch, type Page } from './dashboard-browser.js';

/**
 * `leasehold dashboard`: the built CLI run as a process against real servers, its page loaded in
 * headless Chromium and read through the DevTools protocol. Set LEASEHOLD_DASHBOARD_SCREENSHOT to a
 * path (docs/dashboard.png) to keep the screenshot the first test takes.
 */

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
/** The dashboard's default refresh interval: a change must reach the page within about one. */
const INTERVAL = 1_000;
/** One interval for the next scan to begin, then the scan and the page's redraw on a busy machine. */
const FOLLOW_BOUND = INTERVAL + 1_000;

const chromium = findChromium();
const skip = 'skip' in chromium ? chromium.skip : undefined;
if (skip) console.warn(`dashboard browser tests skipped: ${skip}`);

interface Running {
  readonly url: string;
  readonly token: string | null;
  readonly stdout: string[];
  readonly stderr: string[];
  readonly child: ChildProcess;
  /** Resolves the exit status once the process exits by itself. */
  readonly exit: Promise<number | null>;
  /** Send `signal`, resolve the exit status. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

const running = new Set<Running>();

/** `leasehold dashboard …args`, once it printed its URL (and, with --allow-release, its token). */
async function dashboard(args: readonly string[]): Promise<Running> {
  // Another build may be rewriting dist/ at this moment (tsup cleans it first).
  await waitFor(() => existsSync(CLI), { timeout: 60_000, message: 'dist/cli.js built' });
  const child = spawn(process.execPath, [CLI, 'dashboard', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout: string[] = [];
  const stderr: string[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  createInterface({ input: child.stderr }).on('line', (line) => stderr.push(line));
  const lines = createInterface({ input: child.stdout });
  lines.on('line', (line) => stdout.push(line));
  const release = args.includes('--allow-release');
  await Promise.race([
    waitFor(() => stdout.length >= (release ? 3 : 1), { timeout: 15_000, message: 'the dashboard printing its URL' }),
    exited.then((code) => {
      throw new Error(`the dashboard exited with ${code}: ${stderr.join('\n')}`);
    }),
  ]);
  const url = /: (http:\/\/\S+)$/.exec(stdout[0] ?? '')?.[1];
  if (!url) throw new Error(`no URL in ${stdout[0]}`);
  const token = release ? (/: (\S+)$/.exec(stdout[1] ?? '')?.[1] ?? null) : null;
  const run: Running = {
    url,
    token,
    stdout,
    stderr,
    child,
    exit: exited,
    async stop(signal = 'SIGTERM') {
      running.delete(run);
      if (child.exitCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
  running.add(run);
  return run;
}

/** A request as a page on a DNS name rebound to this address sends it: its own Host header. */
function rebound(url: string, headers: Record<string, string>): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}api/release`, { method: 'POST', headers }, (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.once('error', reject);
    req.end('{}');
  });
}

let redis: RedisServer;
let postgres: PostgresServer;
let etcd: EtcdServer;
let browser: Browser | undefined;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  const started = await Promise.all([
    startRedis(),
    startPostgres(),
    startEtcd(),
    skip ? undefined : launch((chromium as { path: string }).path),
  ]);
  [redis, postgres, etcd, browser] = started;
}, 60_000);

afterAll(async () => {
  for (const run of running) await run.stop('SIGKILL');
  for (const clean of cleanups.reverse()) {
    // A clean-up that hangs must not hold the others (nor the servers' stop) up.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise((resolve) => {
      timer = setTimeout(resolve, 5_000);
    });
    await Promise.race([clean().catch(() => undefined), late]);
    clearTimeout(timer);
  }
  await browser?.close();
  await Promise.all([redis?.stop(), postgres?.stop(), etcd?.stop()]);
});

/** A Leasehold on its own ioredis client, closed after the file. */
function leasehold(prefix: string, instance: string, url = redis.url): Leasehold {
  const client = new Redis(url);
  const locks = new Leasehold(client, { prefix, instance });
  cleanups.push(async () => {
    await locks.close();
    client.disconnect();
  });
  return locks;
}

async function page(url: string, width = 1360, height = 1000): Promise<Page> {
  const p = await (browser as Browser).newPage(width, height);
  cleanups.push(() => p.close());
  await p.goto(url);
  return p;
}

/** What the page threw or logged, but for the refusals of releases the test itself asked for. */
function unexpected(p: Page): string[] {
  return p.errors.filter((e) => !/status of 4\d\d .*\/api\/release$/.test(e));
}

/** The held-locks table as the page shows it: one object per row, by column. */
function tableRows(p: Page): Promise<Record<string, string>[]> {
  return p.evaluate(`[...document.querySelectorAll('#locks-body tr')].map((tr) => {
    const c = tr.children;
    return { name: c[0].textContent, mode: c[1].textContent, instance: c[2].textContent, since: c[3].textContent,
      left: c[4].textContent, fence: c[5].textContent, waiters: c[6].textContent };
  })`);
}

/** Press a key in the page, as a keyboard would. */
async function press(p: Page, key: 'Tab' | 'Enter' | 'Escape'): Promise<void> {
  const codes = { Tab: 9, Enter: 13, Escape: 27 };
  const text = key === 'Enter' ? '\r' : undefined;
  await p.send('Input.dispatchKeyEvent', {
    type: 'keyDown',
    key,
    code: key,
    windowsVirtualKeyCode: codes[key],
    ...(text ? { text } : {}),
  });
  await p.send('Input.dispatchKeyEvent', { type: 'keyUp', key, code: key, windowsVirtualKeyCode: codes[key] });
}

/** Text whose colour is below 4.5:1 against what it is drawn on (alpha composited), visible text only. */
const CONTRAST_FAILURES = `(() => {
  const parse = (c) => { const m = /rgba?\\(([^)]+)\\)/.exec(c); if (!m) return null;
    const p = m[1].split(',').map(Number); return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 }; };
  const over = (top, base) => ({ r: top.r * top.a + base.r * (1 - top.a), g: top.g * top.a + base.g * (1 - top.a),
    b: top.b * top.a + base.b * (1 - top.a), a: 1 });
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const background = (el) => { const layers = [];
    for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; } }
    return layers.reverse().reduce((base, layer) => over(layer, base), { r: 255, g: 255, b: 255, a: 1 }); };
  const failures = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el || el.closest('.sr-only') || el.getClientRects().length === 0) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden') continue;
    const bg = background(el);
    const fg = over(parse(style.color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < 4.5) failures.push(n.textContent.trim().slice(0, 40) + ' ' + ratio.toFixed(2) + ':1');
  }
  return failures;
})()`;

describe('the dashboard helpers', () => {
  it('never lets the connection URL’s user, password or secret parameters through', () => {
    const r = redactor('redis', 'redis://opsuser:s3cr%40t-pass@10.0.0.5:6380/2');
    expect(r.label).toBe('redis 10.0.0.5:6380');
    const text = r.redact(
      'cannot connect to Redis at redis://opsuser:s3cr%40t-pass@10.0.0.5:6380/2: NOPERM User opsuser s3cr@t-pass',
    );
    expect(text).not.toMatch(/opsuser|s3cr/);
    expect(text).toContain('redis 10.0.0.5:6380');
    const p = redactor('postgres', 'postgres://app@db.local:5432/locks?sslmode=require&password=hunter22');
    expect(p.label).toBe('postgres db.local:5432/locks');
    expect(p.redact('password=hunter22 for app')).toBe('password=*** for ***');
    const e = redactor('etcd', 'http://root:etcdpw@10.0.0.1:2379,http://10.0.0.2:2379');
    expect(e.label).toBe('etcd 10.0.0.1:2379, 10.0.0.2:2379');
    expect(e.redact('etcd at http://root:etcdpw@10.0.0.1:2379 refused')).not.toMatch(/root|etcdpw/);
  });

  it('compares tokens in constant time and knows loopback addresses', () => {
    expect(tokenMatches('abc', 'abc')).toBe(true);
    expect(tokenMatches('abd', 'abc')).toBe(false);
    expect(tokenMatches('', 'abc')).toBe(false);
    expect(tokenMatches(undefined, 'abc')).toBe(false);
    expect(['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost'].every(isLoopback)).toBe(true);
    expect(['0.0.0.0', '::', '10.0.0.1', 'example.com'].some(isLoopback)).toBe(false);
  });
});

describe.skipIf(skip !== undefined)('leasehold dashboard in a browser', () => {
  it('shows the held locks, waiters and job runs, follows a release within an interval, filters, and is read-only', async () => {
    const prefix = randomPrefix();
    const a = leasehold(prefix, 'pod-a');
    const b = leasehold(prefix, 'pod-b');
    const order = await a.acquire('orders:1', { ttl: 30_000 });
    await a.acquire('orders:2', { ttl: 30_000 });
    const report = await b.acquire('reports:daily', { ttl: 60_000 });
    await a.acquire('api:quota', { ttl: 30_000, limit: 3 });
    await b.acquire('api:quota', { ttl: 30_000, limit: 3 });
    // Two waiters queued behind orders:1.
    const waiting = [
      b.acquire('orders:1', { ttl: 5_000, wait: 60_000 }),
      b.acquire('orders:1', { ttl: 5_000, wait: 60_000 }),
    ];
    for (const w of waiting) w.catch(() => undefined);
    // A job's history: two ticks that ran and one that failed; and a second job running right now.
    const tick = Date.now() - 60_000;
    await a.runOnce('nightly', async () => 'ok', { lockAtMostFor: 10_000, tick });
    await b.runOnce('nightly', async () => 'ok', { lockAtMostFor: 10_000, tick: tick + 10_000 });
    await a
      .runOnce('nightly', async () => Promise.reject(new Error('ledger unreachable')), {
        lockAtMostFor: 10_000,
        tick: tick + 20_000,
      })
      .catch(() => undefined);
    let finishRates: () => void = () => {};
    const rates = a.runOnce('rates', () => new Promise<void>((resolve) => (finishRates = resolve)), {
      lockAtMostFor: 30_000,
    });
    cleanups.push(async () => {
      finishRates();
      await rates.catch(() => undefined);
    });

    const run = await dashboard(['--redis', redis.url, '--prefix', prefix, '--jobs', 'nightly']);
    expect(run.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    expect(run.stderr.join('\n')).not.toMatch(/warning/);
    const p = await page(run.url, 1360, 1480);
    await p.waitFor(`document.querySelectorAll('#locks-body tr').length === 5`, 10_000, 'five held locks');
    const rows = await tableRows(p);
    // The running job's lock is held too; the finished job's is not.
    expect(rows.map((r) => r.name)).toEqual(['api:quota', 'orders:1', 'orders:2', 'rates', 'reports:daily']);
    const orders = rows.find((r) => r.name === 'orders:1');
    expect(orders).toMatchObject({ mode: 'exclusive', fence: String(order.fencingToken), waiters: '2' });
    expect(orders?.instance).toContain('pod-a');
    expect(orders?.instance).toContain(order.owner.slice(0, 8));
    expect(orders?.instance).not.toContain(order.owner);
    expect(orders?.left).toMatch(/^\d+(\.\d)? s$/);
    expect(rows.find((r) => r.name === 'api:quota')?.mode).toBe('semaphore 2/3');
    expect(rows.find((r) => r.name === 'reports:daily')).toMatchObject({ fence: String(report.fencingToken) });
    expect(rows.find((r) => r.name === 'rates')?.instance).toContain('pod-a');
    // The waiters panel names the queue and how long each waited.
    const waiters = await p.evaluate<string>(`document.getElementById('waiters-list').textContent`);
    expect(waiters).toMatch(/orders:1\s*2 waiting/);
    expect(waiters).toMatch(/waited ≥? ?\d/);
    // The job named on the command line with its runs, and the running job found by the scan.
    await p.waitFor(
      `document.getElementById('jobs-list').textContent.includes('rates')`,
      10_000,
      'the running job found',
    );
    const jobs = await p.evaluate<{ name: string; state: string; runs: string[][] }[]>(
      `[...document.querySelectorAll('#jobs-list .job')].map((j) => ({ name: j.querySelector('h3 span').textContent,
        state: j.querySelector('h3 .state').textContent,
        runs: [...j.querySelectorAll('tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)) }))`,
    );
    const nightly = jobs.find((j) => j.name === 'nightly');
    expect(nightly?.runs.map((r) => r[1])).toEqual(['pod-a', 'pod-b', 'pod-a']);
    expect(nightly?.runs.map((r) => r[4])).toEqual(['failed Error: ledger unreachable', 'ok', 'ok']);
    expect(nightly?.runs[1]?.[3]).toMatch(/^\d+ ms$/);
    expect(jobs.find((j) => j.name === 'rates')).toMatchObject({ state: 'running now' });
    expect(jobs.find((j) => j.name === 'rates')?.runs[0]?.[4]).toBe('running');
    // The timeline has a lane per lock granted.
    const lanes = await p.evaluate<string[]>(`[...document.querySelectorAll('.lane-name')].map((n) => n.title)`);
    expect(lanes).toEqual(expect.arrayContaining(['orders:1', 'reports:daily', 'nightly']));
    // Read-only: no release control, and the server refuses a release even from the page itself.
    expect(await p.evaluate(`document.querySelectorAll('button.release').length`)).toBe(0);
    expect(await p.evaluate(`document.getElementById('action-col').hidden`)).toBe(true);
    expect(await p.evaluate(`document.getElementById('n-mode').textContent`)).toBe('Read-only');
    const refused = await p.evaluate<{ status: number; body: { error: string } }>(`fetch('/api/release', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'orders:1', token: 'x' })
    }).then(async (r) => ({ status: r.status, body: await r.json() }))`);
    expect(refused.status).toBe(403);
    expect(refused.body.error).toMatch(/read-only/);
    expect(await redis.command('EXISTS', `${prefix}:{orders:1}`)).toBe('1');
    const shot = Buffer.from(
      (await p.send<{ data: string }>('Page.captureScreenshot', { format: 'png' })).data,
      'base64',
    );
    expect(shot.subarray(1, 4).toString()).toBe('PNG');
    const keep = process.env.LEASEHOLD_DASHBOARD_SCREENSHOT;
    if (keep) writeFileSync(keep, shot);

    // Accessible: labelled controls, every text at least 4.5:1, a visible focus ring from the keyboard.
    expect(await p.evaluate(`document.querySelector('label[for=filter]').textContent`)).toBe('Filter by name');
    expect(await p.evaluate(CONTRAST_FAILURES)).toEqual([]);
    await p.evaluate('document.activeElement.blur()');
    await press(p, 'Tab');
    expect(await p.evaluate('document.activeElement.className')).toBe('skip');
    await press(p, 'Tab');
    const focus = await p.evaluate<{ id: string; outline: string; width: string }>(
      `(() => { const s = getComputedStyle(document.activeElement);
        return { id: document.activeElement.id, outline: s.outlineStyle, width: s.outlineWidth }; })()`,
    );
    expect(focus).toMatchObject({ id: 'filter', outline: 'solid', width: '3px' });

    // A release reaches the page within an interval of the dashboard's, without a reload.
    await report.release();
    const released = performance.now();
    await p.waitFor(
      `![...document.querySelectorAll('#locks-body tr')].some((tr) => tr.dataset.name === 'reports:daily')`,
      FOLLOW_BOUND + 2_000,
      'the released lock gone',
    );
    const followed = performance.now() - released;
    console.info(`dashboard: a release reached the page in ${followed.toFixed(0)} ms (interval ${INTERVAL} ms)`);
    expect(followed).toBeLessThan(FOLLOW_BOUND);
    expect(await p.evaluate(`location.href`)).toBe(run.url);

    // The filter applies to every panel.
    await p.evaluate(`document.getElementById('filter').focus()`);
    await p.send('Input.insertText', { text: 'ORDERS' });
    await p.waitFor(`document.querySelectorAll('#locks-body tr').length === 2`, 5_000, 'two rows left by the filter');
    expect((await tableRows(p)).map((r) => r.name)).toEqual(['orders:1', 'orders:2']);
    expect(await p.evaluate('location.search')).toBe('?filter=ORDERS');
    await p.waitFor(`!document.getElementById('jobs-list').textContent.includes('nightly')`, 5_000, 'jobs filtered');
    expect(await p.evaluate(`document.getElementById('waiters-list').textContent`)).toContain('orders:1');
    expect(unexpected(p)).toEqual([]);
    expect(await run.stop('SIGINT')).toBe(0);
  });

  it('--allow-release: refuses a wrong token and other origins, and releases with the token after confirmation', async () => {
    const prefix = randomPrefix();
    const a = leasehold(prefix, 'pod-a');
    const b = leasehold(prefix, 'pod-b');
    const held = await a.acquire('orders:9', { ttl: 30_000 });
    const next = b.acquire('orders:9', { ttl: 30_000, wait: 30_000 });
    next.catch(() => undefined);
    await a.acquire('orders:10', { ttl: 30_000 });
    const run = await dashboard(['--redis', redis.url, '--prefix', prefix, '--allow-release']);
    const token = run.token as string;
    expect(token).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(run.stdout[2]).toBe(`or open ${run.url}#token=${token}`);
    const origin = run.url.slice(0, -1);
    const key = `${prefix}:{orders:10}`;

    // From outside the page: every request without the page's origin is refused, right token or not.
    const post = (headers: Record<string, string>) =>
      fetch(`${run.url}api/release`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...headers },
        body: JSON.stringify({ name: 'orders:10', token }),
      });
    expect((await post({})).status).toBe(403);
    expect((await post({ Origin: 'http://evil.example' })).status).toBe(403);
    expect((await post({ Origin: origin, 'Sec-Fetch-Site': 'cross-site' })).status).toBe(403);
    expect((await post({ Origin: origin, 'Sec-Fetch-Site': 'same-site' })).status).toBe(403);
    expect(await rebound(run.url, { Origin: 'http://evil.example:80', Host: 'evil.example:80' })).toBe(421);
    expect((await fetch(`${run.url}events`, { headers: { 'Sec-Fetch-Site': 'cross-site' } })).status).toBe(403);
    const refused = await post({ Origin: 'http://evil.example' });
    expect([...refused.headers.keys()].filter((h) => h.startsWith('access-control-'))).toEqual([]);
    expect(await redis.command('EXISTS', key)).toBe('1');

    // From a real page of another origin (a form post and a no-cors fetch, both with the right token).
    const evil: Server = createServer((_, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html' });
      res.end(`<form id="f" method="POST" action="${run.url}api/release" enctype="text/plain">
        <input name='{"name":"orders:10","token":"${token}","x":"' value='"}'></form>
        <script>fetch(${JSON.stringify(`${run.url}api/release`)}, { method: 'POST', mode: 'no-cors',
          headers: { 'Content-Type': 'text/plain' }, body: JSON.stringify({ name: 'orders:10', token: ${JSON.stringify(token)} }) })
          .finally(() => document.getElementById('f').submit());</script>`);
    });
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
    cleanups.push(async () => {
      evil.closeAllConnections();
      await new Promise((resolve) => evil.close(resolve));
    });
    const refusals = () => run.stderr.filter((l) => l.includes('refused a release request'));
    const before = refusals().length;
    const attacker = await (browser as Browser).newPage();
    cleanups.push(() => attacker.close());
    await attacker.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
    await waitFor(() => refusals().length >= before + 2, {
      timeout: 5_000,
      message: 'the other origin’s posts refused',
    });
    // Another port of 127.0.0.1 is the same site to the browser, but not the same origin.
    expect(refusals().slice(before)).toEqual([
      expect.stringMatching(/Sec-Fetch-Site is same-site/),
      expect.stringMatching(/Sec-Fetch-Site is same-site/),
    ]);
    expect(await redis.command('EXISTS', key)).toBe('1');

    // The page, by keyboard: Release… → the confirmation asks for the token; a wrong one is refused.
    const p = await page(run.url);
    await p.waitFor(`document.querySelectorAll('#locks-body button.release').length === 2`, 10_000, 'release buttons');
    expect(await p.evaluate(`document.getElementById('n-mode').textContent`)).toBe('Enabled');
    await p.evaluate(`document.querySelector('#locks-body tr[data-name="orders:9"] button.release').focus()`);
    await press(p, 'Enter');
    await p.waitFor(`document.getElementById('release-dialog').open`, 5_000, 'the confirmation dialog');
    expect(await p.evaluate(`document.getElementById('rd-detail').textContent`)).toContain(String(held.fencingToken));
    expect(await p.evaluate(`document.activeElement.id`)).toBe('rd-token');
    await p.send('Input.insertText', { text: 'not-the-token' });
    await press(p, 'Enter');
    await p.waitFor(
      `document.getElementById('rd-error').textContent.includes('wrong release token')`,
      5_000,
      'refusal',
    );
    expect(await p.evaluate(`document.getElementById('release-dialog').open`)).toBe(true);
    expect(await redis.command('EXISTS', `${prefix}:{orders:9}`)).toBe('1');
    // Escape cancels; nothing happens.
    await press(p, 'Escape');
    await p.waitFor(`!document.getElementById('release-dialog').open`, 5_000, 'the dialog closed');
    expect(await redis.command('EXISTS', `${prefix}:{orders:9}`)).toBe('1');

    // The right token, handed over in the fragment of the printed URL: the lock goes to the waiter.
    expect(unexpected(p)).toEqual([]);
    await p.close();
    const p2 = await page(run.stdout[2]?.replace(/^or open /, '') ?? '');
    expect(await p2.evaluate(`location.hash`)).toBe('');
    await p2.waitFor(`document.querySelectorAll('#locks-body button.release').length === 2`, 10_000, 'release buttons');
    await p2.evaluate(`document.querySelector('#locks-body tr[data-name="orders:9"] button.release').click()`);
    await p2.waitFor(`document.getElementById('release-dialog').open`, 5_000, 'the confirmation dialog');
    expect(await p2.evaluate(`document.getElementById('rd-token').value`)).toBe(token);
    await p2.evaluate(`document.getElementById('rd-confirm').click()`);
    await p2.waitFor(`!document.getElementById('release-dialog').open`, 5_000, 'the dialog closed after the release');
    const taken: Lock = await next;
    expect(taken.fencingToken).toBeGreaterThan(held.fencingToken);
    await p2.waitFor(
      `/Released orders:9, held by pod-a/.test(document.getElementById('announce').textContent)`,
      5_000,
      'the release announced',
    );
    expect(run.stderr.join('\n')).toMatch(/released "orders:9" from the page \(pod-a, fencing token \d+\)/);
    // The page shows the new holder within an interval.
    await p2.waitFor(
      `document.querySelector('#locks-body tr[data-name="orders:9"] td.fence')?.textContent === '${taken.fencingToken}'`,
      FOLLOW_BOUND + 2_000,
      'the new holder',
    );
    // A confirmation made against an older reading is refused: the lock changed hands since.
    const stale = await p2.evaluate<{ status: number }>(`fetch('/api/release', { method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'orders:9', fence: ${held.fencingToken}, token: ${JSON.stringify(token)} }) })
      .then((r) => ({ status: r.status }))`);
    expect(stale.status).toBe(409);
    expect(await redis.command('EXISTS', `${prefix}:{orders:9}`)).toBe('1');
    expect(unexpected(p2)).toEqual([]);
    expect(await run.stop()).toBe(0);
  });

  it('keeps the browser responsive with 10,000 held locks: paged, filtered, bounded server cost', async () => {
    const prefix = randomPrefix();
    const client = new Redis(redis.url);
    const locks = new Leasehold(client, { prefix, instance: 'bulk' });
    cleanups.push(async () => {
      await locks.close();
      client.disconnect();
    });
    const names = Array.from({ length: 10_000 }, (_, i) => `lock:${String(i).padStart(5, '0')}`);
    for (let i = 0; i < names.length; i += 500) {
      await Promise.all(
        names.slice(i, i + 500).map((name) => locks.acquire(name, { ttl: 120_000, autoExtend: false })),
      );
    }
    const run = await dashboard(['--redis', redis.url, '--prefix', prefix]);
    const p = await page(run.url);
    await p.waitFor(`document.getElementById('n-held').textContent === '10,000'`, 15_000, '10,000 locks counted');
    // A lag monitor: the longest the page's main thread was busy while snapshots arrived.
    await p.evaluate(`window.__lag = 0; (() => { let last = performance.now();
      setInterval(() => { const now = performance.now(); window.__lag = Math.max(window.__lag, now - last - 50); last = now; }, 50); })()`);
    await p.waitFor(`document.querySelectorAll('#locks-body tr:not(.unread)').length === 50`, 10_000, 'a page read');
    expect(await p.evaluate(`document.querySelectorAll('#locks-body tr').length`)).toBe(50);
    expect(await p.evaluate(`document.getElementById('page-info').textContent`)).toBe('1–50 of 10,000');
    await p.evaluate(`document.getElementById('next').click()`);
    await p.waitFor(`document.getElementById('page-info').textContent === '51–100 of 10,000'`, 5_000, 'page two');
    await p.waitFor(
      `document.querySelector('#locks-body tr')?.dataset.name === 'lock:00050' && !document.querySelector('#locks-body tr.unread')`,
      5_000,
      'page two read',
    );
    await p.evaluate(`document.getElementById('filter').focus()`);
    await p.send('Input.insertText', { text: 'lock:0999' });
    await p.waitFor(`document.getElementById('page-info').textContent === '1–10 of 10'`, 5_000, 'the filter');
    await new Promise((r) => setTimeout(r, 3 * INTERVAL));
    const lag = await p.evaluate<number>('window.__lag');
    console.info(`dashboard: 10,000 locks, the page's main thread was blocked at most ${lag.toFixed(0)} ms`);
    expect(lag).toBeLessThan(500);
    // What one snapshot costs to send: bounded by the page size, not by the locks held.
    const res = await fetch(`${run.url}events`);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let text = '';
    while (!text.includes('\n\n', text.indexOf('event: snapshot'))) {
      const { value } = await reader.read();
      text += Buffer.from(value ?? new Uint8Array()).toString('utf8');
    }
    await reader.cancel();
    const size = Buffer.byteLength(text);
    console.info(`dashboard: 10,000 locks, one snapshot of 50 rows is ${size} bytes`);
    expect(size).toBeLessThan(100_000);
    expect(unexpected(p)).toEqual([]);
    expect(await run.stop()).toBe(0);
  });

  it('scans once per interval however many pages are open, and shuts down cleanly on SIGTERM', async () => {
    const own = await startRedis();
    cleanups.push(() => own.stop());
    const prefix = randomPrefix();
    const locks = leasehold(prefix, 'pod-a', own.url);
    // Nothing but the dashboard talks to this server while it is measured: no watchdog, no waiter.
    for (let i = 0; i < 20; i++) await locks.acquire(`lock:${i}`, { ttl: 60_000, autoExtend: false });
    await locks.runOnce('job', async () => undefined, { lockAtMostFor: 5_000 });
    const clients = async () => Number(/connected_clients:(\d+)/.exec(await own.command('INFO', 'clients'))?.[1]);
    const before = await clients();
    const run = await dashboard(['--redis', own.url, '--prefix', prefix, '--jobs', 'job']);
    /** Commands the server ran per second over `ms` (INFO commandstats: calls, scripts' own included). */
    const rate = async (ms: number) => {
      const calls = async () => {
        const stats = await own.command('INFO', 'commandstats');
        let total = 0;
        let top = 0;
        for (const m of stats.matchAll(/^cmdstat_(\w+(?:\|\w+)?):calls=(\d+)/gm)) {
          if (/^(info|ping|client|hello|select|config|command)/.test(m[1] as string)) continue;
          total += Number(m[2]);
          if (/^(fcall|fcall_ro|evalsha|eval|scan)$/.test(m[1] as string)) top += Number(m[2]);
        }
        return { total, top };
      };
      const start = await calls();
      await new Promise((r) => setTimeout(r, ms));
      const end = await calls();
      return { all: ((end.total - start.total) * 1000) / ms, sent: ((end.top - start.top) * 1000) / ms };
    };
    const pages: Page[] = [];
    pages.push(await page(run.url));
    await pages[0]?.waitFor(`document.querySelectorAll('#locks-body tr').length === 20`, 10_000, '20 locks');
    const one = await rate(4 * INTERVAL);
    for (let i = 0; i < 2; i++) pages.push(await page(run.url));
    for (const p of pages) await p.waitFor(`document.querySelectorAll('#locks-body tr').length === 20`, 10_000, 'rows');
    const three = await rate(4 * INTERVAL);
    console.info(
      `dashboard: 20 locks, 1 job; commands/s sent by the dashboard (scripts and scans): 1 page ${one.sent.toFixed(1)}, ` +
        `3 pages ${three.sent.toFixed(1)}; all commands/s (inside scripts too): 1 page ${one.all.toFixed(1)}, 3 pages ${three.all.toFixed(1)}`,
    );
    expect(one.sent).toBeGreaterThan(0);
    // Three pages cost what one does (a window holds 4 or 5 scans, hence the margin), not three times as much.
    expect(three.sent).toBeLessThan(one.sent * 1.5);

    // SIGTERM: every page is told, the streams end, and the backend connection is closed.
    const code = await run.stop('SIGTERM');
    expect(code).toBe(0);
    for (const p of pages) {
      await p.waitFor(`document.getElementById('conn-text').textContent.startsWith('Stopped')`, 5_000, 'stopped');
    }
    await waitFor(async () => (await clients()) === before, { timeout: 5_000, message: 'the connection closed' });
    for (const p of pages) expect(p.errors.filter((e) => !/ERR_CONNECTION_REFUSED/.test(e))).toEqual([]);
  });
});

describe('leasehold dashboard: safe defaults', () => {
  it('warns when it listens beyond loopback, and never shows the URL’s user or password', async () => {
    const prefix = randomPrefix();
    await redis.command('ACL', 'SETUSER', 'dashviewer', 'on', '>Pa55-w0rd-xyz', '~*', '&*', '+@all');
    const locks = leasehold(prefix, 'pod-a');
    await locks.acquire('orders:1', { ttl: 30_000 });
    const url = `redis://dashviewer:Pa55-w0rd-xyz@127.0.0.1:${redis.port}`;
    const run = await dashboard(['--redis', url, '--prefix', prefix, '--host', '0.0.0.0', '--allow-release']);
    expect(run.stderr.join('\n')).toMatch(/warning: listening on 0\.0\.0\.0, not loopback/);
    const address = run.url.replace('0.0.0.0', '127.0.0.1');
    const texts: string[] = [run.stdout[0] ?? ''];
    for (const path of ['', 'app.js', 'app.css', 'nope']) texts.push(await (await fetch(address + path)).text());
    texts.push(
      await (
        await fetch(`${address}api/release`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Origin: address.slice(0, -1) },
          body: JSON.stringify({ name: 'orders:1', token: 'wrong' }),
        })
      ).text(),
    );
    /** The first snapshot of an event stream whose text matches `wanted`. */
    const snapshot = async (wanted: RegExp) => {
      const res = await fetch(`${address}events`);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let text = '';
      const deadline = Date.now() + 8_000;
      while (!wanted.test(text) && Date.now() < deadline) {
        const { value, done } = await reader.read();
        if (done) break;
        text += Buffer.from(value ?? new Uint8Array()).toString('utf8');
      }
      await reader.cancel();
      return text;
    };
    const live = await snapshot(/"name":"orders:1"/);
    expect(live).toContain(`"backend":"redis 127.0.0.1:${redis.port}"`);
    texts.push(live);
    // The server refusing the user: the page is told, and keeps what it read.
    await redis.command('ACL', 'SETUSER', 'dashviewer', '-@all', '+ping', '+info');
    const failing = await snapshot(/"error":"[^"]+"/);
    expect(failing).toMatch(/"error":"[^"]*NOPERM/);
    texts.push(failing);
    // The connection cut: the message that quotes the URL reaches the page redacted, and the command exits 1.
    const stream = await fetch(`${address}events`);
    const reader = (stream.body as ReadableStream<Uint8Array>).getReader();
    await redis.command('CLIENT', 'KILL', 'USER', 'dashviewer');
    let last = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      last += Buffer.from(value ?? new Uint8Array()).toString('utf8');
    }
    expect(last).toMatch(
      new RegExp(`event: bye\\ndata: \\{"reason":"lost the connection to Redis at redis 127\\.0\\.0\\.1:${redis.port}`),
    );
    texts.push(last);
    expect(await run.exit).toBe(1);
    texts.push(...run.stderr);
    for (const text of texts) {
      expect(text).not.toContain('dashviewer');
      expect(text).not.toContain('Pa55-w0rd-xyz');
    }
  });
});

describe.skipIf(skip !== undefined)('leasehold dashboard on PostgreSQL and etcd', () => {
  it.each(['postgres', 'etcd'] as const)(
    'shows the locks held on %s and force-releases one from the page',
    async (kind) => {
      const prefix = randomPrefix().replace(/[^a-z0-9_]/gi, '_');
      const client =
        kind === 'postgres'
          ? new pg.Pool({ connectionString: postgres.url }).on('error', () => {})
          : new Etcd3({ hosts: etcd.url });
      const locks = new Leasehold(client as never, { prefix, instance: `pod-${kind}` });
      cleanups.push(async () => {
        await locks.close();
        if (client instanceof pg.Pool) await client.end();
        else client.close();
      });
      const held = await locks.acquire('orders:1', { ttl: 30_000 });
      await locks.acquire('orders:2', { ttl: 30_000 });
      const url = kind === 'postgres' ? postgres.url : etcd.url;
      const run = await dashboard([`--${kind}`, url, '--prefix', prefix, '--allow-release']);
      const p = await page(`${run.url}#token=${run.token}`);
      await p.waitFor(`document.querySelectorAll('#locks-body tr:not(.unread)').length === 2`, 10_000, 'two locks');
      const rows = await tableRows(p);
      expect(rows.map((r) => r.name)).toEqual(['orders:1', 'orders:2']);
      expect(rows[0]).toMatchObject({ mode: 'exclusive', fence: String(held.fencingToken) });
      expect(rows[0]?.instance).toContain(`pod-${kind}`);
      expect(await p.evaluate(`document.getElementById('backend').textContent`)).toMatch(
        new RegExp(`^${kind} 127\\.0\\.0\\.1:\\d+`),
      );
      await p.evaluate(`document.querySelector('#locks-body tr[data-name="orders:1"] button.release').click()`);
      await p.waitFor(`document.getElementById('release-dialog').open`, 5_000, 'the confirmation dialog');
      await p.evaluate(`document.getElementById('rd-confirm').click()`);
      await p.waitFor(`!document.getElementById('release-dialog').open`, 5_000, 'the dialog closed after the release');
      await p.waitFor(`document.querySelectorAll('#locks-body tr').length === 1`, FOLLOW_BOUND + 2_000, 'the row gone');
      await expect(held.extend()).rejects.toMatchObject({ reason: 'expired' });
      expect(unexpected(p)).toEqual([]);
      expect(await run.stop()).toBe(0);
    },
  );
});
