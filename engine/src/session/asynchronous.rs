//! The session layer for async programs.
//!
//! What waits for durability does so without a thread: [`Session::flush_async`]
//! and [`run_tool_async`] await the store's
//! [`crate::DurableWait`], which the flusher wakes (with every other waiter)
//! after the fdatasync that covers it. A thousand sessions on a 2-worker
//! runtime share fdatasyncs as a thousand threads would, without the threads
//! (`benches/src/bin/async_waits.rs`). [`subscribe`] follows a session live
//! ([`SessionSubscription::next_async`]). These need no runtime: they are
//! plain futures.
//!
//! What reads or folds a whole session (open, repair, replay, search) is CPU
//! and page-cache work, not waiting; with the `tokio` feature the `tokio`
//! submodule runs those on tokio's blocking pool so a runtime thread is
//! never held by them.

use std::sync::Arc;

use serde_json::Value;

use crate::error::Result;
use crate::session::codec::envelope;
use crate::session::codec::envelope::decode_error;
use crate::session::codec::event::{CoreKind, EventKind, Registry, SessionEvent, ToolCall};
use crate::session::handle::Session;
use crate::session::log::LogRef;
use crate::session::tools::durability::{CancelToken, ToolBody, ToolOutcome, ToolRun, ToolScope};
use crate::store::DurableWait;

impl Session {
    /// [`Session::flush`] as a future: every event this handle appended is
    /// durable when it completes. The task holds no thread meanwhile: the
    /// embedded store's flusher wakes it, or another log's
    /// [`crate::backend::EventLog::poll_durable`] (PostgreSQL: the commit
    /// lane that commits the events).
    pub fn flush_async(&self) -> FlushWait {
        self.durability_point().wait_async()
    }
}

/// The future of [`Session::flush_async`] and
/// [`crate::session::DurabilityPoint::wait_async`].
#[must_use = "a future does nothing unless awaited"]
pub enum FlushWait {
    /// Waiting on the embedded store's flusher.
    Embedded(DurableWait),
    /// Waiting on another log until events `0..len` of `session` are
    /// durable.
    Other {
        /// The log.
        log: Arc<dyn crate::backend::EventLog>,
        /// The session.
        session: Arc<str>,
        /// The length to wait for.
        len: u64,
    },
    /// The wait was made when the future was created (or had nothing to
    /// wait for).
    Done(Option<Result<()>>),
}

impl std::future::Future for FlushWait {
    type Output = Result<()>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        match self.get_mut() {
            FlushWait::Embedded(w) => std::pin::Pin::new(w).poll(cx),
            FlushWait::Other { log, session, len } => log.poll_durable(session, *len, cx),
            FlushWait::Done(r) => std::task::Poll::Ready(r.take().unwrap_or(Ok(()))),
        }
    }
}

/// [`crate::session::run_tool`] for async tool bodies, in the same order:
/// record `tool/call` → guard → checkpoint (top level only, awaited without
/// a thread) → body (awaited) → record `tool/result`. The body gets the
/// session for nested tools, as in the blocking wrapper.
///
/// ```
/// # use std::sync::Arc;
/// # use turnstone::session::*;
/// # use turnstone::Store;
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(Store::open(dir.path()).unwrap());
/// # let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let out = run_tool_async(
///     &mut s, ToolScope::model(), "call-1", "add", serde_json::json!({"a": 1, "b": 2}),
///     &CancelToken::new(), |_| Ok(()),
///     async |_session, _scope| ToolBody {
///         content: vec![ContentBlock::text("3")], is_error: false, value: 3,
///     },
/// ).await.unwrap();
/// assert!(matches!(out, ToolOutcome::Ran { value: 3, .. }));
/// # });
/// ```
#[allow(clippy::too_many_arguments)]
pub async fn run_tool_async<T>(
    session: &mut Session,
    scope: ToolScope,
    call_id: &str,
    name: &str,
    input: Value,
    cancel: &CancelToken,
    guard: impl FnOnce(&ToolCall) -> std::result::Result<(), String>,
    body: impl AsyncFnOnce(&mut Session, ToolScope) -> ToolBody<T>,
) -> Result<ToolOutcome<T>> {
    let run = match ToolRun::begin(session, scope, call_id, name, input, guard)? {
        Ok(run) => run,
        Err(refused) => return Ok(refused),
    };
    if run.needs_checkpoint() {
        // The checkpoint before a model-initiated tool body, awaited
        // without a thread.
        session.flush_async().await?;
    }
    if let Some(aborted) = run.dispatch(session, cancel)? {
        return Ok(aborted);
    }
    let out = body(session, run.body_scope()).await;
    run.finish(session, out)
}

