import { execFileSync } from 'node:child_process';

/**
 * Child processes in the fault tests (holders that get SIGSTOPped or kill -9'd) load the built
 * package, exactly as a user would: build it once before any test file runs. It is the full
 * build, declaration files included, so the dist/ a test run leaves behind is a complete package.
 */
export default function setup(): void {
  execFileSync('npx', ['tsup', '--silent'], { stdio: 'inherit' });
}
