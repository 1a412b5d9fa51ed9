"""Benchmarks of the Python package (not tests): run with the package
installed (bash bindings/python/run.sh installs it into target/venv):

    target/venv/bin/python benches/bench.py [--turnstone-bin PATH] [--seconds 5]

1. append of a 1 KiB user/message from Python: median time per call over
   batches of 100 calls, 20,000 calls into sessions of 1,000 events (the
   steady cost), then 20,000 into one session (which also grows the
   session's in-memory message cache by ~20 MB);
2. the fleet turn shape (turn/start, user/message, step/start, 20
   assistant/chunk, assistant/message with a tool_use, tool/call, a
   durability wait, tool/result, step/end, turn/end, a durability wait)
   over 256 sessions from 8 Python threads, durable events/s; next to
   `turnstone fleet --sessions 256 --threads 8 --events 200000` (Rust, the same machine,
   the same run) when --turnstone-bin is given;
3. durable writers: --writers threads (32), each appending a 1 KiB
   user/message to its own session and waiting until it is durable before
   the next (an acknowledged event per wait), durable events/s; next to
   the same loop on the standard library's sqlite3 (one WAL database,
   synchronous=FULL, a connection per thread, one INSERT and COMMIT per
   event), in the same run.
"""

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time

import turnstone


def bench_append(d):
    """Median µs per append: (sessions of 1,000 appends, one session of
    20,000). A session keeps its model-visible messages in memory, so the
    second also pays for ~20 MB of fresh memory (first-touch page faults,
    which cost much on this VM); the first is the steady cost."""
    data = {"content": [{"type": "text", "text": "x" * 1000}]}
    with turnstone.Store(d) as st:
        out = []
        for per_session in (10, 200):
            per_call = []
            s = None
            for b in range(200):
                if b % per_session == 0:
                    if s is not None:
                        s.flush()
                    s = st.create_session(f"append-{per_session}-{b}")
                t0 = time.perf_counter_ns()
                for _ in range(100):
                    s.append("user/message", data, surface="append")
                per_call.append((time.perf_counter_ns() - t0) / 100 / 1000)
            s.flush()
            s = None
            out.append(statistics.median(per_call))
        return out


def turn(s, t, chunk):
    n = 0
    s.append("turn/start", {"turn_id": t}); n += 1
    s.user("please do the thing " * 15); n += 1
    s.append("step/start", {"turn_id": t, "step_id": "s"}); n += 1
    for j in range(20):
        s.append("assistant/chunk", {"index": j, "text": chunk}); n += 1
    s.assistant({"content": [{"type": "text", "text": "y" * 1000},
                             {"type": "tool_use", "id": t + "c", "name": "sh", "input": {"cmd": "ls"}}],
                 "stop_reason": "tool_use"}); n += 1
    with s.tool_call(t + "c", "sh", {"cmd": "ls"}) as call:   # durability wait
        call.result("z" * 4000)
    n += 2
    s.append("step/end", {"turn_id": t, "step_id": "s", "reason": {"kind": "tool_use"}}); n += 1
    s.append("turn/end", {"turn_id": t, "reason": {"kind": "completed"}}); n += 1
    s.flush()                                                 # durability wait
    return n


def bench_fleet(d, sessions, threads, seconds):
    with turnstone.Store(d) as st:
        handles = [st.create_session(f"s{i}") for i in range(sessions)]
        counts = [0] * threads
        stop = time.monotonic() + seconds
        chunk = "c" * 80

        errors = []

        def work(k):
            try:
                run(k)
            except BaseException as e:  # a failed thread must fail the bench
                errors.append(e)

        def run(k):
            mine = handles[k::threads]
            i = 0
            while time.monotonic() < stop:
                for s in mine:
                    counts[k] += turn(s, f"t{i}", chunk)
                    if time.monotonic() >= stop:
                        break
                i += 1

        t0 = time.monotonic()
        ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        secs = time.monotonic() - t0
        if errors:
            raise errors[0]
        return sum(counts) / secs


