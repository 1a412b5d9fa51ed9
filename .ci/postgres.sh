#!/usr/bin/env bash
# A private PostgreSQL server for tests and benchmarks: initdb into a fresh
# directory, listening on a loopback port only, run as an unprivileged user
# when started as root (the server refuses to run as root).
#
#   eval "$(bash .ci/postgres.sh start)"   # exports PGURL, PGDIR_TURNSTONE
#   bash .ci/postgres.sh stop "$PGDIR_TURNSTONE"
#   bash .ci/postgres.sh crash DIR      # pg_ctl stop -m immediate (a crash: no checkpoint)
#   bash .ci/postgres.sh restart DIR    # start it again, same port and data
#
# Needs initdb, pg_ctl and postgres on PATH (Debian: the postgresql package;
# its binaries live in /usr/lib/postgresql/<v>/bin, which is searched too).
set -euo pipefail
cmd="${1:-}"
find_bin() {
  command -v "$1" 2>/dev/null && return
  ls /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -1
}
case "$cmd" in
start)
  initdb="$(find_bin initdb)"; pg_ctl="$(find_bin pg_ctl)"
  if [ -z "$initdb" ] || [ -z "$pg_ctl" ]; then
    echo "postgres.sh: initdb/pg_ctl not found (install Debian's postgresql)" >&2; exit 2
  fi
  dir="$(mktemp -d /tmp/turnstone-pg-XXXXXX)"
  chmod 755 "$dir"
  run=()
  if [ "$(id -u)" = 0 ]; then chown nobody "$dir"; run=(runuser -u nobody --); fi
  # A free loopback port.
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "${run[@]}" "$initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  echo "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c max_connections=200 -c shared_buffers=256MB" >"$dir/options"
  "${run[@]}" "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(cat "$dir/options")" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
  echo "export PGURL=postgresql://postgres@127.0.0.1:$port/postgres PGDIR_TURNSTONE=$dir"
  ;;
stop)
  dir="${2:?usage: postgres.sh stop DIR}"
  pg_ctl="$(find_bin pg_ctl)"
  run=()
  if [ "$(id -u)" = 0 ]; then run=(runuser -u nobody --); fi
  "${run[@]}" "$pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  ;;
crash|restart)
  dir="${2:?usage: postgres.sh $cmd DIR}"
  pg_ctl="$(find_bin pg_ctl)"
  run=()
  if [ "$(id -u)" = 0 ]; then run=(runuser -u nobody --); fi
  if [ "$cmd" = crash ]; then
    "${run[@]}" "$pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
  else
    "${run[@]}" "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(cat "$dir/options")" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
  fi
  ;;
*)
  echo "usage: postgres.sh start | stop DIR | crash DIR | restart DIR" >&2; exit 2
  ;;
esac
