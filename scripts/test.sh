#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what it needs, then type-checks, lints,
# builds, checks the package, and runs every test against real redis-server processes that the
# test harness starts on random loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v redis-sentinel >/dev/null; then
  echo "installing redis-server and redis-sentinel (Debian packages)"
  if [ "$(id -u)" -ne 0 ]; then
    echo "redis-server is missing and this is not root: run 'apt-get install -y redis-server redis-sentinel' first" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq redis-server redis-sentinel redis-tools >/dev/null
fi
# The Debian package may start a server on 6379; the tests never use it, they start their own.
redis-server --version

# PostgreSQL and etcd, for the backends tested against them. The harness runs the server binaries
# itself (test/harness/postgres.ts looks in /usr/lib/postgresql/<version>/bin, or $LEASEHOLD_PG_BIN).
pg_bin=${LEASEHOLD_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
missing=()
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/postgres" ] || [ ! -x "$pg_bin/initdb" ]; then missing+=(postgresql); fi
if ! command -v etcd >/dev/null; then missing+=(etcd-server); fi
if ! command -v etcdctl >/dev/null; then missing+=(etcd-client); fi
# PgBouncer, for the test of PostgreSQL behind transaction pooling (skipped where it is missing).
if ! command -v pgbouncer >/dev/null && [ "$(id -u)" -eq 0 ]; then missing+=(pgbouncer); fi
# Chromium, for the dashboard's test in a real browser (skipped where it is missing).
if ! command -v chromium >/dev/null && [ "$(id -u)" -eq 0 ]; then missing+=(chromium); fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing ${missing[*]} (Debian packages)"
  if [ "$(id -u)" -ne 0 ]; then
    echo "${missing[*]} missing and this is not root: run 'apt-get install -y postgresql etcd-server etcd-client pgbouncer' first" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
  pg_bin=${LEASEHOLD_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
fi
# The postgresql package creates a cluster of its own and may start it on 5432 (etcd-server, a
# member on 2379). The tests never use them: the harness starts its own servers, each with its own
# data directory, socket directory and random loopback port. As root, it runs PostgreSQL as the
# system user leasehold-pg, which it creates when missing.
"$pg_bin/postgres" --version
etcd --version | sed -n 1p  # sed reads it all: head would leave etcd a broken pipe (exit 141 under pipefail)

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi

npx tsc --noEmit -p .
npx biome check .
npx tsup --silent
npx publint --strict
npx attw --pack . --profile node16 --quiet

results=$(mktemp)
status=0
npx vitest run --reporter=default --reporter=json --outputFile.json="$results" "$@" || status=$?
node scripts/test-summary.mjs "$results" || true
rm -f "$results"
exit "$status"
