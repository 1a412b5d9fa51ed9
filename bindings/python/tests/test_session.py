"""The Python session layer: each API, bad input, concurrency, a crash."""

import asyncio
import json
import os
import subprocess
import sys
import threading

import pytest

import turnstone
from turnstone import Store, ToolAborted, ToolRefused, TurnstoneError, error_kind

THINKING = {"type": "thinking", "thinking": "let me see", "signature": "EqQBCkYIAxgC"}
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
FUTURE = {"type": "block_from_the_future", "payload": {"nested": [1, 2.5, None, True]}}


@pytest.fixture
def store(tmp_path):
    with Store(str(tmp_path / "store")) as st:
        yield st


def test_quick_start_and_request_body(store):
    s = store.create_session("s1")
    s.append("turn/start", {"turn_id": "t1"})
    s.user("hi")
    s.flush()
    body = s.messages(format="anthropic")
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert [m["role"] for m in s.messages()] == ["user"]
    assert len(s) == 2
    assert store.sessions()[0]["id"] == "s1"
    assert store.sessions()[0]["open_turn"] is True


def test_provider_content_crosses_unchanged(store):
    s = store.create_session("p")
    s.user([{"type": "text", "text": "look"}, IMAGE])
    blocks = [THINKING, {"type": "text", "text": "an answer"}, FUTURE]
    seq = s.assistant({"content": blocks, "stop_reason": "end_turn"})
    s.flush()
    assert s.events(seq, seq + 1)[0]["data"]["content"] == blocks
    assert store.replay("p")[seq]["data"]["content"] == blocks
    sent = s.messages(format="anthropic")["messages"]
    assert sent[1]["content"] == blocks
    assert sent[0]["content"][1] == IMAGE


def test_bad_input_raises_and_writes_nothing(store):
    s = store.create_session("b")
    s.user("one")
    n = len(s)
    cases = [
        lambda: s.append("user/message", {"content": []}),  # surface missing
        lambda: s.append("turn/end", {"turn_id": "x"}, surface="append"),
        lambda: s.append("tool/call", {"name": 3}),
        lambda: s.append("no/such-kind", {}),
        # Over the payload limit inline: 70 blocks of 250 KB, each under the
        # blob threshold (256 KiB), so none goes out of line.
        lambda: s.user([{"type": "text", "text": "x" * 250_000}] * 70),
    ]
    kinds = []
    for case in cases:
        with pytest.raises(TurnstoneError) as e:
            case()
        kinds.append(error_kind(e.value))
    assert kinds[:4] == ["invalid_argument"] * 4
    assert kinds[4] == "too_large"
    assert len(s) == n
    # One 17 MiB block is stored once as a blob (FORMAT.md §15) and reads back.
    big = "x" * (17 * 1024 * 1024)
    s.user(big)
    assert s.events()[-1]["data"]["content"][0]["text"] == big
    n = len(s)
    with pytest.raises(TurnstoneError) as e:
        s.append("user/message", {"content": []}, surface=42)
    assert error_kind(e.value) == "invalid_argument"
    with pytest.raises(TurnstoneError) as e:
        s.append("user/message", {"content": {1, 2}}, surface="append")  # not JSON
    assert error_kind(e.value) == "invalid_argument"
    assert len(s) == n
    with pytest.raises(TurnstoneError) as e:
        store.open_session("missing")
    assert error_kind(e.value) == "unknown_session"
    with pytest.raises(TurnstoneError) as e:
        store.create_session("b")
    assert error_kind(e.value) == "session_exists"
    with pytest.raises(TurnstoneError) as e:
        s.messages(format="gemini")
    assert error_kind(e.value) == "invalid_argument"


def test_closed_store_raises(tmp_path):
    st = Store(str(tmp_path / "c"))
    st.create_session("x")
    st.close()
    with pytest.raises(TurnstoneError) as e:
        st.create_session("y")
    assert error_kind(e.value) == "closed"


def test_tool_call_order_refusal_abort_and_failure(store):
    s = store.create_session("t")
    s.append("turn/start", {"turn_id": "t1"})
    with s.tool_call("c1", "ls", {"path": "."}) as call:
        # The body runs only once its tool/call is durable: a durable-only
        # reader already sees it.
        assert [e["kind"] for e in store.replay("t")][-1] == "tool/call"
        call.result("a b c")
    with pytest.raises(ToolRefused):
        with s.tool_call("c2", "rm", {"path": "/"}, guard=lambda c: "no deletes"):
            pytest.fail("the body ran")
    with pytest.raises(ToolAborted):
        with s.tool_call("c3", "ls", {}, cancelled=lambda: True):
            pytest.fail("the body ran")
    with pytest.raises(ZeroDivisionError):
        with s.tool_call("c4", "div", {}):
            1 / 0
    with s.tool_call("c5", "big", {}) as call:
        # Too large inline: many blocks each under the blob threshold.
        call.result([{"type": "text", "text": "y" * 250_000}] * 70)
    assert call.not_recorded and "not recorded" in call.not_recorded
    results = {e["data"]["call_id"]: e["data"] for e in s.events() if e["kind"] == "tool/result"}
    assert set(results) == {"c1", "c2", "c3", "c4", "c5"}, "every call is closed"
    assert results["c1"]["content"] == [{"type": "text", "text": "a b c"}]
    assert "refused by policy" in results["c2"]["content"][0]["text"]
    assert results["c3"]["status"] == "ABORTED_BEFORE_DISPATCH"
    assert results["c4"]["is_error"] and "ZeroDivisionError" in results["c4"]["content"][0]["text"]
    assert results["c5"]["is_error"]


