//! Session events: the core kinds with their typed data, plugin kinds
//! registered by name, and the payload envelope stored in each frame
//! (`format-spec/FORMAT.md` §10).
//!
//! The type of [`crate::session::Session::append`] ties each data type to its
//! intent: the three surface kinds take a [`SurfaceOp`], every other kind
//! takes `()`. Passing a surface op with a non-surface event (or omitting it
//! for a surface event) does not compile.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::frame::FLAG_IGNORABLE;
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

pub use crate::session::codec::content::{ContentBlock, Usage};

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// `turn/start`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    /// Id of the turn.
    pub turn_id: String,
}
/// `turn/end`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// Id of the turn.
    pub turn_id: String,
    /// Why it ended.
    pub reason: TurnEndReason,
}
/// `step/start`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStart {
    /// Id of the turn.
    pub turn_id: String,
    /// Id of the step within the turn.
    pub step_id: String,
}
/// `step/end`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEnd {
    /// Id of the turn.
    pub turn_id: String,
    /// Id of the step.
    pub step_id: String,
    /// Why it ended.
    pub reason: StepEndReason,
}
/// `user/message` (surface)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The message content, as the provider shapes it.
    pub content: Vec<ContentBlock>,
}
/// `assistant/chunk`: a streamed delta; kept for replay and usage, never sent
/// to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantChunk {
    /// Position of the delta in the stream.
    pub index: u32,
    /// The delta's text.
    pub text: String,
}
/// `assistant/message` (surface); skipped by derive_messages when empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool use id this call answers.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The tool input.
    pub input: Value,
}
/// `tool/result` (surface)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// The tool name.
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
/// `request/header`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeader {
    /// Why this header was written.
    pub reason: HeaderReason,
    /// The full header.
    pub header: EpochHeader,
}
/// `request/context`: capacity of the current route; no part of header change
/// detection or restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestContext {
    /// Provider of the current route.
    pub provider: String,
    /// Model of the current route.
    pub model: String,
    /// Its context window, in tokens.
    pub context_window: u64,
}
/// `session/end-seed`: separates seed history from the live run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEndSeed {}
/// `compaction/start`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionStart {
    /// Id shared by the events of one compaction.
    pub compaction_id: String,
}
/// `compaction/summary`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionSummary {
    /// Id shared by the events of one compaction.
    pub compaction_id: String,
    /// The summary text.
    pub text: String,
}
/// `compaction/end`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionEnd {
    /// Id shared by the events of one compaction.
    pub compaction_id: String,
}
/// `compaction/prune`: surface nodes (by seq) that the next `tool/result`
/// replaces, and the tokens that saves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDelete {}

/// One event as the log stores it (FORMAT.md §4, §10): the kind code, the
/// frame flags and the payload bytes. Everything the session layer appends
/// is built as one of these and handed to the log as it is; the live state
/// is folded from what decoding it gives (debug builds check that the
/// decoded form the caller built equals it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EncodedEvent {
    pub kind: u16,
    pub flags: u16,
    pub payload: Vec<u8>,
}

impl EncodedEvent {
    /// A core event's bytes, with the flags its kind carries.
    pub(crate) fn core(kind: CoreKind, payload: Vec<u8>) -> EncodedEvent {
        EncodedEvent {
            kind: kind.code(),
            flags: core_flags(kind),
            payload,
        }
    }

    /// A plugin event's bytes.
    pub(crate) fn plugin(ignorable: bool, payload: Vec<u8>) -> EncodedEvent {
        EncodedEvent {
            kind: KIND_CODE_PLUGIN,
            flags: plugin_flags(ignorable),
            payload,
        }
    }
}

/// Frame flags of a core kind: `session/meta` is ignorable (metadata is
/// not needed to fold a session), every other core kind is not.
pub(crate) fn core_flags(kind: CoreKind) -> u16 {
    if kind == CoreKind::SessionMeta {
        FLAG_IGNORABLE
    } else {
        0
    }
}

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

/// The JSON envelope stored as a frame payload (§10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Session format version; must be [`SESSION_FORMAT_VERSION`].
    pub v: u32,
    /// Plugin kind name (plugin events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The surface op (surface events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<SurfaceOp>,
    /// Wall-clock time of the append, milliseconds since the Unix epoch
    /// (informational: never part of what the model sees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<u64>,
    /// The kind's data.
    pub data: Value,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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

