//! The session layer: typed events over the shared log, the surface, derived
//! messages, request headers (`../shared/SEMANTICS.md`).
//!
//! A [`Session`] is one session's event log in the [`crate::Store`]. Every
//! view (surface, messages, header, open turn/step/tool state) is a fold over
//! that log, computed the same way live and on restore.
#![warn(missing_docs)]

pub mod adapter;
pub mod asynchronous;
pub mod blob_refs;
pub mod catalog;
pub mod content;
pub mod coords;
pub mod core;
pub mod delete;
pub mod durability;
pub mod dynamic;
pub mod event;
pub mod gc;
pub mod header;
pub mod host;
pub mod log;
pub mod messages;
pub mod parallel;
pub mod projection;
pub mod query;
pub mod repair;
pub mod replay;
pub mod retention;
pub mod snapshot;
pub mod state_snapshot;
pub mod surface;

#[allow(deprecated)]
pub use self::core::SeedEvent;
pub use self::core::{HistoryEvent, OpenState, Session};
pub use adapter::Provider;
pub use asynchronous::{run_tool_async, subscribe, FlushWait, SessionSubscription};
pub use blob_refs::referenced_blobs;
pub use catalog::{Catalog, CatalogEntry, Cursor, EntryFold, ListPage, ListQuery};
pub use content::{ChatFunction, ContentBlock, Extra, MediaSource, ToolResultContent, Usage};
pub use coords::TurnInfo;
pub use delete::{delete, deleted_at};
pub use durability::{run_tool, CancelToken, CheckpointPoint, ToolBody, ToolOutcome, ToolScope};
pub use event::{
    AssistantChunk, AssistantMessage, CallConfig, CompactionEnd, CompactionPrune, CompactionStart,
    CompactionSummary, CoreKind, CustomEvent, CustomEventError, EpochHeader, EventData, EventKind,
    HeaderReason, MetaUpdate, Registry, RequestContext, RequestHeader, SessionDelete,
    SessionEndSeed, SessionEvent, SessionMetadata, StepEnd, StepEndReason, StepStart, SystemPrompt,
    ToolCall, ToolResult, ToolSchema, ToolStatus, TurnEnd, TurnEndReason, TurnStart, UserMessage,
    META_NAME_BYTES_MAX, META_VALUE_BYTES_MAX, SESSION_FORMAT_VERSION,
};
pub use header::{Difference, Request, RequestSpec};
pub use host::{Host, SharedSession};
pub use log::{DurabilityPoint, LogHandle, LogRef};
pub use messages::{Message, Role};
pub use parallel::run_tools_parallel;
pub use projection::{Projection, ProjectionRegistry, RunState, RunStatus, TokenMeter, TokenState};
#[cfg(feature = "search")]
pub use query::SearchIndex;
pub use query::{
    events, list_sessions, search, search_session, searchable_text, Hit, SessionSummary,
    SEARCH_FILE,
};
pub use repair::{repair, validate_messages, MessageProblem, PluginRepair, RepairReport};
pub use replay::{fork, replay, replay_range, turn_open, Forked, Replay};
pub use surface::{Surface, SurfaceOp};
