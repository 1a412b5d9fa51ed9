"""turnstone: the session layer of an embedded, event-sourced store for
AI-agent sessions.

    import turnstone
    with turnstone.Store("./my-store") as store:
        s = store.create_session("session-1")
        s.append("user/message", {"content": [{"type": "text", "text": "hi"}]}, surface="append")
        s.flush()                                  # durable before the model request
        print(s.messages(format="anthropic"))

Event data are plain dicts in the providers' own shapes; they are stored as
they are and come back unchanged. Every wait for durability and every read
of the log releases the GIL; the ``a``-prefixed methods are their asyncio
versions (run in a worker thread, so the event loop never blocks).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
import weakref
from typing import (Any, Awaitable, Callable, Iterator, Literal, Mapping, Optional, Sequence, TypedDict,
                    Union, overload)

from . import events as _ev
from ._native import (NativeSession, NativeStore, NativeSubscription, NativeWaker, TurnstoneError,
                      schema_json)

__all__ = [
    "Store",
    "Session",
    "Subscription",
    "ToolCall",
    "ToolRefused",
    "ToolAborted",
    "TurnstoneError",
    "error_kind",
    "events",
    "schema",
    "Dropped",
]

Surface = Union[None, str, dict[str, Any]]


def _as_list(text: str) -> list[Any]:
    out: list[Any] = json.loads(text)
    return out


def _as_dict(text: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(text)
    return out


def error_kind(e: BaseException) -> Optional[str]:
    """The engine's error kind of a TurnstoneError (``"unknown_session"``,
    ``"too_large"``, ``"corrupt"``, ...), else None."""
    if isinstance(e, TurnstoneError) and e.args:
        kind: str = e.args[0]
        return kind
    return None


class Dropped(TypedDict):
    """Something a request body left out (``Session.dropped``)."""

    what: str
    """``param reasoning``, ``tool web_search (type web_search_20250305)``,
    ``block thinking``, ``tool field cache_control``."""
    why: str
    count: int
    """How many times (a block type dropped from several messages)."""


def schema(kind: Optional[str] = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one core kind's data
    (``schema("turn/end")``), or with no kind every core kind's keyed by
    name: what ``turnstone schema`` prints, generated from the engine's
    types. An unknown kind raises ``TurnstoneError`` (``invalid_argument``)
    listing the core kinds."""
    out: dict[str, Any] = json.loads(schema_json(kind))
    return out


