import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { contendedChart } from './chart.mjs';
import { SPLIT } from './scenarios/postgres.mjs';
import { median } from './stats.mjs';

const SELF = 'leasehold';
/** Reference rows (not libraries): shown for scale, never "the best peer". */
const REFERENCE = /\(floor\)$/;
/** The reference every `f` ratio is taken against. */
const FLOOR = 'bare ioredis (floor)';
/** The least a lock with fencing tokens costs: the floor its memory is read against. */
const FENCED_FLOOR = 'fenced functions (floor)';
/** leasehold's own functions called raw, no library around them (internals.mjs). */
const OWN_FUNCTIONS = "leasehold's functions (floor)";
/** A lock whose clock token is kept for the retention, and nothing else (fenced-floor.mjs). */
const RETAINED_FLOOR = 'retained token (floor)';
/** The leanest one-key layout that keeps what leasehold's uncontended cycle keeps (fenced-floor.mjs). */
const ONE_KEY_FLOOR = 'one key per lock (floor)';
/** leasehold's functions with the least waiting around them: the contended scenario's floor (internals.mjs). */
const WAITING_FLOOR = "leasehold's functions, waiting (floor)";
/** leasehold's own variants and other revisions (LEASEHOLD_BASELINE): compared with, never "the best peer". */
const OWN = /^(leasehold\b|baseline$)/;
const README = new URL('./README.md', import.meta.url).pathname;
const README_START = '<!-- results:start -->';
const README_END = '<!-- results:end -->';

/** Per contestant: the median of each metric over the rounds that produced it. */
function summarize(results) {
  const summary = {};
  for (const [scenario, { metrics, contestants }] of Object.entries(results)) {
    summary[scenario] = {};
    for (const [name, rounds] of Object.entries(contestants)) {
      const ok = rounds.filter((r) => !r.error && !r.unavailable);
      const row = { rounds: ok.length, errors: rounds.filter((r) => r.error).map((r) => r.error) };
      if (ok.length === 0 && rounds.some((r) => r.unavailable))
        row.unavailable = rounds.find((r) => r.unavailable).unavailable;
      for (const { key } of metrics) row[key] = median(ok.map((r) => r[key]));
      // Starvation is about the worst round, not the typical one.
      if (metrics.some((m) => m.key === 'minPerWorker') && ok.length > 0) {
        row.minPerWorkerWorstRound = Math.min(...ok.map((r) => r.minPerWorker));
      }
      summary[scenario][name] = row;
    }
  }
  return summary;
}

function bestPeer(rows, key, better) {
  let best = null;
  for (const [name, row] of Object.entries(rows ?? {})) {
    const value = row[key];
    if (OWN.test(name) || REFERENCE.test(name) || typeof value !== 'number') continue;
    if (!best || (better === 'higher' ? value > best.value : value < best.value)) best = { name, value };
  }
  return best;
}

