"""An OpenAI Agents SDK session on turnstone: one line to switch.

    from turnstone.agents import TurnstoneSession
    session = TurnstoneSession("conversation-1", "./store")
    result = await Runner.run(agent, "hi", session=session)

The SDK's ``Session`` protocol (``get_items(limit)``, ``add_items``,
``pop_item``, ``clear_session``), with the results of the SDK's own
``SQLiteSession`` on every sequence of calls (tested differentially).

Storage: the session ``agents:<session_id>``. Every item the SDK hands
over is one surface event, ``user/message`` for items with role user,
system or developer and ``assistant/message`` for everything else
(assistant messages, reasoning with its encrypted content, function calls
and their outputs, item types that do not exist yet), whose single content
block is a text block carrying the item, unchanged, in a field of its own:
``{"type": "text", "text": <the item's text>, "openai_agents_item": <the
item>}``. Content blocks cross the engine as JSON values, so ``get_items``
gives back JSON-equal items, unknown fields included; the text (message
text, refusals, reasoning summaries, function names and arguments, tool
outputs) is what search, ``messages()`` and the CLI see, stored a second
time for them. The items of one ``add_items`` call are one atomic group:
after a crash all of them are there or none (a function call is never
left without the output added with it).

Why not the item itself as the block: turnstone reads a bare
``function_call`` / ``function_call_output`` block as a tool use and its
result, and then keeps its own agent-loop rules for them: a replace may
not separate a call from its output, nor remove a call whose output is
pending, and loading a crashed session answers an unanswered call with a
synthetic result. The SDK runs its own loop, and its sessions may pop any
item at any time (SQLiteSession does), so the items stay opaque to the
engine's tool rules.

``pop_item`` and ``clear_session`` are surface operations: an empty
``assistant/message`` (which ``derive_messages`` skips; its ``agents``
field says which operation wrote it) *replaces* the popped item, or every
item, in the surface. Nothing is erased: the removed items stay in the log
for replay and audit (``Store.replay``, ``turnstone dump``); the history
the session derives no longer shows them.

Sessions on one directory in one process share one open Store, and two
objects naming one session id share one history. Mutations return once
durable; concurrent sessions share group commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any, Optional

from agents.items import TResponseInputItem
from agents.memory.session import SessionABC
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from . import Session, TurnstoneError, _frameworks, error_kind

__all__ = ["TurnstoneSession"]

_USER_ROLES = ("user", "system", "developer")


_FIELD = "openai_agents_item"


def _parts_text(content: object, out: list[str]) -> None:
    if isinstance(content, str):
        out.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                for key in ("text", "refusal"):
                    if isinstance(part.get(key), str):
                        out.append(part[key])


def _text(item: Mapping[str, Any]) -> str:
    """The item's text, for search and the CLI: message text and
    refusals, reasoning summaries, a function call's name and arguments,
    a tool output."""
    out: list[str] = []
    _parts_text(item.get("content"), out)
    _parts_text(item.get("summary"), out)
    if isinstance(item.get("name"), str) and isinstance(item.get("arguments"), str):
        out.append(f"{item['name']}({item['arguments']})")
    _parts_text(item.get("output"), out)
    return "\n".join(out)


def _block(item: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "text", "text": _text(item), _FIELD: item}


def _kind(item: object) -> str:
    if not isinstance(item, dict):
        raise TurnstoneError(
            "invalid_argument",
            f"a session item is a dict (a Responses input item), not {type(item).__name__}",
            None,
            None,
        )
    return "user/message" if item.get("role") in _USER_ROLES else "assistant/message"


class _State:
    """One session's surface, shared by every object naming it: the seqs
    of its surface nodes in order, and which of them are the empty
    messages written by pop_item / clear_session."""

    def __init__(self, session: Optional[Session]) -> None:
        self.session = session  # None until the first add
        self.nodes: list[int] = []
        self.hidden: set[int] = set()

    def apply(self, seq: int, op: Mapping[str, Any], tombstone: bool) -> None:
        if op["op"] == "append":
            self.nodes.append(seq)
        else:
            self.nodes[op["start"]:op["end"]] = [seq]
        if tombstone:
            self.hidden.add(seq)

    def visible(self) -> list[int]:
        return [s for s in self.nodes if s not in self.hidden]


async def _await_mutation(fut: Awaitable[None]) -> None:
    """Wait for a mutation's durability even if the caller is cancelled
    meanwhile, then re-raise the cancellation (what the SDK's own sessions
    do: a cancelled add_items is either complete or absent, not unknown)."""
    task = asyncio.ensure_future(fut)
    cancelled: Optional[asyncio.CancelledError] = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as e:
            cancelled = cancelled or e
    task.result()
    if cancelled is not None:
        raise cancelled


class TurnstoneSession(SessionABC):
    """An Agents SDK session stored in the turnstone store at ``path``."""

    session_settings: Optional[SessionSettings] = None

    def __init__(self, session_id: str, path: _frameworks.StorePath, *,
                 session_settings: Optional[SessionSettings | dict[str, Any]] = None) -> None:
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None else SessionSettings()
        )
        self._shared = _frameworks.acquire(path)
        self.store = self._shared.store
        self._name = f"agents:{session_id}"
        self._closed = False

    # ---- state

    def _state(self) -> _State:
        key = ("agents", self._name)
        st: Optional[_State] = self._shared.state.get(key)
        if st is None:
            try:
                session = self.store.open_session(self._name)
            except TurnstoneError as e:
                if error_kind(e) != "unknown_session":
                    raise
                session = None
            st = _State(session)
            if session is not None:
                for ev in session.events():
                    op = ev.get("surface")
                    if op:
                        st.apply(ev["seq"], op, ev["kind"] == "assistant/message"
                                 and not ev["data"].get("content"))
            self._shared.state[key] = st
        return st

    def _items(self, st: _State, seqs: list[int]) -> list[TResponseInputItem]:
        if not seqs:
            return []
        assert st.session is not None  # it wrote the nodes seqs come from
        first = seqs[0]
        events = st.session.events(first, seqs[-1] + 1)
        return [events[s - first]["data"]["content"][0][_FIELD] for s in seqs]

    def _check_not_closed(self) -> None:
        if self._closed:
            raise RuntimeError("TurnstoneSession is closed")

    # ---- the Session protocol

    async def get_items(self, limit: Optional[int] = None) -> list[TResponseInputItem]:
        """The history in order; with ``limit`` (or the settings' limit)
        the latest ``limit`` items, in order. As SQLiteSession: 0 gives
        none, a negative limit gives all."""
        self._check_not_closed()
        n = resolve_session_limit(limit, self.session_settings)
        with self._shared.lock:
            st = self._state()
            seqs = st.visible()
            if n is not None and n >= 0:
                seqs = seqs[-n:] if n else []
            return self._items(st, seqs)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items (one atomic group); returns once durable."""
        self._check_not_closed()
        if not items:
            return
        group = [(_kind(item), {"content": [_block(item)]}, "append") for item in items]
        with self._shared.lock:
            st = self._state()
            session = st.session
            if session is None:
                session = _frameworks.create_named(
                    self.store, [self._name], self.store.create_session)[1]
                st.session = session
            seqs = session.append_group(group)
            for seq in seqs:
                st.apply(seq, {"op": "append"}, False)
            native = session._native
        await _await_mutation(self._shared.waiter.wait(native))

    async def pop_item(self) -> Optional[TResponseInputItem]:
        """Remove the latest item from the history and return it (None if
        there is none): an empty message replaces it in the surface; the
        item stays in the log."""
        self._check_not_closed()
        with self._shared.lock:
            st = self._state()
            vis = st.visible()
            if not vis:
                return None
            assert st.session is not None  # it wrote the visible nodes
            last = vis[-1]
            item = self._items(st, [last])[0]
            start = st.nodes.index(last)
            op = {"op": "replace", "start": start, "end": len(st.nodes)}
            seq = st.session.append("assistant/message",
                                    {"content": [], "agents": {"op": "pop_item", "seq": last}},
                                    surface=op)
            st.apply(seq, op, True)
            native = st.session._native
        await _await_mutation(self._shared.waiter.wait(native))
        return item

    async def clear_session(self) -> None:
        """Remove every item from the history: one empty message replaces
        the whole surface; the items stay in the log."""
        self._check_not_closed()
        with self._shared.lock:
            st = self._state()
            if not st.visible():
                return
            assert st.session is not None  # it wrote the visible nodes
            op = {"op": "replace", "start": 0, "end": len(st.nodes)}
            seq = st.session.append("assistant/message",
                                    {"content": [], "agents": {"op": "clear_session"}},
                                    surface=op)
            st.apply(seq, op, True)
            native = st.session._native
        await _await_mutation(self._shared.waiter.wait(native))

    def close(self) -> None:
        """Release the store (closed when its last user lets go)."""
        if not self._closed:
            self._closed = True
            _frameworks.release(self._shared)
