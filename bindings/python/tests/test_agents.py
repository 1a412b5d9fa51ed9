"""turnstone.agents.TurnstoneSession: the Agents SDK's Session protocol with
the results of the SDK's own SQLiteSession on random operation sequences
(reopening included), items JSON-equal through the log, pop_item and
clear_session as surface operations that erase nothing, atomic add_items,
and a Runner with a scripted model killed with SIGKILL and resumed."""

import asyncio
import copy
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("agents")

from agents.memory import SQLiteSession  # noqa: E402

import turnstone  # noqa: E402
from turnstone import TurnstoneError  # noqa: E402
from turnstone.agents import TurnstoneSession  # noqa: E402
from acks import wait_for_acks  # noqa: E402

HERE = Path(__file__).resolve().parent

# Items as the SDK hands them over: user input, reasoning with encrypted
# content, function calls and outputs, assistant messages, and fields and
# item types that do not exist yet.
ITEMS = [
    {"role": "user", "content": "what is 2+2?"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and 3+3?"}]},
    {"role": "developer", "content": "be brief"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "add"}],
     "encrypted_content": "gAAAAABo" + "x" * 64, "status": None},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "add",
     "arguments": "{\"a\": 2, \"b\": 2}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "4"},
    {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "4", "annotations": [], "logprobs": []}]},
    {"type": "hologram_call", "id": "h_1", "frames": [1, 2.5, None, True, {"deep": ["x"]}],
     "brand_new_field": {"nested": {"k": "v"}}},
    {"role": "assistant", "content": "plain text answer", "unicode": "snow ☃ 𝄞"},
]


def run(coro):
    return asyncio.run(coro)


def test_items_round_trip_json_equal(tmp_path):
    async def main():
        s = TurnstoneSession("rt", tmp_path / "s")
        await s.add_items(copy.deepcopy(ITEMS))
        got = await s.get_items()
        s.close()
        return got

    assert run(main()) == ITEMS
    # Through the log, in a fresh process state: the same.
    async def again():
        s = TurnstoneSession("rt", tmp_path / "s")
        got = await s.get_items()
        s.close()
        return got

    assert run(again()) == ITEMS


async def _apply(session, op, arg):
    if op == "add":
        return await session.add_items(copy.deepcopy(arg))
    if op == "get":
        return await session.get_items(arg)
    if op == "pop":
        return await session.pop_item()
    if op == "clear":
        return await session.clear_session()
    raise AssertionError(op)


@pytest.mark.parametrize("seed", range(6))
def test_same_results_as_sqlite_session_on_random_sequences(tmp_path, seed):
    rng = random.Random(seed)
    ids = ["a", "b"]
    db = str(tmp_path / "sqlite.db")
    store = str(tmp_path / f"store-{seed}")

    def open_all():
        return ({i: SQLiteSession(i, db) for i in ids}, {i: TurnstoneSession(i, store) for i in ids})

    def close_all(pair):
        for x in (*pair[0].values(), *pair[1].values()):
            x.close()

    async def main():
        pair = open_all()
        ops = 0
        for _ in range(120):
            r = rng.random()
            sid = rng.choice(ids)
            if r < 0.35:
                op, arg = "add", [rng.choice(ITEMS) for _ in range(rng.randint(0, 4))]
            elif r < 0.65:
                op, arg = "get", rng.choice([None, None, 0, 1, 2, 3, 5, 8, -1])
            elif r < 0.82:
                op, arg = "pop", None
            elif r < 0.9:
                op, arg = "clear", None
            else:
                close_all(pair)  # reopen: the turnstone side rebuilds from its log
                pair = open_all()
                continue
            want = await _apply(pair[0][sid], op, arg)
            got = await _apply(pair[1][sid], op, arg)
            assert got == want, (op, arg, sid)
            ops += 1
        for sid in ids:
            assert await pair[1][sid].get_items() == await pair[0][sid].get_items()
        close_all(pair)
        return ops

    assert run(main()) > 80


def test_pop_and_clear_are_surface_operations_that_erase_nothing(tmp_path):
    d = str(tmp_path / "s")

    async def main():
        s = TurnstoneSession("p", d)
        await s.add_items(ITEMS[:4])
        assert await s.pop_item() == ITEMS[3]
        assert await s.get_items() == ITEMS[:3]
        await s.clear_session()
        assert await s.get_items() == [] and await s.pop_item() is None
        await s.add_items(ITEMS[5:7])
        assert await s.get_items(limit=1) == ITEMS[6:7]
        s.close()

    run(main())
    with turnstone.Store(d) as st:
        events = st.replay("agents:p")
        kept = [e["data"]["content"][0]["openai_agents_item"] for e in events if e["data"].get("content")]
        assert kept == ITEMS[:4] + ITEMS[5:7], "every item ever added is still in the log"
        ops = [e["data"]["agents"]["op"] for e in events if "agents" in e["data"]]
        assert ops == ["pop_item", "clear_session"]
        assert [e["surface"]["op"] for e in events] == ["append"] * 4 + ["replace", "replace"] + ["append"] * 2
        assert [e["kind"] for e in events[:4]] == ["user/message"] * 3 + ["assistant/message"]
        s = st.open_read_only("agents:p")
        # The derived history (what a model would be sent) no longer shows them.
        derived = [m["content"][0]["openai_agents_item"] for m in s.messages()]
        assert derived == ITEMS[5:7]
        assert [m["content"][0]["text"] for m in s.messages()] == ["4", "4"]
        # Search finds the text of live items and, the log being the record,
        # of popped ones too.
        assert [h["seq"] for h in st.search("brief")] == [2]