/** The bars of the speed issue (#11) and the lean core (#25), each judged on what this one run measured. */
function judge(summary) {
  const bars = [];
  const self = (scenario, key) => summary[scenario]?.[SELF]?.[key];
  const bar = (label, target, measured, met) => bars.push({ bar: label, target, measured, met });
  // A bar of `own`'s row against the best peer (or `peer`). With `alone`, the measure also says
  // where leasehold's own functions, called with no library around them, stand against the same
  // peer (below the target, the scripts alone keep it out of reach), and where the one-key layout
  // does (below it too, no layout of the same guarantees reaches it).
  const versus = (scenario, key, better, factor, label, { peer, own = SELF, alone = false } = {}) => {
    const rows = summary[scenario];
    const mine = rows?.[own]?.[key];
    const best = peer ? rows?.[peer] && { name: peer, value: rows[peer][key] } : bestPeer(rows, key, better);
    if (typeof mine !== 'number' || typeof best?.value !== 'number') return;
    const ratio = mine / best.value;
    const whom = peer ?? 'best peer';
    const against = (row, words) => {
      const value = rows[row]?.[key];
      return alone && typeof value === 'number' ? `; ${words} ${(value / best.value).toFixed(2)}×` : '';
    };
    const beside = against(OWN_FUNCTIONS, 'its functions alone') + against(ONE_KEY_FLOOR, 'one key per lock');
    bar(
      label,
      better === 'higher' ? `≥ ${factor}× ${whom}` : `≤ ${factor}× ${whom}`,
      `${ratio.toFixed(2)}× (${best.name})${beside}`,
      better === 'higher' ? ratio >= factor : ratio <= factor,
    );
  };
  const atMost = (label, value, limit, digits = 2) => {
    if (typeof value === 'number') bar(label, `≤ ${limit}`, value.toFixed(digits), value <= limit);
  };
  const atLeast = (label, value, limit, digits = 2) => {
    if (typeof value === 'number') bar(label, `≥ ${limit}`, value.toFixed(digits), value >= limit);
  };
  versus('serial', 'cyclesPerSec', 'higher', 1, 'serial cycles/s', { alone: true });
  versus('serial', 'cyclesPerSec', 'higher', 0.95, 'serial cycles/s (stretch)', { peer: FLOOR });
  versus('serial', 'cyclesPerSec', 'higher', 0.95, 'withLock serial cycles/s', {
    own: 'leasehold (withLock)',
    alone: true,
  });
  versus('parallel', 'cyclesPerSec', 'higher', 1, 'parallel cycles/s', { alone: true });
  versus('parallel', 'cyclesPerSec', 'higher', 0.95, 'parallel cycles/s (stretch)', { peer: FLOOR });
  versus('parallel-split', 'cyclesPerSec', 'higher', 1, 'parallel cycles/s, on CPUs apart', { alone: true });
  atMost('round trips per uncontended cycle (server)', self('serial', 'serverRoundTripsPerCycle'), 2);
  const utilization = self('contended', 'utilization');
  if (typeof utilization === 'number') {
    // Beside it, the same hand-offs with leasehold's functions and none of its client side.
    const floor = summary.contended?.[WAITING_FLOOR]?.utilization;
    // Three digits: a median of 0.896 is short of the bar, and must not read as 0.90.
    const alone = typeof floor === 'number' ? ` (its functions, waiting, alone ${floor.toFixed(3)})` : '';
    bar('contended lock utilization', '≥ 0.9', `${utilization.toFixed(3)}${alone}`, utilization >= 0.9);
  }
  atLeast('contended least-served ÷ fair share', self('contended', 'leastServedShare'), 0.5);
  versus('contended', 'waitP99', 'lower', 0.2, 'contended wait p99');
  atMost('round trips per contended acquisition (server)', self('contended', 'serverRoundTripsPerAcquisition'), 3);
  const overlaps = self('contended', 'overlaps');
  if (typeof overlaps === 'number') bar('mutual exclusion (sanity)', '0 overlaps', String(overlaps), overlaps === 0);
  versus('redlock', 'cyclesPerSec', 'higher', 1, 'Redlock cycles/s (5 nodes)', { peer: 'redlock', alone: true });
  const perCycle = self('memory', 'heapBytesPerCycle');
  if (typeof perCycle === 'number') {
    const m = summary.memory[SELF];
    bars.push({
      bar: 'memory flat',
      target: '< 1 B of live heap per cycle',
      measured:
        `${perCycle.toFixed(3)} B/cycle over ${format(m.cycles, 0)} cycles ` +
        `(heap ${format(m.heapBeforeMB, 1)} → ${format(m.heapAfterMB, 1)} MB, RSS ${format(m.rssBeforeMB, 1)} → ${format(m.rssAfterMB, 1)} MB)`,
      met: perCycle < 1,
    });
  }
  // The lean core's memory goals (issue #25), each beside the floors measured in the same run: a
  // target below the fenced floor is out of reach for any lock that keeps a counter beside its
  // lease; below the retained-token floor, for any lock whose tokens outlive it for the retention.
  for (const [label, key, limit] of [
    ['redis B per held lock', 'serverBytesPerHeld', 250],
    ['redis B per released name', 'serverBytesPerReleased', 150],
  ]) {
    const value = self('footprint', key);
    if (typeof value !== 'number') continue;
    const floors = [
      ['fenced floor', summary.footprint?.[FENCED_FLOOR]?.[key]],
      ['retained-token floor', summary.footprint?.[RETAINED_FLOOR]?.[key]],
      ['one-key floor', summary.footprint?.[ONE_KEY_FLOOR]?.[key]],
    ].filter(([, v]) => typeof v === 'number');
    const above = floors.filter(([, v]) => v > limit).map(([n]) => n);
    const reach = above.length > 0 ? `: the target is below the ${above.join(' and the ')}` : '';
    const beside = floors.length > 0 ? ` (${floors.map(([n, v]) => `${n} ${v.toFixed(0)}`).join(', ')}${reach})` : '';
    bar(label, `≤ ${limit}`, `${value.toFixed(0)}${beside}`, value <= limit);
  }
  atMost('client heap B per held lock', self('footprint', 'heapBytesPerHeld'), 600, 0);
  // Each placement's bar, with leasehold's own two statements (the floor) beside it.
  for (const placement of ['', SPLIT]) {
    for (const backend of ['pg.Client', 'pg.Pool']) {
      const row = summary.postgres?.[`leasehold (${backend})${placement}`];
      const floor = summary.postgres?.[`leasehold's statements (${backend}, floor)${placement}`]?.ratio;
      if (typeof row?.ratio !== 'number') continue;
      const notes = [
        ...(backend === 'pg.Pool' && typeof row.same === 'number'
          ? [`÷ one write on a pg.Pool: ${row.same.toFixed(2)}`]
          : []),
        ...(typeof floor === 'number' ? [`its statements alone ${floor.toFixed(2)}`] : []),
      ];
      const beside = notes.length > 0 ? ` (${notes.join('; ')})` : '';
      const where = placement === '' ? '' : ', on CPUs apart';
      bar(
        `PostgreSQL cycle ÷ one write, ${backend}${where}`,
        '≤ 3',
        `${row.ratio.toFixed(2)}${beside}`,
        row.ratio <= 3,
      );
    }
  }
  return bars;
}

