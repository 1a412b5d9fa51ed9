//! The checkpoint policy and the tool wrapper (SEMANTICS.md, "Durability:
//! where and when"; invariant 7: no side effect before durability).
//!
//! The store (the backend) decides *where* bytes go and batches them; this
//! module decides *when* they must be durable: before a model request is
//! dispatched, before a model-initiated tool body runs (after its policy and
//! guard checks), and before the next pre-step. If the checkpoint fails, the
//! request or tool does not run and the caller gets the error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::session::codec::event::{ContentBlock, ToolCall, ToolResult, ToolStatus};
use crate::session::fold::surface::SurfaceOp;
use crate::session::handle::Session;

/// The three places where the log must be durable before going on (a name
/// for each; the wait itself is [`Session::flush`] at every one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointPoint {
    /// Before a model request is dispatched.
    BeforeModelRequest,
    /// Before a model-initiated tool body runs, after its guards.
    BeforeToolBody,
    /// Before the next pre-step.
    BeforePreStep,
}

impl Session {
    /// Old name of [`Session::flush`], which is what a checkpoint is: wait
    /// until every event this handle appended is durable (one `fdatasync`
    /// shared with every other appender). The point was never used: every
    /// checkpoint waits for the same thing. On error the caller must not
    /// dispatch the request or run the tool.
    #[deprecated(
        since = "0.1.0",
        note = "call `flush()` at each checkpoint: it waits until this handle's appends are durable; the point argument was ignored"
    )]
    pub fn checkpoint(&self, _point: CheckpointPoint) -> Result<()> {
        self.flush()
    }
}

/// Cancellation signal shared with whoever may cancel a tool.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Cancel: a tool not dispatched yet will not run.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Where a tool runs: model-initiated (top level) or inside another tool,
/// which reuses the outer tool's checkpoint instead of flushing again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolScope {
    /// 0 for a model-initiated tool, n for a tool called from depth n-1.
    pub depth: u32,
}

impl ToolScope {
    /// The scope of a model-initiated tool.
    pub fn model() -> Self {
        ToolScope { depth: 0 }
    }
    fn nested(self) -> Self {
        ToolScope {
            depth: self.depth + 1,
        }
    }
}

/// What a tool body returns: the result content, whether it is an error, and
/// a value for the caller.
pub struct ToolBody<T> {
    /// The result content (the `tool/result` blocks).
    pub content: Vec<ContentBlock>,
    /// Whether the result is an error.
    pub is_error: bool,
    /// A value handed back to the caller (not logged).
    pub value: T,
}

/// How a wrapped tool call ended.
#[derive(Debug, PartialEq, Eq)]
pub enum ToolOutcome<T> {
    /// The body ran; its result is logged at this seq.
    Ran {
        /// The body's value.
        value: T,
        /// Seq of the `tool/result`.
        result_seq: u64,
    },
    /// The guard refused; a refusal result is logged, the body never ran.
    Refused {
        /// The guard's reason (also in the logged result).
        reason: String,
    },
    /// Cancelled while persisting: `ABORTED_BEFORE_DISPATCH` is logged, the
    /// body never ran.
    AbortedBeforeDispatch,
    /// The body ran, but its result could not be logged (for example larger
    /// than the payload limit): an error result saying why is logged at
    /// `result_seq` instead, so the call is closed and the model is told.
    ResultNotRecorded {
        /// The body's value.
        value: T,
        /// Seq of the error result logged instead.
        result_seq: u64,
        /// Why the result was not recorded.
        reason: String,
    },
}

/// Run a tool with the order the log requires: record `tool/call` → guard
/// checks → checkpoint (top level only) → body → record `tool/result`.
///
/// The body runs only if its `tool/call` is durable (or, nested, the outer
/// call's checkpoint covers it). If the checkpoint fails, the error is
/// returned and the body never runs.
///
/// ```
/// # use std::sync::Arc;
/// # use turnstone::session::*;
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
/// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
/// let outcome = run_tool(
///     &mut s,
///     ToolScope::model(),
///     "call-1",
///     "add",
///     serde_json::json!({"a": 2, "b": 3}),
///     &CancelToken::new(),
///     |_call| Ok(()), // policy and guard checks: Err(reason) refuses
///     |_session, _scope| ToolBody {
///         // Runs only once the tool/call is durable.
///         content: vec![ContentBlock::text("5")],
///         is_error: false,
///         value: 5,
///     },
/// )
/// .unwrap();
/// assert!(matches!(outcome, ToolOutcome::Ran { value: 5, .. }));
/// ```
#[allow(clippy::too_many_arguments)]
pub fn run_tool<T>(
    session: &mut Session,
    scope: ToolScope,
    call_id: &str,
    name: &str,
    input: Value,
    cancel: &CancelToken,
    guard: impl FnOnce(&ToolCall) -> std::result::Result<(), String>,
    body: impl FnOnce(&mut Session, ToolScope) -> ToolBody<T>,
) -> Result<ToolOutcome<T>> {
    let run = match ToolRun::begin(session, scope, call_id, name, input, guard)? {
        Ok(run) => run,
        Err(refused) => return Ok(refused),
    };
    if run.needs_checkpoint() {
        session.flush()?;
    }
    if let Some(aborted) = run.dispatch(session, cancel)? {
        return Ok(aborted);
    }
    let out = body(session, run.body_scope());
    run.finish(session, out)
}

