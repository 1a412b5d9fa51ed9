"""Real-client test: the Python client `durable-streams` 0.1.0 against `turnstone serve`.

An agent writes a session's events with `DurableStream.append` while a second
client follows them live over SSE (`stream(..., live="sse")`); after a clean
restart (SIGTERM) and after `kill -9` in the middle of writes, the streams read
back exactly what was acknowledged.

The Python client 0.1.0 has no idempotent producer (`Producer-Id`/`-Epoch`/
`-Seq`); the writer sends every append on its own (`batching=False`) with a
`Stream-Seq` (a zero-padded counter) and keeps the list of acknowledged events.
A single writer has at most one append in doubt when the server dies;
re-sending it with the same `Stream-Seq` after the restart gets a 409 if the
server already holds it and a 2xx if not, which makes the retry exactly-once.

The client's SSE reader does not reconnect when the server ends an SSE
response (`--sse-max-ms`) or dies; the follower here resumes at the last
`next_offset` it was given, so the server is started with a short
`--sse-max-ms` to exercise that resumption.

test_example_runs runs example.py against the server.

The tests start and restart the server themselves: TURNSTONE_BIN (set by
run.sh) or target/debug/turnstone.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from durable_streams import (
    DurableStream,
    DurableStreamError,
    FetchError,
    SeqConflictError,
    stream,
)

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("TURNSTONE_BIN") or str(ROOT / "target" / "debug" / "turnstone")
SSE_MAX_MS = 700  # each SSE response ends after this; the follower resumes
CLIENT_TIMEOUT = httpx.Timeout(10.0)
LISTENING = re.compile(r"listening on (http:\S+) \(")

# No server outlives the test run, even when `timeout` stops it with SIGTERM:
# that becomes a KeyboardInterrupt (pytest tears down), then atexit kills.
_servers: set[subprocess.Popen[bytes]] = set()


def _kill_servers() -> None:
    for p in list(_servers):
        if p.poll() is None:
            p.kill()
            p.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


atexit.register(_kill_servers)
signal.signal(signal.SIGTERM, _interrupt)


class Server:
    """One `turnstone serve` on a store; restarts keep the first address."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.listen = "127.0.0.1:0"
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: list[str] = []

    def start(self) -> str:
        if not os.access(BIN, os.X_OK):
            pytest.fail(f"no turnstone binary at {BIN} (set TURNSTONE_BIN or run run.sh)")
        proc = subprocess.Popen(
            [BIN, "serve", str(self.store), "--listen", self.listen,
             "--sse-max-ms", str(SSE_MAX_MS)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self.proc = proc
        _servers.add(proc)
        found = threading.Event()

        def drain() -> None:  # keep reading so the pipe never fills
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace")
                self.log.append(line)
                m = LISTENING.search(line)
                if m and not found.is_set():
                    self.url = m.group(1)
                    found.set()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + 30
        while not found.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"turnstone serve did not start: {''.join(self.log)}")
        # Restart on the same address, as a real deployment would.
        self.listen = self.url.removeprefix("http://")
        return self.url

    def stop(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"turnstone serve ignored signal {sig}: {''.join(self.log[-5:])}")

    def restart(self) -> None:
        """Clean restart: SIGTERM, which must exit 0, then start again."""
        code = self.stop(signal.SIGTERM)
        assert code == 0, f"unclean shutdown ({code}): {''.join(self.log[-5:])}"
        self.start()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def server(tmp_path: Path):
    s = Server(tmp_path / "store")
    s.start()
    yield s
    s.kill()


def agent_turn(session: str, turn: int) -> list[dict]:
    """One agent turn: user message, streamed assistant chunks, a tool call and its result."""
    call = f"{session}-call-{turn}"
    return [
        {"kind": "turn/start", "session": session, "turn": turn},
        {"kind": "user/message", "turn": turn, "text": f"question {turn}: what's in ./src?"},
        *[{"kind": "assistant/chunk", "turn": turn, "index": i, "text": f"part {i} "}
          for i in range(3)],
        {"kind": "tool/call", "turn": turn, "id": call, "name": "list_files",
         "input": {"path": "./src", "depth": 1}},
        {"kind": "tool/result", "turn": turn, "id": call, "ok": True,
         "output": {"files": ["main.rs", "lib.rs"], "note": "naïve ☃ \"quoted\"\nline 2"}},
        {"kind": "assistant/message", "turn": turn, "text": "part 0 part 1 part 2 "},
        {"kind": "turn/end", "turn": turn, "reason": "completed"},
    ]


TURN_LEN = len(agent_turn("s", 1))


class Writer:
    """Appends one event per request with a Stream-Seq; remembers what was acknowledged."""

    def __init__(self, server: Server, path: str) -> None:
        self.server, self.path = server, path
        self.seq = 0
        self.acked: list[dict] = []
        self.offsets: list[str] = []
        self.in_doubt: tuple[dict, str] | None = None  # sent, answer lost
        self.handle: DurableStream | None = None

    @property
    def url(self) -> str:
        return self.server.url + self.path

    def create(self) -> None:
        DurableStream.create(self.url, content_type="application/json",
                             timeout=CLIENT_TIMEOUT).close()

    def append(self, event: dict) -> None:
        self.seq += 1
        seq = f"{self.seq:012d}"
        if self.handle is None:
            self.handle = DurableStream(self.url, content_type="application/json",
                                        batching=False, timeout=CLIENT_TIMEOUT)
        try:
            res = self.handle.append(event, seq=seq)
        except (httpx.HTTPError, FetchError):
            self.in_doubt = (event, seq)
            self.handle.close()
            self.handle = None
            raise
        self.acked.append(event)
        self.offsets.append(res.next_offset)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class Follower(threading.Thread):
    """Follows a stream live over SSE from the start, resuming at the last offset."""

    def __init__(self, server: Server, path: str) -> None:
        super().__init__(daemon=True)
        self.server, self.path = server, path
        self.seen: list[dict] = []
        self.offset = "-1"
        self.connections = 0
        self.errors: list[str] = []
        self.want: int | None = None  # stop after this many events
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    def done(self) -> bool:
        return self.stopped.is_set() or (self.want is not None and len(self.seen) >= self.want)

    def run(self) -> None:
        while not self.done():
            try:
                with stream(self.server.url + self.path, offset=self.offset, live="sse",
                            timeout=CLIENT_TIMEOUT) as res:
                    self.connections += 1
                    for ev in res.iter_events(mode="json"):
                        with self.lock:
                            self.seen.extend(ev.data)
                            self.offset = ev.next_offset
                        if self.done():
                            return
            except (httpx.HTTPError, FetchError, DurableStreamError) as e:
                # The server is down or restarting: retry at the same offset.
                self.errors.append(repr(e))
                time.sleep(0.05)

    def wait_for(self, n: int, timeout: float = 20.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.seen) < n and time.monotonic() < deadline and self.is_alive():
            time.sleep(0.01)
        with self.lock:
            return list(self.seen)


def read_all(url: str) -> list[dict]:
    """Catch-up read of every JSON message (follows the server's pages)."""
    with stream(url, live=False, timeout=CLIENT_TIMEOUT) as res:
        return list(res.iter_json())


def read_from(url: str, offset: str) -> list[dict]:
    with stream(url, offset=offset, live=False, timeout=CLIENT_TIMEOUT) as res:
        return list(res.iter_json())


def assert_increasing(offsets: list[str]) -> None:
    # Offsets are opaque but ordered: each acknowledgement is past the last.
    assert all(a < b for a, b in zip(offsets, offsets[1:])), offsets


def test_live_sse_follower_and_clean_restart(server: Server) -> None:
    path = "/v1/stream/agent-session-1"
    writer = Writer(server, path)
    writer.create()
    follower = Follower(server, path)
    follower.start()

    try:
        # Turn 1, then the follower must have it before turn 2 is written:
        # it is following live, not catching up at the end.
        for e in agent_turn("s1", 1):
            writer.append(e)
        assert follower.wait_for(TURN_LEN) == writer.acked, follower.errors

        for turn in (2, 3):
            for e in agent_turn("s1", turn):
                writer.append(e)
                time.sleep(0.05)  # an agent's pace: spans several SSE responses
        follower.want = 3 * TURN_LEN
        assert follower.wait_for(3 * TURN_LEN) == writer.acked, follower.errors
    finally:
        follower.stopped.set()
        follower.join(10)
    assert not follower.is_alive()
    assert follower.connections >= 2, "the SSE follower never had to resume"
    assert follower.errors == []  # every SSE response ended cleanly

    expected = [e for t in (1, 2, 3) for e in agent_turn("s1", t)]
    assert writer.acked == expected
    assert_increasing(writer.offsets)
    with DurableStream(writer.url, timeout=CLIENT_TIMEOUT) as h:
        assert h.head().offset == writer.offsets[-1]

    # Clean restart: everything acknowledged reads back, at the same offsets.
    server.restart()
    assert read_all(writer.url) == expected
    with DurableStream(writer.url, timeout=CLIENT_TIMEOUT) as h:
        head = h.head()
    assert head.offset == writer.offsets[-1]
    assert head.content_type == "application/json"
    assert read_from(writer.url, writer.offsets[TURN_LEN - 1]) == expected[TURN_LEN:]
    assert read_from(writer.url, writer.offsets[-1]) == []

    # The Stream-Seq state survived the restart: an old seq is refused...
    with DurableStream(writer.url, content_type="application/json", batching=False,
                       timeout=CLIENT_TIMEOUT) as h, pytest.raises(SeqConflictError):
        h.append({"kind": "replayed"}, seq=f"{writer.seq:012d}")
    # ...and the session goes on.
    for e in agent_turn("s1", 4):
        writer.append(e)
    assert_increasing(writer.offsets)
    assert read_all(writer.url) == expected + agent_turn("s1", 4)
    writer.close()


def session_events(session: str, n: int) -> list[dict]:
    """The first n events of a session that runs turn after turn."""
    out: list[dict] = []
    turn = 0
    while len(out) < n:
        turn += 1
        out += agent_turn(session, turn)
    return out[:n]


def test_kill9_under_writes(server: Server) -> None:
    sessions = [f"agent-session-{i}" for i in range(1, 4)]
    writers = [Writer(server, f"/v1/stream/{s}") for s in sessions]
    for w in writers:
        w.create()
    follower = Follower(server, writers[0].path)
    follower.start()
    stop_writing = threading.Event()

    def write_until_failure(w: Writer, session: str) -> None:
        turn = 0
        try:
            while not stop_writing.is_set():
                turn += 1
                for e in agent_turn(session, turn):
                    if stop_writing.is_set():
                        return
                    w.append(e)
        except (httpx.HTTPError, FetchError):
            return  # the server is gone

    threads = [threading.Thread(target=write_until_failure, args=(w, s), daemon=True)
               for w, s in zip(writers, sessions)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while min(len(w.acked) for w in writers) < 40:
        assert time.monotonic() < deadline, "writers too slow"
        assert all(t.is_alive() for t in threads), "a writer failed before the kill"
        time.sleep(0.01)

    # kill -9 while three writers have appends in flight; no writer may
    # reach the restarted server before the check.
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    stop_writing.set()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    for w in writers:
        w.close()
    server.start()

    outcomes = []
    for w, session in zip(writers, sessions):
        assert_increasing(w.offsets)
        assert w.acked == session_events(session, len(w.acked))
        got = read_all(w.url)
        # Every acknowledged append is there, in order, and nothing else but
        # possibly the one append whose answer the kill cut off.
        assert got[: len(w.acked)] == w.acked
        extra = got[len(w.acked):]
        if w.in_doubt is None:  # stopped between appends
            assert extra == []
            outcomes.append("none in flight")
        else:
            doubt_event, doubt_seq = w.in_doubt
            assert extra in ([], [doubt_event]), extra
            # Resolve the doubt with the same Stream-Seq: 409 iff the server has it.
            with DurableStream(w.url, content_type="application/json", batching=False,
                               timeout=CLIENT_TIMEOUT) as h:
                try:
                    h.append(doubt_event, seq=doubt_seq)
                    landed = False
                except SeqConflictError:
                    landed = True
            assert landed == (extra == [doubt_event])
            outcomes.append("in doubt: was durable" if landed else "in doubt: was lost")
            w.acked.append(doubt_event)
        assert read_all(w.url) == w.acked

        # The session goes on after the crash: the rest of the turn, one more.
        n = len(w.acked)
        for e in session_events(session, n + (-n) % TURN_LEN + TURN_LEN)[n:]:
            w.append(e)
        assert w.acked == session_events(session, len(w.acked))
        assert_increasing(w.offsets)
        assert read_all(w.url) == w.acked
        w.close()

    # The follower crossed the kill -9 (resuming at its offset) and saw
    # exactly the session, in order.
    follower.want = len(writers[0].acked)
    try:
        seen = follower.wait_for(follower.want)
    finally:
        follower.stopped.set()
        follower.join(10)
    assert seen == writers[0].acked, follower.errors
    assert follower.errors, "the follower never noticed the kill"
    print(f"kill -9: acked {[len(w.acked) for w in writers]}; {outcomes}; "
          f"follower: {follower.connections} SSE responses, {len(follower.errors)} errors")

    server.restart()
    for w in writers:
        assert read_all(w.url) == w.acked


def test_example_runs(server: Server) -> None:
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("example.py")), server.url],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "read back 14 events; follower saw 14; same as written: True" in out.stdout
