"""A LangGraph checkpointer on turnstone: one line to switch.

    from turnstone.langgraph import TurnstoneSaver
    graph = builder.compile(checkpointer=TurnstoneSaver("./store"))

Each LangGraph thread is one turnstone session (``langgraph:<thread_id>``)
whose events are four plugin kinds, all ignorable so that the CLI (dump,
verify, stats) and processes without this module still open the store:

- ``langgraph/checkpoint``: namespace, id, parent id, the checkpoint
  without its channel values and its metadata (each as the serializer's
  ``(type, bytes)``, bytes in base64), and the blobs of the channels whose
  version is new in it (``new_versions``);
- ``langgraph/writes``: the pending writes of one task for one checkpoint;
- ``langgraph/delete_runs`` and ``langgraph/prune``: markers. The log is
  append-only: ``delete_for_runs`` and ``prune`` do not erase bytes, they
  append a marker that the index applies (on this run and on every later
  load), so what they hide stays in the log for replay and audit.
  ``delete_thread`` is turnstone's ``Store.delete`` (a durable tombstone;
  the bytes become reclaimable) and ``copy_thread`` is ``Store.fork``
  (nothing is copied: the new thread shares the source's prefix).

An in-memory index per thread, built from the thread's events the first
time the thread is used and updated by every put, answers ``get_tuple``
and ``list`` (filters, ``before``, ``limit``) without scanning the log.

Durability: ``put`` and ``put_writes`` return once their event is durable.
``aput`` and ``aput_writes`` append and then await one shared waiter
thread, so the puts of many concurrent threads share one group commit.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import builtins
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, Optional, Union, overload

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from . import Session, Store, TurnstoneError, _frameworks, error_kind

__all__ = ["TurnstoneSaver"]

_PREFIX = "langgraph"
_SCALARS = (str, int, float, bool, type(None))

#: ``SerializerProtocol.loads_typed``: ``(type, bytes)`` -> value.
_Loads = Callable[[tuple[str, bytes]], Any]
#: A serialized value as stored: ``[type, base64 of the bytes]``.
_Typed = Sequence[str]
#: A channel blob's key: (namespace, channel, version).
_BlobKey = tuple[str, str, Union[str, int, float]]
#: A stored pending write, by (task id, idx): (channel, type, base64, task path).
_Write = tuple[str, str, str, str]


def _names(thread_id: str) -> Iterator[str]:
    """Session names for a thread: ``langgraph:<id>``, then (after a
    delete) ``langgraph~1:<id>``, ``langgraph~2:<id>``, ..."""
    yield f"{_PREFIX}:{thread_id}"
    n = 1
    while True:
        yield f"{_PREFIX}~{n}:{thread_id}"
        n += 1


def _thread_of(name: str) -> Optional[str]:
    head, sep, tid = name.partition(":")
    if not sep:
        return None
    if head == _PREFIX or (head.startswith(_PREFIX + "~") and head[len(_PREFIX) + 1:].isdigit()):
        return tid
    return None


class _Cp:
    __slots__ = ("checkpoint", "metadata", "parent")

    def __init__(self, checkpoint: _Typed, metadata: CheckpointMetadata,
                 parent: Optional[str]) -> None:
        self.checkpoint = checkpoint  # [type, base64] of the checkpoint minus channel values
        self.metadata = metadata      # decoded, for filters
        self.parent = parent


class _Thread:
    """The index of one thread: its checkpoints by namespace (ids kept
    sorted: uuid6 ids sort in creation order), channel blobs by (namespace,
    channel, version) and pending writes by (namespace, checkpoint id).
    ``apply`` is the one fold of the thread's events, used both when
    loading from the log and after each append, so a reload rebuilds
    exactly the live index."""

    def __init__(self, name: str, session: Session, loads: _Loads) -> None:
        self.name = name
        self.session = session
        self.loads = loads
        self.cps: dict[str, dict[str, _Cp]] = {}
        self.order: dict[str, list[str]] = {}
        self.blobs: dict[_BlobKey, _Typed] = {}
        self.writes: dict[tuple[str, str], dict[tuple[str, int], _Write]] = {}
        #: (metadata key, scalar value) -> {(namespace, checkpoint id)}:
        #: what ``list(filter=...)`` intersects instead of testing each
        #: checkpoint
        self.by_meta: dict[tuple[str, object], set[tuple[str, str]]] = {}

    def _index_meta(self, ns: str, cid: str, metadata: Mapping[str, Any], add: bool) -> None:
        for k, v in metadata.items():
            if isinstance(v, _SCALARS):
                key = (k, v)
                if add:
                    self.by_meta.setdefault(key, set()).add((ns, cid))
                else:
                    ids = self.by_meta.get(key)
                    if ids is not None:
                        ids.discard((ns, cid))
                        if not ids:
                            del self.by_meta[key]

    def matching(self, filter: Mapping[str, Any]) -> Optional[set[tuple[str, str]]]:
        """The (namespace, id) pairs whose metadata has every pair of
        ``filter``, from the index; None when a filter value is not a
        scalar or is None (the caller then tests each checkpoint)."""
        if not all(isinstance(v, _SCALARS) and v is not None for v in filter.values()):
            return None  # (a None matches a missing key too, as in LangGraph's savers)
        out: Optional[set[tuple[str, str]]] = None
        for k, v in filter.items():
            ids = self.by_meta.get((k, v), set())
            out = set(ids) if out is None else out & ids
            if not out:
                return set()
        return out

    def apply(self, kind: str, data: Mapping[str, Any],
              metadata: Optional[CheckpointMetadata] = None) -> None:
        if kind == "langgraph/checkpoint":
            ns, cid = data["ns"], data["id"]
            for ch, (ver, typ, b64) in data["blobs"].items():
                self.blobs[(ns, ch, ver)] = [typ, b64]
            if metadata is None:
                metadata = _loads(self.loads, data["metadata"])
            cps = self.cps.setdefault(ns, {})
            if cid not in cps:
                bisect.insort(self.order.setdefault(ns, []), cid)
            else:
                self._index_meta(ns, cid, cps[cid].metadata, add=False)
            cps[cid] = _Cp(data["checkpoint"], metadata, data.get("parent"))
            self._index_meta(ns, cid, metadata, add=True)
        elif kind == "langgraph/writes":
            stored = self.writes.setdefault((data["ns"], data["checkpoint_id"]), {})
            task_id, task_path = data["task_id"], data.get("task_path", "")
            for idx, ch, typ, b64 in data["writes"]:
                key = (task_id, idx)
                if idx >= 0 and key in stored:
                    continue  # a retried task: its first writes stand
                stored[key] = (ch, typ, b64, task_path)
        elif kind == "langgraph/delete_runs":
            runs = set(data["run_ids"])
            self._drop(lambda ns, cid, cp: cp.metadata.get("run_id") in runs)
        elif kind == "langgraph/prune":
            keep = data["keep"]
            self._drop(lambda ns, cid, cp: keep.get(ns) != cid)

    def _drop(self, doomed: Callable[[str, str, _Cp], bool]) -> None:
        for ns, cps in self.cps.items():
            gone = [cid for cid, cp in cps.items() if doomed(ns, cid, cp)]
            for cid in gone:
                self._index_meta(ns, cid, cps.pop(cid).metadata, add=False)
                self.writes.pop((ns, cid), None)
            if gone:
                self.order[ns] = [cid for cid in self.order[ns] if cid in cps]

    def has_writes(self, ns: str, cid: str, task_id: str, idx: int) -> bool:
        return (task_id, idx) in self.writes.get((ns, cid), ())

    def latest(self, ns: str) -> Optional[str]:
        ids = self.order.get(ns)
        return ids[-1] if ids else None


def _delete_when_released(store: Store, name: str) -> None:
    """``Store.delete``, which is refused while a handle is alive: the
    durability waiter may hold ours for the instant it takes to finish a
    round, so wait for that (briefly) instead of failing."""
    import time

    for _ in range(200):
        try:
            store.delete(name)
            return
        except TurnstoneError as e:
            if error_kind(e) != "session_live":
                raise
            time.sleep(0.005)
    store.delete(name)


def _dumps(serde: SerializerProtocol, value: Any) -> list[str]:
    typ, raw = serde.dumps_typed(value)
    return [typ, base64.b64encode(raw).decode("ascii")]


def _loads(loads: _Loads, typed: _Typed) -> Any:
    return loads((typed[0], base64.b64decode(typed[1])))


class TurnstoneSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer storing each thread as a turnstone session
    in the store directory ``path`` (created if missing). Sync and async
    methods; usable as a (async) context manager. Savers on one directory
    in one process share one open Store."""

    def __init__(self, path: _frameworks.StorePath, *,
                 serde: Optional[SerializerProtocol] = None) -> None:
        super().__init__(serde=serde)
        self._shared = _frameworks.acquire(path)
        self.store = self._shared.store
        self._lock = threading.RLock()
        self._threads: dict[str, _Thread] = {}
        self._catalog: Optional[dict[str, str]] = None  # thread id -> session name
        self._closed = False

    # ---- lifecycle

    def close(self) -> None:
        """Release the store (closed when its last user lets go)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._threads.clear()
        _frameworks.release(self._shared)

    def __enter__(self) -> "TurnstoneSaver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "TurnstoneSaver":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # ---- the index

    def _names(self) -> dict[str, str]:
        if self._catalog is None:
            found: dict[str, tuple[int, str]] = {}
            for s in self.store.sessions():
                tid = _thread_of(s["id"])
                if tid is not None:
                    prev = found.get(tid)
                    if prev is None or s["created_ms"] >= prev[0]:
                        found[tid] = (s["created_ms"], s["id"])
            self._catalog = {tid: name for tid, (_, name) in found.items()}
        return self._catalog

    @overload
    def _thread(self, thread_id: object, create: Literal[True]) -> _Thread: ...

    @overload
    def _thread(self, thread_id: object, create: bool = False) -> Optional[_Thread]: ...

    def _thread(self, thread_id: object, create: bool = False) -> Optional[_Thread]:
        tid = str(thread_id)
        t = self._threads.get(tid)
        if t is not None:
            return t
        names = self._names()
        # Not known to this saver: a first generation made since (a
        # store.fork into ``langgraph:<id>``, another tool) is found by name.
        name = names.get(tid) or f"{_PREFIX}:{tid}"
        session: Optional[Session] = None
        try:
            session = self.store.open_session(name)
        except TurnstoneError as e:
            if error_kind(e) not in ("unknown_session", "session_deleted"):
                raise
            names.pop(tid, None)
        if session is not None:
            names[tid] = name
            t = _Thread(name, session, self.serde.loads_typed)
            for ev in session.events():
                t.apply(ev["kind"], ev["data"])
        elif create:
            name, created = _frameworks.create_named(
                self.store, _names(tid), self.store.create_session)
            names[tid] = name  # (names is self._catalog)
            t = _Thread(name, created, self.serde.loads_typed)
        else:
            return None
        self._threads[tid] = t
        return t

    def _tuple(self, t: _Thread, tid: str, ns: str, cid: str, cp: _Cp) -> CheckpointTuple:
        loads = self.serde.loads_typed
        checkpoint = _loads(loads, cp.checkpoint)
        values: dict[str, Any] = {}
        for ch, ver in checkpoint["channel_versions"].items():
            blob = t.blobs.get((ns, ch, ver))
            if blob is not None and blob[0] != "empty":
                values[ch] = _loads(loads, blob)
        checkpoint["channel_values"] = values
        stored = t.writes.get((ns, cid), {})
        order = sorted(stored, key=lambda k: writes_sort_key(stored[k][3], *k))
        pending: builtins.list[PendingWrite] = [
            (k[0], stored[k][0], _loads(loads, stored[k][1:3])) for k in order]
        return CheckpointTuple(
            config={"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=cp.metadata.copy(),
            parent_config=(
                {"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cp.parent}}
                if cp.parent else None
            ),
            pending_writes=pending,
        )

    # ---- reads

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        conf = config["configurable"]
        tid, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        with self._lock:
            t = self._thread(tid)
            if t is None:
                return None
            cid = get_checkpoint_id(config) or t.latest(ns)
            if not cid:
                return None
            cp = t.cps.get(ns, {}).get(cid)
            if cp is None:
                return None
            return self._tuple(t, tid, ns, cid, cp)

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        """Newest first. From the index: per namespace the ids are sorted,
        so ``before`` is a binary search and ``limit`` stops the walk."""
        return iter(self._list(config, filter, before, limit))

    def _list(self, config: Optional[RunnableConfig], filter: Optional[dict[str, Any]],
              before: Optional[RunnableConfig],
              limit: Optional[int]) -> builtins.list[CheckpointTuple]:
        out: builtins.list[CheckpointTuple] = []
        if limit is not None and limit <= 0:
            return out
        conf = (config or {}).get("configurable", {})
        before_id = get_checkpoint_id(before) if before else None
        with self._lock:
            if config is not None and "thread_id" in conf:
                tids = [str(conf["thread_id"])]
            else:
                self._catalog = None  # every thread: read the store's list again
                tids = sorted(self._names())
            for tid in tids:
                t = self._thread(tid)
                if t is None:
                    continue
                want_ns = conf.get("checkpoint_ns")
                want_id = conf.get("checkpoint_id")
                indexed = t.matching(filter) if filter else None
                cands: builtins.list[tuple[str, str]] = []
                for ns, ids in t.order.items():
                    if want_ns is not None and ns != want_ns:
                        continue
                    end = bisect.bisect_left(ids, before_id) if before_id else len(ids)
                    if indexed is not None:
                        cands.extend((cid, ns) for n, cid in indexed
                                     if n == ns and (before_id is None or cid < before_id))
                    else:
                        cands.extend((cid, ns) for cid in ids[:end])
                cands.sort(reverse=True)
                for cid, ns in cands:
                    if want_id and cid != want_id:
                        continue
                    cp = t.cps[ns][cid]
                    if filter and indexed is None and not all(
                            cp.metadata.get(k) == v for k, v in filter.items()):
                        continue
                    out.append(self._tuple(t, tid, ns, cid, cp))
                    if limit is not None and len(out) >= limit:
                        return out
        return out

    # ---- writes

    def _append_checkpoint(self, config: RunnableConfig, checkpoint: Checkpoint,
                           metadata: CheckpointMetadata,
                           new_versions: ChannelVersions) -> tuple[_Thread, RunnableConfig]:
        conf = config["configurable"]
        tid, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        c: dict[str, Any] = dict(checkpoint)
        values = c.pop("channel_values", {})
        blobs = {
            ch: [ver, *(_dumps(self.serde, values[ch]) if ch in values else ["empty", ""])]
            for ch, ver in new_versions.items()
        }
        md = get_checkpoint_metadata(config, metadata)
        data: dict[str, Any] = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": conf.get("checkpoint_id"),
            "checkpoint": _dumps(self.serde, c),
            "metadata": _dumps(self.serde, md),
            "blobs": blobs,
        }
        with self._lock:
            t = self._thread(tid, create=True)
            t.session.append("langgraph/checkpoint", data)
            t.apply("langgraph/checkpoint", data, metadata=md)
        out: RunnableConfig = {"configurable": {"thread_id": tid, "checkpoint_ns": ns,
                                                "checkpoint_id": checkpoint["id"]}}
        return t, out

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        t, out = self._append_checkpoint(config, checkpoint, metadata, new_versions)
        t.session.flush()
        return out

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        t, out = self._append_checkpoint(config, checkpoint, metadata, new_versions)
        await self._shared.waiter.wait(t.session._native)
        return out

    def _append_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                       task_id: str, task_path: str) -> Optional[_Thread]:
        conf = config["configurable"]
        tid, ns, cid = conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
        with self._lock:
            t = self._thread(tid, create=True)
            rows: builtins.list[builtins.list[Any]] = []
            for i, (ch, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(ch, i)
                if idx >= 0 and t.has_writes(ns, cid, task_id, idx):
                    continue
                rows.append([idx, ch, *_dumps(self.serde, value)])
            if not rows:
                return None  # nothing new: no event
            data: dict[str, Any] = {"ns": ns, "checkpoint_id": cid, "task_id": task_id,
                                    "task_path": task_path, "writes": rows}
            t.session.append("langgraph/writes", data)
            t.apply("langgraph/writes", data)
            return t

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        t = self._append_writes(config, writes, task_id, task_path)
        if t is not None:
            t.session.flush()

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        t = self._append_writes(config, writes, task_id, task_path)
        if t is not None:
            await self._shared.waiter.wait(t.session._native)

    # ---- thread operations

    def delete_thread(self, thread_id: str) -> None:
        """``Store.delete`` of the thread's session: a durable tombstone,
        after which the thread is empty (its forks keep working)."""
        tid = str(thread_id)
        with self._lock:
            t = self._threads.pop(tid, None)
            name = self._names().pop(tid, None)
            if t is not None:
                t.session.flush()
                t.session.close()  # the handle must be released before the delete
            if name is not None:
                _delete_when_released(self.store, name)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """A fork: the target shares the source's events up to now (none is
        copied). Into a target that already has checkpoints, the source's
        events are appended instead."""
        src, dst = str(source_thread_id), str(target_thread_id)
        with self._lock:
            s = self._thread(src)
            if s is None:
                return
            s.session.flush()  # a fork shares durable events only
            d = self._thread(dst)
            if d is None:
                at = len(s.session)
                name, _ = _frameworks.create_named(
                    self.store, _names(dst),
                    lambda n: self.store.fork(s.name, at=at, child=n))
                self._names()[dst] = name
                self._thread(dst)
                return
            for ev in s.session.events():
                if ev["kind"].startswith(_PREFIX + "/"):
                    d.session.append(ev["kind"], ev["data"])
                    d.apply(ev["kind"], ev["data"])
        d.session.flush()

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Appends a ``langgraph/delete_runs`` marker to every thread that
        has a checkpoint of these runs (each thread's index is loaded to
        find them); their checkpoints and writes are no longer listed."""
        runs = [str(r) for r in run_ids]
        if not runs:
            return
        touched: builtins.list[_Thread] = []
        with self._lock:
            wanted = set(runs)
            for tid in sorted(self._names()):
                t = self._thread(tid)
                if t is None:
                    continue  # deleted since the catalog was read
                if any(cp.metadata.get("run_id") in wanted
                       for cps in t.cps.values() for cp in cps.values()):
                    data = {"run_ids": runs}
                    t.session.append("langgraph/delete_runs", data)
                    t.apply("langgraph/delete_runs", data)
                    touched.append(t)
        for t in touched:
            t.session.flush()

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: only the newest checkpoint of each namespace
        stays listed (with its writes); ``delete``: none does. A
        ``langgraph/prune`` marker naming what is kept; the rest stays in
        the log."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        touched: builtins.list[_Thread] = []
        with self._lock:
            for tid in thread_ids:
                t = self._thread(tid)
                if t is None:
                    continue
                keep: dict[str, str] = {}
                if strategy == "keep_latest":
                    keep = {ns: ids[-1] for ns, ids in t.order.items() if ids}
                data = {"strategy": strategy, "keep": keep}
                t.session.append("langgraph/prune", data)
                t.apply("langgraph/prune", data)
                touched.append(t)
        for t in touched:
            t.session.flush()

    # ---- asyncio versions (the index is in memory; log reads and
    # durability waits run off the event loop)

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        if str(config["configurable"]["thread_id"]) in self._threads:
            return self.get_tuple(config)
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for tup in await asyncio.to_thread(self._list, config, filter, before, limit):
            yield tup

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