def _threads(n, seconds, step, setup=None):
    """Run ``step(k, state)`` in n threads until the time is up; events/s."""
    counts = [0] * n
    errors = []
    stop = time.monotonic() + seconds

    def work(k):
        try:
            state = setup(k) if setup else None
            while time.monotonic() < stop:
                step(k, state)
                counts[k] += 1
        except BaseException as e:  # a failed thread must fail the bench
            errors.append(e)

    t0 = time.monotonic()
    ts = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts) / (time.monotonic() - t0)


def bench_writers(d, writers, seconds):
    """Durable events/s of ``writers`` threads, each appending to its own
    session and waiting until the event is durable: turnstone, then
    sqlite3 (WAL, synchronous=FULL), the same loop."""
    data = {"content": [{"type": "text", "text": "x" * 1000}]}
    with turnstone.Store(os.path.join(d, "ts")) as st:
        handles = [st.create_session(f"w{k}") for k in range(writers)]

        def ts_step(k, _):
            handles[k].append("user/message", data, surface="append")
            handles[k].flush()

        ts = _threads(writers, seconds, ts_step)
    db = os.path.join(d, "peer.sqlite3")
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE events (session TEXT, seq INTEGER, kind TEXT, data TEXT,"
                " PRIMARY KEY (session, seq))")
    con.commit()
    con.close()
    text = json.dumps(data)

    def sq_setup(k):
        c = sqlite3.connect(db, timeout=60, isolation_level=None)
        c.execute("PRAGMA synchronous=FULL")
        return [c, 0]

    def sq_step(k, state):
        c, seq = state
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO events VALUES (?, ?, 'user/message', ?)", (f"w{k}", seq, text))
        c.execute("COMMIT")
        state[1] = seq + 1

    sq = _threads(writers, seconds, sq_step, sq_setup)
    return ts, sq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--turnstone-bin")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--writers", type=int, default=32)
    a = ap.parse_args()
    rows = []
    for r in range(a.runs):
        with tempfile.TemporaryDirectory() as d:
            per_call, one_session = bench_append(os.path.join(d, "a"))
            py = bench_fleet(os.path.join(d, "f"), 256, 8, a.seconds)
            rs = None
            if a.turnstone_bin:
                out = subprocess.run(
                    [a.turnstone_bin, "fleet", os.path.join(d, "r"), "--sessions", "256",
                     "--threads", "8", "--events", "200000"],
                    capture_output=True, text=True, check=True).stdout
                rs = json.loads(out.splitlines()[0])["events_per_s"]
            w_ts, w_sq = bench_writers(d, a.writers, a.seconds)
        load = os.getloadavg()[0]
        rows.append((per_call, py, rs, one_session, w_ts, w_sq))
        print(json.dumps({"run": r, "append_1k_us_median": round(per_call, 2),
                          "append_1k_one_session_us_median": round(one_session, 2),
                          "python_fleet_events_per_s": round(py),
                          "rust_fleet_events_per_s": rs and round(rs),
                          "ratio": rs and round(py / rs, 2),
                          f"writers_{a.writers}_turnstone_durable_events_per_s": round(w_ts),
                          f"writers_{a.writers}_sqlite3_durable_events_per_s": round(w_sq),
                          "writers_ratio": round(w_ts / w_sq, 1), "loadavg_1m": load}))
    med = lambda i: statistics.median(x[i] for x in rows)
    print(f"medians of {a.runs}: append 1 KiB {med(0):.2f} us/call "
          f"({med(3):.2f} into one 20,000-event session); fleet python {med(1):.0f} ev/s"
          + (f", rust {med(2):.0f} ev/s, ratio {med(1) / med(2):.2f}" if a.turnstone_bin else "")
          + f"; {a.writers} durable writers: turnstone {med(4):.0f} ev/s, sqlite3 {med(5):.0f} ev/s, "
          f"ratio {statistics.median(x[4] / x[5] for x in rows):.1f}")


if __name__ == "__main__":
    main()
