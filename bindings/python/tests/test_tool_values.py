"""Tools as harnesses write them (issue 39 §4): a body's dict, number or
None is stored as JSON text (not refused as "invalid type: map"), and
``run_tools``/``arun_tools`` make each result durable as it finishes, so a
sibling still running cannot take a finished result down with it."""

import asyncio
import json
import threading

import pytest

from turnstone import Store


@pytest.fixture
def store(tmp_path):
    with Store(str(tmp_path / "store")) as st:
        yield st


CALLS = [
    {"call_id": "a", "name": "dict", "input": {}},
    {"call_id": "b", "name": "number", "input": {}},
    {"call_id": "c", "name": "none", "input": {}},
    {"call_id": "d", "name": "blocks", "input": {}},
    {"call_id": "e", "name": "text", "input": {}},
]
VALUES = {
    "dict": {"files": ["a.py", "b.py"], "count": 2, "ok": True},
    "number": 42,
    "none": None,
    "blocks": [{"type": "text", "text": "as blocks"}],
    "text": "plain text",
}
STORED = {
    "a": [{"type": "text", "text": json.dumps(VALUES["dict"], ensure_ascii=False)}],
    "b": [{"type": "text", "text": "42"}],
    "c": [],
    "d": [{"type": "text", "text": "as blocks"}],
    "e": [{"type": "text", "text": "plain text"}],
}


def results(s):
    return {e["data"]["call_id"]: e["data"] for e in s.events() if e["kind"] == "tool/result"}


def test_run_tools_stores_any_json_value_a_body_returns(store):
    s = store.create_session("t")
    outcomes = s.run_tools(CALLS, lambda c: VALUES[c["name"]])
    assert [o["outcome"] for o in outcomes] == ["ran"] * 5
    got = results(s)
    for call_id, content in STORED.items():
        assert got[call_id]["content"] == content, call_id
        assert got[call_id]["is_error"] is False


def test_arun_tools_and_tool_call_store_any_json_value(store):
    s = store.create_session("t")

    async def body(c):
        return VALUES[c["name"]]

    outcomes = asyncio.run(s.arun_tools(CALLS, body))
    assert [o["outcome"] for o in outcomes] == ["ran"] * 5
    got = results(s)
    for call_id, content in STORED.items():
        assert got[call_id]["content"] == content, call_id
    with s.tool_call("f", "dict", {}) as call:
        call.result({"k": "v"})
    assert results(s)["f"]["content"] == [{"type": "text", "text": '{"k": "v"}'}]


def test_each_result_is_durable_as_its_body_finishes(store):
    s = store.create_session("t")
    s.user("go")
    s.flush()
    follower = store.subscribe("t", len(s))
    seen_fast = threading.Event()
    failures = []

    def body(c):
        if c["name"] == "fast":
            return "fast done"
        # The slow sibling waits until the fast one's result is durable
        # (a follower sees only durable events).
        if not seen_fast.wait(10):
            failures.append("the fast result was not durable while its sibling ran")
        return "slow done"

    def follow():
        for e in follower:
            if e["kind"] == "tool/result" and e["data"]["call_id"] == "fast":
                seen_fast.set()
                return

    t = threading.Thread(target=follow)
    t.start()
    s.run_tools(
        [{"call_id": "slow", "name": "slow", "input": {}}, {"call_id": "fast", "name": "fast", "input": {}}],
        body,
    )
    t.join(15)
    assert not failures, failures
    assert seen_fast.is_set()


def test_a_repeated_tool_use_id_is_refused_not_run_again(store):
    """Issue 39 §4: a harness that re-appends an answered assistant message
    (a retry after a crash) gets a refusal, and its tool does not run again."""
    from turnstone import TurnstoneError, error_kind

    s = store.create_session("s")
    s.user("go")
    ask = {"content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}],
           "stop_reason": "tool_use"}
    s.assistant(ask)
    ran = []
    out = s.run_tools([{"call_id": "t1", "name": "ls", "input": {}}], lambda c: ran.append(c) or "ok")
    assert [o["outcome"] for o in out] == ["ran"] and len(ran) == 1
    n = len(s)
    with pytest.raises(TurnstoneError) as e:
        s.assistant(ask)
    assert error_kind(e.value) == "refused" and "t1" in str(e.value)
    with pytest.raises(TurnstoneError) as e:
        s.run_tools([{"call_id": "t1", "name": "ls", "input": {}}], lambda c: ran.append(c) or "ok")
    assert error_kind(e.value) == "refused"
    assert len(ran) == 1, "the answered tool ran again"
    assert len(s) == n, "nothing was appended"


def test_one_call_id_twice_in_one_batch_is_refused_whole(store):
    from turnstone import TurnstoneError, error_kind

    s = store.create_session("s")
    s.user("go")
    s.assistant({"content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]})
    ran = []
    with pytest.raises(TurnstoneError) as e:
        s.run_tools([{"call_id": "t1", "name": "ls", "input": {}}] * 2, lambda c: ran.append(c) or "ok")
    assert error_kind(e.value) == "refused"
    assert ran == []
