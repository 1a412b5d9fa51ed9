//! The event log as an interface (issue 18, docs/BACKENDS.md): what the
//! session layer needs from wherever a session's events live, implemented
//! here by the embedded [`Store`] and by `turnstone_pg::PgEventLog` on
//! PostgreSQL. Both pass one conformance test body (`pg/tests/pg.rs`).
//!
//! The session layer runs on it: a [`crate::session::Session`] opened on a
//! [`crate::session::LogHandle`] of any `EventLog` folds, appends, flushes,
//! repairs and forks through these methods alone (an embedded [`Store`]
//! handed over as a log is recognised by [`EventLog::embedded`] and keeps
//! its own fast paths: zero-copy reads, blobs out of line, state
//! snapshots). docs/BACKENDS.md says where each guarantee comes from.

use std::ops::{ControlFlow, Range};

use crate::error::{Error, Result};
use crate::store::blobs::BlobDir;
use crate::store::{DurableWait, Store};
use crate::types::{LogPos, SessionId};

mod embedded;

/// Events read per call by the default [`EventLog::visit`].
const VISIT_CHUNK: u64 = 4096;

/// Where an append ended, for the durability wait that covers it
/// ([`EventLog::append_group_at_len`], [`EventLog::wait_appended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AppendEnd {
    /// Nothing appended yet.
    #[default]
    Nothing,
    /// The embedded store's log position: durable once the log is durable
    /// up to it.
    At(LogPos),
    /// The session's events before this seq: durable after
    /// [`EventLog::sync_session`] (or [`EventLog::poll_durable`] for it).
    Queued(u64),
}

/// One event as [`EventLog::visit`] hands it over: the payload borrowed
/// where the log can (the embedded store's mapped segments), blob
/// references unresolved.
#[derive(Debug, Clone, Copy)]
pub struct Visited<'p> {
    /// The event's seq in its session.
    pub seq: u64,
    /// The event kind.
    pub kind: u16,
    /// Event flags (bit 0: ignorable).
    pub flags: u16,
    /// The payload bytes as the log stores them.
    pub payload: &'p [u8],
}

/// One durable event, as every backend returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEvent {
    /// The event's seq in its session.
    pub seq: u64,
    /// The event kind.
    pub kind: u16,
    /// Event flags (bit 0: ignorable).
    pub flags: u16,
    /// The event's payload bytes.
    pub payload: Vec<u8>,
}

/// A log of sessions: dense seqs from 0, atomic groups, per-session
/// durability, forks by reference, reads of durable events.
pub trait EventLog: Send + Sync {
    /// `"embedded"`, `"postgres"`: for messages.
    fn backend(&self) -> &'static str;

    /// Create an empty session; [`Error::SessionExists`] if the name is
    /// taken (a deleted session keeps its name).
    fn create_session(&self, session: &str) -> Result<()>;

    /// Create `child` holding `parent`'s events `0..upto` by reference;
    /// the child's own events start at `upto`. `upto` may not pass the
    /// parent's durable end ([`Error::SeqOutOfRange`]).
    fn fork(&self, parent: &str, upto: u64, child: &str) -> Result<()>;

    /// Append events to `session` (created on first use) as one group:
    /// after a crash all or none of them exist. Returns the first one's
    /// seq; durable after [`EventLog::sync_session`].
    fn append_group(&self, session: &str, events: &[(u16, u16, &[u8])]) -> Result<u64>;

    /// Return once everything appended to `session` is durable.
    fn sync_session(&self, session: &str) -> Result<()>;

    /// [`EventLog::sync_session`] for async callers, up to a point: `Ready`
    /// once events `0..len` of `session` that this handle appended are
    /// durable (or the wait failed, with its error); otherwise `Pending`,
    /// having arranged for `cx`'s waker to be woken when that may have
    /// changed. The default makes the whole wait in this call, blocking
    /// the calling thread, and returns `Ready`.
    fn poll_durable(
        &self,
        session: &str,
        len: u64,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        let _ = (len, cx);
        std::task::Poll::Ready(self.sync_session(session))
    }

