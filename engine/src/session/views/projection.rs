//! Projections: pure folds `(state, event) -> state` over a session's log.
//!
//! A projection returns `None` for an event it does not care about: the
//! state is unchanged (the same `Arc`, as the reference compares by
//! identity), and the registry runs no downstream work for it. Two real
//! projections ship: [`RunStatus`] (turn status and a todo list kept by the
//! `todo/update` plugin event) and [`TokenMeter`] (token usage and an
//! estimate of the context size that honours `compaction/prune`).

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::Value;

use crate::session::codec::event::{
    AssistantMessage, CompactionPrune, ContentBlock, CoreKind, EventKind, SessionEvent, ToolResult,
    TurnEnd, TurnEndReason, TurnStart, UserMessage,
};
use crate::session::fold::surface::SurfaceOp;

/// A pure fold over session events.
pub trait Projection: Send + Sync + 'static {
    /// The state; `Default` is the state before any event.
    type State: Clone
        + Default
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + PartialEq
        + std::fmt::Debug
        + 'static;
    /// Stable name (snapshot files are keyed by it).
    fn name(&self) -> &'static str;
    /// Bumped whenever the fold or the state layout changes: snapshots of
    /// another version are discarded.
    fn version(&self) -> u32;
    /// Fold one event; `None` means "unchanged".
    fn fold(&self, state: &Self::State, event: &SessionEvent) -> Option<Self::State>;
}

/// Fold `event` into an `Arc`ed state; returns whether it changed (the `Arc`
/// is replaced only then).
pub fn fold_arc<P: Projection>(p: &P, state: &mut Arc<P::State>, event: &SessionEvent) -> bool {
    match p.fold(state, event) {
        Some(next) => {
            *state = Arc::new(next);
            true
        }
        None => false,
    }
}

/// Object-safe view of a projection for the registry.
trait Erased: Send + Sync {
    fn name(&self) -> &'static str;
    fn fold_erased(
        &self,
        state: &Arc<dyn Any + Send + Sync>,
        event: &SessionEvent,
    ) -> Option<Arc<dyn Any + Send + Sync>>;
    fn initial(&self) -> Arc<dyn Any + Send + Sync>;
}

impl<P: Projection> Erased for P {
    fn name(&self) -> &'static str {
        Projection::name(self)
    }
    fn fold_erased(
        &self,
        state: &Arc<dyn Any + Send + Sync>,
        event: &SessionEvent,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let s = state
            .downcast_ref::<P::State>()
            .expect("state type matches its projection");
        self.fold(s, event)
            .map(|n| Arc::new(n) as Arc<dyn Any + Send + Sync>)
    }
    fn initial(&self) -> Arc<dyn Any + Send + Sync> {
        Arc::new(P::State::default())
    }
}

type Listener = Box<dyn FnMut(&'static str, &SessionEvent) + Send>;

/// Feeds every event to every projection; downstream listeners run only for
/// projections whose state changed.
#[derive(Default)]
pub struct ProjectionRegistry {
    entries: Vec<(Box<dyn Erased>, Arc<dyn Any + Send + Sync>)>,
    listeners: Vec<Listener>,
    /// Number of (projection, event) pairs that changed a state.
    pub changes: u64,
    /// Number of (projection, event) pairs folded.
    pub folds: u64,
}

impl ProjectionRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a projection (starting from its default state).
    pub fn register<P: Projection>(&mut self, p: P) {
        let init = Erased::initial(&p);
        self.entries.push((Box::new(p), init));
    }

    /// Call `f(projection_name, event)` whenever a projection's state changes.
    pub fn on_change(&mut self, f: impl FnMut(&'static str, &SessionEvent) + Send + 'static) {
        self.listeners.push(Box::new(f));
    }

    /// Feed one event to every projection.
    pub fn apply(&mut self, event: &SessionEvent) {
        for (p, state) in &mut self.entries {
            self.folds += 1;
            if let Some(next) = p.fold_erased(state, event) {
                *state = next;
                self.changes += 1;
                let name = p.name();
                for l in &mut self.listeners {
                    l(name, event);
                }
            }
        }
    }

    /// The current state of projection `P` (by name), shared.
    pub fn state<P: Projection>(&self, name: &str) -> Option<Arc<P::State>> {
        self.entries
            .iter()
            .find(|(p, _)| p.name() == name)
            .and_then(|(_, s)| s.clone().downcast::<P::State>().ok())
    }
}

/// Turn status of a session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TurnStatus {
    /// No turn is running.
    #[default]
    Idle,
    /// A turn is running.
    Running {
        /// Its id.
        turn_id: String,
    },
}

