"""Framework backends against the SQLite backends they replace, in one run
(benchmarks, not timed tests):

1. LangGraph: a graph of 20 super-steps run on 64 threads at once
   (``ainvoke`` under ``asyncio.gather``), TurnstoneSaver vs LangGraph's
   AsyncSqliteSaver: checkpoints/s (``aput`` calls over wall time) and the
   p99 latency of a super-step (the time between two consecutive
   executions of the step node in one thread: the step's checkpoint and
   writes included). LangGraph's InMemorySaver (no I/O, not durable) is
   run too, as the ceiling LangGraph's own CPU cost sets for any saver.
   With ``--pg URL`` LangGraph's AsyncPostgresSaver runs too, on a pool of
   connections to that server (a fresh database per run; start a private
   server with ``eval "$(bash .ci/postgres.sh start)"`` and pass ``--pg $PGURL``).
2. Agents SDK: 64 sessions at once, each ``add_items`` 50 times (2 items a
   call: a function call and its output), TurnstoneSession vs the SDK's
   SQLiteSession on a file: items/s and p99 ``add_items`` latency.

Every store and database is on the same file system (a temporary
directory under --dir). Both sides are durable per call: turnstone waits
for its group commit; SQLite runs in WAL mode with synchronous=FULL (its
default here; printed), so every commit is fsynced; PostgreSQL runs with
fsync and synchronous_commit on (printed).

    python benches/frameworks.py [--runs 3] [--threads 64] [--dir /tmp] [--pg URL]

Prints each run, then the medians and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import bisect
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from typing import TypedDict

STEPS = 20


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))]


# ---- LangGraph


class State(TypedDict):
    n: int
    text: str


def build_graph(checkpointer, stamps):
    from langgraph.graph import END, START, StateGraph

    def step(state: State, config) -> dict:
        stamps.setdefault(config["configurable"]["thread_id"], []).append(time.perf_counter())
        n = state["n"] + 1
        return {"n": n, "text": f"step {n}: " + "x" * 500}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < STEPS else END, ["step", END])
    return g.compile(checkpointer=checkpointer)


def count_puts(saver, returns):
    """Wrap ``aput``: count the calls and note when each returns, per thread."""
    counter = [0]
    orig = saver.aput

    async def aput(config, *a, **k):
        counter[0] += 1
        out = await orig(config, *a, **k)
        returns.setdefault(config["configurable"]["thread_id"], []).append(time.perf_counter())
        return out

    saver.aput = aput
    return counter


async def run_graph(saver, threads: int) -> dict:
    returns: dict = {}
    counter = count_puts(saver, returns)
    stamps: dict = {}
    graph = build_graph(saver, stamps)
    cfgs = [{"configurable": {"thread_id": f"t{i}"}, "recursion_limit": 100} for i in range(threads)]
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(graph.ainvoke({"n": 0, "text": ""}, c) for c in cfgs))
    wall = time.perf_counter() - t0
    assert all(o["n"] == STEPS for o in outs)
    # A super-step's latency: from its node starting to its checkpoint
    # being saved (the first aput of that thread to return after it).
    lat = []
    for tid, starts in stamps.items():
        rets = returns[tid]
        for s in starts:
            i = bisect.bisect_right(rets, s)
            lat.append(rets[i] - s)
    return {"checkpoints": counter[0], "wall_s": wall, "checkpoints_per_s": counter[0] / wall,
            "p99_step_ms": p99(lat) * 1e3}


async def langgraph_turnstone(d: str, threads: int) -> dict:
    from turnstone.langgraph import TurnstoneSaver

    with TurnstoneSaver(os.path.join(d, "ts-lg")) as saver:
        return await run_graph(saver, threads)


async def langgraph_memory(d: str, threads: int) -> dict:
    """LangGraph's InMemorySaver: no I/O, no durability: the ceiling that
    LangGraph's own CPU cost leaves any saver on this machine."""
    from langgraph.checkpoint.memory import InMemorySaver

    return await run_graph(InMemorySaver(), threads)


