#!/usr/bin/env bash
# Bounded loopback load test: the same load (load.mjs) against `turnstone
# serve` and the reference Node server (@durable-streams/server, file-backed:
# it fdatasyncs every append, as turnstone acknowledges only durable appends).
#   bash server/load/run.sh [writers=32] [streams=8] [seconds=5] [readers=8]
#   TURNSTONE_LOAD_STORE=postgres://… bash server/load/run.sh   # turnstone serve on PostgreSQL
# Uses target/release/turnstone when present (else builds the debug binary).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
args=("${1:-32}" "${2:-8}" "${3:-5}" "${4:-8}")
die() { echo "load: $*" >&2; exit 2; }
command -v node >/dev/null || die "node is not installed"
( cd "$here" && npm ci --no-audit --no-fund --loglevel=error ) || die "npm ci failed"
bin="$root/target/release/turnstone"
if [ ! -x "$bin" ]; then
  ( cd "$root" && cargo build -q -p turnstone-cli ) || die "cargo build failed"
  bin="$root/target/debug/turnstone"
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/turnstone-load.XXXXXX")"
pid=""
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

wait_url() { # log file
  for _ in $(seq 1 100); do
    url="$(sed -n 's/.*listening on \(http:[^ ]*\) (.*/\1/p' "$1" | head -n1)"
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  cat "$1" >&2; die "server did not start"
}

# TURNSTONE_LOAD_STORE=postgres://… serves from that database instead of a
# fresh store directory (use an empty database).
store="${TURNSTONE_LOAD_STORE:-$work/turnstone}"
"$bin" serve "$store" --listen 127.0.0.1:0 2>"$work/ts.log" & pid=$!
wait_url "$work/ts.log"
echo "load: turnstone serve ($(basename "$(dirname "$bin")") build)"
ts="$(node "$here/load.mjs" "$url" "${args[@]}")"; echo "$ts"
kill -TERM "$pid"; wait "$pid" || true; pid=""

# `exec`: $pid must be node itself, not a subshell (killing the subshell
# left the reference server running after every run).
( cd "$here" && exec node reference.mjs "$work/reference" >"$work/ref.log" 2>&1 ) & pid=$!
wait_url "$work/ref.log"
echo "load: reference @durable-streams/server (file-backed)"
ref="$(node "$here/load.mjs" "$url" "${args[@]}")"; echo "$ref"
stop_pid() { # pid: TERM, then KILL after 5 s; fail if it survives
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  ! kill -0 "$1" 2>/dev/null || die "process $1 is still running"
}
stop_pid "$pid"; pid=""
# Nothing may stay listening: the reference server wrote its URL to the log.
port="${url##*:}"; port="${port%%/*}"
if command -v ss >/dev/null && ss -ltn "sport = :$port" | grep -q LISTEN; then
  die "a server still listens on port $port after the run"
fi

node -e '
const [a, b] = process.argv.slice(1).map(JSON.parse);
console.log(`load: turnstone ${a.appends_per_s}/s p99 ${a.p99_ms} ms; reference ${b.appends_per_s}/s p99 ${b.p99_ms} ms; ratio ${(a.appends_per_s / b.appends_per_s).toFixed(1)}x`);
' "$ts" "$ref"