/// Follow session `id` live from seq `from`: its events as they become
/// durable, decoded (events of kinds this process does not know come as
/// opaque plugin events, as in [`crate::session::replay()`]), each once and in
/// seq order. Blocking as an [`Iterator`], or
/// [`SessionSubscription::next_async`]. It is the log's
/// [`crate::backend::EventLog::follow`]: on the embedded store
/// [`crate::Store::subscribe`] (it never causes an fdatasync, resumes from
/// any seq, a fork's inherited prefix included, and ends when the store
/// closes), on PostgreSQL LISTEN/NOTIFY (ended when the log closes). Either
/// way it ends after it yields the session's `session/delete` tombstone;
/// subscribing to a deleted session is an error, as loading it is.
pub fn subscribe<'a>(
    log: impl Into<LogRef<'a>>,
    id: &str,
    registry: Arc<Registry>,
    from: u64,
) -> Result<SessionSubscription> {
    let log = log.into();
    crate::session::lifecycle::delete::check_not_deleted(log, id)?;
    let log = log.as_log();
    Ok(SessionSubscription {
        follow: log.follow(id, from)?,
        next: from,
        blobs: log.blobs().map(crate::blobs::BlobDir::reader),
        session: id.to_string(),
        registry,
        failed: false,
    })
}

/// How long a blocking wait on the follower sleeps between looks (the
/// follower itself returns sooner when an event comes).
const FOLLOW_STEP: std::time::Duration = std::time::Duration::from_secs(1);

/// A live, decoded follower of one session ([`subscribe`]).
pub struct SessionSubscription {
    /// The log's follower.
    follow: Box<dyn crate::backend::Follow>,
    /// The seq it yields next.
    next: u64,
    /// The log's blobs, where it keeps them (events holding references
    /// are resolved).
    blobs: Option<crate::blobs::BlobDir>,
    session: String,
    registry: Arc<Registry>,
    /// A decode error or the session's deletion was yielded: the
    /// subscription is over.
    failed: bool,
}

impl std::fmt::Debug for SessionSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSubscription")
            .field("session", &self.session)
            .field("next_seq", &self.next_seq())
            .finish()
    }
}

