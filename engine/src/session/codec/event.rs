//! Session events: the core kinds with their typed data, plugin kinds
//! registered by name, and the payload envelope stored in each frame
//! (`format-spec/FORMAT.md` §10).
//!
//! The type of [`crate::session::Session::append`] ties each data type to its
//! intent: the three surface kinds take a [`SurfaceOp`], every other kind
//! takes `()`. Passing a surface op with a non-surface event (or omitting it
//! for a surface event) does not compile.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::fold::surface::SurfaceOp;

/// Version of the session payload format. Only 0 exists; any other value is
/// refused on restore.
pub const SESSION_FORMAT_VERSION: u32 = 0;

/// Frame kind code of plugin events (the kind name is in the envelope).
pub const KIND_CODE_PLUGIN: u16 = 0xFFFF;

macro_rules! core_kinds {
    ($($variant:ident = $code:literal => $name:literal),* $(,)?) => {
        /// The session core's event kinds, with their frame kind codes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum CoreKind { $(#[doc = concat!("`", $name, "`")] $variant),* }

        impl CoreKind {
            /// Every core kind, in code order.
            pub const ALL: &'static [CoreKind] = &[$(CoreKind::$variant),*];
            /// The kind's name as stored and shown (`"tool/result"`).
            pub const fn name(self) -> &'static str {
                match self { $(CoreKind::$variant => $name),* }
            }
            /// The frame kind code.
            pub const fn code(self) -> u16 {
                match self { $(CoreKind::$variant => $code),* }
            }
            /// The kind with this frame kind code.
            pub fn from_code(code: u16) -> Option<CoreKind> {
                match code { $($code => Some(CoreKind::$variant),)* _ => None }
            }
            /// The kind with this name.
            pub fn from_name(name: &str) -> Option<CoreKind> {
                match name { $($name => Some(CoreKind::$variant),)* _ => None }
            }
        }
    };
}

core_kinds! {
    TurnStart = 1 => "turn/start",
    TurnEnd = 2 => "turn/end",
    StepStart = 3 => "step/start",
    StepEnd = 4 => "step/end",
    UserMessage = 5 => "user/message",
    AssistantChunk = 6 => "assistant/chunk",
    AssistantMessage = 7 => "assistant/message",
    ToolCall = 8 => "tool/call",
    ToolResult = 9 => "tool/result",
    RequestHeader = 10 => "request/header",
    RequestContext = 11 => "request/context",
    SessionEndSeed = 12 => "session/end-seed",
    CompactionStart = 13 => "compaction/start",
    CompactionSummary = 14 => "compaction/summary",
    CompactionEnd = 15 => "compaction/end",
    CompactionPrune = 16 => "compaction/prune",
    SessionMeta = 17 => "session/meta",
    SessionDelete = 18 => "session/delete",
}

impl CoreKind {
    /// Whether events of this kind can enter the model's surface.
    pub const fn is_surface(self) -> bool {
        matches!(
            self,
            CoreKind::UserMessage | CoreKind::AssistantMessage | CoreKind::ToolResult
        )
    }
}

pub use crate::session::codec::content::ContentBlock;
pub use crate::session::codec::usage::Usage;

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TurnEndReason {
    /// The turn finished normally.
    Completed,
    /// The loop cancelled the turn.
    Cancelled,
    /// The turn failed.
    Error {
        /// What went wrong.
        message: String,
    },
    /// Written only by repair after a crash; a live append of it is refused.
    Interrupted,
}

/// Why a step ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepEndReason {
    /// The step finished with a final answer.
    Completed,
    /// The step ended to run tools.
    ToolUse,
    /// The loop cancelled the step.
    Cancelled,
    /// The step failed.
    Error {
        /// What went wrong.
        message: String,
    },
    /// Written only by repair.
    Interrupted,
}

/// Status of a synthetic tool result written by repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ToolStatus {
    /// A durable `tool/call` has no reliable result: it may not have run, may
    /// have half run, or may have finished.
    ToolOutcomeUnknown,
    /// The assistant requested the tool but no `tool/call` was durable: it
    /// never started and is safe to re-issue.
    ToolNotStarted,
    /// The body never ran because cancellation arrived while persisting.
    AbortedBeforeDispatch,
}