/// One todo item kept by the `todo/update` plugin event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    /// The text streamed so far.
    pub text: String,
    /// Whether the final message arrived.
    pub done: bool,
}

/// State of [`RunStatus`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// The current turn status.
    pub status: TurnStatus,
    /// Turns that ended `completed`.
    pub turns_completed: u64,
    /// Turns that ended `interrupted` (by repair).
    pub turns_interrupted: u64,
    /// Turns that ended with an error or cancelled.
    pub turns_failed: u64,
    /// Todo items by id, from `todo/update` events
    /// (`{"id": .., "text": .., "done": ..}`, or `{"id": .., "remove": true}`).
    pub todos: BTreeMap<String, TodoItem>,
}

/// Run status and todo list.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunStatus;

impl Projection for RunStatus {
    type State = RunState;
    fn name(&self) -> &'static str {
        "run-status"
    }
    fn version(&self) -> u32 {
        1
    }
    fn fold(&self, s: &RunState, e: &SessionEvent) -> Option<RunState> {
        match &e.kind {
            EventKind::Core(CoreKind::TurnStart) => {
                let d = e.typed::<TurnStart>()?;
                let mut n = s.clone();
                n.status = TurnStatus::Running { turn_id: d.turn_id };
                Some(n)
            }
            EventKind::Core(CoreKind::TurnEnd) => {
                let d = e.typed::<TurnEnd>()?;
                let mut n = s.clone();
                n.status = TurnStatus::Idle;
                match d.reason {
                    TurnEndReason::Completed | TurnEndReason::Cancelled => n.turns_completed += 1,
                    TurnEndReason::Interrupted => n.turns_interrupted += 1,
                    TurnEndReason::Error { .. } => n.turns_failed += 1,
                }
                Some(n)
            }
            EventKind::Plugin(k) if k == "todo/update" => {
                let id = e.data.get("id")?.as_str()?.to_string();
                let mut n = s.clone();
                if e.data.get("remove").and_then(Value::as_bool) == Some(true) {
                    n.todos.remove(&id);
                } else {
                    let text = e
                        .data
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    let done = e.data.get("done").and_then(Value::as_bool).unwrap_or(false);
                    n.todos.insert(id, TodoItem { text, done });
                }
                Some(n)
            }
            _ => None,
        }
    }
}

/// State of [`TokenMeter`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenState {
    /// Sum of reported usage.
    pub input_tokens: u64,
    /// Output tokens summed.
    pub output_tokens: u64,
    /// Cache-read input tokens summed.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Cache-creation input tokens summed.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Reasoning tokens summed.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Estimated tokens of each surface node (seq, tokens), in surface order.
    pub nodes: Vec<(u64, u64)>,
    /// Estimated tokens of the current surface (what the next request carries).
    pub context_tokens: u64,
    /// Tokens saved by `compaction/prune`, as recorded by the pruner.
    pub pruned_tokens: u64,
    /// Number of `compaction/prune` events.
    pub prunes: u64,
    /// Saving announced by a `compaction/prune` whose replacement
    /// `tool/result` has not been folded yet.
    pub pending_prune: u64,
}

/// Token usage and context size. A `compaction/prune` event records the
/// tokens it saves; the replacement `tool/result` that follows is charged at
/// the original's cost minus that saving (the meter trusts the pruner's
/// count rather than re-estimating).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenMeter;