function format(value, digits) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return '–';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/**
 * A Markdown table with its columns padded to one width, the layout biome's formatter gives a
 * table (bench/README.md is formatted and linted; the generated section must pass as is).
 * `align`: 'left' | 'right' | 'center' per column.
 */
function markdownTable(header, rows, align) {
  const widths = header.map((h, i) => Math.max(3, h.length, ...rows.map((r) => r[i].length)));
  const pad = (text, i) => {
    const gap = widths[i] - text.length;
    if (align[i] === 'right') return ' '.repeat(gap) + text;
    if (align[i] === 'center') return ' '.repeat(Math.floor(gap / 2)) + text + ' '.repeat(Math.ceil(gap / 2));
    return text + ' '.repeat(gap);
  };
  const line = (cells) => `| ${cells.map(pad).join(' | ')} |`;
  const rule = widths.map((w, i) => {
    if (align[i] === 'right') return `${'-'.repeat(w - 1)}:`;
    if (align[i] === 'center') return `:${'-'.repeat(w - 2)}:`;
    return '-'.repeat(w);
  });
  return [line(header), `| ${rule.join(' | ')} |`, ...rows.map(line)].join('\n');
}

function ratio(a, b) {
  if (typeof a !== 'number' || typeof b !== 'number' || b === 0) return null;
  const r = a / b;
  return Number.isFinite(r) ? r : null;
}

/**
 * The two ratios of each cell. `leasehold`: leasehold's value ÷ this row's, and on leasehold's
 * own row, ÷ the best peer's in that column (`bestPeer`, the one the bars are judged against).
 * `floor`: this row's value ÷ the floor row's, where the scenario has one (serial, parallel).
 * Resolves { [row]: { [metric]: { leasehold, bestPeer?, floor } } }.
 */
