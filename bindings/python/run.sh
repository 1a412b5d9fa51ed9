#!/usr/bin/env bash
# Build and install the Python package into a private venv, then run its
# tests: bash bindings/python/run.sh [pytest args]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/target/venv"
command -v python3 >/dev/null || { echo "python3 is not installed" >&2; exit 2; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "pytest>=8,<9"
# The framework backends' dependencies, pinned, with the baselines they are
# compared against (SQLite savers/sessions) and LangGraph's conformance suite.
"$venv/bin/pip" install --quiet --disable-pip-version-check \
  "langgraph==1.2.22" "langgraph-checkpoint==4.3.2" "langgraph-checkpoint-sqlite==3.1.2" \
  "langgraph-checkpoint-conformance==0.0.2" "aiosqlite==0.22.1" "openai-agents==0.24.0"
# Builds the extension with maturin (PEP 517), as `pip install ./bindings/python` does,
# into a kept cargo target folder (the READMEs' own `pip install` in .ci/readme_check.py
# then builds incrementally).
CARGO_TARGET_DIR="$here/target/cargo" "$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$here"
# The Rust CLI, for the cross-language tests (already built by `cargo test`).
root="$(cd "$here/../.." && pwd)"
( cd "$root" && cargo build -q -p turnstone-cli )
export TURNSTONE_BIN="$root/target/debug/turnstone"
cd "$here"
# The package's annotations (py.typed, turnstone/_native.pyi): a harness written
# against them type-checks with mypy --strict (run from target/, so the installed
# package is what it imports), and runs; the package's own modules, the framework
# adapters (langgraph.py, agents.py) included, are strict-clean themselves.
"$venv/bin/pip" install --quiet --disable-pip-version-check "mypy==1.13.0"
( cd "$here/target" && "$venv/bin/mypy" --strict --no-incremental ../tests/typing_check.py ../../../examples/agent_loop.py \
    && "$venv/bin/mypy" --strict --no-incremental -m turnstone -m turnstone.events -m turnstone._cli \
       -m turnstone._frameworks -m turnstone.langgraph -m turnstone.agents \
    && "$venv/bin/python" ../tests/typing_check.py "$(mktemp -d)" >/dev/null )
# The agent loop example (a fake Anthropic model, parallel tools, a SIGKILL
# mid-tool, repair, fork, compaction, replay, search) runs as written.
loop_dir="$(mktemp -d)"
"$venv/bin/python" "$root/examples/agent_loop.py" "$loop_dir/store"
rm -rf "$loop_dir"
# LangGraph's checkpointer conformance suite against TurnstoneSaver: its report.
"$venv/bin/python" tests/langgraph_conformance.py
# `pytest`, not `python -m pytest`: the source folder must not shadow the
# installed package (which has the native module).
# Stores preallocate their first segment: the tests' temp dirs (~2 GB) are
# removed after a passing run (kept for a look after a failing one).
basetemp="$here/target/pytest-tmp"
rc=0
"$venv/bin/pytest" -q -p no:cacheprovider --basetemp="$basetemp" tests "$@" || rc=$?
[ "$rc" -ne 0 ] || rm -rf "$basetemp"
exit "$rc"
