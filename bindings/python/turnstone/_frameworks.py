"""Plumbing shared by the framework backends (``turnstone.langgraph``,
``turnstone.agents``): one open Store per directory in a process, and a
durability waiter that lets many asyncio tasks share one group commit.

A second ``Store(path)`` in a process would be a client of the first
(docs/MULTIPROCESS.md: every request a round trip), so every saver and
session object on the same directory
in one process shares one Store, opened with every plugin kind the
backends write (all ignorable, so the CLI and other processes that do not
know them still open the store)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, Optional, TypeVar, Union

from . import Store, TurnstoneError, error_kind
from ._native import NativeSession, flush_all

_T = TypeVar("_T")

#: A store directory as the backends take it (``str(path)`` is opened).
StorePath = Union[str, os.PathLike[str]]

#: What a durability wait is waiting for: (the session's handle, the event
#: loop of the waiting task, the future resolved on that loop).
_Request = tuple[NativeSession, asyncio.AbstractEventLoop, asyncio.Future[None]]

#: The plugin kinds the backends append (name -> ignorable).
PLUGINS = {
    "langgraph/checkpoint": True,
    "langgraph/writes": True,
    "langgraph/delete_runs": True,
    "langgraph/prune": True,
}

_lock = threading.Lock()
_open: dict[str, _Shared] = {}  # real path -> _Shared


class _Shared:
    def __init__(self, path: str) -> None:
        self.store = Store(path, plugins=PLUGINS)
        self.waiter = DurabilityWaiter()
        self.refs = 0
        #: state the backends keep per session id (e.g. the agents surface),
        #: so that two objects naming one session see one history; keyed by
        #: (backend, name), each backend keeps its own state type as values
        self.state: dict[tuple[str, str], Any] = {}
        self.lock = threading.RLock()


def acquire(path: StorePath) -> _Shared:
    """The shared Store of ``path`` (opened on first use)."""
    key = os.path.realpath(str(path))
    with _lock:
        sh = _open.get(key)
        if sh is None:
            sh = _Shared(str(path))
            _open[key] = sh
        sh.refs += 1
        return sh


def release(sh: _Shared) -> None:
    """Drop one reference; the last one closes the store (everything
    appended is made durable first)."""
    with _lock:
        sh.refs -= 1
        if sh.refs > 0:
            return
        for key, v in list(_open.items()):
            if v is sh:
                del _open[key]
    sh.waiter.close()
    sh.state.clear()
    sh.store.close()


def _settle_all(futs: list[asyncio.Future[None]], error: Optional[BaseException]) -> None:
    for fut in futs:
        if fut.cancelled():
            continue
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)


class DurabilityWaiter:
    """``await waiter.wait(session)``: resolves once everything the handle
    appended is durable. One thread waits for all tasks: each round takes
    every pending request and waits once, with the GIL released, until
    all their sessions' appends are durable (``_native.flush_all``), then
    wakes each event loop once. So N concurrent tasks share one group
    commit (``asyncio.to_thread(flush)`` would cap that at the executor's
    few workers)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._pending: list[_Request] = []
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def wait(self, session: NativeSession) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._cv:
            if self._closed:
                raise TurnstoneError("closed", "the store is closed", None, None)
            self._pending.append((session, loop, fut))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="turnstone-durability", daemon=True)
                self._thread.start()
            self._cv.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._closed:
                    self._cv.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
            self._round(batch)
            del batch  # hold no session handle while idle (delete needs them gone)

    @staticmethod
    def _round(batch: list[_Request]) -> None:
        # One wait for the whole round, with the GIL released once: taking
        # it back per session from a busy event loop costs up to a switch
        # interval (5 ms) each.
        error: Optional[BaseException] = None
        try:
            flush_all([session for session, _, _ in batch])
        except BaseException as e:  # handed to every awaiting task
            error = e
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for _, loop, fut in batch:
            by_loop.setdefault(loop, []).append(fut)
        for loop, futs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, futs, error)
            except RuntimeError:  # that event loop is closed
                pass
        batch.clear()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()


def create_named(store: Store, candidates: Iterable[str],
                 make: Callable[[str], _T]) -> tuple[str, _T]:
    """Create a session under the first free name of ``candidates`` with
    ``make(name)``. A deleted session keeps its name (its tombstone is the
    last event of its log), so a thread or session created again after a
    delete gets the next generation's name."""
    for name in candidates:
        try:
            return name, make(name)
        except TurnstoneError as e:
            if error_kind(e) not in ("session_exists", "session_deleted"):
                raise
    raise AssertionError("unreachable: candidates are endless")