function ratios(scenario, rows) {
  const floorName = FLOOR in rows ? FLOOR : undefined;
  const out = {};
  for (const [name, row] of Object.entries(rows)) {
    out[name] = {};
    for (const { key, better } of scenario.metrics) {
      const cell = { leasehold: null, floor: null };
      if (name === SELF) {
        const best = bestPeer(rows, key, better);
        cell.leasehold = best ? ratio(row[key], best.value) : null;
        if (best && cell.leasehold !== null) cell.bestPeer = best.name;
      } else {
        cell.leasehold = ratio(rows[SELF]?.[key], row[key]);
      }
      if (floorName && name !== floorName) cell.floor = ratio(row[key], rows[floorName][key]);
      out[name][key] = cell;
    }
  }
  return out;
}

function table(scenario, rows) {
  const names = Object.keys(rows).sort((a, b) => (a === SELF ? -1 : b === SELF ? 1 : 0));
  const cellRatios = ratios(scenario, rows);
  const hasFloor = FLOOR in rows;
  const hasPeers = SELF in rows && names.length > 1;
  const body = names.map((name) => {
    const row = rows[name];
    const label =
      name === SELF ? `**${name}**${hasPeers ? ' (×: ÷ best peer)' : ''}` : REFERENCE.test(name) ? `_${name}_` : name;
    if (row.unavailable) return [label, ...scenario.metrics.map(() => 'n/a')];
    if (row.rounds === 0) return [label, ...scenario.metrics.map(() => 'error')];
    const cells = scenario.metrics.map(({ key, digits }) => {
      const text = format(row[key], digits);
      if (typeof row[key] !== 'number') return text;
      const { leasehold, floor } = cellRatios[name][key];
      const parts = [];
      if (leasehold !== null) parts.push(`×${format(leasehold, 2)}`);
      if (floor !== null) parts.push(`f ${format(floor, 2)}`);
      return parts.length > 0 ? `${text} (${parts.join(', ')})` : text;
    });
    return [label, ...cells];
  });
  const legend = [hasPeers && '×: leasehold ÷ row', hasFloor && 'f: row ÷ floor'].filter(Boolean);
  const first = legend.length > 0 ? `library (${legend.join('; ')})` : 'library';
  const header = [first, ...scenario.metrics.map((m) => m.label)];
  return markdownTable(header, body, ['left', ...scenario.metrics.map(() => 'right')]);
}

const RATIOS_NOTE =
  "× after a value is leasehold's value ÷ that row's; on leasehold's own row it is leasehold ÷ the best peer " +
  'in that column (the ratio the bars judge).';
const FLOOR_NOTE =
  "f is that row's value ÷ the floor's: how far each lock is from the least a two-round-trip lock costs " +
  '(for cycles/s lower is further, for latencies, calls and CPU higher is).';
const ROUND_TRIPS_NOTE =
  '"calls" counts the commands the library sent through ioredis in the timed pass; "round trips (server)" ' +
  "counts what the server received from the benchmark's clients (MONITOR lines not from a script), in a " +
  'short untimed pass of its own after the timed one.';

