#!/usr/bin/env python3
"""Run every command and code block of the READMEs as written.

    python3 .ci/readme_check.py [README ...]

Default: README.md, bindings/python/README.md, bindings/node/README.md and
docs/CLI.md (the command line's tour).
Each fenced block runs by its language, in a fresh directory of its own:

- ``sh``: with bash (``set -euo pipefail``) from the repository's root, the
  way a reader runs it in a clone; ``B``, ``pip``, ``python``, ``npm`` are
  whatever the block says (the Python package's venv first on PATH, as
  after ``bindings/python/run.sh``). The one exception is the test command
  of README.md's first block, ``cargo test --workspace``: .ci/run has just
  run it, so it is not run twice.
- ``rust``: a program of its own (a temporary crate that depends on
  ``engine/`` and ``serde_json``), built and run.
- ``python``: with the venv's Python (``bindings/python/run.sh`` makes it).
- ``js``: as an ES module, with ``turnstone`` and the Node package's
  dependencies installed beside it (``bindings/node/run.sh`` builds them).

Blocks tagged ``text`` or ``json`` are output shown, not run. Untagged
blocks are refused: every block says what it is. The ``sh`` blocks of one
README run in order (a later one uses the store an earlier one made);
files they leave in the repository's root (stores, exports) are removed
when that README is done, so each README starts from a clean checkout.
Exit 0 when every block ran and exited 0; the last line says how many ran.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = [
    "README.md",
    "bindings/python/README.md",
    "bindings/node/README.md",
    "docs/CLI.md",
]
VENV = os.path.join(ROOT, "bindings/python/target/venv")
NODE_PKG = os.path.join(ROOT, "bindings/node")
SHOWN = {"text", "json", "console", "output"}
TEST_COMMAND = "cargo test --workspace"


def blocks(path):
    """(line, language, code) of each fenced block of a Markdown file."""
    out, lang, start, buf, indent = [], None, 0, [], ""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^(\s*)```(\S*)\s*$", line.rstrip("\n"))
            if m and lang is None:
                indent, lang, start, buf = m.group(1), m.group(2) or "", n, []
            elif m and not m.group(2) and lang is not None:
                out.append((start, lang, "".join(buf)))
                lang = None
            elif lang is not None:
                # A block inside a list item is indented with the item.
                buf.append(line[len(indent):] if line.startswith(indent) else line)
    if lang is not None:
        raise SystemExit(f"{path}:{start}: a code block is not closed")
    return out


def env():
    e = dict(os.environ)
    if os.path.isdir(VENV):
        e["PATH"] = os.path.join(VENV, "bin") + os.pathsep + e["PATH"]
        e["VIRTUAL_ENV"] = VENV
    return e


def run(cmd, cwd, what, extra_env=None, stdin=None):
    e = env()
    if extra_env:
        e.update(extra_env)
    t = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=e, input=stdin, capture_output=True, text=True)
    took = time.monotonic() - t
    if p.returncode != 0:
        sys.stdout.write(p.stdout[-4000:])
        sys.stdout.write(p.stderr[-4000:])
        print(f"FAIL {what}: exit {p.returncode} after {took:.1f} s")
        return False
    print(f"ok   {what} ({took:.1f} s)")
    return True


def top_level():
    return set(os.listdir(ROOT))


def tracked_top_level():
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {p.split("/", 1)[0] for p in out.split("\0") if p}


def run_sh(code, what, first_of_readme):
    lines = code.splitlines(keepends=True)
    if first_of_readme:
        lines = [l for l in lines if not l.lstrip().startswith(TEST_COMMAND)]
    script = "set -euo pipefail\n" + "".join(lines)
    # `pip install ./bindings/python` builds with cargo: into the kept
    # target folder bindings/python/run.sh uses, so that it is incremental.
    extra = None
    if "pip install" in code:
        extra = {"CARGO_TARGET_DIR": os.path.join(ROOT, "bindings/python/target/cargo")}
    return run(["bash", "-c", script], ROOT, what, extra)


def clean(before):
    """Remove what the blocks left in the repository's root."""
    keep = tracked_top_level() | {"target", ".git"}
    for name in sorted(top_level() - before - keep):
        p = os.path.join(ROOT, name)
        print(f"     removed ./{name}")
        shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)


