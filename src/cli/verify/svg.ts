import { type CheckResult, validEnd } from './checker.js';
import type { History } from './history.js';

/**
 * The run as an SVG timeline: a row per worker, a bar for each lease while its holder believed it
 * valid, grey where it kept acting after that, each write as a mark (accepted, refused, no reply),
 * the faults as bands on the row they hit (or across every row for the server), the violations in
 * red. Hover any mark for its details. Plain SVG 1.1, no script, no external resource.
 */

const WIDTH = 1_100;
const LEFT = 90;
const RIGHT = 20;
const TOP = 64;
const ROW = 30;
const PLOT = WIDTH - LEFT - RIGHT;

const COLOURS = {
  lease: '#4c78a8',
  stale: '#b0b0b0',
  accepted: '#2e7d32',
  refused: '#c62828',
  unknown: '#ef6c00',
  pause: '#f2cf5b',
  kill: '#c62828',
  proxy: '#b279a2',
  freeze: '#9ecae9',
  restart: '#7f7f7f',
  violation: '#d62728',
} as const;

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&${{ '&': 'amp', '<': 'lt', '>': 'gt', '"': 'quot', "'": 'apos' }[c]};`);
}

function n(value: number): string {
  return String(Math.round(value * 10) / 10);
}

function tickStep(seconds: number): number {
  for (const step of [0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300]) if (seconds / step <= 12) return step;
  return 600;
}

/** Where a time and a row fall on the drawing. */
class Layout {
  readonly start: number;
  readonly end: number;
  readonly span: number;
  /** A row per worker, and one for the server if a fault hit it. */
  readonly rows: number;
  readonly plotBottom: number;
  readonly height: number;

  constructor(history: History) {
    this.start = history.start;
    this.end = history.end;
    this.span = Math.max(1, this.end - this.start);
    const serverRow = history.faults.some((f) => f.worker === null);
    this.rows = history.workers + (serverRow ? 1 : 0);
    this.plotBottom = TOP + this.rows * ROW;
    this.height = this.plotBottom + 90;
  }

  /** The x of a time, clamped to the run. */
  readonly x = (t: number): number =>
    LEFT + ((Math.min(Math.max(t, this.start), this.end) - this.start) / this.span) * PLOT;

  rowTop(worker: number): number {
    return TOP + (worker - 1) * ROW;
  }

  /** A time as seconds into the run, for the hover texts. */
  readonly at = (t: number): string => `${((t - this.start) / 1_000).toFixed(3)} s`;
}

function tip(text: string): string {
  return `<title>${escapeXml(text)}</title>`;
}

export function timelineSvg(history: History, result: CheckResult, title: string): string {
  const layout = new Layout(history);
  return [
    ...frame(layout, history.workers, title),
    // Faults under everything else, so the leases show through them.
    ...faultBands(layout, history.faults),
    ...leaseBars(layout, result.grants),
    ...writeMarks(layout, result.writes),
    ...violationMarks(layout, result.violations),
    ...legend(layout),
    '</svg>',
    '',
  ].join('\n');
}

/** The document's opening, the title, a band per row with its label, and the time axis. */
function frame(layout: Layout, workers: number, title: string): string[] {
  const { height, rows, plotBottom } = layout;
  const out = [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect x="0" y="0" width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="${LEFT}" y="22" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
    `<text x="${LEFT}" y="42" fill="#555555">${escapeXml("times: this machine's wall clock, as each process read it; a bar is a lease while its holder believed it valid")}</text>`,
  ];
  for (let row = 1; row <= rows; row++) {
    const label = row <= workers ? `worker ${row}` : 'server';
    out.push(
      `<rect x="${LEFT}" y="${layout.rowTop(row)}" width="${PLOT}" height="${ROW}" fill="${row % 2 === 0 ? '#f4f4f4' : '#fafafa'}"/>`,
      `<text x="${LEFT - 8}" y="${layout.rowTop(row) + ROW / 2 + 4}" text-anchor="end">${label}</text>`,
    );
  }
  const seconds = layout.span / 1_000;
  const step = tickStep(seconds);
  for (let s = 0; s <= seconds + 1e-9; s += step) {
    const tx = LEFT + (s / seconds) * PLOT;
    out.push(
      `<line x1="${n(tx)}" y1="${TOP}" x2="${n(tx)}" y2="${plotBottom + 4}" stroke="#dddddd"/>`,
      `<text x="${n(tx)}" y="${plotBottom + 18}" text-anchor="middle" fill="#555555">${Number(s.toFixed(1))} s</text>`,
    );
  }
  return out;
}

/** Each fault as a band on the row it hit (every row for the server); a kill as a cross where it struck. */
function faultBands(layout: Layout, faults: History['faults']): string[] {
  const { x } = layout;
  const out: string[] = [];
  for (const f of faults) {
    const what = `${f.kind}${f.action === f.kind ? '' : ` (${f.action})`}`;
    const label = `${what}${f.worker === null ? ' of the server' : ` of worker ${f.worker}`} from ${layout.at(f.at)} for ${f.until - f.at} ms${f.holder ? ', while it held the lock' : ''}`;
    const colour = f.kind === 'proxy' ? COLOURS.proxy : COLOURS[f.kind];
    const y = f.worker === null ? TOP : layout.rowTop(f.worker);
    const h = f.worker === null ? layout.rows * ROW : ROW;
    const w = Math.max(2, x(f.until) - x(f.at));
    if (f.kind === 'kill') {
      const cx = x(f.at);
      const cy = y + ROW / 2;
      out.push(
        `<g>${tip(label)}<rect x="${n(cx)}" y="${y}" width="${n(w)}" height="${h}" fill="${COLOURS.restart}" fill-opacity="0.25"/>`,
        `<path d="M${n(cx - 6)} ${n(cy - 6)} L${n(cx + 6)} ${n(cy + 6)} M${n(cx - 6)} ${n(cy + 6)} L${n(cx + 6)} ${n(cy - 6)}" stroke="${colour}" stroke-width="3"/></g>`,
      );
    } else {
      out.push(
        `<g>${tip(label)}<rect x="${n(x(f.at))}" y="${y}" width="${n(w)}" height="${h}" fill="${colour}" fill-opacity="${f.worker === null ? 0.35 : 0.55}"/>`,
        `<text x="${n(x(f.at) + 2)}" y="${y + 10}" font-size="9" fill="#333333">${escapeXml(f.kind === 'proxy' ? f.action : f.kind)}</text></g>`,
      );
    }
  }
  return out;
}

/** A bar for each lease while its holder believed it valid, and a grey one where it kept acting after. */
function leaseBars(layout: Layout, grants: CheckResult['grants']): string[] {
  const { x, at } = layout;
  const out: string[] = [];
  for (const g of grants) {
    const y = layout.rowTop(g.worker) + 8;
    const valid = validEnd(g);
    const text = `worker ${g.worker}, token ${g.token}: valid from ${at(g.start)} to ${at(valid)}`;
    out.push(
      `<rect x="${n(x(g.start))}" y="${y}" width="${n(Math.max(1, x(valid) - x(g.start)))}" height="${ROW - 16}" fill="${COLOURS.lease}">${tip(text)}</rect>`,
    );
    if (g.lastAct > valid) {
      out.push(
        `<rect x="${n(x(valid))}" y="${y + 3}" width="${n(Math.max(1, x(g.lastAct) - x(valid)))}" height="${ROW - 22}" fill="${COLOURS.stale}">${tip(`worker ${g.worker} kept acting under token ${g.token} until ${at(g.lastAct)}, after its lease`)}</rect>`,
      );
    }
  }
  return out;
}

const WRITE_OUTCOMES = {
  ok: 'accepted',
  refused: 'refused by the fence',
  moved: 'not applied: the fence moved, computed again',
  unknown: 'with no reply',
} as const;

/** Each write where it ended: a tick if accepted, a cross if refused, a circle if unanswered (hollow: computed again). */
function writeMarks(layout: Layout, writes: CheckResult['writes']): string[] {
  const { x, at } = layout;
  return writes.map((w) => {
    const t = w.doneAt ?? w.at;
    const cx = x(t);
    const y = layout.rowTop(w.worker);
    const text = `worker ${w.worker}, token ${w.token}: write${w.n === null ? '' : ` of version ${w.n}`} ${WRITE_OUTCOMES[w.outcome]} at ${at(t)}`;
    if (w.outcome === 'ok') {
      return `<line x1="${n(cx)}" y1="${y + 3}" x2="${n(cx)}" y2="${y + ROW - 3}" stroke="${COLOURS.accepted}" stroke-width="1.5">${tip(text)}</line>`;
    }
    if (w.outcome === 'refused') {
      return `<path d="M${n(cx - 4)} ${y + 4} L${n(cx + 4)} ${y + 12} M${n(cx - 4)} ${y + 12} L${n(cx + 4)} ${y + 4}" stroke="${COLOURS.refused}" stroke-width="2">${tip(text)}</path>`;
    }
    if (w.outcome === 'moved') {
      return `<circle cx="${n(cx)}" cy="${y + 8}" r="3.5" fill="none" stroke="${COLOURS.unknown}" stroke-width="1.5">${tip(text)}</circle>`;
    }
    return `<circle cx="${n(cx)}" cy="${y + 8}" r="3.5" fill="${COLOURS.unknown}">${tip(text)}</circle>`;
  });
}

/** An overlap as a red box across the rows it spans; any other violation as a ring on each row it involves. */
function violationMarks(layout: Layout, violations: CheckResult['violations']): string[] {
  const { x } = layout;
  const out: string[] = [];
  for (const v of violations) {
    const top = Math.min(...v.workers);
    const bottom = Math.max(...v.workers);
    if (v.kind === 'overlap') {
      out.push(
        `<rect x="${n(x(v.at))}" y="${layout.rowTop(top) + 2}" width="${n(Math.max(2, x(v.to) - x(v.at)))}" height="${(bottom - top + 1) * ROW - 4}" fill="${COLOURS.violation}" fill-opacity="0.3" stroke="${COLOURS.violation}" stroke-width="1.5">${tip(v.message)}</rect>`,
      );
    } else {
      for (const worker of new Set(v.workers)) {
        out.push(
          `<circle cx="${n(x(v.at))}" cy="${layout.rowTop(worker) + ROW / 2}" r="7" fill="none" stroke="${COLOURS.violation}" stroke-width="2.5">${tip(v.message)}</circle>`,
        );
      }
    }
  }
  return out;
}

const LEGEND: readonly (readonly [string, string])[] = [
  [COLOURS.lease, 'lease, believed valid'],
  [COLOURS.stale, 'acting after the lease'],
  [COLOURS.accepted, 'write accepted'],
  [COLOURS.refused, 'write refused (fence)'],
  [COLOURS.unknown, 'write, no reply (hollow: computed again)'],
  [COLOURS.pause, 'paused (SIGSTOP)'],
  [COLOURS.kill, 'killed (SIGKILL), until restarted'],
  [COLOURS.proxy, 'proxy: partition, delay, reset'],
  [COLOURS.freeze, 'server frozen'],
  [COLOURS.restart, 'server restarted'],
  [COLOURS.violation, 'violation'],
];

/** The legend under the plot, laid out left to right and wrapping; a character of 12 px sans-serif is about 6.5 px wide. */
function legend(layout: Layout): string[] {
  const out: string[] = [];
  let lx = LEFT;
  let ly = layout.plotBottom + 40;
  for (const [colour, text] of LEGEND) {
    const width = 17 + text.length * 6.5 + 18;
    if (lx + width > WIDTH - RIGHT) {
      lx = LEFT;
      ly += 20;
    }
    out.push(
      `<rect x="${n(lx)}" y="${ly - 10}" width="12" height="12" fill="${colour}"/>`,
      `<text x="${n(lx + 17)}" y="${ly}">${escapeXml(text)}</text>`,
    );
    lx += width;
  }
  return out;
}