const NOTES = {
  serial:
    'Latency of `acquire` alone; a cycle is acquire + release. CPU per cycle: this process (library + ioredis) ' +
    `and redis-server (INFO cpu). ${ROUND_TRIPS_NOTE} _bare ioredis (floor)_ is no library: one SET NX PX and ` +
    `one compare-and-delete script per cycle, the least a two-round-trip lock can cost on this client. ` +
    '_fenced functions (floor)_ is no library either: one function takes the lock and INCRs a fencing counter ' +
    '(two keys), one compares and deletes; the least a lock with fencing tokens costs as two functions. ' +
    "_leasehold's functions (floor)_ is leasehold's own acquire and release functions called on ioredis with " +
    'the keys and arguments its store sends, no library around them: what its scripts and their interface ' +
    'cost, every guarantee they keep included. ' +
    '_one key per lock (floor)_ keeps what an uncontended cycle of leasehold keeps (the grant record with the ' +
    "token, its time and the instance, the release mark, the retention's expiry, re-sent calls answered alike) " +
    "in one key, the lease's end checked against the server's clock, and has no queue: the leanest layout with " +
    'the same guarantees. ' +
    '_leasehold (withLock)_ is the same cycle as one `withLock` call, the work a function that returns at once: ' +
    "its bar is against the best peer's acquire + release. " +
    `${RATIOS_NOTE} ${FLOOR_NOTE}`,
  parallel:
    'All 64 loops share one ioredis client (one connection) per library. Floor row, ratios and counts as above.',
  'parallel-split':
    'The parallel scenario with node on CPU 0 and every redis-server on CPU 1, as an application and its Redis ' +
    'on machines of their own: each round trip wakes the other CPU, and the server can work through one batch of ' +
    'commands while node makes the next. Columns as in parallel.',
  limit:
    'The ceiling the parallel bar is measured against: the server fed as fast as it takes it (the C client, ' +
    '64 connections, 16-deep pipelines); a lock cycle is two EVALSHA calls. Unpipelined, each connection waits ' +
    'for its reply, which the libraries do not (their loops share one connection, written back to back).',
  contended:
    'All 16 workers share one ioredis client and one library instance, as one app process would. ' +
    '"lock utilization" is the share of the window during which some worker held the lock and ran its 1 ms ' +
    'of work (1 = never idle; the rest is hand-off and wake-up time). ' +
    '"wait" is from calling acquire to holding the lock. "fewest per worker" is the fewest acquisitions ' +
    'any worker got in the window (0 = starved); "least-served ÷ fair share" divides it by the window\'s ' +
    'acquisitions ÷ 16 (1 = perfectly even). "calls/acq" counts the commands the library sent (counted ' +
    'in ioredis); "round trips/acq (server)" counts the commands the server received from the clients, ' +
    'by MONITOR in a short untimed pass after the timed one; "server cmds/acq" is INFO commandstats, which ' +
    'also counts the commands a Lua script runs. CPU per acquisition: this process and redis-server. ' +
    '"overlaps" counts moments with two holders at once, in either pass (must be 0). ' +
    "_leasehold's functions, waiting (floor)_ is no library: leasehold's acquire and release functions on " +
    "ioredis, a refused caller queued as leasehold's store queues it and woken by the release whose reply " +
    'grants it the lock, with no timer, subscription, watchdog or Lock: what the hand-offs cost with its ' +
    `scripts and none of its client side. ${RATIOS_NOTE}`,
  'contended-apart':
    'Each of the 16 workers has its own ioredis client and library instance, as 16 app processes ' +
    'would; columns as above.',
  redlock: 'n/a: the library has no Redlock over independent masters in this build.',
  footprint:
    'Run once per library, each in a child process with --expose-gc: locks taken one by one on distinct ' +
    "names with a 10-minute ttl (and each library's default watchdog) and held together, then all released. " +
    "Per lock: the growth of redis-server's used_memory while they are held, what is left of it once they " +
    "are released (a released name's fencing counter is kept for its retention, 7 days by default), and " +
    'the growth of the live heap (after a full GC) while they are held, handles included. The floors: a lock ' +
    'with a counter beside it (fenced), one whose clock token is kept for the retention and nothing else ' +
    "(retained token), and leasehold's grant record in one key per lock (one key, as in serial).",
  postgres:
    'bench/postgres-cycle.mjs on a PostgreSQL of its own (fsync off), node and the server pinned as above, the ' +
    'rows interleaved in each round. _one write_ is a prepared upsert of one row on a pg.Client: one round trip, ' +
    'one committed write. "op ÷ one write" is the write\'s rate over the row\'s in the same round (the bar); ' +
    '"CPU ÷ one write" the same by the CPU node and the server spent per operation; "÷ write, same backend" ' +
    "divides a pool's row by the same write on a pg.Pool, leaving out what pg-pool costs each statement. " +
    "_leasehold's statements (floor)_ sends the two statements leasehold's store sends for the cycle (take and " +
    'free), with nothing of the library around them. The rows marked _CPUs apart_ are a second run with node on CPU 0 ' +
    'and the server on CPU 1, as an application and its database on machines of their own.',
  memory:
    'Run once, in a child process with --expose-gc; memory read after a full GC at each tenth of the run ' +
    '(every checkpoint is in latest.json). The bar is on the live heap, whose slope says whether anything is ' +
    'kept per cycle; RSS is shown as measured.',
};

