import { EXIT_UNSAFE, type Level, levelWord } from '../doctor/finding.js';
import { table } from '../format.js';
import { bold, dim } from '../style.js';
import type { CheckResult } from './checker.js';
import type { History } from './history.js';
import type { RunOutcome } from './run.js';

/** How many violations the summary lists; --json has them all. */
const SHOWN = 10;

export interface Verdict {
  readonly level: Level;
  readonly exitCode: number;
}

export function verdictOf(result: CheckResult, crashes: readonly string[]): Verdict {
  const level: Level = result.level === 'ok' && crashes.length > 0 ? 'warn' : result.level;
  return { level, exitCode: level === 'unsafe' ? EXIT_UNSAFE : 0 };
}

export function title(history: History, verdict: Verdict): string {
  const seconds = ((history.end - history.start) / 1_000).toFixed(1);
  const word = verdict.level === 'unsafe' ? 'UNSAFE' : verdict.level === 'warn' ? 'passed, with warnings' : 'passed';
  return `leasehold verify: ${history.lock} lock, ${history.workers} workers, ${seconds} s: ${word}`;
}

function seconds(ms: number, origin: number): string {
  return `${((ms - origin) / 1_000).toFixed(2)} s`;
}

export function humanReport(outcome: RunOutcome, result: CheckResult, verdict: Verdict): string {
  const { history, server } = outcome;
  const lines: string[] = [];
  const where = `${server.name} at ${server.address}${server.local ? " (verify's own redis-server)" : ''}`;
  lines.push(bold(title(history, verdict)), dim(`  ${where}; each worker a process behind its own local TCP proxy;`));
  lines.push(
    dim("  times are this machine's wall clock as each process read it (the processes share no monotonic clock)"),
    '',
  );
  lines.push(
    table([
      ['WORKER', 'GRANTS', 'ACCEPTED', 'REFUSED', 'NO REPLY', 'LOST', 'PAUSED', 'KILLED', 'ERRORS'],
      ...result.workers.map((w) =>
        [w.worker, w.grants, w.accepted, w.refused, w.unknown, w.lost, w.paused, w.killed, w.errors].map(String),
      ),
    ]).trimEnd(),
  );
  lines.push('');
  if (result.recoveries.length > 0) {
    lines.push(
      table([
        ['FAULT', 'ON', 'HOLDING', 'AT', 'LASTED', 'NEXT GRANT AFTER'],
        ...result.recoveries.map(({ fault, nextGrantMs }) => [
          fault.kind === 'proxy' ? `proxy ${fault.action}` : fault.kind,
          fault.worker === null ? 'server' : `worker ${fault.worker}`,
          fault.holder ? 'yes' : 'no',
          seconds(fault.at, history.start),
          `${fault.until - fault.at} ms`,
          nextGrantMs === null ? 'not before the end' : `${nextGrantMs} ms`,
        ]),
      ]).trimEnd(),
      '',
    );
  }
  const width = Math.max(...result.checks.map((c) => c.check.length));
  for (const c of result.checks) lines.push(`${levelWord(c.level)}  ${c.check.padEnd(width)}  ${c.summary}`);
  for (const crash of outcome.crashes) lines.push(`${levelWord('warn')}  ${'worker'.padEnd(width)}  ${crash}`);
  if (result.violations.length > 0) {
    lines.push('', 'violations:');
    for (const v of result.violations.slice(0, SHOWN)) lines.push(`  ${v.kind}: ${v.message}`);
    if (result.violations.length > SHOWN)
      lines.push(`  … and ${result.violations.length - SHOWN} more (--json has them all)`);
  }
  const word = verdict.level === 'unsafe' ? 'UNSAFE' : verdict.level === 'warn' ? 'PASSED, with warnings' : 'PASSED';
  lines.push('', bold(`verdict: ${word} (${history.lock} lock): exit status ${verdict.exitCode}`));
  return `${lines.join('\n')}\n`;
}

export function jsonReport(outcome: RunOutcome, result: CheckResult, verdict: Verdict, faultKinds: readonly string[]) {
  const { history, server } = outcome;
  return {
    lock: history.lock,
    workers: history.workers,
    ttl: history.ttl,
    faults: faultKinds,
    server,
    clock: "this machine's wall clock (Date.now() of each process)",
    start: new Date(history.start).toISOString(),
    durationMs: history.end - history.start,
    level: verdict.level,
    exitCode: verdict.exitCode,
    checks: result.checks,
    violations: result.violations,
    perWorker: result.workers,
    injected: result.recoveries.map(({ fault, nextGrantMs }) => ({
      ...fault,
      atMs: fault.at - history.start,
      lastedMs: fault.until - fault.at,
      nextGrantMs,
    })),
    grants: result.grants.length,
    writes: {
      accepted: result.writes.filter((w) => w.outcome === 'ok').length,
      refused: result.writes.filter((w) => w.outcome === 'refused').length,
      unknown: result.writes.filter((w) => w.outcome === 'unknown').length,
      moved: result.writes.filter((w) => w.outcome === 'moved').length,
    },
    final: history.final,
    crashes: outcome.crashes,
  };
}
