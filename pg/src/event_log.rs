//! [`turnstone::backend::EventLog`] on PostgreSQL: a [`PgLog`] and the
//! writers (leases) this process holds, one per session it appends to.

use std::collections::HashMap;
use std::ops::Range;

use parking_lot::Mutex;
use turnstone::backend::{Claim, EventLog, Follow, Listing, LogEvent};
use turnstone::{Error, Result};

use crate::{PgError, PgLog, Writer};

/// The PostgreSQL log behind the engine's log interface. A session is
/// leased on its first append (as `owner`) and kept until this value is
/// dropped or the lease is lost ([`Error::Fenced`]).
pub struct PgEventLog {
    log: PgLog,
    owner: String,
    writers: Mutex<HashMap<String, std::sync::Arc<Writer>>>,
    /// Sessions claimed through [`EventLog::claim`] (by a session layer
    /// handle), with the claim's epoch.
    claims: Mutex<HashMap<String, u64>>,
}

impl PgEventLog {
    pub fn new(log: PgLog, owner: &str) -> PgEventLog {
        PgEventLog {
            log,
            owner: owner.to_string(),
            writers: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
        }
    }

    pub fn log(&self) -> &PgLog {
        &self.log
    }

    /// Connect to the database at `url` as lease owner `owner` (a lease
    /// TTL of `lease_ttl`, or the default): what the bindings' `Store(url)`
    /// opens. A failure is the engine's `Backend` error naming the URL
    /// with its password left out.
    pub fn connect(
        url: &str,
        owner: &str,
        lease_ttl: Option<std::time::Duration>,
    ) -> Result<PgEventLog> {
        let mut opts = crate::PgOptions::default();
        if let Some(ttl) = lease_ttl {
            opts.lease_ttl = ttl.max(std::time::Duration::from_millis(1));
        }
        let log = PgLog::connect(url, opts).map_err(|e| Error::Backend {
            backend: "postgres",
            op: "connect".into(),
            detail: format!("{}: {e}", crate::redact(url)),
        })?;
        Ok(PgEventLog::new(log, owner))
    }

    fn writer(&self, session: &str) -> Result<std::sync::Arc<Writer>> {
        if let Some(w) = self.writers.lock().get(session) {
            return Ok(w.clone());
        }
        let w = std::sync::Arc::new(
            self.log
                .acquire(session, &self.owner, true)
                .map_err(engine_error)?
                .writer,
        );
        self.writers.lock().insert(session.to_string(), w.clone());
        Ok(w)
    }
}

/// A LISTEN/NOTIFY follower ([`crate::Subscription`]), ended when its log
/// closes.
struct PgFollow {
    sub: crate::Subscription,
}

fn log_event(e: crate::Event) -> LogEvent {
    LogEvent {
        seq: e.seq,
        kind: e.kind,
        flags: e.flags,
        payload: e.payload,
    }
}

impl Follow for PgFollow {
    fn next_timeout(&mut self, timeout: std::time::Duration) -> Result<Option<LogEvent>> {
        match self.sub.next_timeout(timeout) {
            Ok(e) => Ok(e.map(log_event)),
            Err(PgError::Closed) => Err(Error::Closed),
            Err(e) => Err(engine_error(e)),
        }
    }

    fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<LogEvent>> {
        self.sub.poll_next(cx).map(|r| match r {
            Ok(e) => Ok(log_event(e)),
            Err(PgError::Closed) => Err(Error::Closed),
            Err(e) => Err(engine_error(e)),
        })
    }
}

/// The engine's error for a PostgreSQL one (same kinds where the embedded
/// store has them).
pub fn engine_error(e: PgError) -> Error {
    match e {
        PgError::UnknownSession(s) => Error::UnknownSession(s),
        PgError::SessionDeleted(s) => Error::SessionDeleted { session: s, seq: 0 },
        PgError::SessionExists(s) => Error::SessionExists(s),
        PgError::SeqOutOfRange { session, seq, len } => Error::SeqOutOfRange { session, seq, len },
        PgError::Fenced { ref session, .. } | PgError::LeaseHeld { ref session, .. } => {
            Error::Fenced {
                session: session.clone(),
                detail: e.to_string(),
            }
        }
        other => Error::Backend {
            backend: "postgres",
            op: match &other {
                PgError::Database { op, .. } => op.to_string(),
                _ => "write".into(),
            },
            detail: other.to_string(),
        },
    }
}

impl EventLog for PgEventLog {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn create_session(&self, session: &str) -> Result<()> {
        self.log.create_session(session).map_err(engine_error)
    }

    fn fork(&self, parent: &str, upto: u64, child: &str) -> Result<()> {
        self.log.fork(parent, upto, child).map_err(engine_error)
    }

    fn append_group(&self, session: &str, events: &[(u16, u16, &[u8])]) -> Result<u64> {
        if events.is_empty() {
            return Err(Error::InvalidArgument("an empty group".into()));
        }
        self.writer(session)?
            .append_group(events)
            .map_err(engine_error)
    }

    fn poll_durable(
        &self,
        session: &str,
        len: u64,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        let w = self.writers.lock().get(session).cloned();
        match w {
            Some(w) => w.poll_sync(len, cx).map_err(engine_error),
            // Nothing appended here: what the database holds is durable.
            None => std::task::Poll::Ready(Ok(())),
        }
    }

