//! The fold: the one definition of what a session's events mean. Every
//! piece of a session's state (surface, messages, header, open
//! turn/step/tool calls, turns, metadata, seed boundary) is folded here by
//! [`State::apply`], both when an event is appended live and when the
//! session is restored from the log. That is how "model-visible iff
//! logged" (invariant 4) holds by construction; the proptest in
//! `tests/model_visible.rs` checks it. The rules a live append must keep
//! beyond the fold (no tombstone, no `interrupted`, no tool pair split by a
//! replace) are checked against the same state.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::session::codec::envelope;
use crate::session::codec::envelope::DecodeError;
use crate::session::codec::event::{
    self, AssistantMessage, CoreKind, EpochHeader, EventKind, RequestContext, RequestHeader,
    SessionEvent, SessionMetadata, ToolResult, UserMessage,
};
use crate::session::fold::coords::TurnInfo;
use crate::session::fold::messages::{self, Keep, Message, MessageCache};
use crate::session::fold::surface::{Surface, SurfaceOp};

/// Turn, step and tool calls left open (what repair would have to close).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenState {
    /// Open turn: (turn_id, seq of its `turn/start`).
    pub turn: Option<(String, u64)>,
    /// Open step: (turn_id, step_id, seq of its `step/start`).
    pub step: Option<(String, String, u64)>,
    /// `tool/call`s without a `tool/result`: call_id → seq of the call.
    pub calls: BTreeMap<String, u64>,
    /// Tool uses the assistant requested with neither a `tool/call` nor a
    /// `tool/result`: tool_use id → (seq of the assistant message, tool name).
    pub requested: BTreeMap<String, (u64, String)>,
    /// Where each open tool use was requested: (seq of the assistant message,
    /// index of the block). Repair answers open tools in this order.
    pub origin: BTreeMap<String, (u64, u32)>,
    /// Open `tool/call`s the model did not request (a tool called from
    /// inside another tool, or by the harness itself). Their results stay
    /// in the log but are not model-visible: no tool use would match them.
    pub unrequested: std::collections::BTreeSet<String>,
}

impl OpenState {
    /// Whether no turn and no step is open.
    pub fn is_idle(&self) -> bool {
        self.turn.is_none() && self.step.is_none()
    }
}

/// Which event kinds a fold has applied: a snapshot is used only by a
/// process that would have folded the same events without refusing them
/// (a writable open refuses a kind its build or registry does not know).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KindsSeen {
    /// Bit `c` set: a core event of kind code `c` (< 64) was applied.
    pub core: u64,
    /// Names of the non-ignorable plugin kinds met.
    pub plugins: BTreeSet<String>,
}

/// What a session's events fold into (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Number of events folded.
    pub(crate) len: u64,
    pub(crate) surface: Surface,
    pub(crate) messages: MessageCache,
    /// The latest `request/header`'s header.
    pub(crate) header: Option<EpochHeader>,
    /// The latest `request/context`.
    pub(crate) context: Option<RequestContext>,
    /// Seq of the `session/end-seed` marker.
    pub(crate) seed_end: Option<u64>,
    pub(crate) open: OpenState,
    /// Every turn, in order (see [`crate::session::Session::turns`]).
    pub(crate) turns: Vec<TurnInfo>,
    /// The fold of the `session/meta` events.
    pub(crate) metadata: SessionMetadata,
    /// Seq of the `session/delete` tombstone, if any.
    pub(crate) deleted: Option<u64>,
    /// Kinds the fold has applied (kept in state snapshots).
    pub(crate) kinds: KindsSeen,
    /// Tool-use ids answered by a `tool/result`: id → seq of the first
    /// result. A live append refuses to ask for or call one of them again.
    pub(crate) answered: BTreeMap<String, u64>,
}

fn bad(id: &str, seq: u64, detail: impl Into<String>) -> Error {
    Error::BadEvent {
        session: id.to_string(),
        seq,
        detail: detail.into(),
    }
}

