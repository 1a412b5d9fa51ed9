//! Repair of inactive sessions after a crash or kill (SEMANTICS.md, "Crash
//! recovery and repair"; invariant 6).
//!
//! Keep every durable event, then append, in one atomic batch, what closes
//! the open state: a synthetic `tool/result` marked `TOOL_OUTCOME_UNKNOWN` for
//! every durable `tool/call` without a result, one marked `TOOL_NOT_STARTED`
//! for every tool the assistant requested without a durable `tool/call`,
//! `step/end` for an open step and `turn/end { reason: interrupted }` for an
//! open turn. Plugin events are left to plugins ([`PluginRepair`]). After
//! repair nothing is open, so a second run appends nothing (idempotent), and
//! every tool use in the derived messages has a tool result.

use serde::Serialize;

use crate::error::Result;
use crate::session::codec::envelope;
use crate::session::codec::envelope::EncodedEvent;
use crate::session::codec::event::{
    ContentBlock, CoreKind, StepEnd, StepEndReason, ToolResult, ToolStatus, TurnEnd, TurnEndReason,
};
use crate::session::fold::messages::{Message, Role};
use crate::session::fold::surface::SurfaceOp;
use crate::session::handle::Session;

/// What repair did to one session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    /// The session repaired.
    pub session: String,
    /// Call ids given a `TOOL_OUTCOME_UNKNOWN` result.
    pub tools_outcome_unknown: Vec<String>,
    /// Tool-use ids given a `TOOL_NOT_STARTED` result.
    pub tools_not_started: Vec<String>,
    /// Open steps closed with `step/end`.
    pub steps_closed: u32,
    /// Open turns closed with `turn/end {interrupted}`.
    pub turns_interrupted: u32,
    /// Events appended (core repair plus plugin repair).
    pub appended: u64,
}

impl RepairReport {
    /// Whether nothing was appended.
    pub fn is_noop(&self) -> bool {
        self.appended == 0
    }
}

/// A plugin's own repair (for example closing an unmatched
/// `compaction/start`). Runs after the core repair; may append plugin events.
pub trait PluginRepair {
    /// Repair this plugin's open state; return the number of events appended.
    fn repair(&self, session: &mut Session) -> Result<u64>;
}

/// Repair an inactive session. Appends only; idempotent.
///
/// ```
/// # use std::sync::Arc;
/// # use turnstone::session::*;
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
/// # let reg = Arc::new(Registry::new());
/// {
///     let mut s = Session::create(store.clone(), "s1", reg.clone()).unwrap();
///     s.append(TurnStart { turn_id: "t1".into() }, ()).unwrap();
///     s.append(ToolCall { call_id: "c1".into(), name: "ls".into(), input: serde_json::json!({}) }, ()).unwrap();
///     s.flush().unwrap();
/// } // the process "crashes" here: a durable call without a result
/// let mut s = Session::open(store, "s1", reg).unwrap();
/// let report = repair(&mut s, &[]).unwrap();
/// assert_eq!(report.tools_outcome_unknown, ["c1"]);
/// assert_eq!(report.turns_interrupted, 1);
/// assert!(repair(&mut s, &[]).unwrap().is_noop()); // idempotent
/// ```
pub fn repair(session: &mut Session, plugins: &[&dyn PluginRepair]) -> Result<RepairReport> {
    let open = session.open_state().clone();
    let mut report = RepairReport {
        session: session.id().to_string(),
        ..Default::default()
    };
    // Tool results in the order the tools were requested/called.
    let mut tools: Vec<((u64, u32), String, ToolStatus)> = Vec::new();
    let order = |id: &String, seq: u64| open.origin.get(id).copied().unwrap_or((seq, 0));
    for (id, seq) in &open.calls {
        tools.push((order(id, *seq), id.clone(), ToolStatus::ToolOutcomeUnknown));
    }
    for (id, (seq, _name)) in &open.requested {
        tools.push((order(id, *seq), id.clone(), ToolStatus::ToolNotStarted));
    }
    tools.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut items: Vec<EncodedEvent> = Vec::new();
    for (_, id, status) in tools {
        match status {
            ToolStatus::ToolOutcomeUnknown => report.tools_outcome_unknown.push(id.clone()),
            _ => report.tools_not_started.push(id.clone()),
        }
        items.push(EncodedEvent::core(
            CoreKind::ToolResult,
            envelope::encode_core(
                &ToolResult {
                    call_id: id,
                    content: Vec::<ContentBlock>::new(),
                    is_error: true,
                    status: Some(status),
                },
                Some(SurfaceOp::Append),
            ),
        ));
    }
    if let Some((turn_id, step_id, _)) = &open.step {
        report.steps_closed += 1;
        items.push(EncodedEvent::core(
            CoreKind::StepEnd,
            envelope::encode_core(
                &StepEnd {
                    turn_id: turn_id.clone(),
                    step_id: step_id.clone(),
                    reason: StepEndReason::Interrupted,
                },
                None,
            ),
        ));
    }
    if let Some((turn_id, _)) = &open.turn {
        report.turns_interrupted += 1;
        items.push(EncodedEvent::core(
            CoreKind::TurnEnd,
            envelope::encode_core(
                &TurnEnd {
                    turn_id: turn_id.clone(),
                    reason: TurnEndReason::Interrupted,
                },
                None,
            ),
        ));
    }
    report.appended = items.len() as u64;
    if !items.is_empty() {
        session.append_repair_group(items)?;
    }
    for p in plugins {
        report.appended += p.repair(session)?;
    }
    Ok(report)
}

