//! [`Session`]: one agent session over the shared store.
//!
//! Every piece of state here (surface, messages, header, open turn/step/tool
//! calls, seed boundary) is a fold over the session's events, computed by one
//! function (`Session::apply`) both when an event is appended live and when
//! the session is restored from the log. That is how "model-visible iff
//! logged" (invariant 4) holds by construction; the proptest in
//! `tests/model_visible.rs` checks it.

mod append;
pub mod host;
mod json;
mod metadata;
mod open;
pub mod repair;
mod request;
mod snapshot;
mod staged;
mod turns;

pub use staged::{create_from_raw, delete_staging_leftovers, STAGING_PREFIX};

use std::sync::Arc;

use serde_json::Value;

use crate::error::Result;
use crate::session::codec::envelope;
use crate::session::codec::event::{
    EpochHeader, EventKind, Registry, RequestContext, SessionEvent,
};
use crate::session::fold::messages::{Keep, Message};
use crate::session::fold::state::{OpenState, State};
use crate::session::fold::surface::{Surface, SurfaceOp};
use crate::session::log::{AppendEnd, DurabilityPoint, LogHandle, LogRef};
use crate::store::Store;
use crate::types::LogPos;

/// A session: append typed events, derive what the model sees.
pub struct Session {
    pub(in crate::session) log: LogHandle,
    pub(in crate::session) id: Arc<str>,
    /// The session's id inside the embedded store, once an append has
    /// told it: later appends skip the name lookup (the store checks that
    /// the id still names this session).
    pub(in crate::session) store_sid: Option<crate::types::SessionId>,
    pub(in crate::session) registry: Arc<Registry>,
    /// Everything the session's events fold into ([`State::apply`]).
    pub(in crate::session) state: State,
    /// This agent loop has written a header (else the next one is `resume`).
    loop_wrote_header: bool,
    /// End of this handle's last append (for durability waits).
    last_end: AppendEnd,
    /// This handle's claim on the session ([`crate::backend::EventLog::claim`];
    /// `None`: a read-only view).
    live_handle: Option<u64>,
    /// The claim took the session over from a writer that did not release
    /// it (a worker that died): repair before going on.
    took_over: bool,
    /// Events covered by the state snapshot on disk, as far as this handle
    /// knows (FORMAT.md §17).
    pub(in crate::session) state_covered: u64,
    /// The state snapshot this handle was restored from (events covered).
    pub(in crate::session) restored_from: Option<u64>,
    /// Why a state snapshot on disk was not used.
    pub(in crate::session) snapshot_discarded: Option<String>,
    /// Messages of restored surface nodes could not be read from the log:
    /// [`Session::derive_messages`] returned nothing, appends are refused.
    pub(in crate::session) messages_error: Option<String>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(h) = self.live_handle {
            self.log.release(&self.id, h);
        }
    }
}

/// One event of prior history a session is created with (see
/// [`Session::create_with_history`]): events that happened elsewhere (an
/// import, a conversation started by another harness) and that the session
/// starts from. The reference design calls this *seed* history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEvent {
    /// The event kind.
    pub kind: EventKind,
    /// The event data (the kind's schema).
    pub data: Value,
    /// Required for the three surface kinds, absent for all others.
    pub surface: Option<SurfaceOp>,
    /// When the event happened, ms since the Unix epoch (an import keeps
    /// the exported `ts`); `None` stamps the time of the append.
    pub ts: Option<u64>,
}

/// Old name of [`HistoryEvent`].
#[deprecated(since = "0.1.0", note = "renamed `HistoryEvent`")]
pub type SeedEvent = HistoryEvent;

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("len", &self.state.len)
            .finish()
    }
}

impl Session {
    /// Whether opening this handle took the session over from a writer
    /// that held it without releasing it (on PostgreSQL: an expired lease
    /// of a worker that died or stalled). Such a session may have a turn
    /// left open: run [`crate::session::repair()`] before going on.
    pub fn took_over(&self) -> bool {
        self.took_over
    }

    /// Whether this handle is a read-only view.
    pub fn is_read_only(&self) -> bool {
        self.live_handle.is_none()
    }

