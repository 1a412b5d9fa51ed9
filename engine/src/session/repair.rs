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
use crate::session::core::Session;
use crate::session::event::{
    self, ContentBlock, CoreKind, StepEnd, StepEndReason, ToolResult, ToolStatus, TurnEnd,
    TurnEndReason,
};
use crate::session::messages::Message;
use crate::session::surface::SurfaceOp;

/// What repair did to one session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    pub session: String,
    /// Call ids given a `TOOL_OUTCOME_UNKNOWN` result.
    pub tools_outcome_unknown: Vec<String>,
    /// Tool-use ids given a `TOOL_NOT_STARTED` result.
    pub tools_not_started: Vec<String>,
    pub steps_closed: u32,
    pub turns_interrupted: u32,
    /// Events appended (core repair plus plugin repair).
    pub appended: u64,
}

impl RepairReport {
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
    let mut items: Vec<(u16, u16, Vec<u8>)> = Vec::new();
    for (_, id, status) in tools {
        match status {
            ToolStatus::ToolOutcomeUnknown => report.tools_outcome_unknown.push(id.clone()),
            _ => report.tools_not_started.push(id.clone()),
        }
        items.push((
            CoreKind::ToolResult.code(),
            0,
            event::encode_core(
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
        items.push((
            CoreKind::StepEnd.code(),
            0,
            event::encode_core(
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
        items.push((
            CoreKind::TurnEnd.code(),
            0,
            event::encode_core(
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

/// Check that a message history is valid for a model: every tool use has a
/// tool result after it. Returns the first offending tool-use id.
pub fn validate_messages(messages: &[std::sync::Arc<Message>]) -> std::result::Result<(), String> {
    let mut pending: Vec<&str> = Vec::new();
    for m in messages {
        for b in &m.content {
            match b {
                ContentBlock::ToolUse { id, .. } => pending.push(id),
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    pending.retain(|p| p != tool_use_id)
                }
                ContentBlock::Text { .. } => {}
            }
        }
    }
    match pending.first() {
        None => Ok(()),
        Some(id) => Err(format!("tool use {id:?} has no tool result")),
    }
}