/// Rough token estimate: 4 bytes of text per token (text, thinking,
/// tool names and inputs, nested tool-result content); an image or document
/// counts as [`MEDIA_TOKENS_ESTIMATE`]; an opaque block by its JSON length.
pub fn estimate_tokens(blocks: &[ContentBlock]) -> u64 {
    fn bytes(b: &ContentBlock) -> u64 {
        match b {
            ContentBlock::Image { .. }
            | ContentBlock::Document { .. }
            | ContentBlock::InputImage { .. }
            | ContentBlock::InputFile { .. }
            | ContentBlock::ImageUrl { .. } => MEDIA_TOKENS_ESTIMATE * 4,
            ContentBlock::Other(v) => v.to_string().len() as u64,
            ContentBlock::ToolResult { .. } | ContentBlock::Message { .. }
                if !b.children().is_empty() =>
            {
                b.children().iter().map(bytes).sum()
            }
            _ => {
                let mut n = 0u64;
                b.visit_text(&mut |t| n += t.len() as u64);
                if let (Some((_, name)), Some(input)) = (b.client_tool_use(), b.tool_input()) {
                    n += name.len() as u64 + input.to_string().len() as u64;
                }
                n
            }
        }
    }
    blocks.iter().map(bytes).sum::<u64>().div_ceil(4)
}

/// Tokens an image or document is assumed to cost in [`estimate_tokens`].
pub const MEDIA_TOKENS_ESTIMATE: u64 = 1_600;

impl TokenMeter {
    fn surface(s: &TokenState, e: &SessionEvent, tokens: u64) -> TokenState {
        let mut n = s.clone();
        let mut cost = tokens;
        if n.pending_prune > 0 {
            // The pruner said how much the replacement saves over the nodes it
            // replaces: charge exactly the replaced cost minus that saving.
            if let Some(SurfaceOp::Replace { start, end }) = e.surface {
                let (start, end) = (start as usize, (end as usize).min(n.nodes.len()));
                if start <= end {
                    let replaced: u64 = n.nodes[start..end].iter().map(|x| x.1).sum();
                    cost = replaced.saturating_sub(n.pending_prune);
                }
            }
            n.pending_prune = 0;
        }
        match e.surface {
            Some(SurfaceOp::Append) | None => n.nodes.push((e.seq, cost)),
            Some(SurfaceOp::Replace { start, end }) => {
                let (start, end) = (start as usize, (end as usize).min(n.nodes.len()));
                if start <= end {
                    n.nodes.splice(start..end, [(e.seq, cost)]);
                }
            }
        }
        n.context_tokens = n.nodes.iter().map(|x| x.1).sum();
        n
    }
}

impl Projection for TokenMeter {
    type State = TokenState;
    fn name(&self) -> &'static str {
        "token-meter"
    }
    fn version(&self) -> u32 {
        // 2: cache and reasoning token sums.
        2
    }
    fn fold(&self, s: &TokenState, e: &SessionEvent) -> Option<TokenState> {
        match &e.kind {
            EventKind::Core(CoreKind::UserMessage) => {
                let d = e.typed::<UserMessage>()?;
                Some(Self::surface(s, e, estimate_tokens(&d.content)))
            }
            EventKind::Core(CoreKind::AssistantMessage) => {
                let d = e.typed::<AssistantMessage>()?;
                let mut n = Self::surface(s, e, estimate_tokens(&d.content));
                if let Some(u) = &d.usage {
                    n.input_tokens += u.input_tokens;
                    n.output_tokens += u.output_tokens;
                    n.cache_read_input_tokens += u.cache_read_input_tokens.unwrap_or(0);
                    n.cache_creation_input_tokens += u.cache_creation_input_tokens.unwrap_or(0);
                    n.reasoning_tokens += u.reasoning_tokens.unwrap_or(0);
                }
                Some(n)
            }
            EventKind::Core(CoreKind::ToolResult) => {
                let d = e.typed::<ToolResult>()?;
                Some(Self::surface(s, e, estimate_tokens(&d.content)))
            }
            EventKind::Core(CoreKind::CompactionPrune) => {
                let d = e.typed::<CompactionPrune>()?;
                let mut n = s.clone();
                n.pruned_tokens += d.tokens_saved;
                n.prunes += 1;
                n.pending_prune = d.tokens_saved;
                Some(n)
            }
            _ => None,
        }
    }
}
