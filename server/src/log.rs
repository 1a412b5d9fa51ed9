//! Where a server's streams live: an embedded store (one process owns it,
//! the registry is rebuilt from it at start), or a PostgreSQL database that
//! several server instances share (issue 18 §3).
//!
//! On PostgreSQL a write is queued on the stream's writer (a lease on its
//! session, [`turnstone_pg::Writer`]) and its request is answered once the
//! lane's commit, which carries every stream's queued groups in one
//! transaction, is done ([`Commit::wait`]). As on the embedded store, a
//! stream's state includes the groups queued before a request, and its
//! readers see a group once it is durable: [`Log::durable_for`] is the
//! writer's committed length there, as `Store::durable_pos` is here.
//! Another instance may have written the stream since this one last
//! looked: a write states the length it expects the session to have, and
//! a writer whose lease another instance took is fenced by the database;
//! both come back as [`Fail::Retry`], nothing written, and the caller
//! folds what the database holds and tries again.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use turnstone::{EventRef, LogPos, Seq, Store};
use turnstone_pg::{PgError, PgLog, Writer};

use crate::stream::Fail;

/// The lease owner every server instance uses: an instance takes a
/// stream's lease at once when it writes (no waiting for another
/// instance's lease to run out), and the epoch fences the other one.
pub const PG_OWNER: &str = "turnstone-serve";

/// The store behind the streams.
pub enum Log {
    Embedded(Arc<Store>),
    Pg(Shared),
}

/// A PostgreSQL database shared with other instances.
pub struct Shared {
    pub log: PgLog,
    /// This instance's writer per session (its lease), until fenced.
    writers: parking_lot::Mutex<HashMap<String, Arc<Writer>>>,
    /// Commit waits, timed (the metrics' durability-wait histogram).
    pub waits: Arc<crate::ops::WaitHistogram>,
}

impl Shared {
    pub fn new(log: PgLog) -> Shared {
        Shared {
            log,
            writers: parking_lot::Mutex::new(HashMap::new()),
            waits: Arc::default(),
        }
    }

    pub fn forget(&self, session: &str) {
        self.writers.lock().remove(session);
    }

    fn writer(&self, session: &str) -> Result<Arc<Writer>, Fail> {
        if let Some(w) = self.writers.lock().get(session) {
            return Ok(w.clone());
        }
        let w = Arc::new(
            self.log
                .acquire(session, PG_OWNER, false)
                .map_err(pg_fail)?
                .writer,
        );
        self.writers.lock().insert(session.to_string(), w.clone());
        Ok(w)
    }

    /// This instance's current writer of `session`.
    pub fn current(&self, session: &str) -> Option<Arc<Writer>> {
        self.writers.lock().get(session).cloned()
    }

    /// Forget `w` if it is still the current writer of `session`.
    pub fn forget_writer(&self, session: &str, w: &Arc<Writer>) {
        let mut ws = self.writers.lock();
        if ws.get(session).is_some_and(|c| Arc::ptr_eq(c, w)) {
            ws.remove(session);
        }
    }

    /// Queue `events` at `expect` (the session's length as the caller's
    /// state has it, this instance's queued events included); the commit
    /// is waited for with [`Commit::wait`].
    fn append(
        &self,
        session: &str,
        events: &[(u16, u16, &[u8])],
        expect: u64,
    ) -> Result<Commit, Fail> {
        let w = self.writer(session)?;
        if w.len() != expect {
            // Another instance wrote before this writer was acquired:
            // fold, then check the request again.
            return Err(Fail::Retry);
        }
        // A broken writer stays current until the stream's next fold
        // settles it (its queued groups' ends stay invisible meanwhile).
        let first = w.append_group(events).map_err(commit_fail)?;
        Ok(Commit {
            session: session.to_string(),
            len: first + events.len() as u64,
            writer: w,
        })
    }
}

/// A queued group's commit, to wait for (on PostgreSQL).
#[derive(Clone)]
pub struct Commit {
    session: String,
    /// The session's length once it is committed.
    len: u64,
    writer: Arc<Writer>,
}

impl std::fmt::Debug for Commit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commit")
            .field("session", &self.session)
            .field("len", &self.len)
            .field("epoch", &self.writer.epoch())
            .finish()
    }
}

impl Commit {
    /// Wait until the group is committed. `Err(Retry)`: it was not (another
    /// instance took the lease first); `Err(Unknown)`: the commit failed
    /// and may have been applied. Either way the stream's accepted state
    /// no longer holds, and the writer is to be forgotten
    /// ([`Commit::forget`]) once the state is marked so.
    pub fn wait(&self) -> Result<(), Fail> {
        self.writer.sync_to(self.len).map_err(commit_fail)
    }