impl State {
    /// Fold one event of session `id` into the state: the single
    /// definition of what an event means, used live and on restore. `pre`
    /// is a surface kind's data already parsed (by the check before a live
    /// append); `keep` says how long its message is kept ([`Keep`]).
    pub(crate) fn apply(
        &mut self,
        id: &str,
        ev: &SessionEvent,
        pre: Option<envelope::Parsed>,
        keep: Keep,
    ) -> Result<()> {
        if ev.seq != self.len {
            return Err(bad(id, ev.seq, format!("expected seq {}", self.len)));
        }
        self.len += 1;
        let kind = match &ev.kind {
            EventKind::Core(kind) => kind,
            EventKind::Plugin(name) => {
                if !ev.ignorable && !self.kinds.plugins.contains(name) {
                    self.kinds.plugins.insert(name.clone());
                }
                return Ok(()); // plugin events are the plugins' business
            }
        };
        self.kinds.core |= 1u64 << (kind.code() & 63);
        let typed_err = |e: serde_json::Error| bad(id, ev.seq, format!("{}: {e}", kind.name()));
        // Kinds whose data the fold below does not parse are checked here
        // (the decode leaves the check to the fold, so nothing is parsed twice).
        let trusted_chunk = matches!(pre, Some(envelope::Parsed::Chunk(_)));
        if !trusted_chunk
            && matches!(
                kind,
                CoreKind::TurnEnd
                    | CoreKind::StepEnd
                    | CoreKind::AssistantChunk
                    | CoreKind::SessionEndSeed
                    | CoreKind::CompactionStart
                    | CoreKind::CompactionSummary
                    | CoreKind::CompactionEnd
                    | CoreKind::CompactionPrune
                    | CoreKind::SessionDelete
            )
        {
            envelope::validate_core(*kind, &ev.data).map_err(|e| match e {
                DecodeError::Malformed(d) => bad(id, ev.seq, d),
                other => bad(id, ev.seq, format!("{other:?}")),
            })?;
        }
        match kind {
            CoreKind::TurnStart => {
                let d: event::TurnStart =
                    <event::TurnStart as serde::Deserialize>::deserialize(&ev.data)
                        .map_err(typed_err)?;
                self.turns.push(crate::session::fold::coords::TurnInfo {
                    turn_id: d.turn_id.clone(),
                    start_seq: ev.seq,
                    end_seq: None,
                    reason: None,
                });
                self.open.turn = Some((d.turn_id, ev.seq));
            }
            CoreKind::TurnEnd => {
                if let Ok(d) = <event::TurnEnd as serde::Deserialize>::deserialize(&ev.data) {
                    if let Some(t) = self.turns.last_mut().filter(|t| t.end_seq.is_none()) {
                        t.end_seq = Some(ev.seq);
                        t.reason = Some(d.reason);
                    }
                }
                self.open.turn = None;
                self.open.step = None;
            }
            CoreKind::StepStart => {
                let d: event::StepStart =
                    <event::StepStart as serde::Deserialize>::deserialize(&ev.data)
                        .map_err(typed_err)?;
                self.open.step = Some((d.turn_id, d.step_id, ev.seq));
            }
            CoreKind::StepEnd => self.open.step = None,
            CoreKind::UserMessage | CoreKind::AssistantMessage | CoreKind::ToolResult => {
                self.apply_surface(id, ev, *kind, pre, keep)?
            }
            CoreKind::ToolCall => self.apply_tool_call(id, ev, pre)?,
            CoreKind::RequestHeader => {
                let d: RequestHeader = <RequestHeader as serde::Deserialize>::deserialize(&ev.data)
                    .map_err(typed_err)?;
                self.header = Some(d.header);
            }
            CoreKind::RequestContext => {
                let d: RequestContext =
                    <RequestContext as serde::Deserialize>::deserialize(&ev.data)
                        .map_err(typed_err)?;
                self.context = Some(d);
            }
            CoreKind::SessionEndSeed => self.seed_end = Some(ev.seq),
            CoreKind::SessionMeta => {
                let d: event::MetaUpdate =
                    <event::MetaUpdate as serde::Deserialize>::deserialize(&ev.data)
                        .map_err(typed_err)?;
                self.metadata.apply(&d);
            }
            CoreKind::SessionDelete => self.deleted = Some(ev.seq),
            CoreKind::AssistantChunk
            | CoreKind::CompactionStart
            | CoreKind::CompactionSummary
            | CoreKind::CompactionEnd
            | CoreKind::CompactionPrune => {}
        }
        debug_assert_eq!(self.len, ev.seq + 1, "one event folded, in seq order");
        Ok(())
    }