/// `turn/start`: a turn begins: one user request and all the agent does
/// for it, until its `turn/end`. One turn is open at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnStart {
    /// Id of the turn.
    pub turn_id: String,
}
/// `turn/end`: the open turn ends, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnEnd {
    /// Id of the turn.
    pub turn_id: String,
    /// Why it ended.
    pub reason: TurnEndReason,
}
/// `step/start`: a step of the turn begins: one model request, its response
/// and the tools it calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepStart {
    /// Id of the turn.
    pub turn_id: String,
    /// Id of the step within the turn.
    pub step_id: String,
}
/// `step/end`: the open step ends, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepEnd {
    /// Id of the turn.
    pub turn_id: String,
    /// Id of the step.
    pub step_id: String,
    /// Why it ended.
    pub reason: StepEndReason,
}
/// `user/message` (surface): a user message, or a compaction's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserMessage {
    /// The message content, as the provider shapes it.
    pub content: Vec<ContentBlock>,
}
/// `assistant/chunk`: a streamed delta; kept for replay and usage, never sent
/// to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssistantChunk {
    /// Position of the delta in the stream.
    pub index: u32,
    /// The delta's text.
    pub text: String,
}
/// `assistant/message` (surface): a model response: its content blocks as
/// sent, usage, stop reason and the response's other fields; skipped by
/// derive_messages when its content is empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssistantMessage {
    /// The message content, as the provider sent it.
    pub content: Vec<ContentBlock>,
    /// Token usage of the response, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why the model stopped, as the provider says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Every other field of the response worth keeping (its id, model,
    /// `stop_sequence`, …), stored unchanged; never sent to the model.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}
/// `tool/call`: recorded before the tool body may run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCall {
    /// The tool use id this call answers.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The tool input.
    pub input: Value,
}
/// `tool/result` (surface): the result of a recorded `tool/call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolResult {
    /// The tool use id this result answers.
    pub call_id: String,
    /// The result content.
    pub content: Vec<ContentBlock>,
    /// Whether the tool failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Set on synthetic results written by repair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolStatus>,
}
/// Why a request header was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HeaderReason {
    /// The session's first request.
    Initial,
    /// The first request of a new agent loop over an existing session, nothing changed.
    Resume,
    /// Config, system prompt or tools changed.
    Change,
}
/// A tool's schema as sent to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolSchema {
    /// The tool name (absent for OpenAI's hosted tools, such as
    /// `{"type": "web_search_preview"}`, which are named by their type).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON schema of the input (absent for provider-run tools such as a
    /// web search, which are described by fields in `extra`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input_schema: Value,
    /// Every other field (`cache_control`, `strict`, a server tool's `type`
    /// and options), kept and sent unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

impl ToolSchema {
    /// A client tool with a name, a description and an input schema.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        ToolSchema {
            name: name.into(),
            description: description.into(),
            input_schema,
            extra: Default::default(),
        }
    }
}

/// The system prompt: a string, or blocks (Anthropic's form, which can
/// carry `cache_control`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SystemPrompt {
    /// A plain string.
    Text(String),
    /// Content blocks.
    Blocks(Vec<ContentBlock>),
}

impl SystemPrompt {
    /// The prompt's text (blocks' texts joined by blank lines).
    pub fn text(&self) -> String {
        match self {
            SystemPrompt::Text(t) => t.clone(),
            SystemPrompt::Blocks(b) => b
                .iter()
                .filter_map(ContentBlock::as_text)
                .collect::<Vec<_>>()
                .join("\n\n"),
        }
    }
}

