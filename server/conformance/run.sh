#!/usr/bin/env bash
# Run the official Durable Streams server conformance suite against
# `turnstone serve`: install the pinned suite with `npm ci`, build the
# binary, start it on a free loopback port with a temporary store, run
# vitest, stop the server, print the counts; then the real-client test
# (clients.test.mjs). Exit 0 only if no test failed.
#
# Needs: node >= 18 with npm, cargo, and the npm registry (for `npm ci`).
# Environment: CONFORMANCE_KEEP=1 keeps the store and the server log.
#
# CONFORMANCE_STORE=postgres runs the suite against `turnstone serve` on a
# PostgreSQL database instead of a store directory (issue 18): a fresh
# database on TURNSTONE_PG_URL's server, or on a private server started with
# .ci/postgres.sh (needs Debian's postgresql) and stopped at the end. The
# real-client test is skipped in that mode (it restarts and kill -9s a
# server on a store directory).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
long_poll_ms="${CONFORMANCE_LONG_POLL_MS:-3000}"

store_kind="${CONFORMANCE_STORE:-dir}"
case "$store_kind" in dir|postgres) ;; *)
  echo "conformance: CONFORMANCE_STORE must be dir or postgres, not $store_kind" >&2; exit 2 ;;
esac

die() { echo "conformance: $*" >&2; exit 2; }

command -v node >/dev/null || die "node is not installed (need node >= 18 and npm)"
command -v npm >/dev/null || die "npm is not installed (need node >= 18 and npm)"
command -v cargo >/dev/null || die "cargo is not installed"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 18 ] || die "node $(node --version) is too old (need >= 18)"

start=$(date +%s)
echo "conformance: npm ci (pinned @durable-streams/server-conformance-tests, vitest)"
( cd "$here" && npm ci --no-audit --no-fund --loglevel=error ) \
  || die "npm ci failed: is the npm registry reachable?"

# The test profile (opt-level 1, shared with `cargo test`): reuses CI's test
# build, and opens stores far faster than an unoptimised build.
echo "conformance: building turnstone (test profile)"
( cd "$root" && cargo build -q --profile test -p turnstone-cli ) || die "cargo build failed"
bin="$root/target/debug/turnstone"
[ -x "$bin" ] || die "no binary at $bin"

work="$(mktemp -d "${TMPDIR:-/tmp}/turnstone-conformance.XXXXXX")"
log="$work/serve.log"
server_pid=""
# CONFORMANCE_STORE=postgres: the private server's directory (empty: none
# started), and the database made for this run (dropped at the end).
pg_dir=""
pg_admin=""
pg_db=""
psql_bin=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  if [ -n "$pg_db" ] && [ -z "$pg_dir" ]; then
    "$psql_bin" "$pg_admin" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  if [ -n "$pg_dir" ]; then
    bash "$root/.ci/postgres.sh" stop "$pg_dir" || true
  fi
  if [ "${CONFORMANCE_KEEP:-0}" = 1 ]; then
    echo "conformance: kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

store="$work/store"
if [ "$store_kind" = postgres ]; then
  psql_bin="$(command -v psql 2>/dev/null || ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -1)"
  [ -n "$psql_bin" ] || die "psql not found (install Debian's postgresql)"
  if [ -n "${TURNSTONE_PG_URL:-}" ]; then
    pg_admin="$TURNSTONE_PG_URL"
  else
    pg_env="$(bash "$root/.ci/postgres.sh" start)" || die "could not start a private PostgreSQL (.ci/postgres.sh)"
    eval "$pg_env"
    pg_dir="$PGDIR_TURNSTONE"
    pg_admin="$PGURL"
  fi
  pg_db="turnstone_conformance_$$"
  "$psql_bin" "$pg_admin" -qc "CREATE DATABASE $pg_db" >/dev/null || die "could not create database $pg_db"
  store="${pg_admin%/*}/$pg_db"
  echo "conformance: store on PostgreSQL, database $pg_db"
fi

# Port 0: the server picks a free port and prints it.
"$bin" serve "$store" --listen 127.0.0.1:0 --long-poll-timeout-ms "$long_poll_ms" \
  >"$log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(sed -n 's/.*listening on \(http:[^ ]*\) (.*/\1/p' "$log" | head -n1)"
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; die "turnstone serve exited at start"; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$log" >&2; die "turnstone serve did not start within 10 s"; }
echo "conformance: turnstone serve at $url"

results="$work/results.json"
set +e
( cd "$here" && CONFORMANCE_TEST_URL="$url" CONFORMANCE_LONG_POLL_MS="$long_poll_ms" \
    CONFORMANCE_JSON="$results" timeout 600 npx vitest run )
vitest_rc=$?
set -e

kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; die "turnstone serve died during the run"; }
kill -TERM "$server_pid"
wait "$server_pid" || die "turnstone serve did not shut down cleanly (log: $(tail -n 5 "$log"))"
server_pid=""

[ -s "$results" ] || die "vitest wrote no results (exit $vitest_rc)"
summary="$(node - "$results" <<'EOF'
const r = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8"));
const failed = [];
for (const f of r.testResults) for (const t of f.assertionResults)
  if (t.status === "failed") failed.push(t.fullName);
for (const name of failed) console.log(`conformance: FAILED ${name}`);
const skipped = r.numPendingTests + r.numTodoTests;
console.log(`conformance: ${r.numTotalTests} tests`);
console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
EOF
)"

# Real clients (@durable-streams/client): live SSE follower, restart, kill -9.
if [ "$store_kind" = postgres ]; then
  echo "conformance: real-client test SKIPPED on PostgreSQL (it restarts and kill -9s a server on a store directory)"
  clients_rc=0
else
echo "conformance: real-client test (TypeScript client, restart and kill -9)"
set +e
( cd "$here" && TURNSTONE_BIN="$bin" TMPDIR="$work" timeout 180 \
    npx vitest run --config vitest.clients.config.mjs )
clients_rc=$?
set -e
fi
echo "conformance: done in $(( $(date +%s) - start )) s"
echo "$summary"
[ "$vitest_rc" -eq 0 ] || exit 1
[ "$clients_rc" -eq 0 ] || { echo "conformance: the real-client test failed" >&2; exit 1; }