async def langgraph_sqlite(d: str, threads: int) -> dict:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(os.path.join(d, "lg.sqlite")) as saver:
        await saver.setup()
        async with saver.conn.execute("PRAGMA synchronous") as cur:
            sync = (await cur.fetchone())[0]
        async with saver.conn.execute("PRAGMA journal_mode") as cur:
            mode = (await cur.fetchone())[0]
        out = await run_graph(saver, threads)
        out["sqlite"] = f"journal_mode={mode} synchronous={sync}"
        return out


PG_URL = None
PG_POOL = 16


async def langgraph_postgres(d: str, threads: int) -> dict:
    """LangGraph's AsyncPostgresSaver on a connection pool (the setup its
    docs give for concurrent use), in a database made for this run."""
    import psycopg
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    db = "tsbench_" + os.path.basename(d).replace("-", "_").lower()
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
        settings = "fsync={} synchronous_commit={}".format(
            admin.execute("SHOW fsync").fetchone()[0], admin.execute("SHOW synchronous_commit").fetchone()[0])
    url = PG_URL.rsplit("/", 1)[0] + "/" + db
    try:
        async with AsyncConnectionPool(url, min_size=PG_POOL, max_size=PG_POOL, open=False,
                                       kwargs={"autocommit": True, "prepare_threshold": 0,
                                               "row_factory": dict_row}) as pool:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            out = await run_graph(saver, threads)
        out["postgres"] = f"{settings} pool={PG_POOL}"
        return out
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{db}" WITH (FORCE)')


# ---- Agents SDK

CALLS = 50


def items(i: int, k: int) -> list:
    return [
        {"type": "function_call", "id": f"fc_{i}_{k}", "call_id": f"c_{i}_{k}", "name": "search",
         "arguments": json.dumps({"q": "x" * 200}), "status": "completed"},
        {"type": "function_call_output", "call_id": f"c_{i}_{k}", "output": "y" * 300},
    ]


async def run_sessions(sessions) -> dict:
    lat: list = []

    async def one(i, s):
        for k in range(CALLS):
            batch = items(i, k)
            t = time.perf_counter()
            await s.add_items(batch)
            lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, s) for i, s in enumerate(sessions)))
    wall = time.perf_counter() - t0
    n = len(sessions) * CALLS * 2
    assert len(await sessions[0].get_items()) == CALLS * 2
    return {"items": n, "wall_s": wall, "items_per_s": n / wall, "p99_add_items_ms": p99(lat) * 1e3}


async def agents_turnstone(d: str, threads: int) -> dict:
    from turnstone.agents import TurnstoneSession

    sessions = [TurnstoneSession(f"s{i}", os.path.join(d, "ts-ag")) for i in range(threads)]
    try:
        return await run_sessions(sessions)
    finally:
        for s in sessions:
            s.close()