/// Encode a core event's payload.
pub fn encode_core<D: EventData>(data: &D, op: Option<SurfaceOp>) -> Vec<u8> {
    let env = Envelope {
        v: SESSION_FORMAT_VERSION,
        kind: None,
        surface: op,
        ts: Some(now_ms()),
        data: serde_json::to_value(data).expect("event data serializes to JSON"),
    };
    serde_json::to_vec(&env).expect("envelope serializes")
}

/// Encode a core event from its data as JSON, returning the payload and
/// the event that decoding it gives (at `seq`), built from the same value.
pub(crate) fn encode_core_value(
    kind: CoreKind,
    data: Value,
    op: Option<SurfaceOp>,
    seq: u64,
) -> (Vec<u8>, SessionEvent) {
    encode_core_raw(kind, data, None, op, seq)
}

/// Like [`encode_core_value`], with `raw` (when given) the JSON text `data`
/// was parsed from: it is written as the envelope's `data` as it is (§10:
/// readers parse `data`, its spelling is the appender's), which spares
/// serialising the value again.
pub(crate) fn encode_core_raw(
    kind: CoreKind,
    data: Value,
    raw: Option<Raw<'_>>,
    op: Option<SurfaceOp>,
    seq: u64,
) -> (Vec<u8>, SessionEvent) {
    let ts = Some(now_ms());
    let payload = match raw {
        Some(raw) => {
            use std::io::Write as _;
            let guess = match raw {
                Raw::Text(text) => text.len(),
                Raw::Typed(parsed) => parsed.text_len() + 160,
            };
            let mut out = Vec::with_capacity(guess + 96);
            write!(out, "{{\"v\":{SESSION_FORMAT_VERSION}").expect("writes to a vector");
            if let Some(op) = &op {
                out.extend_from_slice(b",\"surface\":");
                serde_json::to_writer(&mut out, op).expect("surface op serializes");
            }
            if let Some(ts) = ts {
                write!(out, ",\"ts\":{ts}").expect("writes to a vector");
            }
            out.extend_from_slice(b",\"data\":");
            match raw {
                Raw::Text(text) => out.extend_from_slice(text.as_bytes()),
                Raw::Typed(parsed) => {
                    serde_json::to_writer(&mut out, parsed).expect("event data serializes to JSON")
                }
            }
            out.push(b'}');
            out
        }
        None => {
            let env = EnvelopeRef {
                v: SESSION_FORMAT_VERSION,
                surface: op.as_ref(),
                ts,
                data: &data,
            };
            // One allocation of about the right size instead of a chain of
            // reallocations from serde_json's small default.
            let mut out = Vec::with_capacity(256);
            serde_json::to_writer(&mut out, &env).expect("envelope serializes");
            out
        }
    };
    let ev = SessionEvent {
        seq,
        kind: EventKind::Core(kind),
        ignorable: false,
        surface: op,
        ts,
        data,
    };
    (payload, ev)
}

/// A core event's envelope by reference (same bytes as [`Envelope`]).
#[derive(Serialize)]
struct EnvelopeRef<'a> {
    v: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    surface: Option<&'a SurfaceOp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<u64>,
    data: &'a Value,
}

/// Encode a plugin event's payload.
pub fn encode_plugin(kind: &str, data: &Value) -> Vec<u8> {
    encode_plugin_at(kind, data, Some(now_ms()))
}

/// Encode a plugin event's payload with a given `ts` (history kept from
/// elsewhere keeps when it happened).
pub fn encode_plugin_at(kind: &str, data: &Value, ts: Option<u64>) -> Vec<u8> {
    let env = Envelope {
        v: SESSION_FORMAT_VERSION,
        kind: Some(kind.to_string()),
        surface: None,
        ts,
        data: data.clone(),
    };
    serde_json::to_vec(&env).expect("envelope serializes")
}

/// Why a stored event cannot be restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Unknown kind without the `ignorable` flag.
    UnknownKind(String),
    /// Envelope or data malformed.
    Malformed(String),
    /// A session format version other than 0.
    Version(u32),
}

/// Decode a stored frame into a session event. An unknown kind marked
/// ignorable decodes with its raw data kept.
pub fn decode(
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
    registry: &Registry,
) -> Result<SessionEvent, DecodeError> {
    decode_checked(seq, code, flags, payload, registry, true)
}

