"""The Python package on a PostgreSQL database (issue 18): the same calls
as on a store directory, leases between processes, and a worker killed
mid-turn whose session another process takes over and repairs.

Against a real server: ``TURNSTONE_PG_URL``, or a private one started with
``.ci/postgres.sh`` (initdb into a temp dir, a loopback port) and stopped
at the end. Each test gets its own database."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

import turnstone

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, ".ci", "postgres.sh")


@pytest.fixture(scope="module")
def server():
    url = os.environ.get("TURNSTONE_PG_URL")
    if url:
        yield url
        return
    out = subprocess.run(["bash", SCRIPT, "start"], capture_output=True, text=True)
    assert out.returncode == 0, (
        "could not start a private PostgreSQL (install Debian's postgresql, "
        "or set TURNSTONE_PG_URL): " + out.stderr
    )
    words = dict(w.split("=", 1) for w in out.stdout.split() if "=" in w)
    try:
        yield words["PGURL"]
    finally:
        subprocess.run(["bash", SCRIPT, "stop", words["PGDIR_TURNSTONE"]])


@pytest.fixture
def db(server):
    name = "py_" + uuid.uuid4().hex[:12]
    subprocess.run(["psql", server, "-qc", f"CREATE DATABASE {name}"], check=True)
    yield server.rsplit("/", 1)[0] + "/" + name
    subprocess.run(
        ["psql", server, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=True
    )


NATIVE = [
    {"type": "thinking", "thinking": "plan", "signature": "c2lnbmF0dXJl"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    {"type": "hologram", "depth": 3},
    {"type": "text", "text": "looking"},
]


def workload(store, sid):
    s = store.create_session(sid)
    for t in range(3):
        s.append("turn/start", {"turn_id": f"t{t}"})
        s.user(f"question {t} about zebras")
        s.assistant({"content": NATIVE + [{"type": "tool_use", "id": f"c{t}", "name": "sh", "input": {"t": t}}],
                     "stop_reason": "tool_use"})
        with s.tool_call(f"c{t}", "sh", {"t": t}) as call:
            call.result(f"ran {t}")
        s.assistant({"content": [{"type": "text", "text": f"answer {t}"}], "stop_reason": "end_turn"})
        s.append("turn/end", {"turn_id": f"t{t}", "reason": {"kind": "completed"}})
    s.flush()
    return s


def shape(events):
    return [(e["seq"], e["kind"], e["data"], e.get("surface")) for e in events]


def test_the_same_calls_give_the_same_session_on_a_directory_and_a_database(db, tmp_path):
    with turnstone.Store(str(tmp_path / "dir")) as d, turnstone.Store(db) as p:
        assert (d.backend, p.backend) == ("embedded", "postgres")
        a, b = workload(d, "s1"), workload(p, "s1")
        for fmt in (None, "anthropic", "openai-responses", "openai-chat"):
            assert a.messages(format=fmt) == b.messages(format=fmt), fmt
        assert shape(a.events()) == shape(b.events())
        # Provider-native blocks come back unchanged.
        first = next(e for e in b.events() if e["kind"] == "assistant/message")
        assert first["data"]["content"][: len(NATIVE)] == NATIVE
        a.close()
        b.close()
        assert shape(d.replay("s1")) == shape(p.replay("s1"))
        child_d = d.fork("s1", at=7, child="s1-fork")
        child_p = p.fork("s1", at=7, child="s1-fork")
        assert child_d == child_p == "s1-fork"
        assert d.open_read_only("s1-fork").messages() == p.open_read_only("s1-fork").messages()
        ld = [(x["id"], x["events"], x["open_turn"], x["parent"]) for x in d.sessions()]
        lp = [(x["id"], x["events"], x["open_turn"], x["parent"]) for x in p.sessions()]
        assert ld == lp
        # PostgreSQL's own text search finds what the session layer wrote.
        hits = p.search("zebras")
        assert sorted(h["seq"] for h in hits if h["session"] == "s1") == sorted(
            e["seq"] for e in p.replay("s1") if "zebras" in str(e["data"])
        )
        assert p.delete("s1-fork") >= 7
        with pytest.raises(turnstone.TurnstoneError) as e:
            p.open_read_only("s1-fork")
        assert turnstone.error_kind(e.value) in ("session_deleted", "unknown_session")
        # The online collection is the directory's (a database is collected
        # by `turnstone gc URL` or the server).
        with pytest.raises(turnstone.TurnstoneError) as e:
            p.collect()
        assert turnstone.error_kind(e.value) == "refused"


def test_a_session_has_one_writer_across_processes(db):
    a = turnstone.Store(db, owner="worker-a")
    b = turnstone.Store(db, owner="worker-b")
    s = a.create_session("shared")
    s.user("from a")
    s.flush()
    with pytest.raises(turnstone.TurnstoneError) as e:
        b.open_session("shared")
    assert turnstone.error_kind(e.value) == "fenced"
    # Released: b writes at once, and a's view follows.
    s.close()
    t = b.open_session("shared")
    assert t.repair_report is None or t.repair_report.get("appended", 0) == 0
    t.user("from b")
    t.flush()
    assert [m["content"][0]["text"] for m in a.open_read_only("shared").messages()] == [
        "from a",
        "from b",
    ]
    t.close()
    a.close()
    b.close()


WORKER = r"""
import sys, turnstone
url, acks = sys.argv[1:3]
st = turnstone.Store(url, owner="doomed-worker", lease_ttl_ms=2000)
s = st.create_session("agent")
ack = open(acks, "a", buffering=1)
turn = 0
while True:
    t = f"t{turn}"
    s.append("turn/start", {"turn_id": t})
    s.user(f"question {turn}")
    s.assistant({"content": [{"type": "tool_use", "id": f"{t}-c", "name": "sh", "input": {}}],
                 "stop_reason": "tool_use"})
    with s.tool_call(f"{t}-c", "sh", {}) as call:
        call.result("ok")
    s.assistant({"content": [{"type": "text", "text": f"answer {turn}"}], "stop_reason": "end_turn"})
    s.append("turn/end", {"turn_id": t, "reason": {"kind": "completed"}})
    s.flush()
    ack.write(f"{len(s)}\n")
    turn += 1
    if turn >= 3:
        # A turn left open, durable, then the worker dies.
        s.append("turn/start", {"turn_id": "open"})
        s.user("never answered")
        s.assistant({"content": [{"type": "tool_use", "id": "last", "name": "sh", "input": {}}],
                     "stop_reason": "tool_use"})
        s.flush()
        ack.write(f"{len(s)}\n")
        print("ready", flush=True)
        import time
        time.sleep(60)