    /// Decode for the fold: [`Session::apply`] checks each core event's data
    /// (parsing what it needs once), so the decode does not parse it too.
    pub(in crate::session) fn decode(
        &self,
        seq: u64,
        code: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<SessionEvent> {
        envelope::decode_for_fold(seq, code, flags, payload, &self.registry)
            .map_err(|e| envelope::decode_error(&self.id, seq, e))
    }

    /// Fold one event into the state ([`State::apply`]).
    pub(in crate::session) fn apply(&mut self, ev: &SessionEvent) -> Result<()> {
        self.state.apply(&self.id, ev, None, Keep::Hold)
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Number of events.
    pub fn len(&self) -> u64 {
        self.state.len
    }
    /// Whether the session has no events.
    pub fn is_empty(&self) -> bool {
        self.state.len == 0
    }
    /// The embedded store this session lives in; `None` on another log
    /// ([`Session::log`]).
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.log.store()
    }
    /// The log this session lives in.
    pub fn log(&self) -> &LogHandle {
        &self.log
    }
    /// A borrowed view of the log, for the free functions (replay, fork).
    pub(crate) fn log_ref(&self) -> LogRef<'_> {
        self.log.as_ref()
    }
    /// The current surface: the logged events the model sees, in order (a
    /// replace swaps nodes; replaced events stay in the log). The messages
    /// are derived from it ([`Session::derive_messages`]).
    #[doc(alias = "context")]
    pub fn surface(&self) -> &Surface {
        &self.state.surface
    }
    /// Open turn, step and tool calls.
    pub fn open_state(&self) -> &OpenState {
        &self.state.open
    }
    /// The latest request header in the log.
    pub fn header(&self) -> Option<&EpochHeader> {
        self.state.header.as_ref()
    }
    /// The latest request context in the log.
    pub fn context(&self) -> Option<&RequestContext> {
        self.state.context.as_ref()
    }
    /// Seq of the `session/end-seed` marker, if the session was created
    /// with prior history ([`Session::create_with_history`]).
    pub fn history_end(&self) -> Option<u64> {
        self.state.seed_end
    }
    /// Whether event `seq` belongs to the prior history (before the
    /// `session/end-seed` marker) rather than the current run.
    pub fn is_history(&self, seq: u64) -> bool {
        self.state.seed_end.is_some_and(|s| seq < s)
    }
    /// Old name of [`Session::history_end`].
    #[deprecated(since = "0.1.0", note = "renamed `history_end`")]
    pub fn seed_end(&self) -> Option<u64> {
        self.history_end()
    }
    /// Old name of [`Session::is_history`].
    #[deprecated(since = "0.1.0", note = "renamed `is_history`")]
    pub fn is_seed(&self, seq: u64) -> bool {
        self.is_history(seq)
    }
    /// Where this handle's last append ended in the embedded store's log
    /// (`LogPos(0)`: nothing appended, or another log).
    pub fn last_end(&self) -> LogPos {
        match self.last_end {
            AppendEnd::At(p) => p,
            _ => LogPos(0),
        }
    }

    /// What [`Session::flush`] would wait for, as a value to wait on once
    /// the session's lock is released (so that other appenders share the
    /// same flush): every event this handle appended so far.
    pub fn durability_point(&self) -> DurabilityPoint {
        DurabilityPoint {
            log: self.log.clone(),
            id: self.id.clone(),
            end: self.last_end,
        }
    }

    /// The model's messages, derived from the surface. Incremental: after
    /// plain appends only the new nodes are visited.
    ///
    /// A session restored from a state snapshot reads the messages of its
    /// surface from the log on the first call, and so does a handle that
    /// has appended without deriving, for its appends already durable (it
    /// does not keep their messages in memory until it first derives: a
    /// recorder's memory does not grow with its sessions' surfaces). If
    /// that read fails, this returns no messages, and appends are refused
    /// with the error (see [`Session::try_derive_messages`], which returns
    /// it).
    pub fn derive_messages(&mut self) -> &[Arc<Message>] {
        match self.load_messages() {
            Ok(()) => self.state.messages.derive(&self.state.surface),
            Err(e) => {
                self.messages_error = Some(e.to_string());
                &[]
            }
        }
    }

    /// [`Session::derive_messages`], returning the error of a failed read
    /// of restored messages.
    pub fn try_derive_messages(&mut self) -> Result<&[Arc<Message>]> {
        self.load_messages()?;
        Ok(self.state.messages.derive(&self.state.surface))
    }

    /// Surface nodes visited by the last [`Session::derive_messages`].
    pub fn last_derive_work(&self) -> usize {
        self.state.messages.last_work
    }

    /// Read and decode events `range` from the log (a read-only view shows
    /// kinds this process does not know as opaque events).
    pub fn events(&self, range: std::ops::Range<u64>) -> Result<Vec<SessionEvent>> {
        // Decoded straight from the log's bytes (payloads lent, not copied).
        let mut out =
            Vec::with_capacity((range.end.saturating_sub(range.start)).min(1 << 16) as usize);
        let mut failed = None;
        self.log.as_ref().visit(&self.id, range, |e| {
            let ev = e.payload.and_then(|payload| {
                if self.is_read_only() {
                    envelope::decode_view(e.seq, e.kind, e.flags, &payload, &self.registry).map_err(
                        |err| crate::session::codec::envelope::decode_error(&self.id, e.seq, err),
                    )
                } else {
                    self.decode(e.seq, e.kind, e.flags, &payload)
                }
            });
            match ev {
                Ok(ev) => {
                    out.push(ev);
                    std::ops::ControlFlow::Continue(())
                }
                Err(err) => {
                    failed = Some(err);
                    std::ops::ControlFlow::Break(())
                }
            }
        })?;
        match failed {
            Some(err) => Err(err),
            None => Ok(out),
        }
    }

    /// Wait until every event this handle appended is durable (one
    /// `fdatasync` serves every appender waiting at once). This is the
    /// checkpoint of SESSIONS.md: call it before a model request is
    /// dispatched, before a model-initiated tool body runs ([`crate::session::run_tool`]
    /// does), and before the next pre-step; on error, do not go on.
    #[doc(alias = "checkpoint")]
    pub fn flush(&self) -> Result<()> {
        self.log.wait(&self.id, self.last_end)
    }
}

#[cfg(test)]
mod tests;