function markdown(results, summary, bars, meta) {
  const m = meta.machine;
  const o = meta.options;
  const out = [
    '# Benchmark results',
    '',
    `${meta.startedAt.slice(0, 19).replace('T', ' ')} UTC on ${m.cpu}, ${m.cores} cores, ${m.memoryGB} GB, ${m.os}; ` +
      `Node ${m.node}, Redis ${m.redis}, ioredis ${m.ioredis}; leasehold ${m.leasehold}; ` +
      `peers: ${Object.entries(m.peers)
        .map(([n, v]) => `${n} ${v}`)
        .join(', ')}.`,
    '',
    `Mode ${o.mode}: ${o.rounds} round(s), ${format(o.durationMs, 0)} ms per library per scenario, libraries in a ` +
      `fresh random order each round, each value the median over rounds (${meta.elapsedSeconds} s in all); ` +
      `${meta.placement}${meta.placement.includes('CPU 0') ? ', so that CPU placement does not decide the result' : ''}. ` +
      "Only ratios within one run mean anything. In every table, ×r after a value is leasehold's value ÷ that " +
      "row's (on leasehold's own row: ÷ the best peer's in that column); in serial and parallel, f r after it is " +
      "that row's value ÷ the floor row's.",
    '',
  ];
  if (bars.length > 0) {
    const rows = bars.map((b) => [b.bar, b.target, b.measured, b.met ? 'yes' : '**no**']);
    out.push(
      '## The bars (issues #11 and #25)',
      '',
      markdownTable(['bar', 'target', 'measured', 'met'], rows, ['left', 'left', 'left', 'center']),
    );
    out.push('');
  }
  for (const [name, scenario] of Object.entries(results)) {
    out.push(`## ${scenario.title}`, '', table(scenario, summary[name]), '');
    const note = name === 'redlock' && !summary.redlock?.[SELF]?.unavailable ? null : NOTES[name];
    if (note) out.push(note, '');
    if (name.startsWith('contended')) out.push(`![${name}: handoffs/s and wait p99](${name}.svg)`, '');
    for (const [lib, row] of Object.entries(summary[name])) {
      for (const error of new Set(row.errors)) out.push(`- ${lib}: ${row.errors.length} round(s) failed: ${error}`);
    }
  }
  return `${out.join('\n').trimEnd()}\n`;
}

function writeAtomically(path, text) {
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
}

/** Write latest.json, latest.md and the contended charts to `out`; on a complete full run, also the bench README's table. */
export async function writeReport(results, meta, { out, updateReadme }) {
  mkdirSync(out, { recursive: true });
  const summary = summarize(results);
  const bars = judge(summary);
  const written = [];
  const put = (file, text) => {
    const path = join(out, file);
    writeAtomically(path, text);
    written.push(path);
  };
  const tableRatios = Object.fromEntries(
    Object.entries(results).map(([name, scenario]) => [name, ratios(scenario, summary[name])]),
  );
  put('latest.json', `${JSON.stringify({ ...meta, bars, summary, ratios: tableRatios, results }, null, 2)}\n`);
  const md = markdown(results, summary, bars, meta);
  put('latest.md', md);
  for (const name of ['contended', 'contended-apart']) {
    if (summary[name]) put(`${name}.svg`, contendedChart(summary[name], SELF, results[name].title));
  }
  if (updateReadme) {
    const readme = readFileSync(README, 'utf8');
    const start = readme.indexOf(README_START);
    const end = readme.indexOf(README_END);
    if (start >= 0 && end > start) {
      const body = md
        .replace(/^# Benchmark results\n\n/, '')
        .replaceAll(/^## /gm, '### ')
        .replaceAll(/\]\((contended[\w-]*\.svg)\)/g, '](results/$1)');
      writeAtomically(README, `${readme.slice(0, start + README_START.length)}\n${body}${readme.slice(end)}`);
      written.push(README);
    }
  }
  return written;
}