def test_fork_replay_search(store):
    s = store.create_session("src")
    s.append("turn/start", {"turn_id": "t1"})
    s.user("deploy the frobnicator")
    s.assistant({"content": [{"type": "text", "text": "deployed"}]})
    s.append("turn/end", {"turn_id": "t1", "reason": {"kind": "completed"}})
    s.flush()
    child = store.fork("src", child="kid")
    assert child == "kid"
    assert [e["kind"] for e in store.replay("kid")] == [e["kind"] for e in store.replay("src")]
    hits = store.search("frobnicator")
    assert hits and hits[0]["session"] == "src"
    assert store.search("frobnicator", session="kid")[0]["session"] == "kid"


def test_eight_threads_append_to_their_own_sessions(store):
    def work(i):
        s = store.create_session(f"w{i}")
        for j in range(200):
            s.user(f"message {j}")
            if j % 20 == 19:
                s.flush()
        s.flush()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lens = {x["id"]: x["events"] for x in store.sessions()}
    assert lens == {f"w{i}": 200 for i in range(8)}
    texts = [e["data"]["content"][0]["text"] for e in store.replay("w3")]
    assert texts == [f"message {j}" for j in range(200)]


def test_next_seq_stays_where_the_subscription_ended(store):
    s = store.create_session("ends")
    s.user("a")
    s.user("b")
    s.flush()
    s.close()
    sub = store.subscribe("ends")
    tomb = store.delete("ends")
    seen = [e["seq"] for e in sub]  # ends after the tombstone
    assert seen == [0, 1, tomb]
    assert sub.next_seq == tomb + 1
    assert sub.try_next() is None
    assert sub.next_seq == tomb + 1


def test_subscribe_blocking_and_asyncio(store):
    s = store.create_session("live")
    sub = store.subscribe("live")
    seen = []
    follower = threading.Thread(target=lambda: seen.extend(e["seq"] for _, e in zip(range(5), sub)))
    follower.start()
    for i in range(5):
        s.user(f"m{i}")
        assert i == 0 or seen[-1:] != [i], "an event showed before it was durable"
        s.flush()
    follower.join(timeout=30)
    assert seen == [0, 1, 2, 3, 4]

    async def follow():
        sub2 = store.subscribe("live", 3)
        return [(await sub2.anext())["seq"] for _ in range(2)]

    assert asyncio.run(follow()) == [3, 4]
    sub3 = store.subscribe("live", 5)
    assert sub3.try_next() is None
    s.user("late")
    assert sub3.try_next() is None, "not durable yet"
    asyncio.run(s.aflush())
    assert sub3.try_next()["seq"] == 5


CHILD = r"""
import os, sys, turnstone
st = turnstone.Store(sys.argv[1])
s = st.create_session("crash")
s.append("turn/start", {"turn_id": "t1"})
s.user("run it")
s.assistant({"content": [{"type": "tool_use", "id": "c1", "name": "sh", "input": {}}]})
with s.tool_call("c1", "sh", {}) as call:
    with open(sys.argv[2], "a") as ledger:
        ledger.write("ran c1\n")
    os.kill(os.getpid(), 9)   # killed mid-tool: the result is never recorded
"""


def test_killed_mid_tool_reopens_repaired(tmp_path):
    d, ledger = str(tmp_path / "k"), str(tmp_path / "ledger")
    r = subprocess.run([sys.executable, "-c", CHILD, d, ledger], cwd=str(tmp_path))
    assert r.returncode == -9
    assert open(ledger).read() == "ran c1\n"
    with Store(d) as st:
        s = st.open_session("crash")
        assert s.repair_report["tools_outcome_unknown"] == ["c1"]
        assert s.repair_report["turns_interrupted"] == 1
        kinds = [e["kind"] for e in s.events()]
        # The body ran only after its tool/call was durable.
        assert kinds.index("tool/call") < kinds.index("tool/result")
        body = s.messages(format="anthropic")
        assert body["messages"][-1]["role"] == "user"
        assert body["messages"][-1]["content"][0]["type"] == "tool_result"
    # A second Store of the same directory is a client of the first
    # (docs/MULTIPROCESS.md): it writes through it, and a session live in
    # one is refused in the other.
    with Store(d) as st:
        assert st.backend == "embedded"
        live = st.open_session("crash")
        with Store(d) as other:
            assert other.backend == "shared"
            with pytest.raises(TurnstoneError) as e:
                other.open_session("crash")
            assert error_kind(e.value) == "session_live"
            o = other.create_session("from-other")
            o.append("user/message", {"content": [{"type": "text", "text": "hi"}]}, surface="append")
            o.flush()
        live.close()
        assert "from-other" in [x["id"] for x in st.sessions()]


