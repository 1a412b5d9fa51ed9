//! The session layer: typed events over the shared log, the surface, derived
//! messages, request headers (`../shared/SEMANTICS.md`).
//!
//! A [`Session`] is one session's event log in the [`crate::Store`]. Every
//! view (surface, messages, header, open turn/step/tool state) is a fold over
//! that log, computed the same way live and on restore.
//!
//! The layer is built in rooms (private modules; everything public is
//! re-exported here, so each public type has one path):
//!
//! | room | owns |
//! |---|---|
//! | `codec/` | events as bytes: core kinds and their data, content blocks and usage, the envelope (FORMAT.md §10), blob references |
//! | `fold/` | what events mean: surface, derived messages, turns and coordinates, request headers, the state snapshot |
//! | `handle/` | [`Session`] and [`Host`]: open, append (typed or JSON), flush, requests, compaction, turns, repair |
//! | `providers/` | one file per model API: responses in, request bodies out |
//! | `tools/` | tool bodies after their `tool/call` is durable, alone or in parallel |
//! | `views/` | replay and fork, query and search, the catalog, projections and their caches |
//! | `lifecycle/` | delete, retention, collection with the session layer's rules |
//! | `log` | the one seam to storage ([`LogHandle`], [`LogRef`]) |
//! | `asynchronous` | awaiting durability and following sessions without a thread |
#![warn(missing_docs)]

pub(crate) mod asynchronous;
pub(crate) mod codec;
pub(crate) mod fold;
pub(crate) mod handle;
pub(crate) mod lifecycle;
pub(crate) mod log;
pub(crate) mod providers;
pub(crate) mod tools;
pub(crate) mod views;

#[allow(deprecated)]
pub use self::handle::SeedEvent;
pub use self::handle::{HistoryEvent, Session, STAGING_PREFIX};
#[cfg(feature = "tokio")]
pub use asynchronous::tokio as blocking_pool;
pub use asynchronous::{run_tool_async, subscribe, FlushWait, SessionSubscription};
pub use codec::content::{ChatFunction, ContentBlock, Extra, MediaSource, ToolResultContent};
pub use codec::envelope::{now_ms, DecodeError};
pub use codec::event::{
    AssistantChunk, AssistantMessage, CallConfig, CompactionEnd, CompactionPrune, CompactionStart,
    CompactionSummary, CoreKind, CustomEvent, CustomEventError, EpochHeader, EventData, EventKind,
    HeaderReason, Intent, MetaUpdate, Registry, RequestContext, RequestHeader, SessionDelete,
    SessionEndSeed, SessionEvent, SessionMetadata, StepEnd, StepEndReason, StepStart, SystemPrompt,
    ToolCall, ToolResult, ToolSchema, ToolStatus, TurnEnd, TurnEndReason, TurnStart, UserMessage,
    META_NAME_BYTES_MAX, META_VALUE_BYTES_MAX, SESSION_FORMAT_VERSION,
};
pub use codec::schema::{kind_example, kind_schema, schema_named};
pub use codec::usage::Usage;
pub use fold::coords::TurnInfo;
pub use fold::header::{Request, RequestSpec};
pub use fold::messages::{Message, Role};
pub use fold::state::OpenState;
pub use fold::surface::{Surface, SurfaceOp};
pub use handle::host::{Host, SharedSession};
pub use handle::repair::{repair, validate_messages, MessageProblem, PluginRepair, RepairReport};
pub use lifecycle::blobs::referenced_blobs;
pub use lifecycle::delete::{delete, deleted_at};
pub use log::{DurabilityPoint, LogHandle, LogRef};
pub use providers::{Dropped, Provider};
pub use tools::durability::{
    run_tool, CancelToken, CheckpointPoint, ToolBody, ToolOutcome, ToolScope,
};
pub use tools::parallel::run_tools_parallel;
pub use views::catalog::{Catalog, CatalogEntry, Cursor, EntryFold, ListPage, ListQuery};
pub use views::projection::{
    estimate_tokens, fold_arc, Projection, ProjectionRegistry, RunState, RunStatus, TodoItem,
    TokenMeter, TokenState, TurnStatus, MEDIA_TOKENS_ESTIMATE,
};
#[cfg(feature = "search")]
pub use views::query::SearchIndex;
#[allow(deprecated)]
pub use views::query::SessionSummary;
pub use views::query::{
    events, list_sessions, search, search_session, searchable_text, SEARCH_FILE,
};
pub use views::replay::{fork, replay, replay_range, turn_open, Forked, Replay};

/// Segment collection with the session layer's liveness rules: a deleted
/// session, or one its retention policy expires, is dead (FORMAT.md §14).
pub mod gc {
    pub use super::lifecycle::gc::{
        collect, collect_live, collect_live_with_rule, collect_with, collect_with_rule, is_dead,
        Background, BackgroundOptions, BackgroundStats, Rule,
    };
    pub use super::lifecycle::retention::Retention;
}

/// Retention: when a store's sessions expire (`retention.json`, FORMAT.md §18).
pub mod retention {
    pub use super::lifecycle::retention::{
        check_with, session_times, Policy, SessionPolicy, RETENTION_FILE, RETENTION_FILE_BYTES_MAX,
    };
}

/// Projection caches in snapshot files (FORMAT.md §12).
pub mod snapshot {
    pub use super::views::snapshot::{
        decode, encode, event_crc, read, refresh, snapshot_path, write, CacheRead, SnapshotHeader,
        SNAPSHOT_DIR, SNAPSHOT_HEADER_BYTES, SNAPSHOT_MAGIC, SNAPSHOT_VERSION,
    };
}

/// What the other crates of this workspace (the CLI, the server, the
/// PostgreSQL backend, benches, fuzz targets) reach below the session
/// layer's API: the envelope codec, blob references, state snapshot paths.
/// Not a stable API.
#[doc(hidden)]
pub mod internals {
    pub use super::codec::blob_refs::{
        direct_refs, has_refs, outline, payload_blobs, refs_in_blob, resolve, resolve_event,
        BLOB_REF_TYPE, ENVELOPE_VERSION_BLOBS,
    };
    pub use super::codec::envelope::{
        decode, decode_view, encode_core, encode_plugin, encode_plugin_at, Envelope,
    };
    pub use super::codec::event::KIND_CODE_PLUGIN;
    pub use super::fold::header::{first_difference, first_json_difference};
    pub use super::fold::messages::MessageCache;
    pub use super::fold::state_snapshot::{
        state_snapshot_path, STATE_SNAPSHOT_NAME, STATE_SNAPSHOT_TAIL, STATE_SNAPSHOT_VERSION,
    };
    pub use super::handle::{create_from_raw, delete_staging_leftovers};
    pub use super::lifecycle::blobs::session_blobs;
    pub use super::lifecycle::delete::check_not_deleted;
    pub use super::lifecycle::retention::check_not_expired;
}