    /// Events `0..n` of `session` are durable (inherited ones included);
    /// `None`: no such session.
    fn durable_len(&self, session: &str) -> Result<Option<u64>>;

    /// `(parent, fork seq)` of a fork.
    fn parent(&self, session: &str) -> Result<Option<(String, u64)>>;

    /// The names of the sessions, oldest first.
    fn sessions(&self) -> Result<Vec<String>>;

    /// Durable events `range` of `session`, inherited ones included.
    /// [`Error::SeqOutOfRange`] past the durable end,
    /// [`Error::UnknownSession`] for a name the log does not have.
    fn read_range(&self, session: &str, range: Range<u64>) -> Result<Vec<LogEvent>>;

    /// Events appended to `session` so far, durable or not (what this
    /// process queued included); `None`: no such session.
    fn appended_len(&self, session: &str) -> Result<Option<u64>> {
        self.durable_len(session)
    }

    /// Walk events `range` of `session` in seq order, this handle's own
    /// appends included, until `f` breaks; returns the number visited. The
    /// default makes the range durable first where it reaches past the
    /// durable end ([`EventLog::sync_session`]), then reads it in chunks
    /// with [`EventLog::read_range`]; the embedded store reads its mapped
    /// segments in place.
    fn visit(
        &self,
        session: &str,
        range: Range<u64>,
        f: &mut dyn FnMut(Visited<'_>) -> ControlFlow<()>,
    ) -> Result<u64> {
        if range.start >= range.end {
            return Ok(0);
        }
        let durable = self
            .durable_len(session)?
            .ok_or_else(|| Error::UnknownSession(session.to_string()))?;
        if range.end > durable {
            self.sync_session(session)?;
        }
        let mut n = 0;
        let mut at = range.start;
        while at < range.end {
            let to = (at + VISIT_CHUNK).min(range.end);
            for e in self.read_range(session, at..to)? {
                n += 1;
                let step = f(Visited {
                    seq: e.seq,
                    kind: e.kind,
                    flags: e.flags,
                    payload: &e.payload,
                });
                if step.is_break() {
                    return Ok(n);
                }
            }
            at = to;
        }
        Ok(n)
    }

    /// Event `seq` of `session`, as stored ([`Error::SeqOutOfRange`] past
    /// the end). The default reads a range of one.
    fn read_event(&self, session: &str, seq: u64) -> Result<LogEvent> {
        self.read_range(session, seq..seq + 1)?
            .pop()
            .ok_or_else(|| Error::SeqOutOfRange {
                session: session.to_string(),
                seq,
                len: seq,
            })
    }

    /// The largest event group (padded frames, a define included) one
    /// append can take. The default is one commit batch's body limit.
    fn group_bytes_max(&self) -> usize {
        crate::frame::BATCH_BODY_BYTES_MAX
    }

    /// Whether the log indexes the searchable text given with
    /// [`EventLog::append_group_indexed`] (the session layer computes it
    /// only then). The default does not.
    fn indexes_text(&self) -> bool {
        false
    }

    /// Append `events` (kind, flags, payload, searchable text) to
    /// `session` as one group, if it holds exactly `len` events now:
    /// `Ok(Err(actual))` otherwise, and nothing is appended. Returns the
    /// first event's seq and where the group ended. `hint` caches the
    /// session's compact id between calls on a log that has one (the
    /// embedded store checks it under the lock its append takes; the
    /// default checks the length just before appending).
    #[allow(clippy::type_complexity)]
    fn append_group_at_len(
        &self,
        session: &str,
        hint: &mut Option<SessionId>,
        len: u64,
        events: &[(u16, u16, &[u8], Option<&str>)],
    ) -> Result<std::result::Result<(Option<u64>, AppendEnd), u64>> {
        let _ = hint;
        let actual = self.appended_len(session)?.unwrap_or(0);
        if actual != len {
            return Ok(Err(actual));
        }
        let first = self.append_group_indexed(session, events)?;
        let end = first + events.len() as u64;
        Ok(Ok((
            (!events.is_empty()).then_some(first),
            AppendEnd::Queued(end),
        )))
    }

    /// Return once what ended at `end` in `session` is durable. The
    /// default waits for the whole session ([`EventLog::sync_session`]).
    fn wait_appended(&self, session: &str, end: AppendEnd) -> Result<()> {
        match end {
            AppendEnd::Nothing => Ok(()),
            _ => self.sync_session(session),
        }
    }

    /// A wait for `end` that holds no thread, where the log has one of
    /// its own (the embedded store's flusher wakes it); `None`: wait with
    /// [`EventLog::poll_durable`].
    fn durable_wait(&self, end: AppendEnd) -> Option<DurableWait> {
        let _ = end;
        None
    }

    /// A log position known to be durable, read without a lock (at most a
    /// flush behind), on a log that has positions; `None` otherwise.
    fn durable_hint(&self) -> Option<LogPos> {
        None
    }

    /// Whether this handle of the log was opened read-only: it takes no
    /// appends, and the session layer writes none of its derived files
    /// through it. The default is writable.
    fn is_read_only(&self) -> bool {
        false
    }

    /// The log's identity, where it has one (the embedded store's id,
    /// FORMAT.md §2): the session layer's derived files carry it, so that
    /// one built for another log is not taken for this one's. The default
    /// is all zeros.
    fn log_id(&self) -> [u8; 16] {
        [0; 16]
    }

    /// The identity a snapshot of `session` carries in its header
    /// (FORMAT.md §12): the log's id and the position of the session's
    /// define, which together tell this incarnation of the name from any
    /// earlier one; `None`: no such session. The default is all zeros (a
    /// log that never reuses a session name).
    fn incarnation(&self, session: &str) -> Result<Option<([u8; 16], LogPos)>> {
        Ok(self
            .appended_len(session)?
            .map(|_| (self.log_id(), LogPos(0))))
    }

    /// The directory this log keeps its own files in, and the file layer
    /// it reads and writes them through, for a log that has one (the
    /// embedded store): the session layer keeps its derived files there
    /// (snapshots, FORMAT.md §12 and §17; the retention policy, §18)
    /// instead of in [`EventLog::put_snapshot`]. The default has none.
    fn files(&self) -> Option<(&std::path::Path, &std::sync::Arc<dyn crate::vfs::Vfs>)> {
        None
    }

    /// The blob files large blocks are kept in out of line (FORMAT.md
    /// §15), for a log whose payloads may refer to them: the session layer
    /// then writes large blocks there before their events and resolves the
    /// references it reads. The default has none (blocks stay inline).
    fn blobs(&self) -> Option<&BlobDir> {
        None
    }

    /// Take `session` for writing: until [`EventLog::release`], this
    /// handle is its only writer. Refused with [`Error::SessionLive`]
    /// (embedded: another handle of this process holds it) or
    /// [`Error::Fenced`] (PostgreSQL: another owner's lease has not
    /// expired). Returns a claim number for `release`, and whether the
    /// claim took the session over from another writer that did not
    /// release it (where a session layer repairs).
    fn claim(&self, session: &str) -> Result<Claim>;

    /// Give up a claim (a claim already lost is ignored).
    fn release(&self, session: &str, claim: u64);

    /// Whether [`EventLog::claim`] takes a name no session has yet (the
    /// embedded store's claims are names): a session created from a
    /// history is then claimed before it is written, so no other writer
    /// can create it meanwhile. The default says no: the claim is taken
    /// once the session exists.
    fn claims_names(&self) -> bool {
        false
    }

    /// Whether a writer holds `session` now ([`EventLog::claim`]), where
    /// the log can tell without taking it (the embedded store's claims are
    /// in memory); the default says no, and [`EventLog::claim`] is then
    /// what finds out.
    fn is_claimed(&self, session: &str) -> bool {
        let _ = session;
        false
    }

    /// [`EventLog::append_group`] with each event's searchable text, for a
    /// log that indexes it (PostgreSQL's text search). The default drops
    /// the text.
    fn append_group_indexed(
        &self,
        session: &str,
        events: &[(u16, u16, &[u8], Option<&str>)],
    ) -> Result<u64> {
        let plain: Vec<(u16, u16, &[u8])> = events.iter().map(|&(k, f, p, _)| (k, f, p)).collect();
        self.append_group(session, &plain)
    }

    /// Keep a snapshot (FORMAT.md §12's bytes) of `session` under `name`,
    /// replacing the one there; `covered` is the number of events it
    /// folds. Returns whether the log keeps snapshots: the default keeps
    /// none (every read folds from seq 0), PostgreSQL keeps them in
    /// `turnstone_snapshots`. The embedded store's are files, written by
    /// the session layer itself.
    fn put_snapshot(&self, session: &str, name: &str, covered: u64, data: &[u8]) -> Result<bool> {
        let _ = (session, name, covered, data);
        Ok(false)
    }

    /// The snapshot kept under `name` for `session`, if any.
    fn snapshot(&self, session: &str, name: &str) -> Result<Option<Vec<u8>>> {
        let _ = (session, name);
        Ok(None)
    }

    /// Follow `session` live from seq `from`: its durable events, each
    /// once and in order, as they become durable. The default cannot
    /// ([`Error::Refused`]); PostgreSQL follows by LISTEN/NOTIFY, the
    /// embedded store with [`Store::subscribe`] (woken by its flusher, or
    /// by the host's socket in a client process).
    fn follow(&self, session: &str, from: u64) -> Result<Box<dyn Follow>> {
        let _ = (session, from);
        Err(Error::Refused(format!(
            "the {} log cannot follow a session",
            self.backend()
        )))
    }

    /// The session layer deleted `session` (its `session/delete` tombstone
    /// is durable): a log with its own notion of deletion applies it
    /// (PostgreSQL: the session leaves lists and its writers are fenced;
    /// its forks keep what they inherit). The default does nothing: the
    /// tombstone is the deletion.
    fn mark_deleted(&self, session: &str) -> Result<()> {
        let _ = session;
        Ok(())
    }

    /// Full-text search over the searchable text the session layer gave
    /// [`EventLog::append_group_indexed`], durable events only, best
    /// matches first, at most `limit` hits, each snippet with the match in
    /// brackets. `session: None` searches every session not deleted, an
    /// event inherited by forks found once, under the session that wrote
    /// it; `Some(id)` searches `id` with the events it inherits from its
    /// fork ancestors (deleted ones included), every hit reported under
    /// `id` ([`Error::SessionDeleted`] / [`Error::UnknownSession`] for a
    /// deleted or unknown `id`). The default has no search
    /// ([`Error::Refused`]); PostgreSQL searches with its text search. The
    /// embedded store's index is the session layer's
    /// (`session::query::search`).
    fn search(&self, query: &str, limit: usize, session: Option<&str>) -> Result<Vec<Hit>> {
        let _ = (query, limit, session);
        Err(Error::Refused(format!(
            "the {} log has no search",
            self.backend()
        )))
    }

    /// Every session [`EventLog::sessions`] lists, oldest first, with its
    /// durable length (inherited events included) and `(parent, fork
    /// seq)`: what a catalog refresh looks at. The default asks
    /// [`EventLog::durable_len`] and [`EventLog::parent`] per session
    /// (leaving out one gone since the list was read); PostgreSQL answers
    /// with one query.
    fn listing(&self) -> Result<Vec<Listing>> {
        let mut out = Vec::new();
        for name in self.sessions()? {
            let gone = |e: &Error| e.is_not_found();
            let durable_len = match self.durable_len(&name) {
                Ok(Some(n)) => n,
                Ok(None) => continue,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e),
            };
            let parent = match self.parent(&name) {
                Ok(p) => p,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e),
            };
            out.push(Listing {
                name,
                durable_len,
                parent,
            });
        }
        Ok(out)
    }

    /// The sessions whose durable events may have changed since an earlier
    /// answer, for a view that folds the log incrementally (the catalog):
    /// `since` is that answer's [`Changes::mark`], `None` the first time
    /// (every session is returned then). A log that cannot say returns
    /// `None` (the default), and the view asks for the whole
    /// [`EventLog::listing`] instead; the embedded store answers from its
    /// index's log positions, one pass over integers.
    fn changes_since(&self, since: Option<ChangeMark>) -> Result<Option<Changes>> {
        let _ = since;
        Ok(None)
    }

    /// Close the log for every handle that shares it: what was appended is
    /// made durable first where the log can (a store this process hosts),
    /// then later calls fail. The default does nothing (a database
    /// connection closes when its last handle goes).
    fn close(&self) -> Result<()> {
        Ok(())
    }

    /// The embedded store behind this log, if it is one: the session layer
    /// then uses the store directly.
    fn embedded(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<Store>> {
        None
    }
}