def test_metadata_and_delete(store):
    import gc

    s = store.create_session("m")
    s.set_title("Fix the build")
    s.add_tag("ci")
    s.set_meta("branch", "main")
    s.user("go")
    s.flush()
    assert s.metadata == {"title": "Fix the build", "tags": ["ci"], "fields": {"branch": "main"}}
    with pytest.raises(TurnstoneError) as e:
        s.add_tag("")
    assert error_kind(e.value) == "invalid_argument"
    with pytest.raises(TurnstoneError) as e:
        store.delete("m")
    assert error_kind(e.value) == "session_live"
    # close() releases the handle while a reference to it remains; the
    # closed handle refuses every call.
    keep = s
    s.close()
    s.close()
    for call in (lambda: keep.user("again"), lambda: len(keep), keep.flush, keep.events):
        with pytest.raises(TurnstoneError) as e:
            call()
        assert error_kind(e.value) == "invalid_argument"
    store.delete("m")
    assert "m" not in [x["id"] for x in store.sessions()]
    # A session used as a context manager is released at the end of the block.
    with store.create_session("m2") as s2:
        s2.user("hi")
        s2.flush()
    store.delete("m2")
    del s, keep, s2
    gc.collect()
    with pytest.raises(TurnstoneError) as e:
        store.open_session("m")
    assert error_kind(e.value) == "session_deleted"


def test_parallel_tools_one_group_one_wait_bodies_concurrent(store):
    import time as _t

    s = store.create_session("par")
    s.append("turn/start", {"turn_id": "t"})
    calls = [{"call_id": f"c{i}", "name": "sleep", "input": {"ms": 200}} for i in range(4)]
    calls.append({"call_id": "bad", "name": "rm", "input": {}})
    calls.append({"call_id": "boom", "name": "fail", "input": {}})
    seen_durable = []

    def body(c):
        if c["name"] == "fail":
            raise ValueError("nope")
        # Every call is durable before any body runs.
        seen_durable.append({e["data"]["call_id"] for e in store.replay("par") if e["kind"] == "tool/call"})
        _t.sleep(c["input"]["ms"] / 1000)
        return f"slept {c['call_id']}"

    t0 = _t.monotonic()
    out = s.run_tools(calls, body, guard=lambda c: "no rm" if c["name"] == "rm" else None)
    took = _t.monotonic() - t0
    assert took < 0.7, f"bodies did not run concurrently ({took:.2f} s for 4 x 0.2 s)"
    assert [o["outcome"] for o in out] == ["ran"] * 4 + ["refused", "failed"]
    assert all(d == {c["call_id"] for c in calls} for d in seen_durable)
    kinds = [e["kind"] for e in s.events()]
    first_result = kinds.index("tool/result")
    assert kinds[1:7] == ["tool/call"] * 6 and first_result == 7
    results = {e["data"]["call_id"] for e in s.events() if e["kind"] == "tool/result"}
    assert results == {c["call_id"] for c in calls}
    # Aborted before dispatch: no body runs.
    cancel_calls = [{"call_id": "x1", "name": "ls", "input": {}}]
    out = s.run_tools(cancel_calls, lambda c: pytest.fail("ran"), cancelled=lambda: True)
    assert out[0]["outcome"] == "aborted"


def test_plugin_kinds(tmp_path):
    with Store(str(tmp_path / "pl"), plugins={"harness/note": True}) as st:
        s = st.create_session("p")
        seq = s.append("harness/note", {"text": "remember this"})
        assert s.events(seq, seq + 1)[0]["kind"] == "harness/note"
        with pytest.raises(TurnstoneError) as e:
            s.append("harness/other", {})
        assert error_kind(e.value) == "invalid_argument"
    with pytest.raises(TurnstoneError):
        Store(str(tmp_path / "pl2"), plugins={"user/message": False})


def test_asyncio_tool_call_and_parallel_tools(store):
    s = store.create_session("aio")
    s.append("turn/start", {"turn_id": "t"})

    async def main():
        async with s.atool_call("c1", "ls", {}) as call:
            assert [e["kind"] for e in await store.areplay("aio")][-1] == "tool/call"
            call.result("ok")
        try:
            async with s.atool_call("c2", "rm", {}, guard=lambda c: "no"):
                raise AssertionError("the body ran")
        except ToolRefused:
            pass

        async def body(c):
            await asyncio.sleep(0.2)
            return "done " + c["call_id"]

        t0 = asyncio.get_running_loop().time()
        out = await s.arun_tools([{"call_id": f"p{i}", "name": "sleep"} for i in range(4)], body)
        assert asyncio.get_running_loop().time() - t0 < 0.7
        return out

    out = asyncio.run(main())
    assert [o["outcome"] for o in out] == ["ran"] * 4
    results = {e["data"]["call_id"] for e in s.events() if e["kind"] == "tool/result"}
    assert results == {"c1", "c2", "p0", "p1", "p2", "p3"}