    /// Forget this commit's writer (if it is still the session's current).
    pub fn forget(&self, shared: &Shared) {
        shared.forget_writer(&self.session, &self.writer);
    }
}

/// What a failed append or commit means for the request.
fn commit_fail(e: PgError) -> Fail {
    match e {
        // Nothing written: fold and try again.
        PgError::Fenced { .. } | PgError::LeaseHeld { .. } | PgError::SessionDeleted(_) => {
            Fail::Retry
        }
        PgError::Closed => Fail::Unavailable("the server is shutting down".into()),
        // A commit that failed may still have been applied.
        other => Fail::Unknown(format!("PostgreSQL commit: {other}")),
    }
}

/// A group handed to the log: where it ends, and on PostgreSQL the commit
/// to wait for.
#[derive(Debug, Clone)]
pub struct Written {
    pub end: LogPos,
    pub commit: Option<Commit>,
}

/// A PostgreSQL error of a read or of a write that wrote nothing.
pub fn pg_fail(e: PgError) -> Fail {
    match e {
        PgError::Fenced { .. } | PgError::LeaseHeld { .. } => Fail::Retry,
        PgError::Closed => Fail::Unavailable("the server is shutting down".into()),
        PgError::Database { .. } => Fail::Unavailable(format!("the database: {e}")),
        // A stream deleted through another instance meanwhile.
        PgError::SessionDeleted(_) | PgError::UnknownSession(_) => Fail::NotFound,
        other => Fail::Internal(other.to_string()),
    }
}

impl Log {
    pub fn is_shared(&self) -> bool {
        matches!(self, Log::Pg(_))
    }

    pub fn embedded(&self) -> Option<&Arc<Store>> {
        match self {
            Log::Embedded(s) => Some(s),
            Log::Pg(_) => None,
        }
    }

    pub fn shared(&self) -> Option<&Shared> {
        match self {
            Log::Embedded(_) => None,
            Log::Pg(p) => Some(p),
        }
    }

    /// Every position at or below this is durable. On PostgreSQL every
    /// position: a write's answer waits for its commit, and a stream's
    /// visibility is decided by [`Log::durable_for`].
    pub fn durable_pos(&self) -> LogPos {
        match self {
            Log::Embedded(s) => s.durable_pos(),
            Log::Pg(_) => LogPos(u64::MAX),
        }
    }

    /// What is durable of `session`, to compare with its stream's pending
    /// ends: the store's durable position (embedded), or the session's
    /// committed length as this instance's writer knows it (PostgreSQL;
    /// everything when it has none: nothing of it is queued here).
    pub fn durable_for(&self, session: &str) -> LogPos {
        match self {
            Log::Embedded(s) => s.durable_pos(),
            Log::Pg(p) => p
                .current(session)
                .map_or(LogPos(u64::MAX), |w| LogPos(w.committed())),
        }
    }

    /// Append one atomic group to `session`, whose length the caller
    /// expects to be `expect`: the position to wait for (embedded), or the
    /// commit to wait for (PostgreSQL; the position is then the session's
    /// length after the group, see [`Log::durable_for`]).
    pub fn append_group(
        &self,
        session: &str,
        events: &[(u16, u16, &[u8])],
        expect: u64,
    ) -> Result<Written, Fail> {
        match self {
            Log::Embedded(store) => {
                let mut end = None;
                store
                    .append_group(session, events, |a| end = Some(a.end))
                    .map_err(|e| match e {
                        turnstone::Error::TooLarge {
                            what: "event group",
                            len,
                            max,
                        } => Fail::TooLarge(format!(
                            "this append takes {len} bytes in the log ({} events), over the \
                             {max} bytes one append (one atomic commit group) can hold: send \
                             it in several requests",
                            events.len()
                        )),
                        e => Fail::engine_write(e),
                    })?;
                let end = end.ok_or_else(|| Fail::Internal("empty event group".into()))?;
                Ok(Written { end, commit: None })
            }
            Log::Pg(p) => {
                let bytes: usize = events.iter().map(|e| e.2.len()).sum();
                if bytes > crate::MAX_BODY_LIMIT + (1 << 20) {
                    return Err(Fail::TooLarge(format!(
                        "this append takes {bytes} bytes ({} events): send it in several \
                         requests",
                        events.len()
                    )));
                }
                let c = p.append(session, events, expect)?;
                Ok(Written {
                    end: LogPos(c.len),
                    commit: Some(c),
                })
            }
        }
    }

