/** Colours only on a terminal that wants them; plain text in pipes, files and CI logs. */
const enabled = process.stdout.isTTY === true && process.env.NO_COLOR === undefined && process.env.TERM !== 'dumb';

function paint(code: string): (text: string) => string {
  return (text) => (enabled ? `\u001b[${code}m${text}\u001b[0m` : text);
}

export const bold = paint('1');
export const dim = paint('2');
export const red = paint('31');
export const green = paint('32');
export const yellow = paint('33');
export const cyan = paint('36');

/** Local wall-clock time with milliseconds: 14:03:05.000 */
export function clockTime(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}
