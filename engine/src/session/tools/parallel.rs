//! Parallel tool calls (invariant 7 kept for each): the tool calls of one
//! assistant message are recorded together — one atomic group, one
//! durability wait — and their bodies then run concurrently without holding
//! the session; each result is recorded when its body finishes. Derived
//! messages keep the results in the order they finished; the request
//! adapters send them in the order the model asked for them.
//!
//! After a crash part-way, repair finds: finished results as they were,
//! `TOOL_OUTCOME_UNKNOWN` for calls that were durable (a body may have run),
//! and `TOOL_NOT_STARTED` for uses whose call never became durable.

use crate::error::Result;
use crate::session::codec::envelope;
use crate::session::codec::envelope::EncodedEvent;
use crate::session::codec::event::{CoreKind, ToolCall};
use crate::session::handle::host::SharedSession;
use crate::session::handle::Session;
use crate::session::tools::durability::{
    append_aborted, append_refusal, record_result, CancelToken, ToolBody, ToolOutcome,
};
use crate::types::LogPos;

impl Session {
    /// Record the tool calls of one assistant message as one atomic group,
    /// without waiting: returns where the group ends, for
    /// [`crate::Store::wait_durable`] (or use [`Session::flush`]). Run no
    /// body before that wait returns.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use serde_json::json;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store.clone(), "s1", Arc::new(Registry::new())).unwrap();
    /// let call = ToolCall { call_id: "c1".into(), name: "ls".into(), input: json!({}) };
    /// s.append(AssistantMessage { content: vec![ContentBlock::tool_use("c1", "ls", json!({}))],
    ///     usage: None, stop_reason: None, extra: Default::default() }, SurfaceOp::Append).unwrap();
    /// let end = s.record_tool_calls(&[call]).unwrap();
    /// store.wait_durable(end).unwrap();            // now the body may run (on any executor)
    /// let (seq, not_recorded) = s.record_tool_result("c1", vec![ContentBlock::text("a b")], false).unwrap();
    /// assert!(not_recorded.is_none() && s.open_state().calls.is_empty());
    /// # let _ = seq;
    /// ```
    pub fn record_tool_calls(&mut self, calls: &[ToolCall]) -> Result<LogPos> {
        // A tool is not run twice: no call already called or answered, and
        // none twice in the group.
        self.state
            .check_new_calls(calls.iter().map(|c| c.call_id.as_str()))?;
        let items = calls
            .iter()
            .map(|c| EncodedEvent::core(CoreKind::ToolCall, envelope::encode_core(c, None)))
            .collect();
        self.append_encoded(items)?;
        Ok(self.last_end())
    }

    /// Record a tool's result, closing its call. A result the log cannot
    /// take (over the payload limit) is replaced by an error result saying
    /// why; the second value is that reason.
    pub fn record_tool_result(
        &mut self,
        call_id: &str,
        content: Vec<crate::session::codec::content::ContentBlock>,
        is_error: bool,
    ) -> Result<(u64, Option<String>)> {
        record_result(self, call_id, content, is_error)
    }
}

/// Run the tool calls of one assistant message concurrently.
///
/// Records every `tool/call` in one atomic group; answers the ones `guard`
/// refuses with a refusal result; waits once for durability (the session
/// is not locked while waiting or while bodies run, so a `Host::load` from
/// another thread is refused at once instead of blocking for the turn);
/// then, unless `cancel` was set meanwhile (every call then gets
/// `ABORTED_BEFORE_DISPATCH`), runs each body on its own scoped thread and
/// records its result as soon as it finishes. Outcomes come back in call
/// order.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use turnstone::session::*;
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
/// let host = Host::new(store, Arc::new(Registry::new()));
/// let shared = host.create("s1").unwrap();
/// let calls: Vec<ToolCall> = ["a", "b"].iter().map(|id| ToolCall {
///     call_id: id.to_string(), name: "echo".into(), input: json!({"x": id}),
/// }).collect();
/// shared.lock().append(AssistantMessage {
///     content: calls.iter().map(|c| ContentBlock::tool_use(&c.call_id, &c.name, c.input.clone())).collect(),
///     usage: None, stop_reason: Some("tool_use".into()), extra: Default::default(),
/// }, SurfaceOp::Append).unwrap();
/// let outcomes = run_tools_parallel(&shared, calls, &CancelToken::new(), |_| Ok(()), |call| ToolBody {
///     content: vec![ContentBlock::text(call.input["x"].to_string())], is_error: false, value: (),
/// }).unwrap();
/// assert!(outcomes.iter().all(|o| matches!(o, ToolOutcome::Ran { .. })));
/// validate_messages(shared.lock().derive_messages()).unwrap();
/// ```
pub fn run_tools_parallel<T: Send>(
    session: &SharedSession,
    calls: Vec<ToolCall>,
    cancel: &CancelToken,
    guard: impl Fn(&ToolCall) -> std::result::Result<(), String> + Sync,
    body: impl Fn(&ToolCall) -> ToolBody<T> + Sync,
) -> Result<Vec<ToolOutcome<T>>> {
    let mut outcomes: Vec<Option<ToolOutcome<T>>> = (0..calls.len()).map(|_| None).collect();
    let (durable_at, runnable) = {
        let mut s = session.lock();
        s.record_tool_calls(&calls)?;
        // Taken now: the calls' durability is what the bodies wait for.
        let durable_at = s.durability_point();
        let mut runnable = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            if let Err(reason) = guard(call) {
                append_refusal(&mut s, &call.call_id, &reason)?;
                outcomes[i] = Some(ToolOutcome::Refused { reason });
            } else {
                runnable.push(i);
            }
        }
        (durable_at, runnable)
    };
    // One durability wait covers every call; no lock held.
    durable_at.wait()?;
    if cancel.is_cancelled() {
        let mut s = session.lock();
        for &i in &runnable {
            append_aborted(&mut s, &calls[i].call_id)?;
            outcomes[i] = Some(ToolOutcome::AbortedBeforeDispatch);
        }
    } else {
        let (body, calls_ref) = (&body, &calls);
        let finished: Vec<(usize, Result<ToolOutcome<T>>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = runnable
                .iter()
                .map(|&i| {
                    scope.spawn(move || {
                        let call = &calls_ref[i];
                        let out = body(call);
                        let recorded = {
                            let mut s = session.lock();
                            record_result(&mut s, &call.call_id, out.content, out.is_error)
                        };
                        (i, recorded.map(|r| ToolOutcome::recorded(out.value, r)))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("tool body panicked"))
                .collect()
        });
        for (i, r) in finished {
            outcomes[i] = Some(r?);
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.expect("every call has an outcome"))
        .collect())
}