class _LoopWaker:
    """The wake-up channel of one event loop (``_native.NativeWaker``): the
    engine pushes woken task ids and writes a byte to a pipe this loop
    watches; the loop then polls those tasks. No thread, no GIL taken by
    the engine's threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.native = NativeWaker()
        fd = self.native.fileno()
        os.set_blocking(fd, False)
        self.polls: dict[int, Callable[[], None]] = {}
        self.next_id = 0
        loop.add_reader(fd, self._drain)

    def _drain(self) -> None:
        for i in self.native.take():
            poll = self.polls.get(i)
            if poll is not None:
                poll()


_WAKERS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaker]" = (
    weakref.WeakKeyDictionary())


def _await_native(wait: Any) -> "asyncio.Future[Any]":
    """An engine future (``_native.NativeWait``) as an asyncio future,
    polled on the loop's thread and woken through the loop's
    ``_LoopWaker``. Nothing waits in a thread."""
    loop = asyncio.get_running_loop()
    lw = _WAKERS.get(loop)
    if lw is None:
        lw = _WAKERS[loop] = _LoopWaker(loop)
    lw.next_id += 1
    i = lw.next_id
    fut: asyncio.Future[Any] = loop.create_future()

    def poll() -> None:
        if fut.done():
            return
        try:
            done, value = wait.poll(lw.native, i)
        except BaseException as e:  # the engine's error, for the awaiting task
            fut.set_exception(e)
            return
        if done:
            fut.set_result(value)

    def finished(f: "asyncio.Future[Any]") -> None:
        lw.polls.pop(i, None)
        if f.cancelled():
            wait.cancel()  # what it holds (a subscription) is given back

    lw.polls[i] = poll
    fut.add_done_callback(finished)
    poll()
    return fut


def _surface(surface: Surface) -> Optional[str]:
    if surface is None:
        return None
    if surface == "append":
        return '{"op":"append"}'
    if isinstance(surface, dict):
        return json.dumps(surface)
    raise TurnstoneError(
        "invalid_argument",
        'surface must be None, "append" or {"op": "replace", "start": S, "end": E}, '
        f"not {surface!r}",
        None,
        None,
    )


class Store:
    """An open store directory (created if missing, unless ``read_only``),
    or a PostgreSQL database given by its URL (``postgres://…``).

    Many threads may use one Store, and many processes one directory: the
    first to open it hosts it, the others become its clients and write
    through it (one group commit for all; docs/MULTIPROCESS.md). A session
    opened for writing in one process is refused in another (kind
    ``"session_live"``) until that process closes it or dies; if the host
    dies, another process takes the store over and a request it had not
    answered fails with kind ``"host_lost"``. A database is shared by many processes on many machines:
    a session opened for writing is leased to this process (``owner``), and
    another process gets kind ``"fenced"`` until the lease is released or
    expires; ``open_session`` of a session whose previous writer died
    repairs it, as after a crash on a directory."""

    def __init__(self, path: str, *, read_only: bool = False,
                 plugins: Optional[dict[str, Any]] = None, owner: Optional[str] = None,
                 lease_ttl_ms: Optional[int] = None, segment_bytes: Optional[int] = None,
                 recycle_segments: int = 0,
                 prepare_segments: Optional[bool] = None,
                 direct_writes: Optional[bool] = None) -> None:
        """``plugins``: the harness's own event kinds, ``{"name": ignorable}``
        (an ignorable kind is skipped by processes that do not know it).
        ``owner``: on a database, the name this process's leases carry
        (default ``python:<pid>``); ``lease_ttl_ms``: how long a lease
        outlives a process that stops renewing it (default 30 s).

        A directory only: ``segment_bytes``, the size of its segment files
        (default 64 MiB); ``recycle_segments``, how many segment files that
        :meth:`collect` frees are kept and made into new segments instead of
        new files (fewer bytes written to the device and cheaper syncs, for
        up to that many segment files of disk beyond the live data; 0, the
        default: freed files are removed); ``prepare_segments``, whether a
        background thread writes the next segment's file of zeros ahead of
        need while batches are small (so that syncs flush data without a
        file-system journal commit; one segment file of disk beyond the log;
        default on, ``False`` turns it off); ``direct_writes``, whether batches
        written into recycled and prepared segments go around the page cache
        with direct I/O (fewer bytes written to the device; reads of fresh
        data then come from the device; default off)."""
        self._native = NativeStore(
            str(path), read_only, None if plugins is None else json.dumps(plugins), owner,
            lease_ttl_ms, segment_bytes, recycle_segments, prepare_segments, direct_writes,
        )

    @property
    def backend(self) -> str:
        """``"embedded"`` (a store directory this process hosts),
        ``"shared"`` (a store directory another process hosts: this one is
        its client, docs/MULTIPROCESS.md) or ``"postgres"``."""
        return self._native.backend()

    def create_session(self, id: str) -> "Session":
        """Create a new, empty session."""
        return Session(self._native.create_session(id))

    def open_session(self, id: str) -> "Session":
        """Load a session for writing. A session a crash left open (a turn
        or a tool call without its end) is repaired first, durably; what
        repair did is ``session.repair_report``: a dict (``appended`` is 0
        when there was nothing to repair), or None when the session was
        already open in this process (it is returned as it is)."""
        native, report = self._native.open_session(id)
        return Session(native, json.loads(report))

    def open_read_only(self, id: str) -> "Session":
        """A view of a session, live or not; appends raise."""
        return Session(self._native.open_read_only(id))

    def sessions(self) -> list[dict[str, Any]]:
        """Every session: id, events, created_ms, updated_ms, open_turn,
        parent (sessions appended to, durable or not). ``list_sessions``
        filters and pages, with title, tags and fields."""
        return _as_list(self._native.sessions())

    def list_sessions(self, *, tags: Optional[list[Any]] = None, where: Optional[dict[str, Any]] = None,
                      updated_since_ms: Optional[int] = None, open_turn: Optional[bool] = None,
                      parent: Optional[str] = None, newest_first: bool = False,
                      limit: int = 50, cursor: Optional[str] = None) -> dict[str, Any]:
        """One page of the sessions the filters select:
        ``{"sessions": [...], "next_cursor": str | None}``. Each entry has
        id, events, created_ms, updated_ms, open_turn, parent
        (``{"session", "upto"}`` or ``None``), title, tags and fields. The
        filters are the CLI's (``turnstone sessions``): every tag in
        ``tags``, every ``where`` field equal, the last event at or after
        ``updated_since_ms``, a turn open or not, fork children of
        ``parent``; creation order, or ``newest_first``. Only durable
        sessions and events are listed (a fork or a new session appears
        once a flush covers it); deleted ones are not. Pass ``next_cursor``
        back as ``cursor`` for the next page; pages are stable (a session
        created meanwhile comes after those already listed). The store's
        catalog is brought up to date at each call, reading only what
        changed since the last."""
        page = self._native.list_sessions(
            list(tags or []), [(k, v) for k, v in (where or {}).items()], updated_since_ms,
            open_turn, parent, newest_first, cursor, limit)
        return _as_dict(page)

    def fork(self, source: str, *, at: Optional[int] = None, child: Optional[str] = None) -> str:
        """Fork ``source`` at a turn boundary (default: the end of its last
        closed turn); no event is copied. Returns the child's id."""
        return self._native.fork(source, at, child)[0]

    def replay(self, id: str, start: int = 0, end: Optional[int] = None) -> list[dict[str, Any]]:
        """The durable events ``start..end`` of a session (chunks and events
        a fork inherits included): dicts with seq, kind, data, surface, ts."""
        return _as_list(self._native.replay(id, start, end))

    def search(self, query: str, limit: int = 20, *, session: Optional[str] = None) -> list[dict[str, Any]]:
        """Full-text search over message text: {session, seq, snippet} hits."""
        return _as_list(self._native.search(query, limit, session))

    def delete(self, id: str) -> int:
        """Delete a session: a durable tombstone, after which loads, lists
        and search do not find it (its forks keep working; its bytes become
        reclaimable). Refused (``"session_live"``) while a Session handle
        for it is alive. Returns the tombstone's seq."""
        return self._native.delete(id)

    def collect(self, *, threshold: float = 0.5, dry_run: bool = False) -> dict[str, Any]:
        """Reclaim disk while the store stays open (a directory only): the
        bytes of deleted sessions and of sessions the store's retention
        expires, then blob files no event references. A sealed segment is
        rewritten when its live bytes are below ``threshold`` of its data.
        Writers keep appending meanwhile. ``dry_run``: decide and report,
        change nothing. Returns the report: ``sessions_reclaimed``,
        ``segment_files_removed``, ``bytes_before``, ``bytes_after``,
        ``bytes_reclaimed``, ``blobs_removed``, … (the CLI's ``turnstone gc``
        does the same on a closed store)."""
        return _as_dict(self._native.collect(threshold, dry_run))

    def subscribe(self, id: str, from_seq: int = 0) -> "Subscription":
        """Follow a session live: each event once, in order, once durable.
        On a database it follows by LISTEN/NOTIFY what any process commits."""
        return Subscription(self._native.subscribe(id, from_seq))

    def close(self) -> None:
        """Make everything durable and close the store."""
        self._native.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def aopen_session(self, id: str) -> "Session":
        return await asyncio.to_thread(self.open_session, id)

    async def areplay(self, id: str, start: int = 0, end: Optional[int] = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.replay, id, start, end)

    async def asearch(self, query: str, limit: int = 20, *, session: Optional[str] = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.search, query, limit, session=session)


class ToolRefused(Exception):
    """The guard refused the tool: a refusal result is recorded, the body
    must not run (raised by ``Session.tool_call`` on entry)."""


class ToolAborted(Exception):
    """Cancelled before dispatch: ``ABORTED_BEFORE_DISPATCH`` is recorded,
    the body must not run (raised by ``Session.tool_call`` on entry)."""


class ToolCall:
    """The running tool of ``Session.tool_call``: record its result once."""

    def __init__(self, session: "Session", call_id: str, name: str, input: Any) -> None:
        self.session, self.call_id, self.name, self.input = session, call_id, name, input
        self.result_seq: Optional[int] = None
        self.not_recorded: Optional[str] = None

    def result(self, content: Any, *, is_error: bool = False) -> int:
        """Record the tool's result: text, a list of content blocks, or any
        other value (a dict, a number) stored as its JSON text; ``None`` is
        an empty result. A result the log cannot take (too large) is
        replaced by an error result saying why (``not_recorded``), so the
        call is always closed."""
        if self.result_seq is not None:
            raise RuntimeError(f"tool call {self.call_id!r} already has its result")
        blocks = _content(content)
        try:
            seq = self.session._result(self.call_id, blocks, is_error)
        except TurnstoneError as e:
            if error_kind(e) not in ("too_large", "invalid_argument", "refused"):
                raise
            self.not_recorded = f"tool result not recorded: {e.args[1]}"
            seq = self.session._result(
                self.call_id, [{"type": "text", "text": self.not_recorded}], True
            )
        self.result_seq = seq
        return seq


def _content(value: Any) -> list[Any]:
    """A tool body's value as tool-result content blocks: text as one text
    block, a list as the blocks it is, ``None`` as none, and anything else
    (a dict, a number, a bool) as one text block of its JSON."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if isinstance(value, list):
        return value
    if value is None:
        return []
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(value)
    return [{"type": "text", "text": text}]


def _refuse(session: "Session", call_id: str, reason: str) -> None:
    session._result(call_id, [{"type": "text", "text": f"refused by policy: {reason}"}], True)


def _abort(session: "Session", call_id: str) -> None:
    session.append("tool/result", {"call_id": call_id, "content": [], "is_error": True,
                                   "status": "ABORTED_BEFORE_DISPATCH"}, surface="append")


def _finish(call: ToolCall, value: Any = None, error: Optional[BaseException] = None) -> dict[str, Any]:
    """Record a body's value (or its exception) as the call's result and
    say what happened, as one outcome dict of ``run_tools``."""
    out: dict[str, Any] = {"call_id": call.call_id}
    if error is not None:
        call.result(f"tool failed: {type(error).__name__}: {error}", is_error=True)
        out.update(outcome="failed", error=error)
    else:
        call.result(value)
        out.update(outcome="result_not_recorded" if call.not_recorded else "ran", value=value)
        if call.not_recorded:
            out["reason"] = call.not_recorded
    out["result_seq"] = call.result_seq
    return out


Guard = Callable[["ToolCall"], Any]


class _ToolContext:
    def __init__(self, session: "Session", call_id: str, name: str, input: Any,
                 guard: Optional[Guard], cancelled: Optional[Callable[[], bool]],
                 checkpoint: bool) -> None:
        self.session, self.call = session, ToolCall(session, call_id, name, input)
        self.guard, self.cancelled, self.checkpoint = guard, cancelled, checkpoint

    def _record(self) -> None:
        c = self.call
        self.session.append("tool/call", {"call_id": c.call_id, "name": c.name, "input": c.input})

    def _refused(self, reason: Optional[str]) -> None:
        if reason:
            _refuse(self.session, self.call.call_id, reason)
            raise ToolRefused(reason)

    def _dispatch(self) -> ToolCall:
        if self.cancelled is not None and self.cancelled():
            _abort(self.session, self.call.call_id)
            raise ToolAborted(self.call.call_id)
        return self.call

    def __enter__(self) -> ToolCall:
        self._record()
        if self.guard is not None:
            self._refused(self.guard(self.call))
        if self.checkpoint:
            self.session.flush()  # the body runs only once its tool/call is durable
        return self._dispatch()

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Any) -> Literal[False]:
        c = self.call
        if c.result_seq is None:
            if exc is not None:
                c.result(f"tool failed: {type(exc).__name__}: {exc}", is_error=True)
            else:
                c.result("the tool returned no result", is_error=True)
        return False


class _AsyncToolContext(_ToolContext):
    """``async with session.atool_call(...)``: the same order, the
    durability wait awaited in a worker thread."""

    async def __aenter__(self) -> ToolCall:
        self._record()
        if self.guard is not None:
            reason = self.guard(self.call)
            self._refused(await reason if asyncio.iscoroutine(reason) else reason)
        if self.checkpoint:
            await self.session.aflush()
        return self._dispatch()

    async def __aexit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                        tb: Any) -> Literal[False]:
        return self.__exit__(exc_type, exc, tb)


class _Batch:
    """The shared steps of ``run_tools`` and ``arun_tools``: record every
    call in one group, then (after the guards and the one durability wait)
    abort or hand out the runnable calls."""

    def __init__(self, session: "Session", calls: list[Any]) -> None:
        self.session = session
        self.calls = [ToolCall(session, c["call_id"], c["name"], c.get("input", {})) for c in calls]
        session._native.record_tool_calls(json.dumps(
            [{"call_id": c.call_id, "name": c.name, "input": c.input} for c in self.calls]))
        self.outcomes: list[Any] = [None] * len(self.calls)
        self.runnable: list[Any] = []

    def guarded(self, i: int, reason: Optional[str]) -> None:
        if reason:
            _refuse(self.session, self.calls[i].call_id, reason)
            self.outcomes[i] = {"call_id": self.calls[i].call_id, "outcome": "refused", "reason": reason}
        else:
            self.runnable.append(i)

    def aborted(self, cancelled: Optional[Callable[[], bool]]) -> bool:
        if cancelled is None or not cancelled():
            return False
        for i in self.runnable:
            _abort(self.session, self.calls[i].call_id)
            self.outcomes[i] = {"call_id": self.calls[i].call_id, "outcome": "aborted"}
        return True


def _reason(kind: str, message: Optional[str]) -> dict[str, Any]:
    if kind == "error":
        if message is None:
            raise TurnstoneError("invalid_argument", "an error reason needs a message", None, None)
        return {"kind": "error", "message": message}
    if message is not None:
        raise TurnstoneError("invalid_argument", f"a {kind!r} reason takes no message", None, None)
    return {"kind": kind}


class Session:
    """One session: append events, wait for durability, derive messages."""

    def __init__(self, native: NativeSession, repair_report: Optional[dict[str, Any]] = None) -> None:
        self._native = native
        self.repair_report = repair_report

    @property
    def id(self) -> str:
        return self._native.id

    def __len__(self) -> int:
        return len(self._native)

    def close(self) -> None:
        """Release this handle at once (rather than when the last reference
        to it goes): the session is no longer held for writing here, so
        another handle may open it and ``Store.delete`` may delete it. What
        it appended stays appended (``flush()`` first for durability); later
        calls on it raise ``TurnstoneError`` (``invalid_argument``)."""
        self._native.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, kind: str, data: Mapping[str, Any], *, surface: Surface = None) -> int:
        """Append one event of ``kind`` (``"user/message"``, ``"tool/call"``,
        ... or a registered plugin kind). The three surface kinds
        (user/assistant messages, tool results) need ``surface="append"``
        or ``{"op": "replace", "start": S, "end": E}``; others take none.
        Returns the event's seq. Nothing is written if it raises."""
        return self._native.append(kind, data, _surface(surface))

    def append_group(self, events: list[Any]) -> list[Any]:
        """Append several core events as one atomic group: after a crash
        either all of them exist or none. ``events``: ``(kind, data,
        surface)`` tuples as for ``append``; a surface kind may only
        ``"append"``. Returns their seqs; nothing is written if it raises."""
        return self._native.append_group([(k, d, _surface(op)) for k, d, op in events])

    def start_turn(self, turn_id: str) -> int:
        """``turn/start``: a turn begins (one user request and all the agent
        does for it). Returns its seq."""
        return self.append("turn/start", _ev.TurnStart(turn_id=turn_id))

    def end_turn(self, turn_id: str,
                 reason: Literal["completed", "cancelled", "error"] = "completed", *,
                 message: Optional[str] = None) -> int:
        """``turn/end`` with its reason (``"error"`` takes a ``message``)."""
        return self.append("turn/end", {"turn_id": turn_id, "reason": _reason(reason, message)})

    def start_step(self, turn_id: str, step_id: str) -> int:
        """``step/start``: one model request of the turn, its response and
        the tools it calls."""
        return self.append("step/start", _ev.StepStart(turn_id=turn_id, step_id=step_id))

    def end_step(self, turn_id: str, step_id: str,
                 reason: Literal["completed", "tool_use", "cancelled", "error"] = "completed", *,
                 message: Optional[str] = None) -> int:
        """``step/end`` with its reason (``"tool_use"`` when the step ends
        to run tools; ``"error"`` takes a ``message``)."""
        return self.append("step/end", {"turn_id": turn_id, "step_id": step_id,
                                         "reason": _reason(reason, message)})

    def user(self, content: Union[str, list[Any]]) -> int:
        """Append a user message (text, or content blocks)."""
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        return self.append("user/message", {"content": blocks}, surface="append")

    def assistant(self, message: Mapping[str, Any], *, provider: Optional[str] = None) -> int:
        """Append an assistant message: ``{"content": [...], "usage": ...,
        "stop_reason": ...}`` with the provider's blocks as they came. With
        ``provider`` (``"anthropic"``, ``"openai-responses"``,
        ``"openai-chat"``), ``message`` is that API's whole response body,
        logged as it came: its content blocks or output items, its usage
        (normalised, every field kept) and every other field."""
        if provider is not None:
            return self._native.append_response(provider, message)
        return self.append("assistant/message", message, surface="append")

    def turns(self) -> list[Any]:
        """Every turn, in order: ``turn_id``, ``start_seq``, ``end_seq``
        (``None`` while it runs) and ``reason`` (how it ended)."""
        return _as_list(self._native.turns())

    def fork_after_turn(self, turn_id: str, child: Optional[str] = None) -> tuple[str, int]:
        """Fork this session after the end of turn ``turn_id``: the child
        holds every event up to and including that ``turn/end``. Forks take
        durable events only (``flush()`` first); a turn still running is
        refused. Returns ``(child_id, events_held)``. ``Store.fork(source,
        at=N)`` forks at a seq instead: the child holds seqs ``0..N``
        (``at`` excluded)."""
        child_id, upto = self._native.fork_after_turn(turn_id, child)
        return child_id, upto

    def _result(self, call_id: str, blocks: list[Any], is_error: bool) -> int:
        return self.append(
            "tool/result",
            {"call_id": call_id, "content": blocks, "is_error": is_error},
            surface="append",
        )

    @property
    def metadata(self) -> dict[str, Any]:
        """Title, tags and fields, as set by the methods below (a fork
        starts from its parent's; they are events in the log)."""
        return _as_dict(self._native.metadata())

    def set_title(self, title: str) -> int:
        return self.append("session/meta", {"title": title})

    def add_tag(self, tag: str) -> int:
        return self.append("session/meta", {"add_tags": [tag]})

    def remove_tag(self, tag: str) -> int:
        return self.append("session/meta", {"remove_tags": [tag]})

    def set_meta(self, key: str, value: Optional[str]) -> int:
        """Set a free field (user id, cwd, git branch, model); None removes it."""
        return self.append("session/meta", {"fields": {key: value}})

    def flush(self) -> None:
        """Wait until everything this handle appended is durable (the GIL is
        released meanwhile). Call it before a model request is sent."""
        self._native.flush()

    checkpoint = flush

    async def aflush(self) -> None:
        """``flush`` for asyncio: woken by the engine after the fdatasync
        that covers this handle's appends; it holds no thread (any number
        of tasks may wait at once)."""
        await _await_native(self._native.flush_wait())

    @overload
    def messages(self, format: None = None) -> list[_ev.Message]: ...
    @overload
    def messages(self, format: str) -> dict[str, Any]: ...

    def messages(self, format: Optional[str] = None) -> Any:
        """The messages the model sees (a list of {role, content, ...}), or
        with ``format="anthropic" | "openai-responses" | "openai-chat"`` the
        request body the log rebuilds for that API."""
        return json.loads(self._native.messages(format))

    def prepare_request(
        self,
        *,
        provider: str,
        model: str,
        params: Optional[Mapping[str, Any]] = None,
        system: Union[str, Sequence[Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        adapter_defaults: Optional[Mapping[str, Any]] = None,
    ) -> Optional[str]:
        """Before each model request: record what the request is made with.
        Writes a ``request/header`` when one is needed and returns why
        (``"initial"`` for the session's first, ``"resume"`` for the first
        of a new agent loop over an existing session, ``"change"`` when the
        provider, model, params, system prompt or tools changed), or
        ``None`` when nothing changed. ``params`` are the API's other
        fields (``max_tokens``, ``temperature``, ...), sent as given;
        ``adapter_defaults`` apply only where ``params`` sets nothing.
        ``tools`` are ``{"name", "description", "input_schema", ...}``.
        ``request_body(format)`` then rebuilds the whole body from the log."""
        spec: dict[str, Any] = {"provider": provider, "model": model,
                                "params": dict(params or {}), "tools": list(tools or [])}
        if system is not None:
            spec["system"] = system if isinstance(system, str) else list(system)
        if adapter_defaults:
            spec["adapter_defaults"] = dict(adapter_defaults)
        return self._native.prepare_request(spec)

    def begin_loop(self) -> None:
        """A new agent loop takes over this session (a restarted worker):
        the next ``prepare_request`` writes a ``resume`` header."""
        self._native.begin_loop()

    def request_body(self, format: str) -> dict[str, Any]:
        """The request body the log rebuilds for ``format``
        (``"anthropic"``, ``"openai-responses"``, ``"openai-chat"``): the
        latest header's model, params, system prompt and tools, and the
        messages. Send it as it is; ``messages(format=...)`` is the same.

        A header written for another API (an OpenAI session sent to
        Anthropic) is translated: parameters the target has under another
        name are renamed (``max_output_tokens`` → ``max_tokens``), tools
        take the target's shape, and what the target cannot take (its
        hosted tools, ``reasoning`` items, ``thinking`` blocks, unknown
        blocks and parameters) is left out; ``dropped(format)`` lists it.
        A header for the target's own API, or for a provider name turnstone
        does not know, is sent as it is."""
        body: dict[str, Any] = json.loads(self._native.messages(format))
        return body

    def dropped(self, format: str) -> list[Dropped]:
        """What ``request_body(format)`` leaves out because the header was
        written for another API: ``[{"what": "param reasoning", "why":
        ..., "count": 1}, ...]``; empty when nothing was."""
        out: list[Dropped] = json.loads(self._native.dropped(format))
        return out

    def check_request_body(self, format: str, body: dict[str, Any]) -> None:
        """The invariant "model-visible iff logged": raise ``TurnstoneError``
        (kind ``request_mismatch``) naming the first JSON path where
        ``body`` differs from the body the log rebuilds for ``format``."""
        self._native.check_request_body(format, body)

    def compact(self, start: int, end: int, summary: str, *,
                compaction_id: Optional[str] = None) -> int:
        """Replace surface positions ``start..end`` (``end`` excluded; a
        position is a message's index in ``messages()``) by one user
        message holding ``summary``, atomically: ``compaction/start``,
        ``compaction/summary``, the summary, ``compaction/end``. The
        originals stay in the log (``events()``, replay, search). Returns
        the summary message's seq."""
        cid = compaction_id if compaction_id is not None else uuid.uuid4().hex
        return self._native.compact(cid, start, end, summary)

    def compact_turn(self, turn_id: str, summary: str, *,
                     compaction_id: Optional[str] = None) -> int:
        """``compact`` over the messages of turn ``turn_id`` (it must have
        ended): they become one summary message. Returns its seq."""
        cid = compaction_id if compaction_id is not None else uuid.uuid4().hex
        return self._native.compact_turn(cid, turn_id, summary)

    def prune_tool_result(self, at: int, replacement: str, *, tokens_saved: int = 0) -> int:
        """Replace the tool result at surface position ``at`` by
        ``replacement`` (same call id), atomically, after a
        ``compaction/prune``; the original stays in the log. Returns the
        replacement's seq."""
        return self._native.prune_tool_result(at, replacement, tokens_saved)

    def events(self, start: int = 0, end: Optional[int] = None) -> list[_ev.Event]:
        """This handle's events ``start..end`` (its own appends included)."""
        out: list[_ev.Event] = json.loads(self._native.events(start, end))
        return out

    def tool_call(
        self,
        call_id: str,
        name: str,
        input: Any,
        *,
        guard: Optional[Callable[[ToolCall], Optional[str]]] = None,
        cancelled: Optional[Callable[[], bool]] = None,
        nested: bool = False,
    ) -> _ToolContext:
        """Run a tool in the order the log requires::

            with session.tool_call("call-1", "ls", {"path": "."}) as call:
                call.result(run_ls("."))

        On entry: record ``tool/call``; run ``guard`` (a non-empty return is
        the refusal reason: the refusal is recorded and ``ToolRefused``
        raised); wait until the call is durable (not for a ``nested`` tool,
        which the outer call's checkpoint covers); if ``cancelled()`` says so,
        record ``ABORTED_BEFORE_DISPATCH`` and raise ``ToolAborted``. An
        exception in the body, or no result, is recorded as an error result:
        every call is closed."""
        return _ToolContext(self, call_id, name, input, guard, cancelled, not nested)

    def atool_call(self, call_id: str, name: str, input: Any, *, guard: Optional[Guard] = None,
                   cancelled: Optional[Callable[[], bool]] = None,
                   nested: bool = False) -> _AsyncToolContext:
        """``tool_call`` for asyncio: ``async with session.atool_call(...) as call``.
        The guard may be a coroutine function."""
        return _AsyncToolContext(self, call_id, name, input, guard, cancelled, not nested)

    async def arun_tools(self, calls: list[Any], body: Callable[[Any], Awaitable[Any]], *,
                         guard: Optional[Callable[[Any], Any]] = None,
                         cancelled: Optional[Callable[[], bool]] = None) -> list[Any]:
        """``run_tools`` for asyncio: ``body`` is a coroutine function; the
        bodies run concurrently on the event loop (``asyncio.gather``). The
        guard may be a coroutine function."""
        batch = _Batch(self, calls)
        for i, c in enumerate(calls):
            reason = guard(c) if guard is not None else None
            batch.guarded(i, await reason if asyncio.iscoroutine(reason) else reason)
        await self.aflush()  # one durability wait covers every call
        if batch.aborted(cancelled):
            return batch.outcomes

        async def one(i: int) -> dict[str, Any]:
            try:
                value = await body(calls[i])
            except Exception as e:  # recorded as an error result; the others go on
                out = _finish(batch.calls[i], error=e)
            else:
                out = _finish(batch.calls[i], value)
            await self.aflush()  # durable as it finishes: a sibling cannot take it down
            return out

        for i, out in zip(batch.runnable, await asyncio.gather(*(one(i) for i in batch.runnable))):
            batch.outcomes[i] = out
        return batch.outcomes

    async def aevents(self, start: int = 0, end: Optional[int] = None) -> list[_ev.Event]:
        return await asyncio.to_thread(self.events, start, end)

    def run_tools(
        self,
        calls: list[Any],
        body: Callable[[Any], Any],
        *,
        guard: Optional[Callable[[Any], Optional[str]]] = None,
        cancelled: Optional[Callable[[], bool]] = None,
        max_workers: Optional[int] = None,
    ) -> list[Any]:
        """Run the tool calls of one assistant message in parallel: record
        every ``tool/call`` in one atomic group, run the guard on each (a
        refusal is recorded), wait once until they are durable, then run
        the bodies concurrently in threads (the GIL is released by every
        wait and append), recording each result as it finishes and waiting
        until it is durable (so a crash while a sibling still runs keeps
        it). A body may return text, content blocks, ``None`` or any JSON
        value (stored as its JSON text). ``calls``:
        dicts with call_id, name, input. Returns one outcome dict per call,
        in order: ``outcome`` is ran, refused, aborted, failed (the body
        raised; an error result is recorded) or result_not_recorded."""
        return _run_tools(self, calls, body, guard, cancelled, max_workers)


def _run_tools(session: Session, calls: list[Any], body: Callable[[Any], Any],
               guard: Optional[Callable[[Any], Optional[str]]],
               cancelled: Optional[Callable[[], bool]], max_workers: Optional[int]) -> list[Any]:
    from concurrent.futures import ThreadPoolExecutor

    batch = _Batch(session, calls)
    for i, c in enumerate(calls):
        batch.guarded(i, guard(c) if guard is not None else None)
    session.flush()  # one durability wait covers every call
    if batch.aborted(cancelled):
        return batch.outcomes

    def one(i: int) -> dict[str, Any]:
        try:
            value = body(calls[i])
        except Exception as e:  # recorded as an error result; the others go on
            out = _finish(batch.calls[i], error=e)
        else:
            out = _finish(batch.calls[i], value)
        session.flush()  # durable as it finishes: a sibling cannot take it down
        return out

    with ThreadPoolExecutor(max_workers=max_workers or max(1, len(batch.runnable))) as pool:
        for i, out in zip(batch.runnable, pool.map(one, batch.runnable)):
            batch.outcomes[i] = out
    return batch.outcomes


class Subscription:
    """A live follower of one session (``Store.subscribe``): iterate it to
    wait for each durable event, or ``await sub.anext()``."""

    def __init__(self, native: NativeSubscription) -> None:
        self._native = native

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        e = self._native.next()
        if e is None:
            raise StopIteration
        return _as_dict(e)

    def try_next(self) -> Optional[dict[str, Any]]:
        """The next durable event if there is one now."""
        e = self._native.try_next()
        return None if e is None else json.loads(e)

    async def anext(self) -> Optional[dict[str, Any]]:
        """The next durable event (None when the store closes). Woken by the
        engine when it is durable; it holds no thread, so any number of
        idle followers can wait in one event loop. One ``anext`` at a time
        per subscription; cancelling it loses no event."""
        e = await _await_native(self._native.next_wait())
        return None if e is None else json.loads(e)

    @property
    def next_seq(self) -> int:
        return self._native.next_seq()