impl SessionSubscription {
    /// The seq of the next event it yields.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The next durable event without waiting (`Ok(None)`: none yet).
    pub fn try_next(&mut self) -> Result<Option<SessionEvent>> {
        if self.failed {
            return Ok(None);
        }
        match self.follow.next_timeout(std::time::Duration::ZERO) {
            Ok(Some(e)) => self.decode(e).map(Some),
            Ok(None) | Err(crate::Error::Closed) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The next durable event as a future; `None` when the log closes. No
    /// thread waits (the embedded store's flusher, or PostgreSQL's
    /// notifications, wake the task: [`crate::backend::Follow::poll_next`]).
    /// Cancel-safe: an event is not lost when the future is dropped.
    pub async fn next_async(&mut self) -> Option<Result<SessionEvent>> {
        if self.failed {
            return None;
        }
        let follow = &mut self.follow;
        let raw = match std::future::poll_fn(|cx| follow.poll_next(cx)).await {
            Ok(e) => Ok(e),
            Err(crate::Error::Closed) => return None,
            Err(e) => Err(e),
        };
        Some(raw.and_then(|e| self.decode(e)))
    }

    fn decode(&mut self, e: crate::backend::LogEvent) -> Result<SessionEvent> {
        let payload = match &self.blobs {
            Some(blobs) => match crate::session::codec::blob_refs::resolve(blobs, &e.payload) {
                Ok(std::borrow::Cow::Borrowed(_)) => e.payload,
                Ok(std::borrow::Cow::Owned(p)) => p,
                Err(err) => {
                    self.failed = true;
                    return Err(err);
                }
            },
            None => e.payload,
        };
        self.next = e.seq + 1;
        let ev = envelope::decode_view(e.seq, e.kind, e.flags, &payload, &self.registry).map_err(
            |err| {
                self.failed = true;
                decode_error(&self.session, e.seq, err)
            },
        )?;
        if ev.kind == EventKind::Core(CoreKind::SessionDelete) {
            // The tombstone is the last event a follower sees.
            self.failed = true;
        }
        Ok(ev)
    }
}

impl Iterator for SessionSubscription {
    type Item = Result<SessionEvent>;

    fn next(&mut self) -> Option<Result<SessionEvent>> {
        if self.failed {
            return None;
        }
        loop {
            match self.follow.next_timeout(FOLLOW_STEP) {
                Ok(Some(e)) => return Some(self.decode(e)),
                Ok(None) => continue,
                Err(crate::Error::Closed) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The parts of the session layer that read or fold whole sessions, run on
/// tokio's blocking pool (feature `tokio`): open, repair, replay, search.
#[cfg(feature = "tokio")]
pub mod tokio {
    use super::*;
    use crate::error::Error;
    use crate::session::handle::repair::RepairReport;
    use crate::session::log::LogHandle;

    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        ::tokio::task::spawn_blocking(f).await.map_err(|e| {
            Error::Refused(format!("a blocking task of the session layer failed: {e}"))
        })?
    }

    /// [`Session::open`] (restore and claim) off the runtime's threads.
    pub async fn open(
        log: impl Into<LogHandle>,
        id: &str,
        registry: Arc<Registry>,
    ) -> Result<Session> {
        let (log, id) = (log.into(), id.to_string());
        blocking(move || Session::open(log, &id, registry)).await
    }

    /// [`Session::open_or_create`] off the runtime's threads.
    pub async fn open_or_create(
        log: impl Into<LogHandle>,
        id: &str,
        registry: Arc<Registry>,
    ) -> Result<Session> {
        let (log, id) = (log.into(), id.to_string());
        blocking(move || Session::open_or_create(log, &id, registry)).await
    }

    /// [`Session::open_read_only`] off the runtime's threads.
    pub async fn open_read_only(
        log: impl Into<LogHandle>,
        id: &str,
        registry: Arc<Registry>,
    ) -> Result<Session> {
        let (log, id) = (log.into(), id.to_string());
        blocking(move || Session::open_read_only(log, &id, registry)).await
    }

    /// Open session `id` (restore and claim) and repair it
    /// ([`crate::session::handle::repair`], no plugin repairs) off the runtime's
    /// threads, and wait until the repair is durable: what a harness does
    /// when it resumes a session after a crash.
    pub async fn open_repaired(
        log: impl Into<LogHandle>,
        id: &str,
        registry: Arc<Registry>,
    ) -> Result<(Session, RepairReport)> {
        let (log, id) = (log.into(), id.to_string());
        blocking(move || {
            let mut s = Session::open(log, &id, registry)?;
            let report = crate::session::repair(&mut s, &[])?;
            s.flush()?;
            Ok((s, report))
        })
        .await
    }

    /// The durable events `from..` of session `id` ([`crate::session::views::replay`]),
    /// collected off the runtime's threads; the first error ends it.
    pub async fn replay(
        log: impl Into<LogHandle>,
        id: &str,
        registry: Arc<Registry>,
        from: u64,
    ) -> Result<Vec<SessionEvent>> {
        let (log, id) = (log.into(), id.to_string());
        blocking(move || crate::session::replay(&log, &id, registry, from)?.collect()).await
    }

    /// Search across sessions ([`crate::session::views::query::search`]) off the
    /// runtime's threads: on the embedded store (an `Arc<Store>`) its
    /// index brought up to date first, on another log (an
    /// `Arc<PgEventLog>`) that log's own search.
    pub async fn search(
        log: impl Into<LogHandle>,
        registry: Arc<Registry>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<crate::backend::Hit>> {
        let log = log.into();
        let query = query.to_string();
        blocking(move || crate::session::views::query::search(&log, &registry, &query, limit)).await
    }
}
