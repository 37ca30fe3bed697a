/**
 * Whether the CLI colours its output. The environment decides first, then the terminal:
 *
 * - `FORCE_COLOR` set and not empty forces colour on, even in a pipe, a file or a CI log
 *   (https://force-color.org), except `FORCE_COLOR=0` and `FORCE_COLOR=false`, which turn it off,
 *   as they do for Node itself and for chalk.
 * - `NO_COLOR` set and not empty turns colour off (https://no-color.org). Both conventions say an
 *   empty value counts as unset.
 * - Both set: `FORCE_COLOR` wins. `NO_COLOR` is a standing preference, typically exported once in a
 *   shell profile, while `FORCE_COLOR` is the more specific request, usually made for one command;
 *   no-color.org itself says per-invocation settings should override `NO_COLOR`, and Node resolves
 *   the same pair the same way (its own colours ignore `NO_COLOR` when `FORCE_COLOR` is set).
 * - Otherwise colours only on a terminal that can show them: stdout is a TTY and `TERM` is not
 *   `dumb`.
 */
export function colourWanted(env: NodeJS.ProcessEnv, isTTY: boolean): boolean {
  const force = env.FORCE_COLOR;
  if (force !== undefined && force !== '') return force !== '0' && force !== 'false';
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  return isTTY && env.TERM !== 'dumb';
}

const enabled = colourWanted(process.env, process.stdout.isTTY === true);

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