impl From<&str> for SystemPrompt {
    fn from(s: &str) -> Self {
        SystemPrompt::Text(s.to_string())
    }
}
impl From<String> for SystemPrompt {
    fn from(s: String) -> Self {
        SystemPrompt::Text(s)
    }
}
/// Call configuration: provider, model and every other parameter (sampling,
/// reasoning effort, max tokens, …) by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CallConfig {
    /// Provider name (`anthropic`, `openai`, ...).
    pub provider: String,
    /// Model name.
    pub model: String,
    /// Every other request parameter, by name.
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
}
/// The full epoch header of a request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EpochHeader {
    /// Call configuration.
    pub config: CallConfig,
    /// Names of `config.params` whose values came from the adapter's defaults
    /// (dropped and re-derived before the next request).
    #[serde(default)]
    pub adapter_defaults: Vec<String>,
    /// The system prompt, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemPrompt>,
    /// Tool schemas offered to the model.
    #[serde(default)]
    pub tools: Vec<ToolSchema>,
}
/// `request/header`: what the next model request is made with (provider,
/// model, parameters, system prompt, tools), written before the request
/// when it is the first, a new loop's first, or a change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestHeader {
    /// Why this header was written.
    pub reason: HeaderReason,
    /// The full header.
    pub header: EpochHeader,
}
/// `request/context`: capacity of the current route; no part of header change
/// detection or restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RequestContext {
    /// Provider of the current route.
    pub provider: String,
    /// Model of the current route.
    pub model: String,
    /// Its context window, in tokens.
    pub context_window: u64,
}
/// `session/end-seed`: separates seed history from the live run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionEndSeed {}
/// `compaction/start`: a compaction begins (the summary message that
/// replaces a range of the surface follows, then `compaction/end`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompactionStart {
    /// Id shared by the events of one compaction.
    pub compaction_id: String,
}
/// `compaction/summary`: the text that replaces the compacted range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompactionSummary {
    /// Id shared by the events of one compaction.
    pub compaction_id: String,
    /// The summary text.
    pub text: String,
}
/// `compaction/end`: the compaction is complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompactionEnd {
    /// Id shared by the events of one compaction.
    pub compaction_id: String,
}
/// `compaction/prune`: surface nodes (by seq) that the next `tool/result`
/// replaces, and the tokens that saves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompactionPrune {
    /// Seqs of the surface nodes replaced.
    pub replaced_seqs: Vec<u64>,
    /// Tokens the replacement saves (as the pruner estimates).
    pub tokens_saved: u64,
}

/// `session/meta`: one update of the session's metadata (title, tags, free
/// key/value fields). Not model-visible. Written with the `IGNORABLE` frame
/// flag, so a build that predates the kind skips it instead of refusing the
/// session (FORMAT.md §10).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MetaUpdate {
    /// New title (`Some("")` clears it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Tags to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_tags: Vec<String>,
    /// Tags to remove (applied after `add_tags`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_tags: Vec<String>,
    /// Fields to set (`None` removes the field).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, Option<String>>,
}

/// Longest tag, field key or title, in bytes.
pub const META_NAME_BYTES_MAX: usize = 256;
/// Longest field value, in bytes.
pub const META_VALUE_BYTES_MAX: usize = 4096;

impl MetaUpdate {
    /// Check the limits: tags and keys 1 to [`META_NAME_BYTES_MAX`] bytes
    /// (keys without `=`, so `key=value` parses), a title of at most
    /// [`META_NAME_BYTES_MAX`] bytes, values of at most
    /// [`META_VALUE_BYTES_MAX`] bytes.
    pub fn check(&self) -> Result<(), String> {
        if let Some(t) = &self.title {
            if t.len() > META_NAME_BYTES_MAX {
                return Err(format!(
                    "title of {} bytes exceeds {META_NAME_BYTES_MAX} bytes",
                    t.len()
                ));
            }
        }
        for tag in self.add_tags.iter().chain(&self.remove_tags) {
            if tag.is_empty() || tag.len() > META_NAME_BYTES_MAX {
                return Err(format!(
                    "tag {tag:?} must be 1 to {META_NAME_BYTES_MAX} bytes"
                ));
            }
        }
        for (k, v) in &self.fields {
            if k.is_empty() || k.len() > META_NAME_BYTES_MAX || k.contains('=') {
                return Err(format!(
                    "field key {k:?} must be 1 to {META_NAME_BYTES_MAX} bytes without '='"
                ));
            }
            if v.as_ref().is_some_and(|v| v.len() > META_VALUE_BYTES_MAX) {
                return Err(format!(
                    "value of field {k:?} exceeds {META_VALUE_BYTES_MAX} bytes"
                ));
            }
        }
        Ok(())
    }
}

/// A session's metadata: the fold of its `session/meta` events (a fork
/// child starts from its parent's metadata at the fork point).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMetadata {
    /// The title, if set.
    pub title: Option<String>,
    /// Tags, sorted.
    pub tags: std::collections::BTreeSet<String>,
    /// Free key/value fields (user id, cwd, git branch, model, ...).
    pub fields: BTreeMap<String, String>,
}

impl SessionMetadata {
    /// Fold one update.
    pub fn apply(&mut self, u: &MetaUpdate) {
        if let Some(t) = &u.title {
            self.title = (!t.is_empty()).then(|| t.clone());
        }
        for t in &u.add_tags {
            self.tags.insert(t.clone());
        }
        for t in &u.remove_tags {
            self.tags.remove(t);
        }
        for (k, v) in &u.fields {
            match v {
                Some(v) => {
                    self.fields.insert(k.clone(), v.clone());
                }
                None => {
                    self.fields.remove(k);
                }
            }
        }
    }
}

