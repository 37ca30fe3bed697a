/**
 * A small hand-written SVG: two horizontal bar charts side by side (contended handoffs/s, higher
 * is better; wait p99, lower is better), one bar per library, leasehold in its own colour.
 */
const PANEL_WIDTH = 360;
const LABEL_WIDTH = 170;
const BAR_HEIGHT = 18;
const GAP = 8;
const TOP = 44;
const SELF_COLOUR = '#2b7a4b';
const PEER_COLOUR = '#9aa5b1';

function xml(text) {
  return String(text).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
}

function number(value, digits) {
  return value.toLocaleString('en-US', { maximumFractionDigits: digits });
}

function panel(rows, { key, title, digits, x0, self }) {
  const max = Math.max(...rows.map((r) => r[key]));
  const width = PANEL_WIDTH - LABEL_WIDTH - 60;
  const parts = [`<text x="${x0}" y="24" font-weight="bold">${xml(title)}</text>`];
  rows.forEach((row, i) => {
    const y = TOP + i * (BAR_HEIGHT + GAP);
    const length = max > 0 ? Math.max(1, (row[key] / max) * width) : 1;
    const colour = row.name === self ? SELF_COLOUR : PEER_COLOUR;
    parts.push(
      `<text x="${x0 + LABEL_WIDTH - 6}" y="${y + 13}" text-anchor="end">${xml(row.name)}</text>`,
      `<rect x="${x0 + LABEL_WIDTH}" y="${y}" width="${length.toFixed(1)}" height="${BAR_HEIGHT}" fill="${colour}"/>`,
      `<text x="${(x0 + LABEL_WIDTH + length + 4).toFixed(1)}" y="${y + 13}">${number(row[key], digits)}</text>`,
    );
  });
  return parts.join('\n  ');
}

export function contendedChart(summary, self, title) {
  const rows = Object.entries(summary)
    .filter(([, r]) => typeof r.handoffsPerSec === 'number' && typeof r.waitP99 === 'number')
    .map(([name, r]) => ({ name, handoffsPerSec: r.handoffsPerSec, waitP99: r.waitP99 }))
    .sort((a, b) => b.handoffsPerSec - a.handoffsPerSec);
  const height = TOP + 20 + rows.length * (BAR_HEIGHT + GAP) + 10;
  const width = PANEL_WIDTH * 2 + 20;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">
  <rect width="100%" height="100%" fill="#ffffff"/>
  <text x="10" y="18" font-size="13">${xml(title)}</text>
  <g transform="translate(0 20)">
  ${panel(rows, { key: 'handoffsPerSec', title: 'handoffs/s (higher is better)', digits: 0, x0: 10, self })}
  ${panel(rows, { key: 'waitP99', title: 'wait p99, ms (lower is better)', digits: 1, x0: PANEL_WIDTH + 10, self })}
  </g>
</svg>
`;
}
