//! Where a server's streams live: an embedded store (one process owns it,
//! the registry is rebuilt from it at start), or a PostgreSQL database that
//! several server instances share (issue 18 §3).
//!
//! On PostgreSQL every write is committed before it returns: the stream's
//! writer (a lease on its session, [`turnstone_pg::Writer`]) queues the
//! group and waits for its lane's commit, which carries every other
//! stream's pending groups in the same transaction (group commit across
//! requests and streams). The position a write returns is therefore
//! already durable ([`Log::durable_pos`] is past every position), and the
//! embedded server's accepted-then-visible machinery reduces to "visible
//! at once". Another instance may have written the stream since this one
//! last looked: a write states the length it expects the session to have,
//! and a writer whose lease another instance took is fenced by the
//! database; both come back as [`Fail::Retry`], nothing written, and the
//! caller folds what the database holds and tries again.

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
}

impl Shared {
    pub fn new(log: PgLog) -> Shared {
        Shared {
            log,
            writers: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// Forget this instance's writer of `session` unless it holds `epoch`
    /// (another instance acquired the session since).
    pub fn forget_unless(&self, session: &str, epoch: i64) {
        let mut w = self.writers.lock();
        if w.get(session).is_some_and(|w| w.epoch() != epoch) {
            w.remove(session);
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

    /// Append and commit `events` at `expect` (the session's length as the
    /// caller's state has it).
    fn append(&self, session: &str, events: &[(u16, u16, &[u8])], expect: u64) -> Result<(), Fail> {
        let w = self.writer(session)?;
        if w.len() != expect {
            // Another instance wrote since this one's state was folded.
            self.forget(session);
            return Err(Fail::Retry);
        }
        let done = w.append_group(events).and_then(|_| w.sync());
        match done {
            Ok(()) => Ok(()),
            Err(e) => {
                self.forget(session);
                Err(match e {
                    // Nothing written: fold and try again.
                    PgError::Fenced { .. } | PgError::LeaseHeld { .. } => Fail::Retry,
                    PgError::Closed => Fail::Unavailable("the server is shutting down".into()),
                    PgError::SessionDeleted(_) => Fail::Retry,
                    // A commit that failed may still have been applied.
                    other => Fail::Unknown(format!("PostgreSQL commit: {other}")),
                })
            }
        }
    }
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

    /// Every position at or below this is durable (on PostgreSQL, every
    /// position: writes return committed).
    pub fn durable_pos(&self) -> LogPos {
        match self {
            Log::Embedded(s) => s.durable_pos(),
            Log::Pg(_) => LogPos(u64::MAX),
        }
    }

    /// Append one atomic group to `session`, whose length the caller
    /// expects to be `expect`; returns the position to wait for.
    pub fn append_group(
        &self,
        session: &str,
        events: &[(u16, u16, &[u8])],
        expect: u64,
    ) -> Result<LogPos, Fail> {
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
                end.ok_or_else(|| Fail::Internal("empty event group".into()))
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
                p.append(session, events, expect).map(|()| LogPos(0))
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
/// started are durable (committed, on PostgreSQL).
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
    /// the follower was lost: the caller reads again and answers).
    pub async fn ready(&mut self) -> bool {
        match self {
            Follower::Embedded(s) => s.ready_async().await,
            Follower::Pg { sub, .. } => std::future::poll_fn(|cx| sub.poll_next(cx)).await.is_ok(),
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
                .subscribe(session, from)
                .map(|sub| Follower::Pg { sub, from })
                .map_err(pg_fail),
        }
    }
}