/// A live follower of one session ([`EventLog::follow`]).
pub trait Follow: Send {
    /// The next durable event, waiting up to `timeout` for one: `Ok(None)`
    /// if none came. [`Error::Closed`] once the log is closed.
    fn next_timeout(&mut self, timeout: std::time::Duration) -> Result<Option<LogEvent>>;

    /// The next durable event for async callers: `Ready(Ok(event))`,
    /// `Ready(Err(..))` ([`Error::Closed`] once the log is closed), or
    /// `Pending`, having arranged for `cx`'s waker to be woken when an
    /// event or the end comes. An event is never lost to a dropped future:
    /// it stays with the follower until a poll returns it. The default
    /// waits in this call, blocking the calling thread.
    fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<LogEvent>> {
        let _ = cx;
        loop {
            match self.next_timeout(std::time::Duration::from_secs(1)) {
                Ok(Some(e)) => return std::task::Poll::Ready(Ok(e)),
                Ok(None) => continue,
                Err(e) => return std::task::Poll::Ready(Err(e)),
            }
        }
    }
}

/// One session of [`EventLog::listing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The session's string id.
    pub name: String,
    /// Durable events, inherited ones included.
    pub durable_len: u64,
    /// `(parent, fork seq)` of a fork.
    pub parent: Option<(String, u64)>,
}

