//! The session-layer agent both loops drive: the events of its turns in
//! order, with the durability waits between them ([`Agent::next`]), the
//! filler text its payloads are cut from, and the repair invariants checked
//! after every crash ([`check_repair`]). Shared by the kill loop's child and
//! the simulated loop, so both append the same shapes of open state.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::Rng;
use serde_json::json;
use turnstone::session::internals as event;
use turnstone::session::Registry;
use turnstone::session::{
    validate_messages, AssistantMessage, ContentBlock, Host, StepEnd, StepEndReason, StepStart,
    SurfaceOp, ToolCall, ToolResult, TurnEnd, TurnEndReason, TurnStart, UserMessage,
};
use turnstone::Store;

use super::Check;

/// One agent's place in its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    TurnStart,
    User,
    StepStart,
    Assistant,
    Call,
    /// Durability wait: the tool may run only once its call is durable.
    AwaitCall,
    Result,
    StepEnd,
    /// Durability wait before the next model request.
    AwaitStep,
    TurnEnd,
}

#[derive(Debug, Clone)]
pub(super) struct Agent {
    /// Makes turn, step and call ids unique across runs on one store.
    prefix: String,
    /// Text sizes are divided by this (the simulated loop keeps events
    /// small: restore and repair parse every event's JSON).
    shrink: usize,
    phase: Phase,
    turn: u64,
    step: u32,
    steps: u32,
}

impl Agent {
    pub(super) fn new(prefix: String, shrink: usize) -> Self {
        Agent {
            prefix,
            shrink,
            phase: Phase::TurnStart,
            turn: 0,
            step: 0,
            steps: 1,
        }
    }

    /// The next event (kind code, payload), or `None` for a durability wait.
    pub(super) fn next(&mut self, rng: &mut StdRng, filler: &str) -> Option<(u16, Vec<u8>)> {
        fn core<D: turnstone::session::EventData>(d: D, op: Option<SurfaceOp>) -> (u16, Vec<u8>) {
            (D::KIND.code(), event::encode_core(&d, op))
        }
        let t = format!("{}-t{}", self.prefix, self.turn);
        let s = format!("s{}", self.step);
        let call = format!("call-{}-{}-{}", self.prefix, self.turn, self.step);
        let shrink = self.shrink;
        let text = |n: usize| filler[..(n / shrink).min(filler.len())].to_string();
        let out = match self.phase {
            Phase::TurnStart => {
                self.steps = rng.gen_range(1..=3);
                self.step = 0;
                self.phase = Phase::User;
                core(TurnStart { turn_id: t }, None)
            }
            Phase::User => {
                self.phase = Phase::StepStart;
                let n = rng.gen_range(10..400);
                core(
                    UserMessage {
                        content: vec![ContentBlock::text(text(n))],
                    },
                    Some(SurfaceOp::Append),
                )
            }
            Phase::StepStart => {
                self.phase = Phase::Assistant;
                core(
                    StepStart {
                        turn_id: t,
                        step_id: s,
                    },
                    None,
                )
            }
            Phase::Assistant => {
                self.phase = Phase::Call;
                let n = rng.gen_range(10..1200);
                core(
                    AssistantMessage {
                        content: vec![
                            ContentBlock::text(text(n)),
                            ContentBlock::ToolUse {
                                id: call,
                                name: "shell".into(),
                                input: json!({"cmd": "ls"}),
                                extra: Default::default(),
                            },
                        ],
                        usage: None,
                        stop_reason: None,
                        extra: Default::default(),
                    },
                    Some(SurfaceOp::Append),
                )
            }
            Phase::Call => {
                self.phase = Phase::AwaitCall;
                core(
                    ToolCall {
                        call_id: call,
                        name: "shell".into(),
                        input: json!({"cmd": "ls"}),
                    },
                    None,
                )
            }
            Phase::AwaitCall => {
                self.phase = Phase::Result;
                return None;
            }
            Phase::Result => {
                self.phase = Phase::StepEnd;
                let n = if rng.gen_ratio(1, 20) {
                    rng.gen_range(3000..12000)
                } else {
                    rng.gen_range(10..2000)
                };
                core(
                    ToolResult {
                        call_id: call,
                        content: vec![ContentBlock::text(text(n))],
                        is_error: false,
                        status: None,
                    },
                    Some(SurfaceOp::Append),
                )
            }
            Phase::StepEnd => {
                self.phase = Phase::AwaitStep;
                core(
                    StepEnd {
                        turn_id: t,
                        step_id: s,
                        reason: StepEndReason::ToolUse,
                    },
                    None,
                )
            }
            Phase::AwaitStep => {
                self.step += 1;
                self.phase = if self.step < self.steps {
                    Phase::StepStart
                } else {
                    Phase::TurnEnd
                };
                return None;
            }
            Phase::TurnEnd => {
                self.phase = Phase::TurnStart;
                self.turn += 1;
                core(
                    TurnEnd {
                        turn_id: t,
                        reason: TurnEndReason::Completed,
                    },
                    None,
                )
            }
        };
        Some(out)
    }
}

pub(super) fn filler(rng: &mut StdRng) -> String {
    let mut s = String::with_capacity(16_384);
    while s.len() < 16_000 {
        for _ in 0..rng.gen_range(1..9) {
            s.push((b'a' + rng.gen_range(0..26u8)) as char);
        }
        s.push(' ');
    }
    s
}

/// Repair every inactive session and check the repair invariants: after
/// repair each session is idle with no open tool, its messages are valid,
/// and a second repair appends nothing. Returns the number of sessions.
pub(super) fn check_repair(store: &Arc<Store>) -> Check<u64> {
    let reg = Arc::new(Registry::new());
    let host = Host::new(store.clone(), reg.clone());
    let first = host
        .repair_inactive()
        .map_err(|e| format!("repair after a crash failed: {e}"))?;
    for r in &first {
        // Loading an inactive session restores it and repairs it again:
        // that second repair must append nothing.
        let (s, second) = host
            .load(&r.session)
            .map_err(|e| format!("session {:?} does not restore after repair: {e}", r.session))?;
        if let Some(again) = second.filter(|a| !a.is_noop()) {
            return Err(format!("a second repair appended events: {again:?}"));
        }
        let mut s = s.lock();
        let open = s.open_state();
        if !open.is_idle() || !open.calls.is_empty() || !open.requested.is_empty() {
            return Err(format!(
                "session {:?} is not idle after repair: {open:?}",
                r.session
            ));
        }
        validate_messages(s.derive_messages()).map_err(|e| {
            format!(
                "session {:?}: invalid messages after repair: {e}",
                r.session
            )
        })?;
    }
    Ok(first.len() as u64)
}
