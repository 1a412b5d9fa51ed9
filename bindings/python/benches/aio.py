"""asyncio benchmark of the Python package (not a test), issue 39 §5:

    target/venv/bin/python benches/aio.py [--followers 1000] [--writers 64] [--seconds 5] [--runs 3]

One event loop holds --followers idle subscriptions (each awaiting
``anext()`` on a session nobody writes) and --writers tasks, each appending
a 1 KiB user/message to its own session and awaiting ``aflush()`` before
the next; a ticker task sleeps 1 ms at a time and records how late each
wake-up is. Reported per run: durable events/s, aflush latency (p50, p99,
max), the loop's tick gaps (largest, p99, how many over 10 ms), and the
process's OS threads.
Then the same writers with no followers, flushing through
``asyncio.to_thread(session.flush)`` (what aflush was before), for
comparison; with the followers also on threads that configuration never
finishes (the followers take every executor thread).
"""

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time

import turnstone


async def ticker(stop, gaps):
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last - 0.001)
        last = now


async def writers_loop(store, n, seconds, flush):
    data = {"content": [{"type": "text", "text": "x" * 1000}]}
    sessions = [store.create_session(f"w{k}-{time.monotonic_ns()}") for k in range(n)]
    lat = []
    stop_at = time.monotonic() + seconds

    async def one(s):
        count = 0
        while time.monotonic() < stop_at:
            s.append("user/message", data, surface="append")
            t0 = time.perf_counter()
            await flush(s)
            lat.append(time.perf_counter() - t0)
            count += 1
        return count

    t0 = time.monotonic()
    counts = await asyncio.gather(*(one(s) for s in sessions))
    return sum(counts) / (time.monotonic() - t0), lat


async def run(d, followers, writers, seconds):
    with turnstone.Store(os.path.join(d, "st")) as st:
        idle = [st.create_session(f"f{i}") for i in range(followers)]
        for s in idle:
            s.flush()
        subs = [st.subscribe(s.id, 0) for s in idle]
        waiting = [asyncio.ensure_future(sub.anext()) for sub in subs]
        stop, gaps = asyncio.Event(), []
        tick = asyncio.ensure_future(ticker(stop, gaps))
        await asyncio.sleep(0.1)
        threads = len(os.listdir('/proc/self/task'))
        rate, lat = await writers_loop(st, writers, seconds, lambda s: s.aflush())
        threads = max(threads, len(os.listdir('/proc/self/task')))
        stop.set()
        await tick
        for w in waiting:
            w.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        # The old way, for comparison: a thread per flush, no followers.
        old_rate, old_lat = await writers_loop(st, writers, seconds,
                                               lambda s: asyncio.to_thread(s.flush))
    q = statistics.quantiles(lat, n=100)
    oq = statistics.quantiles(old_lat, n=100)
    return {
        "events_per_s": round(rate), "aflush_p50_ms": round(q[49] * 1e3, 3),
        "aflush_p99_ms": round(q[98] * 1e3, 3), "aflush_max_ms": round(max(lat) * 1e3, 3),
        "max_tick_gap_ms": round(max(gaps) * 1e3, 3),
        "tick_gap_p99_ms": round(statistics.quantiles(gaps, n=100)[98] * 1e3, 3),
        "ticks_over_10ms": sum(g > 0.010 for g in gaps), "ticks": len(gaps), "threads": threads,
        "to_thread_events_per_s": round(old_rate), "to_thread_p50_ms": round(oq[49] * 1e3, 3),
        "to_thread_p99_ms": round(oq[98] * 1e3, 3),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--followers", type=int, default=1000)
    ap.add_argument("--writers", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    rows = []
    for r in range(a.runs):
        with tempfile.TemporaryDirectory() as d:
            row = asyncio.run(run(d, a.followers, a.writers, a.seconds))
        row.update(run=r, loadavg_1m=os.getloadavg()[0])
        rows.append(row)
        print(json.dumps(row))
    med = {k: statistics.median(x[k] for x in rows) for k in rows[0] if k != "run"}
    print(f"medians of {a.runs}: {a.followers} idle followers, {a.writers} writers: "
          f"{med['events_per_s']:.0f} durable events/s, aflush p50 {med['aflush_p50_ms']:.2f} ms "
          f"p99 {med['aflush_p99_ms']:.2f} ms, largest tick gap {med['max_tick_gap_ms']:.2f} ms "
          f"(p99 {med['tick_gap_p99_ms']:.2f} ms, {med['ticks_over_10ms']:.0f} of {med['ticks']:.0f} ticks over 10 ms), "
          f"{med['threads']:.0f} threads; to_thread(flush) without followers: "
          f"{med['to_thread_events_per_s']:.0f} events/s, p50 {med['to_thread_p50_ms']:.2f} ms")


if __name__ == "__main__":
    main()
