"""A LangGraph agent with a tool node on TurnstoneSaver, killed with
SIGKILL in the middle of a run and resumed from its last checkpoint.

    python examples/langgraph_crash_resume.py [store-dir]

The "model" is scripted (no network): it asks for the `add` tool until
the running total has had STEPS additions, then answers. The tool sleeps
a little and writes each call id to a ledger file, so the parent can see
what ran. The parent starts the run in a child process, kills it with
SIGKILL once a few tool calls are in the ledger, then opens the same
store in a fresh saver and resumes with ``graph.invoke(None, config)``:
LangGraph continues from the last durable checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from turnstone.langgraph import TurnstoneSaver

STEPS = 12
THREAD = {"configurable": {"thread_id": "crash-demo"}, "recursion_limit": 100}
LEDGER = os.environ.get("LEDGER", os.devnull)


@tool
def add(a: int, b: int, call: str) -> int:
    """Add two numbers (slowly, recording the call in the ledger)."""
    time.sleep(0.05)
    with open(LEDGER, "a") as f:
        f.write(call + "\n")
    return a + b


def model(state: MessagesState) -> dict:
    """A scripted model: one tool call per step until STEPS results."""
    results = [m for m in state["messages"] if m.type == "tool"]
    if len(results) >= STEPS:
        return {"messages": [AIMessage(content=f"total {results[-1].content}")]}
    total = int(results[-1].content) if results else 0
    n = len(results)
    call = {"id": f"call-{n}", "name": "add", "args": {"a": total, "b": n + 1, "call": f"call-{n}"}}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def route(state: MessagesState) -> str:
    return "tools" if state["messages"][-1].tool_calls else END


def build(checkpointer):
    g = StateGraph(MessagesState)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([add]))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g.compile(checkpointer=checkpointer)


def child(store: str) -> None:
    with TurnstoneSaver(store) as saver:
        build(saver).invoke({"messages": [HumanMessage("add them up")]}, THREAD)


def crash_and_resume(store: str, ledger: str, kill_after: int = 4) -> dict:
    """Run the child, SIGKILL it once ``kill_after`` tool calls ran,
    resume in this process. Returns what happened."""
    env = dict(os.environ, LEDGER=ledger)
    proc = subprocess.Popen([sys.executable, __file__, "--child", store], env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        ran = open(ledger).read().split() if os.path.exists(ledger) else []
        if len(ran) >= kill_after or proc.poll() is not None:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    code = proc.wait()
    before = open(ledger).read().split() if os.path.exists(ledger) else []
    global LEDGER
    LEDGER = ledger
    with TurnstoneSaver(store) as saver:
        graph = build(saver)
        resumed_from = graph.get_state(THREAD)
        final = graph.invoke(None, THREAD)
        history = list(graph.get_state_history(THREAD))
    return {
        "exit_code": code,
        "ran_before_kill": before,
        "ran_total": open(ledger).read().split(),
        "resumed_from_step": resumed_from.metadata["step"],
        "resumed_next": resumed_from.next,
        "final": final,
        "history": history,
    }


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    store = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="lg-crash-")
    out = crash_and_resume(store, os.path.join(store + "-ledger"))
    print(f"child killed (exit {out['exit_code']}) after {len(out['ran_before_kill'])} tool calls")
    print(f"resumed from step {out['resumed_from_step']}, next {out['resumed_next']}")
    print(f"final answer: {out['final']['messages'][-1].content!r}; "
          f"tool calls run in total: {len(out['ran_total'])} (a call killed after it ran "
          f"but before its result was checkpointed runs again)")


if __name__ == "__main__":
    main()