/// [`decode`] without checking a core event's data against its type: for
/// the session fold, which parses the data it needs anyway and checks the
/// rest itself ([`validate_core`]), so no event is parsed twice.
pub(crate) fn decode_for_fold(
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
    registry: &Registry,
) -> Result<SessionEvent, DecodeError> {
    decode_checked(seq, code, flags, payload, registry, false)
}

fn decode_checked(
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
    registry: &Registry,
    check_data: bool,
) -> Result<SessionEvent, DecodeError> {
    let ignorable = flags & FLAG_IGNORABLE != 0;
    let env: Envelope = match serde_json::from_slice(payload) {
        Ok(e) => e,
        Err(e) if ignorable => {
            return Ok(SessionEvent {
                seq,
                kind: EventKind::Plugin(format!("unknown/{code}")),
                ignorable,
                surface: None,
                ts: None,
                data: Value::String(format!("undecodable payload: {e}")),
            })
        }
        Err(e) => {
            return Err(DecodeError::Malformed(format!(
                "payload is not a session envelope: {e}"
            )))
        }
    };
    if env.v != SESSION_FORMAT_VERSION {
        return Err(DecodeError::Version(env.v));
    }
    let kind = if code == KIND_CODE_PLUGIN {
        let name = env
            .kind
            .clone()
            .ok_or_else(|| DecodeError::Malformed("plugin event without a kind name".into()))?;
        if !ignorable && !registry.knows(&name) {
            return Err(DecodeError::UnknownKind(name));
        }
        EventKind::Plugin(name)
    } else {
        match CoreKind::from_code(code) {
            Some(k) => EventKind::Core(k),
            None if ignorable => EventKind::Plugin(format!("unknown/{code}")),
            None => return Err(DecodeError::UnknownKind(format!("kind code {code}"))),
        }
    };
    if let EventKind::Core(k) = kind {
        if k.is_surface() != env.surface.is_some() {
            return Err(DecodeError::Malformed(format!(
                "{} event {} a surface op",
                k.name(),
                if k.is_surface() { "without" } else { "with" }
            )));
        }
        if check_data {
            validate_core(k, &env.data)?;
        }
    }
    Ok(SessionEvent {
        seq,
        kind,
        ignorable,
        surface: env.surface,
        ts: env.ts,
        data: env.data,
    })
}

/// Decode for a view (replay, query, a read-only session): like [`decode`],
/// but an event of a kind this process does not know — a plugin kind its
/// registry lacks, a core kind code from a newer build — is returned as an
/// opaque plugin event (`unknown/<code>` for a core code) with its data as
/// stored, instead of refusing. A writable restore still refuses it.
pub fn decode_view(
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
    registry: &Registry,
) -> Result<SessionEvent, DecodeError> {
    match decode(seq, code, flags, payload, registry) {
        Err(DecodeError::UnknownKind(_)) => {
            let env: Envelope = serde_json::from_slice(payload).map_err(|e| {
                DecodeError::Malformed(format!("payload is not a session envelope: {e}"))
            })?;
            let name = match (code, env.kind) {
                (KIND_CODE_PLUGIN, Some(name)) => name,
                _ => format!("unknown/{code}"),
            };
            Ok(SessionEvent {
                seq,
                kind: EventKind::Plugin(name),
                ignorable: flags & FLAG_IGNORABLE != 0,
                surface: env.surface,
                ts: env.ts,
                data: env.data,
            })
        }
        other => other,
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

/// Check a core event's data against its type.
/// A surface kind's data parsed by the check before a live append, handed
/// to the fold so it is not parsed a second time.
pub(crate) enum Parsed {
    User(UserMessage),
    Assistant(AssistantMessage),
    ToolResult(ToolResult),
    /// A chunk appended as the engine's own type: valid by construction
    /// (the fold only checks a chunk's data, so it has nothing to do).
    Chunk(AssistantChunk),
    ToolCall(ToolCall),
}

/// The data, serialised as its own type is.
impl Serialize for Parsed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Parsed::User(d) => d.serialize(s),
            Parsed::Assistant(d) => d.serialize(s),
            Parsed::ToolResult(d) => d.serialize(s),
            Parsed::Chunk(d) => d.serialize(s),
            Parsed::ToolCall(d) => d.serialize(s),
        }
    }
}

