"""Not a test module: checked by `mypy --strict` in run.sh (issue 39 §1).
A harness written against the package's annotations (py.typed,
turnstone/_native.pyi) type-checks strictly; it is also run, so it stays
true."""

import asyncio
import sys
import tempfile
from typing import Any, Optional

import turnstone
from turnstone import Store, TurnstoneError, error_kind
from turnstone import events as ev


def body(call: dict[str, Any]) -> str:
    return f"ran {call['name']}"


async def abody(call: dict[str, Any]) -> dict[str, int]:
    return {"n": 1}


def main(path: str) -> None:
    with Store(path) as store:
        s = store.create_session("typed")
        seq: int = s.append("turn/start", {"turn_id": "t1"})
        s.user("hi")
        s.assistant({"content": [{"type": "text", "text": "Hello."}]})
        s.assistant({"content": [{"type": "text", "text": "Hi."}], "stop_reason": "end_turn"},
                    provider="anthropic")
        outcomes: list[Any] = s.run_tools([{"call_id": "c1", "name": "ls", "input": {}}], body)
        more: list[Any] = asyncio.run(s.arun_tools([{"call_id": "c2", "name": "n", "input": {}}], abody))
        s.append("turn/end", ev.TurnEnd(turn_id="t1", reason={"kind": "completed"}))
        # Typed data: mypy refuses these (an unused ignore would fail --strict).
        bad_end = ev.TurnEnd(turn_id="t9")  # type: ignore[typeddict-item]
        bad_reason: ev.TurnEnd = {"turn_id": "t9", "reason": {"kind": "done"}}  # type: ignore[misc, typeddict-item]
        assert bad_end and bad_reason
        s.start_turn("t2")
        s.start_step("t2", "s1")
        s.prepare_request(provider="anthropic", model="m", params={"max_tokens": 64},
                          tools=[ev.ToolSchema(name="ls", input_schema={"type": "object"})])
        s.append("assistant/chunk", ev.AssistantChunk(index=0, text="He"))
        s.end_step("t2", "s1", "completed")
        s.end_turn("t2", "error", message="the model timed out")
        s.flush()
        messages: list[ev.Message] = s.messages()
        roles = [m["role"] for m in messages]
        log: list[ev.Event] = s.events()
        kinds = [e["kind"] for e in log]
        assert roles and kinds[-1] == "turn/end"
        request: Any = s.messages(format="anthropic")
        turns: list[Any] = s.turns()
        child: tuple[Any, ...] = s.fork_after_turn("t1")
        page: dict[Any, Any] = store.list_sessions(tags=["ci"], limit=10)
        cursor: Optional[str] = page["next_cursor"]
        try:
            # The annotations refuse this before it runs; the store too.
            s.append("turn/start", ["not an object"])  # type: ignore[arg-type]
        except TurnstoneError as e:
            kind: Optional[str] = error_kind(e)
            assert kind == "invalid_argument"
        print(seq, len(outcomes), len(more), len(messages), bool(request), len(turns), child, cursor,
              turnstone.__name__)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
