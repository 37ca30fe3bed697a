/** An owner token shortened for a terminal: enough to tell holders apart, not to impersonate one. */
export function shortToken(token: string): string {
  return token.length > 10 ? `${token.slice(0, 8)}…` : token;
}

/** A lease's ms left as a person reads it; PTTL -1 is a key without expiry (not a leasehold lease). */
export function msLeft(pttl: number): string {
  return pttl >= 0 ? `${pttl} ms` : 'no expiry';
}

/** Local date and time with milliseconds: 2026-05-01 14:03:05.000 */
export function dateTime(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** Rows as left-aligned columns two spaces apart; the first row is the header. */
export function table(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  }
  return rows
    .map((row) =>
      row
        .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
        .join('  ')
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join('');
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}