    /// A surface event (user/message, assistant/message, tool/result): the
    /// surface op, the message cache, and the open tool calls it asks for
    /// or answers.
    fn apply_surface(
        &mut self,
        id: &str,
        ev: &SessionEvent,
        kind: CoreKind,
        pre: Option<envelope::Parsed>,
        keep: Keep,
    ) -> Result<()> {
        let typed_err = |e: serde_json::Error| bad(id, ev.seq, format!("{}: {e}", kind.name()));
        let op = ev
            .surface
            .ok_or_else(|| bad(id, ev.seq, "surface event without op"))?;
        let removed = match op {
            SurfaceOp::Replace { start, end } => self
                .surface
                .nodes
                .get(start as usize..end as usize)
                .map(<[u64]>::to_vec),
            SurfaceOp::Append => None,
        };
        self.surface
            .apply(ev.seq, op)
            .map_err(|e| bad(id, ev.seq, e.to_string()))?;
        if let Some(removed) = removed {
            self.messages
                .replaced(&removed, self.surface.replace_generation);
        }
        let msg = match kind {
            CoreKind::UserMessage => {
                let d: UserMessage = if let Some(envelope::Parsed::User(d)) = pre {
                    d
                } else {
                    <UserMessage as serde::Deserialize>::deserialize(&ev.data).map_err(typed_err)?
                };
                messages::user_message(ev.seq, d)
            }
            CoreKind::AssistantMessage => {
                let d: AssistantMessage = if let Some(envelope::Parsed::Assistant(d)) = pre {
                    d
                } else {
                    <AssistantMessage as serde::Deserialize>::deserialize(&ev.data)
                        .map_err(typed_err)?
                };
                for (i, b) in d.content.iter().enumerate() {
                    if let Some((id, name)) = b.client_tool_use() {
                        // Asked for now: a call recorded before the
                        // request is the model's from here on.
                        self.open.unrequested.remove(id);
                        if !self.open.calls.contains_key(id) {
                            self.open
                                .requested
                                .insert(id.to_string(), (ev.seq, name.to_string()));
                        }
                        self.open.origin.insert(id.to_string(), (ev.seq, i as u32));
                    }
                }
                messages::assistant_message(ev.seq, d)
            }
            _ => {
                let d: ToolResult = if let Some(envelope::Parsed::ToolResult(d)) = pre {
                    d
                } else {
                    <ToolResult as serde::Deserialize>::deserialize(&ev.data).map_err(typed_err)?
                };
                let id = &d.call_id;
                let answers_open = self.open.requested.contains_key(id)
                    || (self.open.calls.contains_key(id) && !self.open.unrequested.contains(id));
                self.open.unrequested.remove(id);
                self.open.calls.remove(id);
                self.open.requested.remove(id);
                self.open.origin.remove(id);
                if !self.answered.contains_key(id) {
                    self.answered.insert(id.clone(), ev.seq);
                }
                // Postcondition: a result closes its tool use, whatever
                // state it was in.
                debug_assert!(
                    !self.open.calls.contains_key(id)
                        && !self.open.requested.contains_key(id)
                        && !self.open.origin.contains_key(id)
                        && self.answered.contains_key(id),
                    "a tool/result closes call {id:?}"
                );
                // Model-visible only when it answers a tool use the
                // model made and that is still open, or replaces
                // surface nodes (a pruned result): any other result
                // would answer nothing, and providers refuse that.
                let replaces = matches!(op, SurfaceOp::Replace { .. });
                if !(answers_open || replaces) {
                    None
                } else {
                    messages::tool_result_message(ev.seq, d)
                }
            }
        };
        self.messages.insert_kept(ev.seq, msg, keep);
        Ok(())
    }

    /// A tool/call: it runs a tool use the model asked for, or it is
    /// recorded before any assistant message asks for it (`unrequested`,
    /// the model's once one does).
    fn apply_tool_call(
        &mut self,
        id: &str,
        ev: &SessionEvent,
        pre: Option<envelope::Parsed>,
    ) -> Result<()> {
        let typed_err =
            |e: serde_json::Error| bad(id, ev.seq, format!("{}: {e}", CoreKind::ToolCall.name()));
        let d: event::ToolCall = if let Some(envelope::Parsed::ToolCall(d)) = pre {
            d
        } else {
            <event::ToolCall as serde::Deserialize>::deserialize(&ev.data).map_err(typed_err)?
        };
        let model_asked = self.open.requested.remove(&d.call_id).is_some()
            || (self.open.calls.contains_key(&d.call_id)
                && !self.open.unrequested.contains(&d.call_id));
        if !model_asked {
            self.open.unrequested.insert(d.call_id.clone());
        }
        self.open
            .origin
            .entry(d.call_id.clone())
            .or_insert((ev.seq, 0));
        // Postcondition: the call is open, and no longer merely requested
        // (a tool use is requested or called, never both).
        debug_assert!(
            !self.open.requested.contains_key(&d.call_id),
            "a called tool use is not left requested"
        );
        self.open.calls.insert(d.call_id, ev.seq);
        Ok(())
    }

