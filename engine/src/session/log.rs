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

/// Events read per call from a non-embedded log.
const LOG_CHUNK: u64 = 4096;

/// A log the session layer runs on: the embedded store, or another
/// [`EventLog`]. Every `Session` constructor takes `impl Into<LogHandle>`,
/// so an `Arc<Store>` and an `Arc<PgEventLog>` are both accepted.
#[derive(Clone)]
pub enum LogHandle {
    /// The embedded store.
    Embedded(Arc<Store>),
    /// Any other log, through the trait.
    Other(Arc<dyn EventLog>),
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogHandle({})", self.as_log().backend())
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
        match log.clone().embedded() {
            Some(store) => LogHandle::Embedded(store),
            None => LogHandle::Other(log),
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
        match self {
            LogHandle::Embedded(s) => Some(s),
            LogHandle::Other(_) => None,
        }
    }

    /// The log behind the trait.
    pub fn as_log(&self) -> &dyn EventLog {
        match self {
            LogHandle::Embedded(s) => &**s,
            LogHandle::Other(l) => &**l,
        }
    }

    /// The log behind the trait, as a shared handle.
    pub fn as_log_arc(&self) -> Arc<dyn EventLog> {
        match self {
            LogHandle::Embedded(s) => s.clone(),
            LogHandle::Other(l) => l.clone(),
        }
    }

    /// A borrowed view, for the functions that take `impl Into<LogRef>`.
    pub fn as_ref(&self) -> LogRef<'_> {
        match self {
            LogHandle::Embedded(s) => LogRef::Embedded(s),
            LogHandle::Other(l) => LogRef::Other(&**l),
        }
    }
}

/// A borrowed [`LogHandle`]: what the session layer's free functions
/// (replay, fork, delete) read through.
#[derive(Clone, Copy)]
pub enum LogRef<'a> {
    /// The embedded store.
    Embedded(&'a Store),
    /// Any other log.
    Other(&'a dyn EventLog),
}

impl<'a> From<&'a Store> for LogRef<'a> {
    fn from(s: &'a Store) -> Self {
        LogRef::Embedded(s)
    }
}

impl<'a> From<&'a Arc<Store>> for LogRef<'a> {
    fn from(s: &'a Arc<Store>) -> Self {
        LogRef::Embedded(s)
    }
}

impl<'a> From<&'a dyn EventLog> for LogRef<'a> {
    fn from(l: &'a dyn EventLog) -> Self {
        LogRef::Other(l)
    }
}

