"""Several processes on one store directory (docs/MULTIPROCESS.md, issue
40): the first process to open it hosts it, the others write through it;
the host is killed again and again and no acknowledged event is lost."""

import os
import random
import subprocess
import sys
import threading
import time

import pytest

from turnstone import Store, TurnstoneError, error_kind

WORKER = r"""
import os, sys, threading
from turnstone import Store, TurnstoneError, error_kind

d, n = sys.argv[1], int(sys.argv[2])
st = Store(d)
out = threading.Lock()

def say(line):
    with out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

say("READY " + st.backend)
stop = os.path.join(d, "stop")

def run(t):
    sid = f"w{os.getpid()}-{t}"
    s, k = None, 0
    while not os.path.exists(stop):
        try:
            if s is None:
                try:
                    s = st.open_session(sid)
                except TurnstoneError as e:
                    if error_kind(e) != "unknown_session":
                        raise
                    s = st.create_session(sid)
            k += 1
            tag = f"{sid}/{k}"
            seq = s.append("user/message", {"content": [{"type": "text", "text": tag}]},
                           surface="append")
            s.flush()
            say(f"ACK {sid} {seq} {tag}")
        except TurnstoneError as e:
            if error_kind(e) != "host_lost":
                raise
            if s is not None:
                s.close()
            s = None

threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
for th in threads:
    th.start()
for th in threads:
    th.join()
st.close()
say("DONE")
"""


def lock_holder(d):
    """The pid holding the store's lock (the host), from /proc/locks."""
    ino = os.stat(os.path.join(d, "LOCK")).st_ino
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if "->" in parts:
                continue
            if parts[1] == "FLOCK" and parts[5].endswith(f":{ino}"):
                return int(parts[4])
    return None


def test_a_second_process_writes_through_the_first(tmp_path):
    d = str(tmp_path / "s")
    with Store(d) as st:
        assert st.backend == "embedded"
        code = (
            "import sys\nfrom turnstone import Store\n"
            "st = Store(sys.argv[1])\nassert st.backend == 'shared', st.backend\n"
            "s = st.create_session('child')\n"
            "s.append('user/message', {'content': [{'type': 'text', 'text': 'from the child'}]}, surface='append')\n"
            "s.flush()\nst.close()\n"
        )
        subprocess.run([sys.executable, "-c", code, d], check=True, timeout=60,
                       cwd=str(tmp_path))
        evs = st.open_read_only("child").events()
        assert evs[-1]["data"]["content"][0]["text"] == "from the child"


def test_the_host_killed_20_times_loses_no_acknowledged_event(tmp_path):
    d = str(tmp_path / "fleet")
    Store(d).close()
    lines, lock = [], threading.Lock()
    kids = []

    def start():
        # (cwd: the installed package, not the source folder, is imported)
        p = subprocess.Popen([sys.executable, "-c", WORKER, d, "8"],
                             stdout=subprocess.PIPE, text=True, cwd=str(tmp_path))

        def read():
            for line in p.stdout:
                with lock:
                    lines.append(line.strip())
        threading.Thread(target=read, daemon=True).start()
        kids.append(p)

    for _ in range(4):
        start()
    rng = random.Random(40)
    kills = 0
    deadline = time.time() + 240
    while kills < 20:
        assert time.time() < deadline, f"only {kills} kills in 240 s"
        time.sleep(rng.uniform(0.2, 0.6))
        pid = lock_holder(d)
        victim = next((p for p in kids if p.pid == pid and p.poll() is None), None)
        if victim is None:
            continue
        victim.kill()
        victim.wait()
        kids.remove(victim)
        kills += 1
        start()
    open(os.path.join(d, "stop"), "w").close()
    for p in kids:
        # No hang: every worker stops once asked.
        assert p.wait(timeout=60) == 0
    time.sleep(0.2)
    with lock:
        acked = [l.split(" ") for l in lines if l.startswith("ACK ")]
    assert len(acked) > 200, len(acked)
    with Store(d, read_only=True) as st:
        seen = set()
        by_session = {}
        for info in st.sessions():
            evs = st.open_read_only(info["id"]).events()
            by_session[info["id"]] = evs
            for e in evs:
                if e["kind"] == "user/message":
                    tag = e["data"]["content"][0]["text"]
                    assert tag not in seen, f"{tag} twice"
                    seen.add(tag)
        for _, sid, seq, tag in acked:
            evs = by_session[sid]
            assert int(seq) < len(evs), f"acknowledged {tag} lost"
            assert evs[int(seq)]["data"]["content"][0]["text"] == tag
    print(f"20 hosts killed: {len(acked)} acknowledged events, all there, none twice")


def test_a_client_follows_searches_and_awaits_through_the_host(tmp_path):
    import asyncio

    d = str(tmp_path / "s")
    with Store(d) as host, Store(d) as client:
        assert client.backend == "shared"
        s = host.create_session("talk")
        sub = client.subscribe("talk", 0)
        s.append("user/message", {"content": [{"type": "text", "text": "find the zebra"}]},
                 surface="append")
        s.flush()
        e = next(sub)
        assert e["seq"] == 0 and e["kind"] == "user/message"
        hits = client.search("zebra")
        assert [(h["session"], h["seq"]) for h in hits] == [("talk", 0)]
        # A client's session: appended through the host, awaited without
        # holding the loop.
        c = client.create_session("mine")
        c.append("user/message", {"content": [{"type": "text", "text": "b"}]}, surface="append")
        asyncio.run(c.aflush())
        assert len(host.open_read_only("mine").events()) == 1
        # What only the host runs is refused in a client, saying so.
        with pytest.raises(TurnstoneError) as err:
            client.collect()
        assert error_kind(err.value) == "refused"
        assert "hosts the store" in str(err.value)


LANGGRAPH_CHILD = r"""
import sys
from typing import TypedDict
from langgraph.graph import END, START, StateGraph
from turnstone.langgraph import TurnstoneSaver

class S(TypedDict):
    count: int

b = StateGraph(S)
b.add_node("inc", lambda s: {"count": s["count"] + 1})
b.add_edge(START, "inc")
b.add_edge("inc", END)
saver = TurnstoneSaver(sys.argv[1])
assert saver.store.backend == "shared", saver.store.backend
graph = b.compile(checkpointer=saver)
cfg = {"configurable": {"thread_id": "worker-thread"}}
assert graph.invoke({"count": 0}, cfg) == {"count": 1}
assert graph.invoke({"count": 5}, cfg) == {"count": 6}
print(graph.get_state(cfg).values["count"])
"""


def test_a_langgraph_worker_process_checkpoints_through_the_host(tmp_path):
    # put and put_writes flush from different threads of the worker: each
    # flush answers for its own appends (a sibling's later ones made a
    # false host_lost once).
    d = str(tmp_path / "lg")
    with Store(d) as st:
        r = subprocess.run([sys.executable, "-c", LANGGRAPH_CHILD, d], capture_output=True,
                           text=True, timeout=120, cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.strip() == "6"
        kinds = [e["kind"] for e in st.open_read_only("langgraph:worker-thread").events()]
        assert kinds.count("langgraph/checkpoint") >= 4