/// Why a message history is not valid for a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageProblem {
    /// A client tool use without a result.
    #[error("tool use {id:?} (message {message}) has no tool result")]
    UnansweredToolUse {
        /// The tool use id.
        id: String,
        /// Index of the message that holds the block.
        message: usize,
    },
    /// A result that answers no earlier tool use.
    #[error("tool result for {id:?} (message {message}) answers no earlier tool use")]
    OrphanToolResult {
        /// The tool use id.
        id: String,
        /// Index of the message that holds the block.
        message: usize,
    },
    /// A result after the next assistant message.
    #[error("tool result for {id:?} (message {message}) comes after the next assistant message; providers need it before")]
    LateToolResult {
        /// The tool use id.
        id: String,
        /// Index of the message that holds the block.
        message: usize,
    },
    /// A second result for one tool use.
    #[error("tool use {id:?} has a second tool result (message {message})")]
    DuplicateToolResult {
        /// The tool use id.
        id: String,
        /// Index of the message that holds the block.
        message: usize,
    },
}

/// Check that a message history is valid for a model, in both directions:
/// every client tool use has exactly one tool result, every tool result
/// answers an earlier tool use, and the results of an assistant turn's tool
/// uses (consecutive assistant messages are one turn) all come before the
/// next assistant turn (the order the providers' request rules need; the
/// adapters put them right after it).
pub fn validate_messages(
    messages: &[std::sync::Arc<Message>],
) -> std::result::Result<(), MessageProblem> {
    use std::collections::{HashMap, HashSet};
    // id -> message index of its use; pending = uses of the last assistant
    // message not yet answered.
    let mut uses: HashMap<&str, usize> = HashMap::new();
    let mut answered: HashSet<&str> = HashSet::new();
    let mut pending: Vec<(&str, usize)> = Vec::new();
    let mut prev_role = None;
    for (i, m) in messages.iter().enumerate() {
        // Consecutive assistant messages are one turn (the adapters merge
        // them); its results must come before the next assistant turn.
        if m.role == Role::Assistant && prev_role != Some(Role::Assistant) {
            if let Some((id, message)) = pending.first() {
                return Err(MessageProblem::UnansweredToolUse {
                    id: id.to_string(),
                    message: *message,
                });
            }
        }
        if !m.content.is_empty() {
            prev_role = Some(m.role);
        }
        for b in &m.content {
            if let Some((id, _)) = b.client_tool_use() {
                uses.insert(id, i);
                pending.push((id, i));
            }
            if let Some(id) = b.answers_tool_use() {
                if !uses.contains_key(id) {
                    return Err(MessageProblem::OrphanToolResult {
                        id: id.to_string(),
                        message: i,
                    });
                }
                if !answered.insert(id) {
                    return Err(MessageProblem::DuplicateToolResult {
                        id: id.to_string(),
                        message: i,
                    });
                }
                if !pending.iter().any(|(p, _)| *p == id) {
                    return Err(MessageProblem::LateToolResult {
                        id: id.to_string(),
                        message: i,
                    });
                }
                pending.retain(|(p, _)| *p != id);
            }
        }
    }
    match pending.first() {
        None => Ok(()),
        Some((id, message)) => Err(MessageProblem::UnansweredToolUse {
            id: id.to_string(),
            message: *message,
        }),
    }
}