/// `session/delete`: the tombstone. Once durable, the session is not found
/// by loads, lists or search; its fork children keep the events they
/// inherit. Written only by [`crate::session::delete()`] and
/// [`crate::session::Session::delete`]; always the session's last event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionDelete {}

/// Typed data of a core kind. `Intent` is [`SurfaceOp`] for the three surface
/// kinds and `()` for all others: the compile-time rule of `append`.
pub trait EventData: Serialize + serde::de::DeserializeOwned + Clone + 'static {
    /// The core kind of this data.
    const KIND: CoreKind;
    /// `SurfaceOp` for surface kinds, `()` for the others.
    type Intent: Intent;
}

/// What `append` takes besides the data: a surface op or nothing.
pub trait Intent: sealed::Sealed + Copy {
    /// The surface op, if any.
    fn surface_op(self) -> Option<SurfaceOp>;
}
impl Intent for () {
    fn surface_op(self) -> Option<SurfaceOp> {
        None
    }
}
impl Intent for SurfaceOp {
    fn surface_op(self) -> Option<SurfaceOp> {
        Some(self)
    }
}
mod sealed {
    pub trait Sealed {}
    impl Sealed for () {}
    impl Sealed for super::SurfaceOp {}
}

macro_rules! event_data {
    ($($ty:ident => $kind:ident, $intent:ty);* $(;)?) => {
        $(impl EventData for $ty {
            const KIND: CoreKind = CoreKind::$kind;
            type Intent = $intent;
        })*
    };
}
event_data! {
    TurnStart => TurnStart, ();
    TurnEnd => TurnEnd, ();
    StepStart => StepStart, ();
    StepEnd => StepEnd, ();
    UserMessage => UserMessage, SurfaceOp;
    AssistantChunk => AssistantChunk, ();
    AssistantMessage => AssistantMessage, SurfaceOp;
    ToolCall => ToolCall, ();
    ToolResult => ToolResult, SurfaceOp;
    RequestHeader => RequestHeader, ();
    RequestContext => RequestContext, ();
    SessionEndSeed => SessionEndSeed, ();
    CompactionStart => CompactionStart, ();
    CompactionSummary => CompactionSummary, ();
    CompactionEnd => CompactionEnd, ();
    CompactionPrune => CompactionPrune, ();
    MetaUpdate => SessionMeta, ();
    SessionDelete => SessionDelete, ();
}

/// The kind of a stored event: core or plugin (by name).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A core kind.
    Core(CoreKind),
    /// A plugin kind, by name.
    Plugin(String),
}

impl EventKind {
    /// The kind's name as stored and shown.
    pub fn name(&self) -> &str {
        match self {
            EventKind::Core(k) => k.name(),
            EventKind::Plugin(n) => n,
        }
    }
}

/// A decoded session event.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    /// Seq in the session.
    pub seq: u64,
    /// The kind.
    pub kind: EventKind,
    /// Whether the frame carries the `IGNORABLE` flag.
    pub ignorable: bool,
    /// The surface op (surface kinds only).
    pub surface: Option<SurfaceOp>,
    /// Append time in ms since the epoch, when recorded.
    pub ts: Option<u64>,
    /// The data, as stored.
    pub data: Value,
}

impl SessionEvent {
    /// The event as one JSON object: `{"seq", "kind", "ignorable", "data"}`
    /// plus `"surface"` and `"ts"` when it has them — the shape `dump
    /// --json`, `replay --json` and the Python and Node packages show.
    pub fn to_json(&self) -> Value {
        let mut o = serde_json::json!({
            "seq": self.seq,
            "kind": self.kind.name(),
            "ignorable": self.ignorable,
            "data": self.data,
        });
        if let Some(op) = self.surface {
            o["surface"] = serde_json::to_value(op).unwrap_or(Value::Null);
        }
        if let Some(ts) = self.ts {
            o["ts"] = serde_json::json!(ts);
        }
        o
    }

    /// The data as its typed struct (when the kind matches).
    pub fn typed<D: EventData>(&self) -> Option<D> {
        if self.kind != EventKind::Core(D::KIND) {
            return None;
        }
        serde_json::from_value(self.data.clone()).ok()
    }
}

