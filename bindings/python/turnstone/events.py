"""The data of every core event kind, typed (docs/EVENTS.md).

Each class is a ``TypedDict``: build the data with it and mypy checks the
fields (a missing ``reason``, a misspelt reason ``kind``) before anything
runs; at run time it is the plain dict ``Session.append`` takes::

    from turnstone import events as ev
    s.append("turn/start", ev.TurnStart(turn_id="t1"))
    s.append("turn/end", ev.TurnEnd(turn_id="t1", reason={"kind": "completed"}))

The fields follow the engine's types (``turnstone schema`` prints their
JSON Schema; a test checks these classes against it). Content blocks are
the providers' own dicts, any block type included, so they are typed
``dict[str, Any]``.
"""


import sys
from typing import Any, Literal, Optional, TypedDict, Union

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover
    from typing_extensions import NotRequired

#: A content block in the provider's shape (``{"type": "text", "text": ...}``,
#: thinking with its signature, tool_use, an OpenAI Responses item, ...).
ContentBlock = dict[str, Any]


class Completed(TypedDict):
    kind: Literal["completed"]


class Cancelled(TypedDict):
    kind: Literal["cancelled"]


class Failed(TypedDict):
    kind: Literal["error"]
    message: str


class Interrupted(TypedDict):
    """Written by repair after a crash; a live append of it is refused."""
    kind: Literal["interrupted"]


class ToolUse(TypedDict):
    kind: Literal["tool_use"]


#: Why a turn ended.
TurnEndReason = Union[Completed, Cancelled, Failed, Interrupted]
#: Why a step ended.
StepEndReason = Union[Completed, ToolUse, Cancelled, Failed, Interrupted]
#: A synthetic tool result's status (written by repair).
ToolStatus = Literal["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED", "ABORTED_BEFORE_DISPATCH"]


class TurnStart(TypedDict):
    """``turn/start``"""
    turn_id: str


class TurnEnd(TypedDict):
    """``turn/end``"""
    turn_id: str
    reason: TurnEndReason


class StepStart(TypedDict):
    """``step/start``"""
    turn_id: str
    step_id: str


class StepEnd(TypedDict):
    """``step/end``"""
    turn_id: str
    step_id: str
    reason: StepEndReason


class UserMessage(TypedDict):
    """``user/message`` (surface)"""
    content: list[ContentBlock]


class AssistantChunk(TypedDict):
    """``assistant/chunk``: a streamed delta, never sent to the model."""
    index: int
    text: str


class AssistantMessage(TypedDict):
    """``assistant/message`` (surface). Any other field of the response
    (its id, model, ...) is kept too: pass the dict with them."""
    content: list[ContentBlock]
    usage: NotRequired[Optional[dict[str, Any]]]
    stop_reason: NotRequired[Optional[str]]


class ToolCall(TypedDict):
    """``tool/call``: recorded before the tool body may run."""
    call_id: str
    name: str
    input: Any


class ToolResult(TypedDict):
    """``tool/result`` (surface)"""
    call_id: str
    content: list[ContentBlock]
    is_error: NotRequired[bool]
    status: NotRequired[Optional[ToolStatus]]


class ToolSchema(TypedDict):
    """A tool as offered to the model (any other field is kept)."""
    name: NotRequired[str]
    description: NotRequired[str]
    input_schema: NotRequired[Any]


class CallConfig(TypedDict):
    provider: str
    model: str
    params: NotRequired[dict[str, Any]]


class EpochHeader(TypedDict):
    config: CallConfig
    adapter_defaults: NotRequired[list[str]]
    system: NotRequired[Union[str, list[ContentBlock], None]]
    tools: NotRequired[list[ToolSchema]]


class RequestHeader(TypedDict):
    """``request/header`` (``Session.prepare_request`` writes it for you)."""
    reason: Literal["initial", "resume", "change"]
    header: EpochHeader


class RequestContext(TypedDict):
    """``request/context``: the current route's capacity."""
    provider: str
    model: str
    context_window: int


class SessionEndSeed(TypedDict):
    """``session/end-seed``: no fields."""


class CompactionStart(TypedDict):
    compaction_id: str


class CompactionSummary(TypedDict):
    compaction_id: str
    text: str


class CompactionEnd(TypedDict):
    compaction_id: str


class CompactionPrune(TypedDict):
    replaced_seqs: list[int]
    tokens_saved: int


class SessionMeta(TypedDict):
    """``session/meta`` (``set_title``, ``add_tag``, ``set_meta`` write it)."""
    title: NotRequired[Optional[str]]
    add_tags: NotRequired[list[str]]
    remove_tags: NotRequired[list[str]]
    fields: NotRequired[dict[str, Optional[str]]]


class SessionDelete(TypedDict):
    """``session/delete``: written by ``Store.delete`` only."""


#: Each core kind's name and the class of its data.
KINDS: dict[str, type] = {
    "turn/start": TurnStart,
    "turn/end": TurnEnd,
    "step/start": StepStart,
    "step/end": StepEnd,
    "user/message": UserMessage,
    "assistant/chunk": AssistantChunk,
    "assistant/message": AssistantMessage,
    "tool/call": ToolCall,
    "tool/result": ToolResult,
    "request/header": RequestHeader,
    "request/context": RequestContext,
    "session/end-seed": SessionEndSeed,
    "compaction/start": CompactionStart,
    "compaction/summary": CompactionSummary,
    "compaction/end": CompactionEnd,
    "compaction/prune": CompactionPrune,
    "session/meta": SessionMeta,
    "session/delete": SessionDelete,
}


class Event(TypedDict):
    """One event as ``events()``, ``Store.replay()`` and subscriptions give
    it: ``data`` is the kind's data (the classes above for core kinds)."""
    seq: int
    kind: str
    ignorable: bool
    data: dict[str, Any]
    #: The surface op of a surface kind (``{"op": "append"}``, ``{"op": "replace", ...}``).
    surface: NotRequired[dict[str, Any]]
    #: When it was appended, in milliseconds since the Unix epoch.
    ts: NotRequired[int]


class Message(TypedDict):
    """One message the model sees, as ``messages()`` gives it (a tool
    result is a user message holding one ``tool_result`` block)."""
    role: Literal["user", "assistant"]
    source_seq: int
    kind: Literal["user/message", "assistant/message", "tool/result"]
    content: list[ContentBlock]
