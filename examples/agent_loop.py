"""A runnable agent harness on turnstone's Python package, with a fake model
that answers the way Anthropic's Messages API does (thinking with a
signature, streamed text, two tool calls at once).

It runs a turn; runs the next one in a child process that is killed with
SIGKILL inside a tool body (the tool calls are durable, their results are
not); reopens the store, where repair closes what the crash left open;
forks the session at a turn boundary, compacts the first turn, replays and
searches. The same scope as engine/examples/agent_loop.rs.

    python3 examples/agent_loop.py            # prints what it does
"""

import os
import signal
import subprocess
import sys
import tempfile
from typing import Any

import turnstone
from turnstone import events as ev

TOOLS = [
    {"name": "ls", "description": "List a directory.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "wc", "description": "Count the lines of a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
]


def model(body: dict[str, Any], turn: str, step: int) -> dict[str, Any]:
    """The fake model: a response body in Anthropic's shape."""
    assert body["messages"][-1]["role"] == "user"
    if step == 0:
        content = [
            {"type": "thinking", "thinking": "List the files and count the lines.", "signature": "EqQBfake=="},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": f"toolu_{turn}_{step}a", "name": "ls", "input": {"path": "."}},
            {"type": "tool_use", "id": f"toolu_{turn}_{step}b", "name": "wc", "input": {"path": "README.md"}},
        ]
    else:
        content = [{"type": "text", "text": "There are 3 files; the README has 42 lines."}]
    return {
        "id": f"msg_{turn}_{step}", "type": "message", "role": "assistant", "model": "claude-x",
        "content": content, "stop_reason": "tool_use" if step == 0 else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 80},
    }


def turn(s: turnstone.Session, turn_id: str, question: str, crash_in_tool: bool = False) -> None:
    """One turn: the user's message, then steps until the model stops
    calling tools. With ``crash_in_tool`` the process dies inside a tool body."""
    s.start_turn(turn_id)
    s.user(question)
    for step in range(4):
        step_id = f"{turn_id}-s{step}"
        s.start_step(turn_id, step_id)
        s.prepare_request(provider="anthropic", model="claude-x", params={"max_tokens": 1024},
                          system="You are a careful coding agent.", tools=TOOLS)
        body = s.request_body("anthropic")
        s.check_request_body("anthropic", body)    # what is sent is what is logged
        s.flush()                                  # durable before the request
        response = model(body, turn_id, step)
        for i, chunk in enumerate(["There are ", "3 files."]):
            s.append("assistant/chunk", ev.AssistantChunk(index=i, text=chunk))
        s.assistant(response, provider="anthropic")
        calls = [{"call_id": b["id"], "name": b["name"], "input": b["input"]}
                 for b in response["content"] if b["type"] == "tool_use"]
        if not calls:
            s.end_step(turn_id, step_id, "completed")
            s.end_turn(turn_id)
            s.flush()
            return

        def run(call: dict[str, Any]) -> str:
            if crash_in_tool:
                os.kill(os.getpid(), signal.SIGKILL)  # the calls are durable, the results are not
            return f"{call['name']} of {call['input']}: ok"

        outcomes = s.run_tools(calls, run)           # each result durable as it finishes
        assert [o["outcome"] for o in outcomes] == ["ran", "ran"]
        s.end_step(turn_id, step_id, "tool_use")
        s.flush()


def main(path: str) -> None:
    with turnstone.Store(path) as store:
        s = store.create_session("agent-1")
        turn(s, "t1", "How many files, and how long is the README?")
        s.flush()
    # The next turn runs in a process that is killed mid-tool.
    child = subprocess.run([sys.executable, __file__, "--crash", path])
    assert child.returncode == -signal.SIGKILL, child.returncode
    with turnstone.Store(path) as store:
        s = store.open_session("agent-1")          # repairs what the crash left open
        report = s.repair_report or {}
        unknown = report["tools_outcome_unknown"]
        print(f"crash in the middle of turn t2; repair: {len(unknown)} tool outcomes unknown, "
              f"{report['turns_interrupted']} turn interrupted")
        assert len(unknown) == 2 and report["turns_interrupted"] == 1
        print("turns:", [(t["turn_id"], t["reason"]["kind"]) for t in s.turns()])
        results = [m for m in s.messages() if m["kind"] == "tool/result"]
        assert "TOOL_OUTCOME_UNKNOWN" in str(results[-1]["content"])
        s.flush()
        child_id, upto = s.fork_after_turn("t1", "agent-1.retry")
        print(f"forked {child_id} at seq {upto}")
        s.compact_turn("t1", "Turn 1: there are 3 files; the README has 42 lines.")
        s.flush()
        body = s.request_body("anthropic")
        print(f"next request: {len(body['messages'])} messages")
        replayed = store.replay("agent-1")
        print(f"replay: {len(replayed)} events")
        hits = store.search("README")
        print(f'search "README": {len(hits)} hits')
        assert hits


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--crash":
        with turnstone.Store(sys.argv[2]) as store:
            turn(store.open_session("agent-1"), "t2", "And now?", crash_in_tool=True)
        sys.exit("not reached: the tool body kills the process")
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