impl Parsed {
    /// The bytes of text the data holds (block texts, thinking, a chunk's
    /// delta): the bulk of its JSON, to size the payload's buffer once.
    fn text_len(&self) -> usize {
        let blocks = |c: &[crate::session::codec::content::ContentBlock]| -> usize {
            use crate::session::codec::content::ContentBlock as B;
            c.iter()
                .map(|b| match b {
                    B::Text { text, .. } => text.len(),
                    B::Thinking {
                        thinking,
                        signature,
                        ..
                    } => thinking.len() + signature.len(),
                    _ => 64,
                })
                .sum()
        };
        match self {
            Parsed::User(d) => blocks(&d.content),
            Parsed::Assistant(d) => blocks(&d.content),
            Parsed::ToolResult(d) => blocks(&d.content),
            Parsed::Chunk(d) => d.text.len(),
            Parsed::ToolCall(_) => 256,
        }
    }
}

/// Where the JSON of an appended event's `data` comes from when it is not
/// serialised from its value.
#[derive(Clone, Copy)]
pub(crate) enum Raw<'a> {
    /// The text it was parsed from, written as it is.
    Text(&'a str),
    /// Typed data, serialised straight into the payload.
    Typed(&'a Parsed),
}

/// The data of a live append, for the fold, when `D` is one of the
/// engine's own types for which the fold takes typed data (the surface
/// kinds, `assistant/chunk`, `tool/call`): such data is valid by
/// construction, so it is serialised once, straight into the payload
/// ([`Raw::Typed`]), and never parsed back. `Err` gives any other data back.
pub(crate) fn typed_parsed<D: EventData>(data: D) -> Result<Parsed, D> {
    use std::any::Any;
    fn take<T: 'static>(slot: &mut dyn Any) -> Option<T> {
        slot.downcast_mut::<Option<T>>().and_then(Option::take)
    }
    let mut slot = Some(data);
    let any: &mut dyn Any = &mut slot;
    if let Some(d) = take::<AssistantChunk>(any) {
        return Ok(Parsed::Chunk(d));
    }
    if let Some(d) = take::<UserMessage>(any) {
        return Ok(Parsed::User(d));
    }
    if let Some(d) = take::<AssistantMessage>(any) {
        return Ok(Parsed::Assistant(d));
    }
    if let Some(d) = take::<ToolResult>(any) {
        return Ok(Parsed::ToolResult(d));
    }
    if let Some(d) = take::<ToolCall>(any) {
        return Ok(Parsed::ToolCall(d));
    }
    Err(slot.expect("the data is taken only when it is returned"))
}

/// A surface kind's data parsed from JSON text (`None`: not a surface kind).
pub(crate) fn parse_surface(k: CoreKind, text: &str) -> Option<Result<Parsed, serde_json::Error>> {
    Some(match k {
        CoreKind::UserMessage => serde_json::from_str(text).map(Parsed::User),
        CoreKind::AssistantMessage => serde_json::from_str(text).map(Parsed::Assistant),
        CoreKind::ToolResult => serde_json::from_str(text).map(Parsed::ToolResult),
        _ => return None,
    })
}

/// [`validate_core`], keeping the parsed data of the surface kinds.
pub(crate) fn validate_core_parsed(
    k: CoreKind,
    data: &Value,
) -> Result<Option<Parsed>, DecodeError> {
    fn parse<D: EventData>(v: &Value) -> Result<D, DecodeError> {
        D::deserialize(v)
            .map_err(|e| DecodeError::Malformed(format!("{} data: {e}", D::KIND.name())))
    }
    Ok(match k {
        CoreKind::UserMessage => Some(Parsed::User(parse(data)?)),
        CoreKind::AssistantMessage => Some(Parsed::Assistant(parse(data)?)),
        CoreKind::ToolResult => Some(Parsed::ToolResult(parse(data)?)),
        other => {
            validate_core(other, data)?;
            None
        }
    })
}