    /// Rules checked before a live append (restore is lenient: the log is
    /// the truth, whatever wrote it).
    pub(crate) fn check_live(
        &self,
        kind: CoreKind,
        v: &Value,
        op: Option<SurfaceOp>,
        parsed: Option<&envelope::Parsed>,
    ) -> Result<()> {
        match kind {
            // A replace may carry the ids of what it replaces (an edited
            // assistant message, a pruned result): only an append asks anew.
            CoreKind::AssistantMessage if op == Some(SurfaceOp::Append) => {
                self.check_new_tool_uses(v, parsed)?
            }
            CoreKind::ToolCall => {
                let id = match parsed {
                    Some(envelope::Parsed::ToolCall(d)) => Some(d.call_id.as_str()),
                    _ => v.get("call_id").and_then(Value::as_str),
                };
                if let Some(id) = id {
                    self.check_new_call(id)?;
                }
            }
            _ => {}
        }
        if kind == CoreKind::SessionDelete {
            return Err(Error::Refused(
                "a session/delete tombstone is written only by Session::delete or session::delete"
                    .into(),
            ));
        }
        if let Some(op) = op {
            self.surface.check(op)?;
        }
        {
            let interrupted = v
                .get("reason")
                .and_then(|r| r.get("kind"))
                .is_some_and(|k| k == "interrupted");
            if interrupted && matches!(kind, CoreKind::TurnEnd | CoreKind::StepEnd) {
                return Err(Error::Refused(
                    "`interrupted` is written only by repair, never by a live loop".into(),
                ));
            }
        }
        Ok(())
    }