/// A harness's own event kind, as a Rust type: a name, a version and
/// whether a process that does not know it may skip it. Register it with
/// [`Registry::register_custom`], append it with
/// [`crate::session::Session::append_custom`], read it back with
/// [`SessionEvent::custom`]. Stored as a plugin event whose data is
/// `{"version": N, "event": <the value>}`.
///
/// ```
/// use std::sync::Arc;
/// use serde::{Deserialize, Serialize};
/// use turnstone::session::*;
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct TodoUpdate { items: Vec<String> }
/// impl CustomEvent for TodoUpdate {
///     const KIND: &'static str = "todo/update";
///     const VERSION: u32 = 2;
///     const IGNORABLE: bool = true;
/// }
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
/// let mut reg = Registry::new();
/// reg.register_custom::<TodoUpdate>().unwrap();
/// let mut s = Session::create(store, "s1", Arc::new(reg)).unwrap();
/// let seq = s.append_custom(&TodoUpdate { items: vec!["write tests".into()] }).unwrap();
/// let ev = s.events(seq..seq + 1).unwrap().remove(0);
/// assert_eq!(ev.custom::<TodoUpdate>().unwrap().unwrap().items, ["write tests"]);
/// ```
pub trait CustomEvent: Serialize + serde::de::DeserializeOwned {
    /// The kind name (not a core kind's).
    const KIND: &'static str;
    /// The payload version this type writes and reads (newer is refused).
    const VERSION: u32 = 1;
    /// Whether a process whose registry lacks the kind may skip it.
    const IGNORABLE: bool = false;
}

/// Why an event could not be read as a [`CustomEvent`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CustomEventError {
    #[error(
        "event at seq {seq} is {kind:?} version {found}; this type reads up to version {supported}"
    )]
    /// The stored event is of a newer version than the type reads.
    NewerVersion {
        /// Seq of the event.
        seq: u64,
        /// Kind name.
        kind: String,
        /// Version stored.
        found: u64,
        /// Newest version the type reads.
        supported: u32,
    },
    /// The data does not deserialize into the type.
    #[error("event at seq {seq} ({kind:?}) does not decode: {detail}")]
    Decode {
        /// Seq of the event.
        seq: u64,
        /// Kind name.
        kind: String,
        /// What serde said.
        detail: String,
    },
}

impl SessionEvent {
    /// This event as the custom type `E` (None: another kind).
    pub fn custom<E: CustomEvent>(&self) -> Option<Result<E, CustomEventError>> {
        if self.kind != EventKind::Plugin(E::KIND.to_string()) {
            return None;
        }
        let found = self
            .data
            .get("version")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if found > u64::from(E::VERSION) {
            return Some(Err(CustomEventError::NewerVersion {
                seq: self.seq,
                kind: E::KIND.into(),
                found,
                supported: E::VERSION,
            }));
        }
        let inner = self.data.get("event").cloned().unwrap_or(Value::Null);
        Some(
            serde_json::from_value(inner).map_err(|e| CustomEventError::Decode {
                seq: self.seq,
                kind: E::KIND.into(),
                detail: e.to_string(),
            }),
        )
    }
}

/// The stored data of a custom event.
pub(crate) fn custom_data<E: CustomEvent>(e: &E) -> Result<Value, serde_json::Error> {
    Ok(serde_json::json!({"version": E::VERSION, "event": serde_json::to_value(e)?}))
}

/// Plugin kinds known to this process, each declared ignorable or not.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<String, bool>,
}

impl Registry {
    /// An empty registry (core kinds only).
    pub fn new() -> Self {
        Self::default()
    }
    /// Register a plugin kind. Names of core kinds are refused.
    pub fn register(&mut self, name: &str, ignorable: bool) -> Result<(), String> {
        if CoreKind::from_name(name).is_some() {
            return Err(format!("{name:?} is a core kind"));
        }
        if name.is_empty() || name.len() > 256 {
            return Err("plugin kind names are 1 to 256 bytes".into());
        }
        self.kinds.insert(name.to_string(), ignorable);
        Ok(())
    }
    /// Register a [`CustomEvent`] type's kind.
    pub fn register_custom<E: CustomEvent>(&mut self) -> Result<(), String> {
        self.register(E::KIND, E::IGNORABLE)
    }
    /// Whether a plugin kind is registered.
    pub fn knows(&self, name: &str) -> bool {
        self.kinds.contains_key(name)
    }
    /// Whether a registered plugin kind is ignorable (None: not registered).
    pub fn ignorable(&self, name: &str) -> Option<bool> {
        self.kinds.get(name).copied()
    }
}
