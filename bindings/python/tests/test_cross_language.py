"""A store written from Python reads the same from the Rust CLI, and the
other way round. `run.sh` builds the CLI and sets TURNSTONE_BIN."""

import json
import os
import subprocess

import pytest

import turnstone

BIN = os.environ.get("TURNSTONE_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="TURNSTONE_BIN (the turnstone CLI) is not set")


def cli(*args):
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_python_writes_rust_reads(tmp_path):
    d = str(tmp_path / "py")
    with turnstone.Store(d) as st:
        s = st.create_session("py-1")
        s.append("turn/start", {"turn_id": "t"})
        s.user([{"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}])
        s.assistant({"content": [{"type": "thinking", "thinking": "hm", "signature": "c2ln"},
                                 {"type": "tool_use", "id": "c1", "name": "ls", "input": {}},
                                 {"type": "novel_block", "k": 1}],
                     "stop_reason": "tool_use"})
        with s.tool_call("c1", "ls", {}) as call:
            call.result("a b")
        s.append("turn/end", {"turn_id": "t", "reason": {"kind": "completed"}})
        s.flush()
        mine = {f: s.messages(format=f) for f in ("anthropic", "openai-responses", "openai-chat")}
    report = json.loads(cli("verify", d, "--json"))
    assert report["ok"] is True and report["problems"] == [], report
    assert report["sessions"] == 1 and report["clean_close"] is True, report
    for f, body in mine.items():
        assert json.loads(cli("messages", d, "--session", "py-1", "--format", f)) == body, f


def test_rust_writes_python_reads(tmp_path):
    d = str(tmp_path / "rs")
    cli("fleet", d, "--sessions", "3", "--threads", "1", "--events", "400")
    with turnstone.Store(d, read_only=True) as st:
        ids = [x["id"] for x in st.sessions()]
        assert len(ids) == 3
        for sid in ids:
            s = st.open_read_only(sid)
            assert s.messages(format="anthropic") == json.loads(
                cli("messages", d, "--session", sid, "--format", "anthropic")
            )
            lines = [json.loads(x) for x in cli("messages", d, "--session", sid, "--json").splitlines()]
            assert [m["content"] for m in s.messages()] == [m["content"] for m in lines]