/// Where an answer of [`EventLog::changes_since`] left off: pass it back
/// to get what changed after it. Opaque to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeMark {
    /// Every frame before this durable position was reported.
    pub position: LogPos,
    /// The log handle and its collection generation when it was taken: a
    /// mark from another handle, or from before an online collection moved
    /// frames, asks for every session again.
    pub epoch: (u64, u64),
}

/// What changed in a log ([`EventLog::changes_since`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Pass to the next call.
    pub mark: ChangeMark,
    /// Positions moved since `since` (or `since` was `None`): `sessions`
    /// is every session, and a session of a rank not in it is gone.
    pub all: bool,
    /// The sessions with a frame at or after `since`, in creation order.
    pub sessions: Vec<Changed>,
}

/// One session of [`Changes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// Its creation rank in the log (dense from 0, never reused).
    pub rank: u32,
    /// The session's string id.
    pub name: String,
    /// Which incarnation of the name this is ([`EventLog::incarnation`]).
    pub define_pos: LogPos,
    /// The define itself is durable.
    pub durable: bool,
    /// Durable events, inherited ones included.
    pub durable_len: u64,
    /// `(parent, fork seq)` of a fork.
    pub parent: Option<(String, u64)>,
}

/// A writer's hold on a session ([`EventLog::claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Passed back to [`EventLog::release`].
    pub id: u64,
    /// The session was held by another writer that did not release it (a
    /// worker that died, or whose lease expired): its last turn may be
    /// open, so repair.
    pub took_over: bool,
}

/// One search hit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Hit {
    /// The session the hit is reported under.
    pub session: String,
    /// Seq of the event.
    pub seq: u64,
    /// The matching text, with the match in brackets.
    pub snippet: String,
}