def test_a_crashed_session_is_loaded_without_repairs_and_pops_anything(tmp_path):
    """A function call without its output, loaded after the process ended:
    turnstone's own loop rules (synthetic results, tool pairs) stay out of
    the SDK's history, which may then pop the call as SQLiteSession does."""
    d = str(tmp_path / "s")

    async def first():
        s = TurnstoneSession("c", d)
        await s.add_items([ITEMS[0], ITEMS[4]])  # the call, its output never added
        s.close()

    async def second():
        s = TurnstoneSession("c", d)
        got = await s.get_items()
        popped = await s.pop_item()
        await s.add_items([ITEMS[4], ITEMS[5]])
        assert await s.pop_item() == ITEMS[5]  # the output alone, its call stays
        rest = await s.get_items()
        s.close()
        return got, popped, rest

    run(first())
    got, popped, rest = run(second())
    assert got == [ITEMS[0], ITEMS[4]] and popped == ITEMS[4]
    assert rest == [ITEMS[0], ITEMS[4]]
    with turnstone.Store(d) as st:
        kinds = {e["kind"] for e in st.replay("agents:c")}
        assert kinds == {"user/message", "assistant/message"}, "no repair event was added"


def test_add_items_is_one_atomic_group_and_bad_items_write_nothing(tmp_path):
    async def main():
        s = TurnstoneSession("g", tmp_path / "s")
        await s.add_items(ITEMS[:2])
        with pytest.raises(TurnstoneError):
            await s.add_items([ITEMS[0], {"role": "user", "content": {1, 2}}])  # not JSON
        with pytest.raises(TurnstoneError):
            await s.add_items([ITEMS[0], "not an item"])
        assert await s.get_items() == ITEMS[:2]
        s.close()
        with pytest.raises(RuntimeError):
            await s.add_items(ITEMS[:1])

    run(main())


def test_two_objects_on_one_session_share_one_history(tmp_path):
    async def main():
        a = TurnstoneSession("same", tmp_path / "s")
        b = TurnstoneSession("same", tmp_path / "s")
        await a.add_items(ITEMS[:2])
        assert await b.get_items() == ITEMS[:2]
        assert await b.pop_item() == ITEMS[1]
        assert await a.get_items() == ITEMS[:1]
        a.close()
        b.close()

    run(main())


def test_runner_with_a_scripted_model_is_killed_and_resumed(tmp_path):
    example = HERE.parent / "examples" / "agents_crash_resume.py"
    out = subprocess.run([sys.executable, str(example), str(tmp_path / "store"), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["exit_code"] == -signal.SIGKILL
    assert r["items_before_resume"] > 0, "the killed run left durable items"
    assert r["final_output"] == r["expected_output"]
    calls = [i["call_id"] for i in r["items"] if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in r["items"] if i.get("type") == "function_call_output"]
    assert calls == outputs and len(set(calls)) == len(calls), "every call has its output, once"
    assert r["reasoning_intact"], "encrypted reasoning came back unchanged"


ACKING_CHILD = r"""
import asyncio, sys
from turnstone.agents import TurnstoneSession
store, acks = sys.argv[1:3]
ack = open(acks, "a", buffering=1)

async def worker(k):
    s = TurnstoneSession(f"s{k}", store)
    for i in range(10**9):
        call = {"type": "function_call", "call_id": f"c{k}-{i}", "name": "f", "arguments": "{}"}
        out = {"type": "function_call_output", "call_id": f"c{k}-{i}", "output": "x" * 200}
        await s.add_items([call, out])
        ack.write(f"s{k} {i}\n")

async def main():
    await asyncio.gather(*(worker(k) for k in range(8)))
asyncio.run(main())
"""


def test_acknowledged_items_survive_sigkill_and_batches_stay_whole(tmp_path):
    store, acks = str(tmp_path / "s"), str(tmp_path / "acks")
    open(acks, "w").close()
    for round_ in range(3):
        child = subprocess.Popen([sys.executable, "-c", ACKING_CHILD, store, acks], cwd=str(tmp_path))
        wait_for_acks(acks, child)
        time.sleep(0.05 + 0.1 * round_)  # then kill in the middle of the stream
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        acked: dict = {}
        for line in open(acks).read().splitlines():
            sid, i = line.split()
            acked.setdefault(sid, set()).add(int(i))
        assert acked, "the child acknowledged nothing: the test proved nothing"

        async def check():
            for sid, done in acked.items():
                s = TurnstoneSession(sid, store)
                items = await s.get_items()
                s.close()
                assert len(items) % 2 == 0, "an add_items batch was cut in half"
                for a, b in zip(items[::2], items[1::2]):
                    assert a["type"] == "function_call" and b["call_id"] == a["call_id"]
                have = {int(a["call_id"].split("-")[1]) for a in items[::2]}
                assert done <= have, f"acknowledged items lost in {sid}"

        run(check())


