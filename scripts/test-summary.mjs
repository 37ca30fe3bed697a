// After `npm test`: where the time went (the slowest files, and the time of each layer of the
// suite, summed over files that run two at a time), then the closing count line.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

const report = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const files = report.testResults.map((f) => ({
  file: relative(process.cwd(), f.name),
  seconds: Math.max(0, (f.endTime - f.startTime) / 1000),
}));

/** The layers a developer runs on every change, and the slower ones. */
const LAYERS = [
  ['unit, contract and models', /^test\/(unit|contract|types|model)\//],
  ['faults', /^test\/faults\//],
  ['backends (PostgreSQL, etcd)', /^test\/(postgres|etcd)\//],
  ['CLI, package, integrations', /^test\/(cli|package|nestjs|recipes|harness)\//],
];

const format = (s) => `${s.toFixed(1).padStart(6)} s`;
console.log('\nslowest test files:');
for (const f of [...files].sort((a, b) => b.seconds - a.seconds).slice(0, 10)) {
  console.log(`${format(f.seconds)}  ${f.file}`);
}
console.log('time per layer (summed over its files):');
for (const [label, pattern] of LAYERS) {
  const mine = files.filter((f) => pattern.test(f.file));
  const total = mine.reduce((sum, f) => sum + f.seconds, 0);
  console.log(`${format(total)}  ${label} (${mine.length} files)`);
}
const skipped = report.numPendingTests + report.numTodoTests;
console.log(`vitest: ${report.numPassedTests} passed, ${report.numFailedTests} failed, ${skipped} skipped`);
