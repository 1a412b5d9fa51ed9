"""The package installs the ``turnstone`` command line (issue 39 §8): the
Rust CLI's subcommands, but ``serve``, as a console script next to this
Python, with its exit statuses."""

import json
import os
import subprocess
import sys


import turnstone

SCRIPT = os.path.join(os.path.dirname(sys.executable), "turnstone")


def cli(*args):
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=120)


def test_the_console_script_is_installed_and_runs_the_engine_cli(tmp_path):
    assert os.access(SCRIPT, os.X_OK), SCRIPT
    out = cli("schema", "turn/end")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == turnstone.schema("turn/end")
    # A store the package wrote, read by its CLI.
    with turnstone.Store(str(tmp_path / "st")) as st:
        s = st.create_session("s1")
        s.user("hello from python")
        s.flush()
    out = cli("verify", str(tmp_path / "st"))
    assert out.returncode == 0, out.stderr
    out = cli("messages", str(tmp_path / "st"), "--session", "s1", "--json")
    assert out.returncode == 0, out.stderr
    assert "hello from python" in out.stdout


def test_failures_keep_their_exit_status_and_one_line(tmp_path):
    out = cli("verify", str(tmp_path / "no-such-store"))
    assert out.returncode == 2
    assert out.stderr.startswith("turnstone: ") and out.stderr.count("\n") == 1
    out = cli("serve", str(tmp_path / "st"))
    assert out.returncode == 2 and "serve" in out.stderr, "serve is not in the package's CLI"