    /// Create `child` as a fork of `parent`'s events `0..upto`.
    pub fn fork(&self, parent: &str, upto: u64, child: &str) -> Result<(), Fail> {
        match self {
            Log::Embedded(s) => s
                .fork(parent, upto, child)
                .map(|_| ())
                .map_err(Fail::engine_write),
            Log::Pg(p) => p.log.fork(parent, upto, child).map_err(pg_fail),
        }
    }

    /// Create an empty session.
    pub fn create_session(&self, session: &str) -> Result<(), Fail> {
        match self {
            Log::Embedded(_) => Ok(()), // the first append creates it
            Log::Pg(p) => p.log.create_session(session).map_err(pg_fail),
        }
    }

    /// One event's kind and payload.
    pub fn read(&self, session: &str, seq: u64) -> Result<(u16, Vec<u8>), Fail> {
        match self {
            Log::Embedded(s) => {
                let e = s.read(session, seq).map_err(Fail::engine)?;
                Ok((e.kind, e.payload))
            }
            Log::Pg(p) => {
                let mut v = p.log.read_range(session, seq..seq + 1).map_err(pg_fail)?;
                let e = v
                    .pop()
                    .ok_or_else(|| Fail::Internal(format!("no event {seq} in {session}")))?;
                Ok((e.kind, e.payload))
            }
        }
    }

    /// Visit events `range` of `session` in order until `visit` breaks;
    /// returns how many were visited.
    pub fn visit_range(
        &self,
        session: &str,
        range: std::ops::Range<u64>,
        mut visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64, Fail> {
        match self {
            Log::Embedded(s) => s.visit_range(session, range, visit).map_err(Fail::engine),
            Log::Pg(p) => {
                let mut n = 0u64;
                let mut at = range.start;
                while at < range.end {
                    let to = range.end.min(at + 256);
                    let evs = p.log.read_range(session, at..to).map_err(pg_fail)?;
                    for e in &evs {
                        n += 1;
                        let r = visit(EventRef {
                            seq: Seq(e.seq),
                            kind: e.kind,
                            flags: e.flags,
                            payload: &e.payload,
                            pos: LogPos(0),
                        });
                        if r.is_break() {
                            return Ok(n);
                        }
                    }
                    if evs.is_empty() {
                        break;
                    }
                    at = to;
                }
                Ok(n)
            }
        }
    }
}

/// A live follower of one session: woken when events past where it
/// started are durable (committed, on PostgreSQL, where it is a watcher of
/// the session's length that reads nothing itself).
pub enum Follower {
    Embedded(turnstone::Subscription),
    Pg {
        sub: turnstone_pg::Subscription,
        from: u64,
    },
}

impl Follower {
    /// The seq it follows from.
    pub fn next_seq(&self) -> u64 {
        match self {
            Follower::Embedded(s) => s.next_seq(),
            Follower::Pg { from, .. } => *from,
        }
    }

    /// Wait for new events; `false`: the log stopped (or, on PostgreSQL,
    /// the watcher was lost: the caller reads again and answers).
    pub async fn ready(&mut self) -> bool {
        match self {
            Follower::Embedded(s) => s.ready_async().await,
            Follower::Pg { sub, .. } => std::future::poll_fn(|cx| sub.poll_grown(cx)).await.is_ok(),
        }
    }

    /// Whether it can follow on after a read (a PostgreSQL watcher can: it
    /// is told what was read, [`Follower::seen`]); an embedded
    /// subscription is made anew from where the read stopped.
    pub fn reusable(&self) -> bool {
        matches!(self, Follower::Pg { .. })
    }

    /// The caller read the session up to `len`: wait for more than that.
    pub fn seen(&mut self, len: u64) {
        if let Follower::Pg { sub, from } = self {
            sub.seen(len);
            *from = (*from).max(len);
        }
    }
}

impl Log {
    /// Follow `session` from `from`. Blocking on PostgreSQL (it reads the
    /// session's row).
    pub fn subscribe(&self, session: &str, from: u64) -> Result<Follower, Fail> {
        match self {
            Log::Embedded(s) => s
                .subscribe(session, from)
                .map(Follower::Embedded)
                .map_err(Fail::engine),
            Log::Pg(p) => p
                .log
                .watch(session, from)
                .map(|sub| Follower::Pg { sub, from })
                .map_err(pg_fail),
        }
    }
}