impl<'a> From<&'a Arc<dyn EventLog>> for LogRef<'a> {
    fn from(l: &'a Arc<dyn EventLog>) -> Self {
        LogRef::Other(&**l)
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
    /// The embedded store, if this is one.
    pub fn store(self) -> Option<&'a Store> {
        match self {
            LogRef::Embedded(s) => Some(s),
            LogRef::Other(_) => None,
        }
    }

    pub(crate) fn as_log(self) -> &'a dyn EventLog {
        match self {
            LogRef::Embedded(s) => s,
            LogRef::Other(l) => l,
        }
    }

    /// Events appended so far, durable or not; `None`: no such session.
    pub(crate) fn appended_len(self, id: &str) -> Result<Option<u64>> {
        match self {
            LogRef::Embedded(s) => Ok(s.session_len(id)),
            LogRef::Other(l) => l.appended_len(id),
        }
    }

    /// Durable events; `None`: no such session.
    pub(crate) fn durable_len(self, id: &str) -> Result<Option<u64>> {
        match self {
            LogRef::Embedded(s) => Ok(s.session_meta(id).map(|m| m.durable_len)),
            LogRef::Other(l) => l.durable_len(id),
        }
    }

    /// Walk events `range` of `id` in seq order (appended ones included:
    /// on a non-embedded log this makes the caller's own appends durable
    /// first). Returns the number visited.
    pub(crate) fn visit(
        self,
        id: &str,
        range: Range<u64>,
        mut f: impl FnMut(Raw<'_>) -> ControlFlow<()>,
    ) -> Result<u64> {
        match self {
            LogRef::Embedded(s) => {
                let blobs = s.blobs();
                s.visit_range(id, range, |e| {
                    f(Raw {
                        seq: e.seq.0,
                        kind: e.kind,
                        flags: e.flags,
                        payload: crate::session::codec::blob_refs::resolve(blobs, e.payload),
                    })
                })
            }
            LogRef::Other(l) => {
                if range.start >= range.end {
                    return Ok(0);
                }
                let durable = l
                    .durable_len(id)?
                    .ok_or_else(|| Error::UnknownSession(id.to_string()))?;
                if range.end > durable {
                    l.sync_session(id)?;
                }
                let mut n = 0;
                let mut at = range.start;
                while at < range.end {
                    let to = (at + LOG_CHUNK).min(range.end);
                    for e in l.read_range(id, at..to)? {
                        n += 1;
                        let step = f(Raw {
                            seq: e.seq,
                            kind: e.kind,
                            flags: e.flags,
                            payload: Ok(Cow::Borrowed(&e.payload)),
                        });
                        if step.is_break() {
                            return Ok(n);
                        }
                    }
                    at = to;
                }
                Ok(n)
            }
        }
    }

    /// Event `seq` of `id` as the log stores it: kind, flags and payload
    /// (blob references unresolved).
    pub(crate) fn stored_event(self, id: &str, seq: u64) -> Result<EncodedEvent> {
        match self {
            LogRef::Embedded(store) => {
                let e = store.read(id, seq)?;
                Ok(EncodedEvent {
                    kind: e.kind,
                    flags: e.flags,
                    payload: e.payload,
                })
            }
            LogRef::Other(l) => {
                let e =
                    l.read_range(id, seq..seq + 1)?
                        .pop()
                        .ok_or_else(|| Error::SeqOutOfRange {
                            session: id.to_string(),
                            seq,
                            len: seq,
                        })?;
                Ok(EncodedEvent {
                    kind: e.kind,
                    flags: e.flags,
                    payload: e.payload,
                })
            }
        }
    }

    /// The names of the sessions with their `(parent, fork seq)`, in
    /// creation order.
    pub(crate) fn sessions(self) -> Result<Vec<Listed>> {
        match self {
            LogRef::Embedded(store) => Ok(store
                .sessions()
                .into_iter()
                .map(|i| (i.name, i.parent))
                .collect()),
            LogRef::Other(l) => l
                .sessions()?
                .into_iter()
                .map(|n| {
                    let parent = l.parent(&n)?;
                    Ok((n, parent))
                })
                .collect(),
        }
    }
}

/// A session's name and its `(parent, fork seq)`.
pub(crate) type Listed = (String, Option<(String, u64)>);

