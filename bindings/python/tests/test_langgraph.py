"""turnstone.langgraph.TurnstoneSaver: LangGraph's conformance suite (all 8
capabilities), the same graph results as LangGraph's own InMemorySaver,
an index rebuilt from the log equal to the live one, a SIGKILL in the
middle of a run resumed from the last checkpoint, many concurrent async
threads, and a store the Rust CLI still verifies."""

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

import turnstone  # noqa: E402
from turnstone.langgraph import TurnstoneSaver  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from langgraph_conformance import run as run_conformance  # noqa: E402
from acks import wait_for_acks  # noqa: E402


def _example():
    path = HERE.parent / "examples" / "langgraph_crash_resume.py"
    spec = importlib.util.spec_from_file_location("langgraph_crash_resume", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


EX = _example()


def test_conformance_suite_passes_all_eight_capabilities():
    report = asyncio.run(run_conformance())
    assert sorted(report.results) == sorted(
        ["put", "put_writes", "get_tuple", "list", "delete_thread",
         "delete_for_runs", "copy_thread", "prune"])
    for name, r in report.results.items():
        assert r.detected and r.passed is True and r.tests_failed == 0, (name, r.failures)
    assert report.conformance_level() == "FULL"


def _shape(history):
    """A state history without ids and timestamps (they differ per saver)."""
    out = []
    for s in history:
        msgs = [(m.type, m.content, [c["id"] for c in getattr(m, "tool_calls", [])])
                for m in s.values["messages"]]
        out.append((msgs, s.next, s.metadata["source"], s.metadata["step"],
                    len(s.tasks), s.parent_config is None))
    return out


def test_same_history_as_in_memory_saver(tmp_path):
    inp = {"messages": [HumanMessage("add them up", id="h1")]}
    ref_graph = EX.build(InMemorySaver())
    ref_graph.invoke(inp, EX.THREAD)
    ref = _shape(ref_graph.get_state_history(EX.THREAD))
    with TurnstoneSaver(tmp_path / "s") as saver:
        g = EX.build(saver)
        g.invoke(inp, EX.THREAD)
        live = _shape(g.get_state_history(EX.THREAD))
        limited = [s.config for s in g.get_state_history(EX.THREAD, limit=3)]
    assert live == ref and len(live) == 2 * EX.STEPS + 3
    with TurnstoneSaver(tmp_path / "s") as saver:  # reopened: rebuilt from the log
        g = EX.build(saver)
        assert _shape(g.get_state_history(EX.THREAD)) == ref
        assert [s.config for s in g.get_state_history(EX.THREAD, limit=3)] == limited
        before = limited[1]
        older = list(g.get_state_history(EX.THREAD, before=before, limit=2))
        assert [s.config["configurable"]["checkpoint_id"] for s in older] == \
            [c["configurable"]["checkpoint_id"] for c in
             [s.config for s in g.get_state_history(EX.THREAD)][2:4]]


def _dump(saver):
    return [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
            for t in saver.list(None)]


def test_index_rebuilt_from_the_log_equals_the_live_one(tmp_path):
    d = tmp_path / "s"
    with TurnstoneSaver(d) as saver:
        for tid in ("a", "b", "c"):
            parent = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            for step in range(5):
                cp = {"v": 1, "id": f"1ef{step:05d}-{tid}", "ts": "t", "channel_values": {"x": step, "y": tid},
                      "channel_versions": {"x": step + 1, "y": 1}, "versions_seen": {}, "updated_channels": None}
                cfg = saver.put(parent, cp, {"source": "loop", "step": step, "run_id": f"run-{step % 2}"},
                                {"x": step + 1} if step else {"x": 1, "y": 1})
                saver.put_writes(cfg, [("x", step), ("__error__", "boom")], f"task-{step}", "p")
                saver.put_writes(cfg, [("x", -1)], f"task-{step}", "p")  # a retry: ignored
                parent = cfg
        saver.prune(["a"], strategy="keep_latest")
        saver.delete_for_runs(["run-1"])
        saver.copy_thread("b", "b2")
        saver.delete_thread("c")
        saver.put({"configurable": {"thread_id": "c", "checkpoint_ns": ""}},
                  {"v": 1, "id": "1ef99999", "ts": "t", "channel_values": {}, "channel_versions": {},
                   "versions_seen": {}, "updated_channels": None}, {"source": "input", "step": -1}, {})
        live = _dump(saver)
    assert [t[0]["configurable"]["thread_id"] for t in live] == ["a", "b", "b", "b", "b2", "b2", "b2", "c"]
    a = live[0]
    assert a[1]["channel_values"] == {"x": 4, "y": "a"}
    assert a[4] == [("task-4", "__error__", "boom"), ("task-4", "x", 4)]
    assert all(t[2].get("run_id") != "run-1" for t in live)
    with TurnstoneSaver(d) as saver:
        assert _dump(saver) == live
        assert saver.get_tuple({"configurable": {"thread_id": "c", "checkpoint_ns": "",
                                                 "checkpoint_id": "1ef00000-c"}}) is None
    with turnstone.Store(d, read_only=True) as st:  # nothing was erased: markers only
        kinds = [e["kind"] for e in st.replay("langgraph:a")]
        assert kinds.count("langgraph/checkpoint") == 5 and kinds[-1] == "langgraph/prune"


def test_sigkill_mid_run_resumes_from_the_last_checkpoint(tmp_path):
    out = EX.crash_and_resume(str(tmp_path / "store"), str(tmp_path / "ledger"))
    assert out["exit_code"] == -9, "the child was killed, not finished"
    assert len(out["ran_before_kill"]) >= 4
    # `next` may be empty: when the kill fell after a step's writes were
    # durable but before the next checkpoint, every task of the step is done.
    assert out["resumed_from_step"] > 0, "resumed mid-run, not from scratch"
    msgs = out["final"]["messages"]
    assert msgs[-1].content == f"total {sum(range(1, EX.STEPS + 1))}"
    results = [m.tool_call_id for m in msgs if m.type == "tool"]
    assert results == [f"call-{i}" for i in range(EX.STEPS)], "each call answered once, in order"
    ran = out["ran_total"]
    assert set(ran) == set(results)
    assert len(ran) - len(set(ran)) <= 1, "only the call in flight at the kill may run twice"
    steps = [s.metadata["step"] for s in out["history"]]
    assert steps == sorted(steps, reverse=True) and len(set(steps)) == len(steps)


def test_concurrent_async_threads_are_durable_and_equal(tmp_path):
    async def main(saver, n):
        g = EX.build(saver)
        cfgs = [{"configurable": {"thread_id": f"t{i}"}, "recursion_limit": 100} for i in range(n)]
        outs = await asyncio.gather(*(g.ainvoke({"messages": [HumanMessage("go", id="h")]}, c)
                                      for c in cfgs))
        return [o["messages"][-1].content for o in outs]

    d = tmp_path / "s"
    with TurnstoneSaver(d) as saver:
        answers = asyncio.run(main(saver, 16))
        counts = {i: len(list(saver.list({"configurable": {"thread_id": f"t{i}"}}))) for i in range(16)}
    assert set(answers) == {f"total {sum(range(1, EX.STEPS + 1))}"}
    with TurnstoneSaver(d) as saver:
        assert {i: len(list(saver.list({"configurable": {"thread_id": f"t{i}"}})))
                for i in range(16)} == counts
        assert set(counts.values()) == {2 * EX.STEPS + 3}


def test_sync_and_async_reads_agree(tmp_path):
    with TurnstoneSaver(tmp_path / "s") as saver:
        EX.build(saver).invoke({"messages": [HumanMessage("go", id="h")]}, EX.THREAD)

        async def both():
            cfg = {"configurable": {"thread_id": "crash-demo"}}
            got = await saver.aget_tuple(cfg)
            listed = [t async for t in saver.alist(cfg, filter={"source": "loop"}, limit=4)]
            return got, listed

        got, listed = asyncio.run(both())
        cfg = {"configurable": {"thread_id": "crash-demo"}}
        assert got == saver.get_tuple(cfg)
        assert listed == list(saver.list(cfg, filter={"source": "loop"}, limit=4))
        assert len(listed) == 4 and all(t.metadata["source"] == "loop" for t in listed)


BIN = os.environ.get("TURNSTONE_BIN")


@pytest.mark.skipif(not BIN, reason="TURNSTONE_BIN (the turnstone CLI) is not set")
def test_the_cli_verifies_and_dumps_a_langgraph_store(tmp_path):
    d = str(tmp_path / "s")
    with TurnstoneSaver(d) as saver:
        EX.build(saver).invoke({"messages": [HumanMessage("go", id="h")]}, EX.THREAD)
    r = subprocess.run([BIN, "verify", d, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] is True and report["problems"] == [], report
    assert report["sessions"] == 1


ACKING_CHILD = r"""
import asyncio, sys
from turnstone.langgraph import TurnstoneSaver
store, acks, mode = sys.argv[1:4]
ack = open(acks, "a", buffering=1)

def cp(i):
    return {"v": 1, "id": f"1ef{i:08d}", "ts": "t", "channel_values": {"x": "v" * 300},
            "channel_versions": {"x": i + 1}, "versions_seen": {}, "updated_channels": None}

saver = TurnstoneSaver(store)
if mode == "sync":
    parent = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for i in range(10**9):
        parent = saver.put(parent, cp(i), {"source": "loop", "step": i}, {"x": i + 1})
        saver.put_writes(parent, [("x", i)], f"task-{i}")
        ack.write(f"t {parent['configurable']['checkpoint_id']}\n")
else:
    async def worker(k):
        parent = {"configurable": {"thread_id": f"t{k}", "checkpoint_ns": ""}}
        for i in range(10**9):
            parent = await saver.aput(parent, cp(i), {"source": "loop", "step": i}, {"x": i + 1})
            await saver.aput_writes(parent, [("x", i)], f"task-{i}")
            ack.write(f"t{k} {parent['configurable']['checkpoint_id']}\n")
    async def main():
        await asyncio.gather(*(worker(k) for k in range(16)))
    asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_acknowledged_checkpoint_survives_sigkill(tmp_path, mode):
    import signal
    import time

    store, acks = str(tmp_path / "s"), str(tmp_path / "acks")
    open(acks, "w").close()
    for round_ in range(3):
        child = subprocess.Popen([sys.executable, "-c", ACKING_CHILD, store, acks, mode], cwd=str(tmp_path))
        wait_for_acks(acks, child)
        time.sleep(0.05 + 0.1 * round_)  # then kill in the middle of the stream
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        acked: dict = {}
        for line in open(acks).read().splitlines():
            tid, cid = line.split()
            acked.setdefault(tid, set()).add(cid)
        assert acked, "the child acknowledged nothing: the test proved nothing"
        with TurnstoneSaver(store) as saver:
            for tid, cids in acked.items():
                listed = {t.checkpoint["id"]: t for t in saver.list({"configurable": {"thread_id": tid}})}
                missing = cids - set(listed)
                assert not missing, f"round {round_}: acknowledged checkpoints lost: {sorted(missing)[:3]}"
                for cid in cids:
                    t = listed[cid]
                    assert t.checkpoint["channel_values"] == {"x": "v" * 300}
                    assert [w[1:] for w in t.pending_writes] == [("x", t.metadata["step"])]


def test_a_copy_outlives_its_deleted_source_and_a_deleted_thread_starts_empty(tmp_path):
    d = tmp_path / "s"
    with TurnstoneSaver(d) as saver:
        EX.build(saver).invoke({"messages": [HumanMessage("go", id="h")]}, EX.THREAD)
        src = _dump(saver)
        saver.copy_thread("crash-demo", "copy")
        saver.delete_thread("crash-demo")
        assert list(saver.list({"configurable": {"thread_id": "crash-demo"}})) == []
        EX.build(saver).invoke({"messages": [HumanMessage("again", id="h2")]}, EX.THREAD)
        fresh = list(saver.list({"configurable": {"thread_id": "crash-demo"}}))
    with TurnstoneSaver(d) as saver:
        copy = list(saver.list({"configurable": {"thread_id": "copy"}}))
        assert [t.checkpoint["id"] for t in copy] == [t[1]["id"] for t in src]
        assert [t.checkpoint for t in copy] == [t[1] for t in src]
        again = list(saver.list({"configurable": {"thread_id": "crash-demo"}}))
        assert [t.checkpoint["id"] for t in again] == [t.checkpoint["id"] for t in fresh]
        assert not set(t.checkpoint["id"] for t in again) & set(t[1]["id"] for t in src)
        names = sorted(s["id"] for s in saver.store.sessions())
    assert names == ["langgraph:copy", "langgraph~1:crash-demo"]


@pytest.mark.parametrize("seed", range(3))
def test_list_answers_like_in_memory_saver_on_random_queries(tmp_path, seed):
    """list() with filters (from the metadata index, or tested one by one
    for None and non-scalar values), before, limit and namespaces gives
    LangGraph's InMemorySaver's answers; after a reload too."""
    import random

    rng = random.Random(seed)
    ref = InMemorySaver()
    d = tmp_path / "s"
    saver = TurnstoneSaver(d)
    heads: dict = {}
    n = 0
    for _ in range(120):
        tid, ns = rng.choice(["a", "b"]), rng.choice(["", "child:1"])
        n += 1
        md = {"source": rng.choice(["input", "loop", "update"]), "step": rng.randint(0, 3),
              "run_id": rng.choice(["r1", "r2", None]), "score": rng.choice([1, 2.5, True, "x"]),
              "tags": rng.choice([["t"], {"k": 1}, []])}
        if rng.random() < 0.3:
            del md["run_id"]
        cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ns}}
        if (tid, ns) in heads:
            cfg["configurable"]["checkpoint_id"] = heads[(tid, ns)]
        cp = {"v": 1, "id": f"1ef{n:06d}", "ts": "t", "channel_values": {}, "channel_versions": {},
              "versions_seen": {}, "updated_channels": None}
        ref.put(cfg, cp, md, {})
        heads[(tid, ns)] = saver.put(cfg, cp, md, {})["configurable"]["checkpoint_id"]

    def queries():
        r = random.Random(seed + 100)
        for _ in range(150):
            keys = r.sample(["source", "step", "run_id", "score", "tags"], r.randint(0, 2))
            values = {"source": ["input", "loop", "nope"], "step": [0, 1, 3], "run_id": ["r1", None],
                      "score": [1, 2.5, True, "x"], "tags": [["t"], {"k": 1}]}
            flt = {k: r.choice(values[k]) for k in keys} or None
            cfg = {"configurable": {"thread_id": r.choice(["a", "b"]), "checkpoint_ns": r.choice(["", "child:1"])}}
            before = {"configurable": {"checkpoint_id": f"1ef{r.randint(1, n + 1):06d}"}} if r.random() < 0.4 else None
            yield cfg, flt, before, r.choice([None, 1, 3, 10])

    def ids(sv, q):
        cfg, flt, before, limit = q
        return [t.checkpoint["id"] for t in sv.list(cfg, filter=flt, before=before, limit=limit)]

    want = [ids(ref, q) for q in queries()]
    assert sum(1 for w in want if w) > 50, "most queries match something"
    assert [ids(saver, q) for q in queries()] == want
    saver.close()
    with TurnstoneSaver(d) as again:
        assert [ids(again, q) for q in queries()] == want


def test_a_thread_forked_through_the_store_is_seen_by_a_saver_already_in_use(tmp_path):
    # The saver lists its threads once; a session made afterwards under a
    # thread's first-generation name (store.fork, another tool) is found.
    with TurnstoneSaver(tmp_path / "s") as saver:
        EX.build(saver).invoke({"messages": [HumanMessage("go", id="h")]}, EX.THREAD)
        src = list(saver.list({"configurable": {"thread_id": "crash-demo"}}))
        at = len(saver.store.replay("langgraph:crash-demo"))
        saver.store.fork("langgraph:crash-demo", at=at, child="langgraph:side")
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"crash-demo", "side"}
        side = list(saver.list({"configurable": {"thread_id": "side"}}))
        assert [t.checkpoint["id"] for t in side] == [t.checkpoint["id"] for t in src]
        saver.store.fork("langgraph:crash-demo", at=at, child="langgraph:other")
        other = list(saver.list({"configurable": {"thread_id": "other"}}))
        assert [t.checkpoint["id"] for t in other] == [t.checkpoint["id"] for t in src]


def test_delete_for_runs_skips_a_thread_another_saver_deleted(tmp_path):
    # Found by mypy --strict: a saver that had listed a thread, deleted
    # since through another saver on the store, failed with AttributeError
    # in delete_for_runs.
    d = tmp_path / "s"
    with TurnstoneSaver(d) as a, TurnstoneSaver(d) as b:
        EX.build(a).invoke({"messages": [HumanMessage("go", id="h")]}, EX.THREAD)
        assert "crash-demo" in b._names()
        a.delete_thread("crash-demo")
        b.delete_for_runs(["run-1"])
        assert list(b.list({"configurable": {"thread_id": "crash-demo"}})) == []