async def agents_sqlite(d: str, threads: int) -> dict:
    from agents.memory import SQLiteSession

    path = os.path.join(d, "ag.sqlite")
    sessions = [SQLiteSession(f"s{i}", path) for i in range(threads)]
    try:
        return await run_sessions(sessions)
    finally:
        for s in sessions:
            s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--pg", default=None, help="a PostgreSQL URL: run AsyncPostgresSaver too")
    args = ap.parse_args()
    global PG_URL
    PG_URL = args.pg
    print("loadavg at start:", open("/proc/loadavg").read().strip())
    cases = [("langgraph", "turnstone", langgraph_turnstone), ("langgraph", "sqlite", langgraph_sqlite),
             ("agents", "turnstone", agents_turnstone), ("agents", "sqlite", agents_sqlite),
             ("langgraph", "memory", langgraph_memory)]
    if PG_URL:
        cases.append(("langgraph", "postgres", langgraph_postgres))
    results: dict = {(a, b): [] for a, b, _ in cases}
    for r in range(args.runs):
        # Alternate the order so neither side always runs on a warmer cache.
        order = cases if r % 2 == 0 else [cases[1], cases[0], cases[3], cases[2]] + cases[4:]
        for area, backend, fn in order:
            d = tempfile.mkdtemp(prefix="tsbench-", dir=args.dir)
            try:
                out = asyncio.run(fn(d, args.threads))
            finally:
                shutil.rmtree(d, ignore_errors=True)
            results[(area, backend)].append(out)
            print(f"run {r + 1} {area:9s} {backend:9s} " + json.dumps(
                {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}))
    print("loadavg at end:", open("/proc/loadavg").read().strip())
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0] if not isinstance(v[0][m], str)}
           for k, v in results.items()}
    print(f"\nmedians of {args.runs} runs, {args.threads} concurrent threads/sessions:")
    lg_t, lg_s = med[("langgraph", "turnstone")], med[("langgraph", "sqlite")]
    ag_t, ag_s = med[("agents", "turnstone")], med[("agents", "sqlite")]
    print(f"  LangGraph  TurnstoneSaver   {lg_t['checkpoints_per_s']:9.0f} checkpoints/s  p99 step {lg_t['p99_step_ms']:7.2f} ms")
    print(f"  LangGraph  AsyncSqliteSaver {lg_s['checkpoints_per_s']:9.0f} checkpoints/s  p99 step {lg_s['p99_step_ms']:7.2f} ms")
    lg_m = med[("langgraph", "memory")]
    print(f"  LangGraph  InMemorySaver    {lg_m['checkpoints_per_s']:9.0f} checkpoints/s  p99 step {lg_m['p99_step_ms']:7.2f} ms"
          "  (no I/O: the ceiling)")
    print(f"    ratio: {lg_t['checkpoints_per_s'] / lg_s['checkpoints_per_s']:.2f}x checkpoints/s, "
          f"p99 step {lg_s['p99_step_ms'] / lg_t['p99_step_ms']:.2f}x lower")
    if PG_URL:
        lg_p = med[("langgraph", "postgres")]
        print(f"  LangGraph  AsyncPostgresSaver {lg_p['checkpoints_per_s']:7.0f} checkpoints/s  p99 step {lg_p['p99_step_ms']:7.2f} ms"
              f"  ({results[('langgraph', 'postgres')][0]['postgres']})")
        print(f"    ratio: {lg_t['checkpoints_per_s'] / lg_p['checkpoints_per_s']:.2f}x checkpoints/s, "
              f"p99 step {lg_p['p99_step_ms'] / lg_t['p99_step_ms']:.2f}x lower")
    print(f"  Agents     TurnstoneSession {ag_t['items_per_s']:9.0f} items/s  p99 add_items {ag_t['p99_add_items_ms']:7.2f} ms")
    print(f"  Agents     SQLiteSession    {ag_s['items_per_s']:9.0f} items/s  p99 add_items {ag_s['p99_add_items_ms']:7.2f} ms")
    print(f"    ratio: {ag_t['items_per_s'] / ag_s['items_per_s']:.2f}x items/s, "
          f"p99 add_items {ag_s['p99_add_items_ms'] / ag_t['p99_add_items_ms']:.2f}x lower")
    print(f"  SQLite: {results[('langgraph', 'sqlite')][0]['sqlite']}")
    per_run = lambda area, m: ", ".join(  # noqa: E731
        f"{t[m] / q[m]:.2f}x" for t, q in zip(results[(area, "turnstone")], results[(area, "sqlite")]))
    print(f"  per-run ratios (turnstone / sqlite, same run): LangGraph checkpoints/s {per_run('langgraph', 'checkpoints_per_s')}; "
          f"Agents items/s {per_run('agents', 'items_per_s')}")


if __name__ == "__main__":
    main()