/// Where an append ended, for the durability wait that covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum AppendEnd {
    /// Nothing appended by this handle yet.
    #[default]
    Nothing,
    /// The embedded store's log position.
    At(LogPos),
    /// Appended to a non-embedded log, ending before this seq (its
    /// `sync_session` covers it; `poll_durable` waits for exactly it).
    Queued(u64),
}

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
    /// append can take: one commit batch of the embedded store.
    pub(crate) fn group_bytes_max(&self) -> usize {
        match self {
            LogHandle::Embedded(store) => store.group_bytes_max(),
            LogHandle::Other(_) => crate::frame::BATCH_BODY_BYTES_MAX,
        }
    }

    /// Append `group` to `id` as one atomic group. Large blocks go out of
    /// line first on the embedded store (FORMAT.md §15; each blob durable
    /// before its event is appended); another log stores them inline and
    /// indexes each event's searchable text. Returns the seqs and where
    /// the group ended.
    ///
    /// The session must hold `len` events when the group is appended (the
    /// handle's own count): otherwise another handle appended to it, and
    /// this one's state is unknown, so nothing is appended
    /// ([`Error::Refused`]). The embedded store checks this under the lock
    /// its append takes; another log checks it just before.
    ///
    /// `sid` is the session's id in the embedded store when the caller
    /// knows it (it is set after the append): the store then skips the
    /// name lookup.
    pub(crate) fn append_group(
        &self,
        id: &str,
        sid: &mut Option<crate::types::SessionId>,
        len: u64,
        items: &[EncodedEvent],
        texts: impl Fn(usize) -> Option<String>,
    ) -> Result<(Option<u64>, AppendEnd)> {
        let other_handle = || {
            Error::Refused(format!(
                "session {id:?} was appended to by another handle; reopen it"
            ))
        };
        match self {
            LogHandle::Embedded(store) => {
                // The blobs stay pinned until the group is appended (an
                // online collection keeps pinned blobs).
                let mut pins = Vec::new();
                let mut first = None;
                let mut end = AppendEnd::Nothing;
                let hint = *sid;
                let mut each = |a: crate::types::Appended| {
                    first.get_or_insert(a.seq.0);
                    end = AppendEnd::At(a.end);
                    *sid = Some(a.session);
                };
                let appended = if let [e] = items {
                    // One event (nearly every append): nothing to collect.
                    let o = crate::session::codec::blob_refs::outline(
                        store.blobs(),
                        &e.payload,
                        &mut pins,
                    )?;
                    let group = [(
                        e.kind,
                        e.flags,
                        o.as_deref().unwrap_or(e.payload.as_slice()),
                    )];
                    store.append_group_at_len(id, hint, len, &group, &mut each)?
                } else {
                    let mut outlined = Vec::with_capacity(items.len());
                    for e in items {
                        outlined.push(crate::session::codec::blob_refs::outline(
                            store.blobs(),
                            &e.payload,
                            &mut pins,
                        )?);
                    }
                    let group: Vec<(u16, u16, &[u8])> = items
                        .iter()
                        .zip(&outlined)
                        .map(|(e, o)| {
                            (
                                e.kind,
                                e.flags,
                                o.as_deref().unwrap_or(e.payload.as_slice()),
                            )
                        })
                        .collect();
                    store.append_group_at_len(id, hint, len, &group, &mut each)?
                };
                appended.map_err(|_| other_handle())?;
                drop(pins);
                Ok((first, end))
            }
            LogHandle::Other(log) => {
                if log.appended_len(id)?.unwrap_or(0) != len {
                    return Err(other_handle());
                }
                let texts: Vec<Option<String>> = (0..items.len()).map(texts).collect();
                let group: Vec<(u16, u16, &[u8], Option<&str>)> = items
                    .iter()
                    .zip(&texts)
                    .map(|(e, t)| (e.kind, e.flags, e.payload.as_slice(), t.as_deref()))
                    .collect();
                let first = log.append_group_indexed(id, &group)?;
                let end = first + items.len() as u64;
                Ok(((!items.is_empty()).then_some(first), AppendEnd::Queued(end)))
            }
        }
    }

    /// Wait until what this handle appended (up to `end`) is durable.
    pub(crate) fn wait(&self, id: &str, end: AppendEnd) -> Result<()> {
        match (self, end) {
            (_, AppendEnd::Nothing) => Ok(()),
            (LogHandle::Embedded(store), AppendEnd::At(pos)) => store.wait_durable(pos),
            (LogHandle::Embedded(store), AppendEnd::Queued(_)) => store.sync_session(id),
            (LogHandle::Other(log), _) => log.sync_session(id),
        }
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
        match (&self.log, self.end) {
            (LogHandle::Embedded(s), AppendEnd::At(p)) => Some((s.clone(), p)),
            _ => None,
        }
    }

    /// The wait as a future that holds no thread: the embedded store's
    /// flusher or another log's [`EventLog::poll_durable`] wakes it.
    pub fn wait_async(&self) -> crate::session::FlushWait {
        match (&self.log, self.end) {
            (_, AppendEnd::Nothing) => crate::session::FlushWait::Done(Some(Ok(()))),
            (LogHandle::Embedded(s), AppendEnd::At(p)) => {
                crate::session::FlushWait::Embedded(s.wait_durable_async(p))
            }
            (LogHandle::Other(log), AppendEnd::Queued(len)) => crate::session::FlushWait::Other {
                log: log.clone(),
                session: self.id.clone(),
                len,
            },
            _ => crate::session::FlushWait::Done(Some(self.wait())),
        }
    }
}