    /// An assistant message appended asks for tools anew: none of its
    /// tool-use ids may have been answered, be open, or repeat within it
    /// (providers refuse a conversation where two tool uses share an id,
    /// and a harness re-appending an answered message must not run its
    /// tools again). A tool called before the model asked for it (an
    /// unrequested `tool/call`) may be asked for.
    fn check_new_tool_uses(&self, v: &Value, parsed: Option<&envelope::Parsed>) -> Result<()> {
        let mut ids: Vec<String> = Vec::new();
        match parsed {
            Some(envelope::Parsed::Assistant(d)) => ids.extend(
                d.content
                    .iter()
                    .filter_map(|b| b.client_tool_use().map(|(id, _)| id.to_string())),
            ),
            _ => {
                for b in v
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    // Only blocks that can be tool uses are parsed.
                    let t = b.get("type").and_then(Value::as_str);
                    if !matches!(t, Some("tool_use" | "function_call" | "function")) {
                        continue;
                    }
                    if let Ok(block) = <crate::session::codec::content::ContentBlock as serde::Deserialize>::deserialize(b) {
                        if let Some((id, _)) = block.client_tool_use() {
                            ids.push(id.to_string());
                        }
                    }
                }
            }
        }
        for (i, id) in ids.iter().enumerate() {
            if ids[..i].contains(id) {
                return Err(Error::Refused(format!(
                    "tool use id {id:?} appears twice in this assistant message; each tool use needs its own id"
                )));
            }
            if let Some(seq) = self.answered.get(id) {
                return Err(Error::Refused(format!(
                    "tool use id {id:?} was already answered (tool/result at seq {seq}); a tool-use id is used once per session"
                )));
            }
            if let Some((seq, _)) = self.open.requested.get(id) {
                return Err(Error::Refused(format!(
                    "tool use id {id:?} is already open (asked for at seq {seq}); a tool-use id is used once per session"
                )));
            }
            if self.open.calls.contains_key(id) && !self.open.unrequested.contains(id) {
                return Err(Error::Refused(format!(
                    "tool use id {id:?} is already open (its tool/call is at seq {}); a tool-use id is used once per session",
                    self.open.calls[id]
                )));
            }
        }
        Ok(())
    }

    /// A `tool/call` records a tool about to run: not one already answered
    /// (it would run a second time) nor one already called.
    pub(crate) fn check_new_call(&self, id: &str) -> Result<()> {
        if let Some(seq) = self.answered.get(id) {
            return Err(Error::Refused(format!(
                "tool call {id:?} already has its result (tool/result at seq {seq}); a tool is not run twice"
            )));
        }
        if let Some(seq) = self.open.calls.get(id) {
            return Err(Error::Refused(format!(
                "tool call {id:?} is already recorded (tool/call at seq {seq}); record its result"
            )));
        }
        Ok(())
    }

    /// The `tool/call`s of one group: each by [`State::check_new_call`],
    /// and none twice in the group (each is checked against the state
    /// before the group, so a repeat inside it is caught here).
    pub(crate) fn check_new_calls<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            if !seen.insert(id) {
                return Err(Error::Refused(format!(
                    "tool call {id:?} appears twice in one group; a tool is not run twice"
                )));
            }
            self.check_new_call(id)?;
        }
        Ok(())
    }

    /// A replace must not separate a tool use from its tool result: every
    /// tool-use id answered on the surface before must be answered (both
    /// halves present) or gone entirely (both halves replaced) after.
    pub(crate) fn check_tool_pairs(&self, after: &Surface, group: &[SessionEvent]) -> Result<()> {
        let mut new_msgs: std::collections::HashMap<u64, Option<Message>> = Default::default();
        for ev in group {
            let m = match ev.kind {
                EventKind::Core(CoreKind::UserMessage) => ev
                    .typed::<UserMessage>()
                    .and_then(|d| messages::user_message(ev.seq, d)),
                EventKind::Core(CoreKind::AssistantMessage) => ev
                    .typed::<AssistantMessage>()
                    .and_then(|d| messages::assistant_message(ev.seq, d)),
                EventKind::Core(CoreKind::ToolResult) => ev
                    .typed::<ToolResult>()
                    .and_then(|d| messages::tool_result_message(ev.seq, d)),
                _ => None,
            };
            new_msgs.insert(ev.seq, m);
        }
        // The tool-use ids used and answered on a surface, borrowed from
        // its messages (no copies: a compaction checks the whole surface).
        fn pairs<'a>(
            cache: &'a MessageCache,
            surface: &Surface,
            extra: &'a std::collections::HashMap<u64, Option<Message>>,
        ) -> (
            std::collections::BTreeSet<&'a str>,
            std::collections::BTreeSet<&'a str>,
        ) {
            let mut uses = std::collections::BTreeSet::new();
            let mut results = std::collections::BTreeSet::new();
            for seq in &surface.nodes {
                let msg = match extra.get(seq) {
                    Some(m) => m.as_ref(),
                    None => cache.node(*seq).map(|m| &**m),
                };
                // A message dropped once durable left its ids behind.
                for (is_use, id) in cache.dropped_ids(*seq).unwrap_or(&[]) {
                    if *is_use {
                        uses.insert(&**id);
                    } else {
                        results.insert(&**id);
                    }
                }
                for b in msg.map(|m| m.content.as_slice()).unwrap_or(&[]) {
                    if let Some((id, _)) = b.client_tool_use() {
                        uses.insert(id);
                    }
                    if let Some(id) = b.answers_tool_use() {
                        results.insert(id);
                    }
                }
            }
            (uses, results)
        }
        let none = Default::default();
        let (uses_before, results_before) = pairs(&self.messages, &self.surface, &none);
        let (uses_after, results_after) = pairs(&self.messages, after, &new_msgs);
        for id in uses_before.intersection(&results_before) {
            if uses_after.contains(id) != results_after.contains(id) {
                return Err(Error::Refused(format!(
                    "this replace would separate tool use {id:?} from its tool result on the surface; replace both or neither"
                )));
            }
        }
        // A tool use whose result is still to come must stay on the surface:
        // its result (from the tool, or from repair) would answer nothing.
        for id in uses_before.difference(&results_before) {
            let pending =
                self.open.calls.contains_key(*id) || self.open.requested.contains_key(*id);
            if pending && !uses_after.contains(id) && !results_after.contains(id) {
                return Err(Error::Refused(format!(
                    "this replace would remove tool use {id:?} while its result is still pending; record the result first"
                )));
            }
        }
        Ok(())
    }
}
