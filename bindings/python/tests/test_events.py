"""Typed event data (issue 39 §1): `turnstone.events` holds one TypedDict
per core kind whose required and optional fields are those of the engine's
types (`turnstone schema`), and the turn/step helpers write what the engine
expects."""

import json
import os
import subprocess

import pytest

import turnstone

from turnstone import Store, TurnstoneError, error_kind
from turnstone import events as ev


def schema():
    return turnstone.schema()


@pytest.mark.skipif(not os.environ.get("TURNSTONE_BIN"), reason="TURNSTONE_BIN is not set")
def test_the_package_schema_is_the_cli_schema():
    out = subprocess.run([os.environ["TURNSTONE_BIN"], "schema"], check=True,
                         capture_output=True, text=True).stdout
    assert turnstone.schema() == json.loads(out)
    assert turnstone.schema("turn/end") == json.loads(out)["turn/end"]


def test_an_unknown_kind_has_no_schema():
    with pytest.raises(TurnstoneError) as e:
        turnstone.schema("turn/finish")
    assert error_kind(e.value) == "invalid_argument"
    assert "turn/end" in str(e.value), "the message lists the core kinds"


def test_each_kind_class_has_the_fields_of_the_engine_type():
    kinds = schema()
    assert sorted(ev.KINDS) == sorted(kinds), "one class per core kind"
    for name, cls in ev.KINDS.items():
        s = kinds[name]
        required = set(s.get("required", []))
        optional = set(s.get("properties", {})) - required
        assert set(cls.__required_keys__) == required, name
        assert set(cls.__optional_keys__) == optional, name


def test_the_shared_types_match_too():
    defs = {}
    for s in schema().values():
        defs.update(s.get("$defs", {}))
    for cls, name in [(ev.EpochHeader, "EpochHeader"), (ev.CallConfig, "CallConfig"),
                      (ev.ToolSchema, "ToolSchema")]:
        d = defs[name]
        required = set(d.get("required", []))
        assert set(cls.__required_keys__) == required, name
        assert set(cls.__optional_keys__) == set(d["properties"]) - required, name
    turn_reasons = {v["properties"]["kind"]["const"] for v in defs["TurnEndReason"]["oneOf"]}
    assert turn_reasons == {"completed", "cancelled", "error", "interrupted"}
    step_reasons = {v["properties"]["kind"]["const"] for v in defs["StepEndReason"]["oneOf"]}
    assert step_reasons == turn_reasons | {"tool_use"}


def test_turn_and_step_helpers_write_the_engine_shapes(tmp_path):
    with Store(str(tmp_path / "st")) as st:
        s = st.create_session("s")
        s.start_turn("t1")
        s.start_step("t1", "s1")
        s.user("hi")
        s.end_step("t1", "s1", "tool_use")
        s.end_turn("t1", "error", message="model timed out")
        data = [(e["kind"], e["data"]) for e in s.events()]
        assert data[3] == ("step/end", {"turn_id": "t1", "step_id": "s1", "reason": {"kind": "tool_use"}})
        assert data[4] == ("turn/end", {"turn_id": "t1", "reason": {"kind": "error", "message": "model timed out"}})
        assert s.turns()[0]["reason"] == {"kind": "error", "message": "model timed out"}
        for bad in [lambda: s.end_turn("t1", "error"), lambda: s.end_turn("t1", "completed", message="x"),
                    lambda: s.end_turn("t1", "done")]:  # type: ignore[arg-type]
            with pytest.raises(TurnstoneError) as e:
                bad()
            assert error_kind(e.value) == "invalid_argument"
        assert len(s) == 5, "a refused end writes nothing"
