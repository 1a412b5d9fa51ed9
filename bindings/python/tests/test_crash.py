"""The crash test in Python: a child runs an agent loop (a fake model, two
tools, one with a side effect recorded in a ledger file) and is killed with
SIGKILL at random moments, 20 rounds on one store. After each kill the
parent reopens the store in Python, lets it repair the session, and checks
that every acknowledged event is there, that every tool body that ran had
its tool/call durable first, and that the messages are valid provider
input."""

import os
import random
import signal
import subprocess
import sys
import time

import turnstone

AGENT = r"""
import json, os, sys, turnstone
store_dir, acks, effects = sys.argv[1:4]
st = turnstone.Store(store_dir)
ids = [x["id"] for x in st.sessions()]
s = st.open_session("agent") if "agent" in ids else st.create_session("agent")
ack = open(acks, "a", buffering=1)
fx = open(effects, "a", buffering=1)
turn = len([e for e in s.events() if e["kind"] == "turn/start"])
while True:
    t = f"t{turn}"
    s.append("turn/start", {"turn_id": t})
    s.user(f"question {turn}")
    s.append("step/start", {"turn_id": t, "step_id": "s0"})
    calls = [(f"{t}-a", "write_file"), (f"{t}-b", "read_file")]
    s.assistant({"content": [{"type": "thinking", "thinking": "plan", "signature": "c2ln"}]
                 + [{"type": "tool_use", "id": c, "name": n, "input": {"n": turn}} for c, n in calls],
                 "stop_reason": "tool_use"})
    for call_id, name in calls:
        with s.tool_call(call_id, name, {"n": turn}) as call:
            if name == "write_file":
                # The side effect: it must never happen before the call is durable.
                fx.write(call_id + "\n")
            call.result(f"{name} done for turn {turn}")
    s.append("step/end", {"turn_id": t, "step_id": "s0", "reason": {"kind": "tool_use"}})
    s.assistant({"content": [{"type": "text", "text": f"answer {turn}"}], "stop_reason": "end_turn"})
    s.append("turn/end", {"turn_id": t, "reason": {"kind": "completed"}})
    s.flush()
    ack.write(f"{len(s)}\n")   # acknowledged: everything below is durable
    turn += 1
"""


def valid_anthropic(body):
    """Roles alternate from user; every tool_use is answered by a
    tool_result in the next message; no result answers nothing."""
    msgs = body["messages"]
    assert msgs and msgs[0]["role"] == "user"
    for a, b in zip(msgs, msgs[1:]):
        assert a["role"] != b["role"], (a, b)
    for i, m in enumerate(msgs):
        uses = [c["id"] for c in m["content"] if c.get("type") == "tool_use"]
        if uses:
            nxt = msgs[i + 1] if i + 1 < len(msgs) else {"content": []}
            answered = [c["tool_use_id"] for c in nxt["content"] if c.get("type") == "tool_result"]
            assert sorted(answered) == sorted(uses), (uses, answered)
        if m["role"] == "user" and i > 0:
            prev = [c["id"] for c in msgs[i - 1]["content"] if c.get("type") == "tool_use"]
            for c in m["content"]:
                if c.get("type") == "tool_result":
                    assert c["tool_use_id"] in prev


def test_sigkill_agent_loop_20_rounds(tmp_path):
    store_dir = str(tmp_path / "store")
    acks, effects = str(tmp_path / "acks"), str(tmp_path / "effects")
    open(acks, "w").close()
    open(effects, "w").close()
    rng = random.Random(int(os.environ.get("TURNSTONE_CRASH_SEED", "1234")))
    repaired_rounds = 0
    for round_ in range(20):
        child = subprocess.Popen(
            [sys.executable, "-c", AGENT, store_dir, acks, effects], cwd=str(tmp_path)
        )
        time.sleep(0.15 + rng.random() * 0.35)
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL, f"round {round_}: the child ended on its own"
        with turnstone.Store(store_dir) as st:
            s = st.open_session("agent")
            if s.repair_report is not None:
                repaired_rounds += 1
            events = s.events()
            acked = max([int(x) for x in open(acks).read().split()] or [0])
            assert len(events) >= acked, f"round {round_}: acknowledged events lost"
            seqs = [e["seq"] for e in events]
            assert seqs == list(range(len(events))), "seqs are dense"
            durable_calls = {e["data"]["call_id"] for e in events if e["kind"] == "tool/call"}
            for call_id in open(effects).read().split():
                assert call_id in durable_calls, f"tool body {call_id} ran without a durable tool/call"
            results = {e["data"]["call_id"] for e in events if e["kind"] == "tool/result"}
            assert durable_calls <= results, "after repair every call has a result"
            assert not any(x["open_turn"] for x in st.sessions()), "repair closed the turn"
            valid_anthropic(s.messages(format="anthropic"))
            del s
    assert repaired_rounds > 0, "no kill landed inside a turn: the test proved nothing"
