#!/usr/bin/env bash
# Build the Node.js addon (napi-rs) and run its tests, then the LangGraph
# checkpointer conformance suite against TurnstoneSaver:
#   bash bindings/node/run.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command -v node >/dev/null || { echo "node is not installed" >&2; exit 2; }
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
npm run build
# The Rust CLI, for the tests that share stores with it (built by `cargo test`).
( cd "$root" && cargo build -q -p turnstone-cli )
export TURNSTONE_BIN="$root/target/debug/turnstone"
# The Python package's venv, when bindings/python/run.sh has built it (as
# .ci/run does first): stores are exchanged between the two languages.
if [ -x "$root/bindings/python/target/venv/bin/python" ]; then
  export TURNSTONE_PYTHON="$root/bindings/python/target/venv/bin/python"
fi
npm test
# The agent loop example (a fake Anthropic model, parallel tools, a SIGKILL
# mid-tool, repair, fork, compaction, replay, search) runs as written.
loop_dir="$(mktemp -d)"
node "$root/examples/agent_loop.mjs" "$loop_dir/store"
rm -rf "$loop_dir"
# The LangGraph checkpointer conformance suite (@langchain/langgraph-checkpoint-validation,
# pinned in package-lock.json, on vitest) against TurnstoneSaver: as it runs, then
# with every read answered from indexes rebuilt from the sessions' events.
NO_COLOR=1 npx vitest run --config test/langgraph/vitest.config.mjs
NO_COLOR=1 TURNSTONE_LG_REBUILD=1 npx vitest run --config test/langgraph/vitest.config.mjs
# langgraph.d.ts and langgraph.d.mts against LangGraph's own declarations (tsc comes
# with @napi-rs/cli): from a TypeScript file, an ES module (.mts) and CommonJS (.cts).
for f in test/langgraph/types-check.ts test/langgraph/types-check-esm.mts test/langgraph/types-check-cjs.cts; do
  npx --no-install tsc --noEmit --strict --module nodenext --moduleResolution nodenext --target es2022 --lib esnext,dom --skipLibCheck "$f"
done
# The package's own declarations, strict.
npx --no-install tsc --noEmit --strict --skipLibCheck turnstone.d.ts
npx --no-install tsc --noEmit --strict --module nodenext --moduleResolution nodenext --target es2022 --lib esnext --skipLibCheck test/types-check-events.ts
echo "langgraph.d.ts, langgraph.d.mts, turnstone.d.ts (event data): types check"