    fn sync_session(&self, session: &str) -> Result<()> {
        let w = self.writers.lock().get(session).cloned();
        match w {
            Some(w) => w.sync().map_err(engine_error),
            // Nothing appended here: what the database holds is durable.
            None => self
                .log
                .session_len(session)
                .map(|_| ())
                .map_err(engine_error),
        }
    }

    fn durable_len(&self, session: &str) -> Result<Option<u64>> {
        match self.log.session_len(session) {
            Ok(n) => Ok(Some(n)),
            Err(PgError::UnknownSession(_)) => Ok(None),
            Err(e) => Err(engine_error(e)),
        }
    }

    fn parent(&self, session: &str) -> Result<Option<(String, u64)>> {
        self.log.parent(session).map_err(engine_error)
    }

    fn sessions(&self) -> Result<Vec<String>> {
        Ok(self
            .log
            .sessions()
            .map_err(engine_error)?
            .into_iter()
            .map(|s| s.id)
            .collect())
    }

    fn appended_len(&self, session: &str) -> Result<Option<u64>> {
        let w = self.writers.lock().get(session).cloned();
        match w {
            Some(w) => Ok(Some(w.len())),
            None => self.durable_len(session),
        }
    }

    /// Take the session's lease (a new epoch: a writer of any earlier
    /// epoch, in this process or another, is fenced from now on). Refused
    /// while another owner's lease runs ([`Error::Fenced`]) or a handle of
    /// this log holds the claim ([`Error::SessionLive`]). The claim took
    /// the session over when the lease was held, by anyone, when it was
    /// taken: that writer did not release it.
    fn claim(&self, session: &str) -> Result<Claim> {
        let mut claims = self.claims.lock();
        if claims.contains_key(session) {
            return Err(Error::SessionLive {
                session: session.to_string(),
                since_ms: 0,
            });
        }
        let acquired = self
            .log
            .acquire(session, &self.owner, false)
            .map_err(engine_error)?;
        let took_over = acquired.previous_owner.is_some();
        let w = std::sync::Arc::new(acquired.writer);
        let id = w.epoch() as u64;
        self.writers.lock().insert(session.to_string(), w);
        claims.insert(session.to_string(), id);
        Ok(Claim { id, took_over })
    }

    /// Commit what the claim's writer queued and give the lease up.
    fn release(&self, session: &str, claim: u64) {
        let mut claims = self.claims.lock();
        if claims.get(session) != Some(&claim) {
            return;
        }
        claims.remove(session);
        let w = {
            let mut writers = self.writers.lock();
            match writers.get(session) {
                Some(w) if w.epoch() as u64 == claim => writers.remove(session),
                _ => None,
            }
        };
        if let Some(w) = w.and_then(|w| std::sync::Arc::try_unwrap(w).ok()) {
            // A lease that cannot be released expires.
            let _ = w.release();
        }
    }

    fn put_snapshot(&self, session: &str, name: &str, covered: u64, data: &[u8]) -> Result<bool> {
        self.log
            .put_snapshot(session, name, covered, data)
            .map_err(engine_error)?;
        Ok(true)
    }

    fn snapshot(&self, session: &str, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .log
            .snapshot(session, name)
            .map_err(engine_error)?
            .map(|(_, data)| data))
    }

    fn follow(&self, session: &str, from: u64) -> Result<Box<dyn Follow>> {
        let sub = self.log.subscribe(session, from).map_err(engine_error)?;
        Ok(Box::new(PgFollow { sub }))
    }

    fn mark_deleted(&self, session: &str) -> Result<()> {
        self.log.delete(session).map_err(engine_error)
    }

    /// Searchable text goes into `turnstone_events.text` (PostgreSQL's
    /// text search).
    fn indexes_text(&self) -> bool {
        true
    }

    fn append_group_indexed(
        &self,
        session: &str,
        events: &[(u16, u16, &[u8], Option<&str>)],
    ) -> Result<u64> {
        if events.is_empty() {
            return Err(Error::InvalidArgument("an empty group".into()));
        }
        self.writer(session)?
            .append_group_with_text(events)
            .map_err(engine_error)
    }

    /// PostgreSQL's text search ([`PgLog::search`],
    /// [`PgLog::search_session`]).
    fn search(
        &self,
        query: &str,
        limit: usize,
        session: Option<&str>,
    ) -> Result<Vec<turnstone::backend::Hit>> {
        let hits = match session {
            None => self.log.search(query, limit),
            Some(s) => self.log.search_session(s, query, limit),
        }
        .map_err(engine_error)?;
        Ok(hits
            .into_iter()
            .map(|h| turnstone::backend::Hit {
                session: h.session,
                seq: h.seq,
                snippet: h.snippet,
            })
            .collect())
    }

    /// One query ([`PgLog::sessions`]).
    fn listing(&self) -> Result<Vec<Listing>> {
        Ok(self
            .log
            .sessions()
            .map_err(engine_error)?
            .into_iter()
            .map(|s| Listing {
                name: s.id,
                durable_len: s.len,
                parent: s.parent,
            })
            .collect())
    }

    fn read_range(&self, session: &str, range: Range<u64>) -> Result<Vec<LogEvent>> {
        Ok(self
            .log
            .read_range(session, range)
            .map_err(engine_error)?
            .into_iter()
            .map(|e| LogEvent {
                seq: e.seq,
                kind: e.kind,
                flags: e.flags,
                payload: e.payload,
            })
            .collect())
    }
}