"""


def test_a_killed_workers_session_is_taken_over_and_repaired(db, tmp_path):
    acks = tmp_path / "acks"
    p = subprocess.Popen(
        [sys.executable, "-c", WORKER, db, str(acks)],
        stdout=subprocess.PIPE,
        text=True,
        # Not the source folder: it would shadow the installed package.
        cwd=str(tmp_path),
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        # While the worker lives, its lease holds.
        st = turnstone.Store(db, owner="rescuer")
        with pytest.raises(turnstone.TurnstoneError) as e:
            st.open_session("agent")
        assert turnstone.error_kind(e.value) == "fenced"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    acked = int(acks.read_text().split()[-1])
    time.sleep(2.5)  # the dead worker's lease runs out
    s = st.open_session("agent")
    report = s.repair_report
    assert report is not None and report["turns_interrupted"] == 1, report
    assert report["tools_not_started"] == ["last"], report
    # Every acknowledged event is there, then the repair.
    assert len(s) == acked + report["appended"]
    kinds = [e["kind"] for e in s.events()]
    assert kinds[-1] == "turn/end"
    assert s.events()[-1]["data"]["reason"]["kind"] == "interrupted"
    msgs = s.messages(format="anthropic")["messages"]
    assert msgs[-1]["content"][0]["type"] == "tool_result"
    s.close()
    # Repaired once: the next open finds nothing to do.
    again = st.open_session("agent")
    assert again.repair_report is None or again.repair_report["appended"] == 0
    again.close()
    st.close()


def test_a_follower_on_another_process_sees_the_writers_events(db):
    import threading

    w = turnstone.Store(db, owner="writer")
    r = turnstone.Store(db, owner="reader")
    s = w.create_session("followed")
    s.user("one")
    s.flush()
    sub = r.subscribe("followed")
    assert next(sub)["seq"] == 0
    assert sub.try_next() is None

    def write():
        s.user("two")
        s.flush()
        s.close()
        w.delete("followed")

    t = threading.Thread(target=write)
    t.start()
    rest = [e["kind"] for e in sub]          # ends after the tombstone
    t.join()
    assert rest == ["user/message", "session/delete"]
    r.close()
    w.close()
