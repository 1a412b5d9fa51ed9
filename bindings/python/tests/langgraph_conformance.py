"""LangGraph's checkpointer conformance suite (langgraph-checkpoint-conformance,
pinned in run.sh) against TurnstoneSaver: all 8 capabilities, each on a
fresh store. `python tests/langgraph_conformance.py` prints the suite's
report and exits non-zero unless every capability passed."""

import asyncio
import shutil
import sys
import tempfile

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from turnstone.langgraph import TurnstoneSaver


async def run(progress=None):
    root = tempfile.mkdtemp(prefix="turnstone-conformance-")
    count = [0]

    @checkpointer_test(name="TurnstoneSaver")
    async def turnstone_saver():
        count[0] += 1
        saver = TurnstoneSaver(f"{root}/store-{count[0]}")
        try:
            yield saver
        finally:
            saver.close()

    try:
        return await validate(turnstone_saver, progress=progress)
    finally:
        # ~500 MB of stores (each preallocates its first segment).
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    report = asyncio.run(run(ProgressCallbacks.default()))
    report.print_report()
    ok = report.passed_all() and all(r.detected for r in report.results.values())
    for name, r in report.results.items():
        for f in r.failures:
            print(f"  FAILED {name}: {f}")
    return 0 if ok and len(report.results) == 8 else 1


if __name__ == "__main__":
    sys.exit(main())
