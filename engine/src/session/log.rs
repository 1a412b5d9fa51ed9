//! Where a session's events live (issue 18, docs/BACKENDS.md): the
//! embedded [`Store`] or any other [`EventLog`] (PostgreSQL).
//!
//! The session layer reads, appends, waits and claims through this one
//! seam. The embedded store keeps its own paths (zero-copy reads, large
//! blocks out of line in blob files, state snapshots, the retention
//! policy); any other log gets the same fold, the same rules and the same
//! events through the trait's methods, and does without those caches.

use std::borrow::Cow;
use std::ops::{ControlFlow, Range};
use std::sync::Arc;

use crate::backend::{Claim, EventLog};
use crate::error::{Error, Result};
use crate::session::codec::envelope::EncodedEvent;
use crate::store::Store;
use crate::types::LogPos;

/// A log the session layer runs on: the embedded store, or any other
/// [`EventLog`]. Every `Session` constructor takes `impl Into<LogHandle>`,
/// so an `Arc<Store>` and an `Arc<PgEventLog>` are both accepted. The
/// session layer reaches the log only through the trait; which log it is
/// matters only to [`LogHandle::store`], for callers that want the
/// embedded store's own API.
#[derive(Clone)]
pub struct LogHandle {
    log: Arc<dyn EventLog>,
    /// The same log, when it is the embedded store.
    store: Option<Arc<Store>>,
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogHandle({})", self.log.backend())
    }
}

impl<T: EventLog + 'static> From<Arc<T>> for LogHandle {
    fn from(log: Arc<T>) -> LogHandle {
        let dynamic: Arc<dyn EventLog> = log;
        LogHandle::from(dynamic)
    }
}

impl From<Arc<dyn EventLog>> for LogHandle {
    fn from(log: Arc<dyn EventLog>) -> LogHandle {
        LogHandle {
            store: log.clone().embedded(),
            log,
        }
    }
}

impl From<&LogHandle> for LogHandle {
    fn from(log: &LogHandle) -> LogHandle {
        log.clone()
    }
}

impl LogHandle {
    /// The embedded store, if this is one.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// The log behind the trait.
    pub fn as_log(&self) -> &dyn EventLog {
        &*self.log
    }

    /// The log behind the trait, as a shared handle.
    pub fn as_log_arc(&self) -> Arc<dyn EventLog> {
        self.log.clone()
    }

    /// A borrowed view, for the functions that take `impl Into<LogRef>`.
    pub fn as_ref(&self) -> LogRef<'_> {
        LogRef(&*self.log)
    }
}

/// A borrowed [`LogHandle`]: what the session layer's free functions
/// (replay, fork, delete) read through.
#[derive(Clone, Copy)]
pub struct LogRef<'a>(&'a dyn EventLog);

impl<'a> From<&'a Store> for LogRef<'a> {
    fn from(s: &'a Store) -> Self {
        LogRef(s)
    }
}

impl<'a> From<&'a Arc<Store>> for LogRef<'a> {
    fn from(s: &'a Arc<Store>) -> Self {
        LogRef(&**s)
    }
}

impl<'a> From<&'a dyn EventLog> for LogRef<'a> {
    fn from(l: &'a dyn EventLog) -> Self {
        LogRef(l)
    }
}

impl<'a> From<&'a Arc<dyn EventLog>> for LogRef<'a> {
    fn from(l: &'a Arc<dyn EventLog>) -> Self {
        LogRef(&**l)
    }
}

impl<'a> From<&'a LogHandle> for LogRef<'a> {
    fn from(l: &'a LogHandle) -> Self {
        l.as_ref()
    }
}

/// One event as the session layer reads it: blob references already
/// resolved (embedded store), or the error of resolving them.
pub(crate) struct Raw<'p> {
    pub seq: u64,
    pub kind: u16,
    pub flags: u16,
    pub payload: Result<Cow<'p, [u8]>>,
}

impl<'a> LogRef<'a> {
    /// The log behind the trait.
    pub fn as_log(self) -> &'a dyn EventLog {
        self.0
    }

    /// Events appended so far, durable or not; `None`: no such session.
    pub(crate) fn appended_len(self, id: &str) -> Result<Option<u64>> {
        self.as_log().appended_len(id)
    }

    /// Durable events; `None`: no such session.
    pub(crate) fn durable_len(self, id: &str) -> Result<Option<u64>> {
        self.as_log().durable_len(id)
    }

    /// Walk events `range` of `id` in seq order (appended ones included:
    /// a log that reads only durable events makes the caller's own appends
    /// durable first), blob references resolved where the log keeps
    /// blobs. Returns the number visited.
    pub(crate) fn visit(
        self,
        id: &str,
        range: Range<u64>,
        mut f: impl FnMut(Raw<'_>) -> ControlFlow<()>,
    ) -> Result<u64> {
        let log = self.as_log();
        let blobs = log.blobs();
        log.visit(id, range, &mut |e| {
            f(Raw {
                seq: e.seq,
                kind: e.kind,
                flags: e.flags,
                payload: match blobs {
                    Some(blobs) => crate::session::codec::blob_refs::resolve(blobs, e.payload),
                    None => Ok(Cow::Borrowed(e.payload)),
                },
            })
        })
    }

    /// Event `seq` of `id` as the log stores it: kind, flags and payload
    /// (blob references unresolved).
    pub(crate) fn stored_event(self, id: &str, seq: u64) -> Result<EncodedEvent> {
        let e = self.as_log().read_event(id, seq)?;
        Ok(EncodedEvent {
            kind: e.kind,
            flags: e.flags,
            payload: e.payload,
        })
    }

    /// Every session with its durable length and `(parent, fork seq)`,
    /// in creation order ([`EventLog::listing`]).
    pub(crate) fn listing(self) -> Result<Vec<crate::backend::Listing>> {
        self.as_log().listing()
    }
}