def run_rust(code, what, work):
    crate = os.path.join(work, "readme_block")
    os.makedirs(os.path.join(crate, "src"))
    engine = os.path.join(ROOT, "engine").replace("\\", "/")
    with open(os.path.join(crate, "Cargo.toml"), "w") as f:
        f.write(
            "[package]\nname = \"readme_block\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n"
            f"[dependencies]\nturnstone = {{ path = \"{engine}\" }}\nserde_json = \"1\"\n\n"
            "[workspace]\n"
        )
    with open(os.path.join(crate, "src", "main.rs"), "w") as f:
        f.write(code)
    # The workspace's versions of the dependencies (no new downloads).
    shutil.copy(os.path.join(ROOT, "Cargo.lock"), os.path.join(crate, "Cargo.lock"))
    target = os.path.join(ROOT, "target", "readme-check")
    if not run(
        ["cargo", "build", "-q", "--manifest-path", os.path.join(crate, "Cargo.toml")],
        work,
        what + " (build)",
        {"CARGO_TARGET_DIR": target},
    ):
        return False
    return run([os.path.join(target, "debug", "readme_block")], work, what)


def run_python(code, what, work):
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        print(f"FAIL {what}: no {py} (run bindings/python/run.sh first)")
        return False
    path = os.path.join(work, "block.py")
    with open(path, "w") as f:
        f.write(code)
    return run([py, path], work, what)


def run_js(code, what, work):
    deps = os.path.join(NODE_PKG, "node_modules")
    if not os.path.exists(os.path.join(NODE_PKG, "turnstone.node")):
        print(f"FAIL {what}: the Node package is not built (run bindings/node/run.sh first)")
        return False
    mods = os.path.join(work, "node_modules")
    os.makedirs(mods)
    # As after `npm install ./bindings/node`: the package, and what it and
    # the block import (LangGraph) beside it.
    os.symlink(NODE_PKG, os.path.join(mods, "turnstone"))
    for name in os.listdir(deps) if os.path.isdir(deps) else []:
        if not name.startswith("."):
            os.symlink(os.path.join(deps, name), os.path.join(mods, name))
    path = os.path.join(work, "block.mjs")
    with open(path, "w") as f:
        f.write(code)
    return run(["node", path], work, what)


def main():
    files = sys.argv[1:] or DEFAULT
    ran = failed = shown = 0
    for rel in files:
        # Each file starts from the repository as it was: what one file's
        # blocks made (stores, exports) is gone before the next runs.
        before = top_level()
        try:
            r, f, s = run_all([rel])
        finally:
            clean(before)
        ran, failed, shown = ran + r, failed + f, shown + s
    print(f"readme: {ran - failed} passed, {failed} failed ({shown} blocks shown, not run)")
    sys.exit(1 if failed else 0)


def run_all(files):
    ran = failed = shown = 0
    for rel in files:
        path = os.path.join(ROOT, rel)
        for i, (line, lang, code) in enumerate(blocks(path)):
            what = f"{rel}:{line} ({lang or 'untagged'})"
            if lang in SHOWN:
                shown += 1
                continue
            if lang not in {"sh", "rust", "python", "js"}:
                print(f"FAIL {what}: a block must be sh, rust, python, js, or text/json (shown, not run)")
                failed += 1
                continue
            work = tempfile.mkdtemp(prefix="readme-block-")
            try:
                if lang == "sh":
                    ok = run_sh(code, what, rel == "README.md" and i == 0)
                elif lang == "rust":
                    ok = run_rust(code, what, work)
                elif lang == "python":
                    ok = run_python(code, what, work)
                else:
                    ok = run_js(code, what, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            ran += 1
            failed += 0 if ok else 1
    return ran, failed, shown


if __name__ == "__main__":
    main()
