"""Bad event data from Python (issue 39 §6, §1): a TurnstoneError of kind
``invalid_argument`` naming the kind and what is wrong, never a raw
TypeError or UnicodeEncodeError, and nothing written; text cut inside a
UTF-16 pair keeps its event."""

import pytest

from turnstone import Store, TurnstoneError, error_kind


@pytest.fixture
def store(tmp_path):
    with Store(str(tmp_path / "store")) as st:
        yield st


def call(name, value):
    return {"call_id": "c1", "name": name, "input": {"x": value}}


def test_bad_data_is_a_turnstone_error_naming_the_kind_and_the_fault(store):
    s = store.create_session("d")
    circular = {}
    circular["self"] = circular
    cases = [
        ("turn/start", ["x"], None, ["turn/start", "JSON object", "array"]),
        ("turn/end", {"turn_id": "t"}, None, ["turn/end", "reason"]),
        ("turn/end", {"turn_id": "t", "reason": {"kind": "done"}}, None, ["reason", "completed"]),
        ("tool/call", call("f", float("nan")), None, ["tool/call", "x", "NaN"]),
        ("tool/call", call("f", float("inf")), None, ["tool/call", "inf"]),
        ("tool/call", call("f", {1, 2}), None, ["tool/call", "set"]),
        ("tool/call", call("f", 2**70), None, ["tool/call", "64-bit"]),
        ("tool/call", call("f", circular), None, ["tool/call", "circular"]),
        ("tool/call", {"call_id": "c", "name": "f", "input": {3: "x"}}, None, ["key", "int"]),
        ("user/message", {"content": []}, 42, ["surface"]),
    ]
    for kind, data, surface, words in cases:
        with pytest.raises(TurnstoneError) as e:
            s.append(kind, data, surface=surface)
        assert error_kind(e.value) == "invalid_argument", (kind, data)
        message = str(e.value)
        for w in words:
            assert w in message, (w, message)
    with pytest.raises(TurnstoneError) as e:
        s.append_group([("turn/start", ["x"], None)])
    assert error_kind(e.value) == "invalid_argument"
    assert len(s) == 0


def test_a_lone_surrogate_is_replaced_and_the_event_kept(store):
    s = store.create_session("u")
    s.user("streamed text cut mid-emoji: \ud83d")
    s.user("a whole one: \U0001f600")
    s.append("tool/call", {"call_id": "c", "name": "f", "input": {"\udc00key": "v\ud83d"}})
    s.flush()
    events = s.events()
    assert events[0]["data"]["content"][0]["text"] == "streamed text cut mid-emoji: \ufffd"
    assert events[1]["data"]["content"][0]["text"] == "a whole one: \U0001f600"
    assert events[2]["data"]["input"] == {"\ufffdkey": "v\ufffd"}
