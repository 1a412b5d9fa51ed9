#!/usr/bin/env bash
# Real-client test with the Python client `durable-streams` (pinned in
# requirements.txt): build the turnstone binary (test profile), make a venv in
# server/python-client/.venv, install the pinned packages, run
# test_clients.py, which starts, restarts and kill -9s `turnstone serve`
# itself, and runs example.py once. Exit 0 only if every test passed.
#
# Needs: python3 >= 3.10 with the venv module (on Debian/Ubuntu as root, a
# missing python3-venv is installed with apt-get), cargo, and PyPI (pip).
# Environment: PYTHON=/path/to/python3 picks the interpreter for a new venv;
# PYTHON_CLIENT_KEEP=1 keeps the temporary stores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
venv="$here/.venv"

die() { echo "python-client: $*" >&2; exit 2; }

command -v "$python" >/dev/null || die "$python is not installed (need python >= 3.10 with venv)"
command -v cargo >/dev/null || die "cargo is not installed"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "$("$python" --version 2>&1) is too old (durable-streams needs python >= 3.10)"

start=$(date +%s)
echo "python-client: building turnstone (test profile)"
( cd "$root" && cargo build -q --profile test -p turnstone-cli ) || die "cargo build failed"
bin="$root/target/debug/turnstone"
[ -x "$bin" ] || die "no binary at $bin"

make_venv() { rm -rf "$venv"; "$python" -m venv "$venv" >/dev/null; }
# Reuse the venv only if it still runs (the interpreter may have changed).
if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "python-client: creating $venv"
  if ! make_venv; then
    # Debian/Ubuntu ship venv without ensurepip in a separate package.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "python-client: python3 -m venv failed; installing python3-venv"
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q python3-venv >/dev/null \
        || { apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null; } \
        || die "apt-get install python3-venv failed"
      make_venv || { rm -rf "$venv"; die "python3 -m venv still fails after installing python3-venv"; }
    else
      rm -rf "$venv"
      die "'$python -m venv' failed (ensurepip missing?): install python3-venv (apt-get install python3-venv) or set PYTHON"
    fi
  fi
fi
echo "python-client: pip install -r requirements.txt"
PIP_ROOT_USER_ACTION=ignore "$venv/bin/python" -m pip install -q --disable-pip-version-check \
  -r "$here/requirements.txt" || die "pip install failed: is PyPI reachable?"

work="$(mktemp -d "${TMPDIR:-/tmp}/turnstone-python-client.XXXXXX")"
cleanup() {
  if [ "${PYTHON_CLIENT_KEEP:-0}" = 1 ]; then echo "python-client: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "python-client: real-client test (Python durable-streams, SSE follower, restart and kill -9)"
set +e
( cd "$here" && TURNSTONE_BIN="$bin" PYTHONDONTWRITEBYTECODE=1 timeout --kill-after=10 300 \
    "$venv/bin/python" -m pytest -q -rA -p no:cacheprovider --rootdir "$here" \
    --basetemp "$work/pytest" test_clients.py )
rc=$?
set -e
echo "python-client: done in $(( $(date +%s) - start )) s"
[ "$rc" -eq 0 ] || { echo "python-client: the real-client test failed (exit $rc)" >&2; exit 1; }