pub(crate) use crate::backend::AppendEnd;

impl LogHandle {
    /// Claim `id` for writing ([`EventLog::claim`]).
    pub(crate) fn claim(&self, id: &str) -> Result<Claim> {
        self.as_log().claim(id)
    }

    /// Release a claim.
    pub(crate) fn release(&self, id: &str, claim: u64) {
        self.as_log().release(id, claim)
    }

    /// The largest event group (padded frames, the define included) one
    /// append can take ([`EventLog::group_bytes_max`]).
    pub(crate) fn group_bytes_max(&self) -> usize {
        self.as_log().group_bytes_max()
    }

    /// Append `group` to `id` as one atomic group. Large blocks go out of
    /// line first where the log keeps blobs (FORMAT.md §15; each blob
    /// durable before its event is appended); a log that indexes text gets
    /// each event's searchable text (`texts` is asked only then). Returns
    /// the seqs and where the group ended.
    ///
    /// The session must hold `len` events when the group is appended (the
    /// handle's own count): otherwise another handle appended to it, and
    /// this one's state is unknown, so nothing is appended
    /// ([`Error::Refused`]).
    ///
    /// `sid` is the session's compact id in the log when the caller knows
    /// it (it is set after the append): the log then skips the name
    /// lookup.
    pub(crate) fn append_group(
        &self,
        id: &str,
        sid: &mut Option<crate::types::SessionId>,
        len: u64,
        items: &[EncodedEvent],
        texts: impl Fn(usize) -> Option<String>,
    ) -> Result<(Option<u64>, AppendEnd)> {
        let log = self.as_log();
        // The blobs stay pinned until the group is appended (an online
        // collection keeps pinned blobs).
        let mut pins = Vec::new();
        let blobs = log.blobs();
        let mut outline = |payload: &[u8]| match blobs {
            Some(blobs) => crate::session::codec::blob_refs::outline(blobs, payload, &mut pins),
            None => Ok(None),
        };
        let indexes_text = log.indexes_text();
        let text = |i: usize| if indexes_text { texts(i) } else { None };
        let appended = if let [e] = items {
            // One event (nearly every append): nothing to collect.
            let o = outline(&e.payload)?;
            let t = text(0);
            let payload = o.as_deref().unwrap_or(e.payload.as_slice());
            log.append_group_at_len(id, sid, len, &[(e.kind, e.flags, payload, t.as_deref())])?
        } else {
            let mut outlined = Vec::with_capacity(items.len());
            for e in items {
                outlined.push(outline(&e.payload)?);
            }
            let texts: Vec<Option<String>> = (0..items.len()).map(text).collect();
            let group: Vec<(u16, u16, &[u8], Option<&str>)> = items
                .iter()
                .zip(&outlined)
                .zip(&texts)
                .map(|((e, o), t)| {
                    let payload = o.as_deref().unwrap_or(e.payload.as_slice());
                    (e.kind, e.flags, payload, t.as_deref())
                })
                .collect();
            log.append_group_at_len(id, sid, len, &group)?
        };
        drop(pins);
        appended.map_err(|_| {
            Error::Refused(format!(
                "session {id:?} was appended to by another handle; reopen it"
            ))
        })
    }

    /// Wait until what this handle appended (up to `end`) is durable.
    pub(crate) fn wait(&self, id: &str, end: AppendEnd) -> Result<()> {
        self.as_log().wait_appended(id, end)
    }
}

/// A durability wait that outlives the lock of the session it came from
/// ([`crate::session::Session::durability_point`]): wait on it with no
/// lock held, so that other appenders share the same flush.
#[derive(Debug, Clone)]
pub struct DurabilityPoint {
    pub(crate) log: LogHandle,
    pub(crate) id: Arc<str>,
    pub(crate) end: AppendEnd,
}

impl DurabilityPoint {
    /// Return once every event appended before this point was taken is
    /// durable.
    pub fn wait(&self) -> Result<()> {
        self.log.wait(&self.id, self.end)
    }

    /// The embedded store's log position of the point, if there is one
    /// (for an async wait on [`Store::wait_durable_async`]).
    pub fn log_pos(&self) -> Option<(Arc<Store>, LogPos)> {
        match (self.log.store(), self.end) {
            (Some(s), AppendEnd::At(p)) => Some((s.clone(), p)),
            _ => None,
        }
    }

    /// The wait as a future that holds no thread: the log's own wait
    /// ([`EventLog::durable_wait`], the embedded store's flusher wakes it)
    /// or [`EventLog::poll_durable`].
    pub fn wait_async(&self) -> crate::session::FlushWait {
        if self.end == AppendEnd::Nothing {
            return crate::session::FlushWait::Done(Some(Ok(())));
        }
        if let Some(w) = self.log.as_log().durable_wait(self.end) {
            return crate::session::FlushWait::Embedded(w);
        }
        match self.end {
            AppendEnd::Queued(len) => crate::session::FlushWait::Other {
                log: self.log.as_log_arc(),
                session: self.id.clone(),
                len,
            },
            _ => crate::session::FlushWait::Done(Some(self.wait())),
        }
    }
}