/// The steps of one tool run, in the order the log requires, shared by
/// [`run_tool`] and [`crate::session::run_tool_async`]: they differ only
/// in how they wait for the checkpoint and run the body.
pub(crate) struct ToolRun {
    call_id: String,
    scope: ToolScope,
}

impl ToolRun {
    /// Record the `tool/call`, then run the guard: a refusal is recorded
    /// as the call's result and returned as the outcome (`Err`).
    pub(crate) fn begin<T>(
        session: &mut Session,
        scope: ToolScope,
        call_id: &str,
        name: &str,
        input: Value,
        guard: impl FnOnce(&ToolCall) -> std::result::Result<(), String>,
    ) -> Result<std::result::Result<ToolRun, ToolOutcome<T>>> {
        let call = ToolCall {
            call_id: call_id.to_string(),
            name: name.to_string(),
            input,
        };
        session.append(call.clone(), ())?;
        if let Err(reason) = guard(&call) {
            append_refusal(session, call_id, &reason)?;
            return Ok(Err(ToolOutcome::Refused { reason }));
        }
        Ok(Ok(ToolRun {
            call_id: call.call_id,
            scope,
        }))
    }

    /// Whether the body must wait for the checkpoint first: a
    /// model-initiated (top-level) tool does; a nested one is covered by
    /// its outer call's.
    pub(crate) fn needs_checkpoint(&self) -> bool {
        self.scope.depth == 0
    }

    /// After the checkpoint, before the body: a cancelled call is closed
    /// with `ABORTED_BEFORE_DISPATCH` and its body never runs.
    pub(crate) fn dispatch<T>(
        &self,
        session: &mut Session,
        cancel: &CancelToken,
    ) -> Result<Option<ToolOutcome<T>>> {
        if !cancel.is_cancelled() {
            return Ok(None);
        }
        append_aborted(session, &self.call_id)?;
        Ok(Some(ToolOutcome::AbortedBeforeDispatch))
    }

    /// The scope the body runs in (one level deeper, for nested tools).
    pub(crate) fn body_scope(&self) -> ToolScope {
        self.scope.nested()
    }

    /// Record what the body returned as the call's result.
    pub(crate) fn finish<T>(
        self,
        session: &mut Session,
        out: ToolBody<T>,
    ) -> Result<ToolOutcome<T>> {
        let recorded = record_result(session, &self.call_id, out.content, out.is_error)?;
        Ok(ToolOutcome::recorded(out.value, recorded))
    }
}

/// Close a call its guard refused: an error result saying why.
pub(crate) fn append_refusal(session: &mut Session, call_id: &str, reason: &str) -> Result<u64> {
    session.append(
        ToolResult {
            call_id: call_id.to_string(),
            content: vec![ContentBlock::text(format!("refused by policy: {reason}"))],
            is_error: true,
            status: None,
        },
        SurfaceOp::Append,
    )
}

/// Close a call cancelled before its body ran (`ABORTED_BEFORE_DISPATCH`).
pub(crate) fn append_aborted(session: &mut Session, call_id: &str) -> Result<u64> {
    session.append(
        ToolResult {
            call_id: call_id.to_string(),
            content: vec![],
            is_error: true,
            status: Some(ToolStatus::AbortedBeforeDispatch),
        },
        SurfaceOp::Append,
    )
}

impl<T> ToolOutcome<T> {
    /// The outcome of a body that ran, from what [`record_result`] did.
    pub(crate) fn recorded(value: T, (result_seq, not_recorded): (u64, Option<String>)) -> Self {
        match not_recorded {
            None => ToolOutcome::Ran { value, result_seq },
            Some(reason) => ToolOutcome::ResultNotRecorded {
                value,
                result_seq,
                reason,
            },
        }
    }
}

/// Record a tool's result, always closing its call: a result the log cannot
/// take (larger than the payload limit, or refused) is replaced by an error
/// result saying why, and the output stays out of the log. Only a failure of
/// the store itself (poisoned, closed) is returned, and then nothing can be
/// written; repair answers the call after a reopen.
pub(crate) fn record_result(
    session: &mut Session,
    call_id: &str,
    content: Vec<ContentBlock>,
    is_error: bool,
) -> Result<(u64, Option<String>)> {
    let result = ToolResult {
        call_id: call_id.to_string(),
        content,
        is_error,
        status: None,
    };
    match session.append(result, SurfaceOp::Append) {
        Ok(seq) => Ok((seq, None)),
        Err(e @ (Error::TooLarge { .. } | Error::InvalidArgument(_) | Error::Refused(_))) => {
            let reason = format!("tool result not recorded: {e}");
            let seq = session.append(
                ToolResult {
                    call_id: call_id.to_string(),
                    content: vec![ContentBlock::text(reason.clone())],
                    is_error: true,
                    status: None,
                },
                SurfaceOp::Append,
            )?;
            Ok((seq, Some(reason)))
        }
        Err(e) => Err(e),
    }
}