pub(crate) fn validate_core(k: CoreKind, data: &Value) -> Result<(), DecodeError> {
    fn check<D: EventData>(v: &Value) -> Result<(), DecodeError> {
        D::deserialize(v)
            .map(|_| ())
            .map_err(|e| DecodeError::Malformed(format!("{} data: {e}", D::KIND.name())))
    }
    match k {
        CoreKind::TurnStart => check::<TurnStart>(data),
        CoreKind::TurnEnd => check::<TurnEnd>(data),
        CoreKind::StepStart => check::<StepStart>(data),
        CoreKind::StepEnd => check::<StepEnd>(data),
        CoreKind::UserMessage => check::<UserMessage>(data),
        CoreKind::AssistantChunk => check::<AssistantChunk>(data),
        CoreKind::AssistantMessage => check::<AssistantMessage>(data),
        CoreKind::ToolCall => check::<ToolCall>(data),
        CoreKind::ToolResult => check::<ToolResult>(data),
        CoreKind::RequestHeader => check::<RequestHeader>(data),
        CoreKind::RequestContext => check::<RequestContext>(data),
        CoreKind::SessionEndSeed => check::<SessionEndSeed>(data),
        CoreKind::CompactionStart => check::<CompactionStart>(data),
        CoreKind::CompactionSummary => check::<CompactionSummary>(data),
        CoreKind::CompactionEnd => check::<CompactionEnd>(data),
        CoreKind::CompactionPrune => check::<CompactionPrune>(data),
        CoreKind::SessionMeta => check::<MetaUpdate>(data),
        CoreKind::SessionDelete => check::<SessionDelete>(data),
    }
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

/// Frame flags for a plugin event of a registered kind.
pub(crate) fn plugin_flags(ignorable: bool) -> u16 {
    if ignorable {
        FLAG_IGNORABLE
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_codes_roundtrip() {
        for k in CoreKind::ALL {
            assert_eq!(CoreKind::from_code(k.code()), Some(*k));
            assert_eq!(CoreKind::from_name(k.name()), Some(*k));
        }
        assert_eq!(CoreKind::ALL.len(), 18);
    }

    #[test]
    fn decode_refuses_unknown_and_keeps_ignorable() {
        let reg = Registry::new();
        let p = encode_plugin("todo/update", &serde_json::json!({"x": 1}));
        assert_eq!(
            decode(3, KIND_CODE_PLUGIN, 0, &p, &reg),
            Err(DecodeError::UnknownKind("todo/update".into()))
        );
        let e = decode(3, KIND_CODE_PLUGIN, FLAG_IGNORABLE, &p, &reg).unwrap();
        assert_eq!(e.kind, EventKind::Plugin("todo/update".into()));
        let v = serde_json::to_vec(&Envelope {
            v: 1,
            kind: None,
            surface: None,
            ts: None,
            data: Value::Null,
        })
        .unwrap();
        assert_eq!(decode(0, 1, 0, &v, &reg), Err(DecodeError::Version(1)));
    }

    /// The example payloads of FORMAT.md §10 decode to what the spec says.
    #[test]
    fn spec_examples_of_meta_and_delete_decode() {
        let reg = Registry::new();
        let meta = br#"{"v":0,"data":{"title":"t","add_tags":["ci"],"fields":{"cwd":"/src","user":null}}}"#;
        let e = decode(4, 17, FLAG_IGNORABLE, meta, &reg).unwrap();
        assert_eq!(e.kind, EventKind::Core(CoreKind::SessionMeta));
        let u: MetaUpdate = serde_json::from_value(e.data).unwrap();
        let mut m = SessionMetadata::default();
        m.fields.insert("user".into(), "u".into());
        m.apply(&u);
        assert_eq!(m.title.as_deref(), Some("t"));
        assert_eq!(m.tags.iter().collect::<Vec<_>>(), ["ci"]);
        assert_eq!(m.fields, [("cwd".to_string(), "/src".to_string())].into());
        let del = br#"{"v":0,"data":{}}"#;
        let e = decode(5, 18, 0, del, &reg).unwrap();
        assert_eq!(e.kind, EventKind::Core(CoreKind::SessionDelete));
        assert_eq!(core_flags(CoreKind::SessionMeta), FLAG_IGNORABLE);
        assert_eq!(core_flags(CoreKind::SessionDelete), 0);
        // What a build that predates kind 17 does: keeps it as unknown/17.
        assert_eq!(CoreKind::SessionMeta.code(), 17);
        assert_eq!(CoreKind::SessionDelete.code(), 18);
    }

    #[test]
    fn surface_op_must_match_kind() {
        let reg = Registry::new();
        let p = encode_core(
            &TurnStart {
                turn_id: "t".into(),
            },
            Some(SurfaceOp::Append),
        );
        assert!(matches!(
            decode(0, 1, 0, &p, &reg),
            Err(DecodeError::Malformed(_))
        ));
        let p = encode_core(&UserMessage { content: vec![] }, None);
        assert!(matches!(
            decode(0, 5, 0, &p, &reg),
            Err(DecodeError::Malformed(_))
        ));
    }
}
