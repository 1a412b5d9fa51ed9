//! What `turnstone serve` keeps in the database besides its streams'
//! sessions, so that several server instances can share one database
//! (issue 18 §3; schema step 4): which session holds each stream path now,
//! when a stream with a sliding TTL was last read or written, and the
//! incarnation numbers of new streams' sessions.
//!
//! A path is mapped only once its stream's create record is committed, and
//! unmapped only after its hard-delete tombstone is: a mapped session is
//! always a stream that was created, and a stream whose session is mapped
//! was not hard-deleted before the mapping changed. A create maps its path
//! with a compare-and-set ([`PgLog::map_stream`]), so two instances
//! creating one path concurrently get one winner.

use std::sync::Arc;
use std::time::Duration;

use postgres::Client;

use crate::error::{db, Result};
use crate::{Inner, PgLog};

/// The first key of the advisory locks [`PgLog::lock_stream_session`]
/// takes ("TSTN"), so that they cannot meet an application's one-key
/// advisory locks on the same database.
const LOCK_CLASS: i32 = 0x5453_544e;

/// How long [`PgLog::lock_stream_session`] waits for another holder.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// A lock on one session held for every process on the database: a
/// session-level advisory lock on a connection of its own. Dropping it
/// unlocks (and returns the connection to the pool); a process that dies
/// holding it loses its connection, and the lock with it.
pub struct SessionLock {
    inner: Arc<Inner>,
    client: Option<Client>,
    session: String,
}

impl std::fmt::Debug for SessionLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLock")
            .field("session", &self.session)
            .finish()
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        let Some(mut c) = self.client.take() else {
            return;
        };
        let unlocked = c
            .query_one(
                "SELECT pg_advisory_unlock($1, hashtext($2))",
                &[&LOCK_CLASS, &self.session],
            )
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false);
        if unlocked {
            self.inner.give_back(c);
        }
        // Otherwise the connection is dropped, which releases the lock.
    }
}

/// When a stream expires, as its mapping records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamExpiry {
    /// A sliding TTL (ms after the last access, `touched_ms`).
    pub ttl_ms: Option<i64>,
    /// A fixed time (ms since the epoch).
    pub expires_ms: Option<i64>,
}

/// A path's mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRow {
    pub session: String,
    /// Last access (ms since the epoch) recorded by [`PgLog::touch_stream`].
    pub touched_ms: i64,
}

/// A session's row as a writer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRow {
    /// Committed length (inherited events included).
    pub len: u64,
    /// The lease epoch: it changes whenever any writer acquires the session.
    pub epoch: i64,
    pub deleted: bool,
}

impl PgLog {
    /// The session a stream path maps to, if any.
    pub fn stream_row(&self, path: &str) -> Result<Option<StreamRow>> {
        self.with_client(|c| {
            Ok(c.query_opt(
                "SELECT session, touched_ms FROM turnstone_streams WHERE path = $1",
                &[&path],
            )
            .map_err(db("read stream path"))?
            .map(|r| StreamRow {
                session: r.get(0),
                touched_ms: r.get(1),
            }))
        })
    }

    /// Map `path` to `session` if it maps to nothing, or to `replacing`
    /// (a hard-deleted incarnation). `false`: the path maps to another
    /// session (another instance created it first).
    pub fn map_stream(
        &self,
        path: &str,
        session: &str,
        replacing: Option<&str>,
        now_ms: i64,
        expiry: StreamExpiry,
    ) -> Result<bool> {
        self.with_client(|c| {
            let n = c
                .execute(
                    "INSERT INTO turnstone_streams (path, session, touched_ms, ttl_ms, expires_ms)
                     VALUES ($1, $2, $4, $5, $6)
                     ON CONFLICT (path) DO UPDATE
                        SET session = excluded.session, touched_ms = excluded.touched_ms,
                            ttl_ms = excluded.ttl_ms, expires_ms = excluded.expires_ms
                      WHERE turnstone_streams.session = $3",
                    &[
                        &path,
                        &session,
                        &replacing,
                        &now_ms,
                        &expiry.ttl_ms,
                        &expiry.expires_ms,
                    ],
                )
                .map_err(db("map stream path"))?;
            Ok(n == 1)
        })
    }

    /// Unmap `path` if it still maps to `session`.
    pub fn unmap_stream(&self, path: &str, session: &str) -> Result<()> {
        self.with_client(|c| {
            c.execute(
                "DELETE FROM turnstone_streams WHERE path = $1 AND session = $2",
                &[&path, &session],
            )
            .map_err(db("unmap stream path"))?;
            Ok(())
        })
    }

    /// Record an access of the stream at `path` (a sliding TTL's renewal).
    pub fn touch_stream(&self, path: &str, session: &str, now_ms: i64) -> Result<()> {
        self.with_client(|c| {
            c.execute(
                "UPDATE turnstone_streams SET touched_ms = greatest(touched_ms, $3)
                  WHERE path = $1 AND session = $2",
                &[&path, &session, &now_ms],
            )
            .map_err(db("touch stream"))?;
            Ok(())
        })
    }

    /// Forget the expiry of the stream at `path` (if it still maps to
    /// `session`): a soft-deleted stream stays mapped for its forks, and is
    /// no longer a candidate for [`PgLog::expired_streams`].
    pub fn clear_stream_expiry(&self, path: &str, session: &str) -> Result<()> {
        self.with_client(|c| {
            c.execute(
                "UPDATE turnstone_streams SET ttl_ms = NULL, expires_ms = NULL
                  WHERE path = $1 AND session = $2",
                &[&path, &session],
            )
            .map_err(db("clear stream expiry"))?;
            Ok(())
        })
    }

    /// Up to `limit` mapped streams whose expiry (as their mappings record
    /// it) is at or before `now_ms`: `(path, session)`, oldest expiry
    /// first. The caller checks each against its own state before
    /// expiring it (an access not yet recorded may have renewed it).
    pub fn expired_streams(&self, now_ms: i64, limit: i64) -> Result<Vec<(String, String)>> {
        self.with_client(|c| {
            let rows = c
                .query(
                    "SELECT path, session FROM (
                        SELECT path, session,
                               least(expires_ms, touched_ms + ttl_ms) AS at
                          FROM turnstone_streams
                         WHERE expires_ms IS NOT NULL OR ttl_ms IS NOT NULL
                     ) s WHERE at <= $1 ORDER BY at LIMIT $2",
                    &[&now_ms, &limit],
                )
                .map_err(db("read expired streams"))?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    /// A new incarnation number (never handed out twice, by any instance).
    pub fn next_stream_incarnation(&self) -> Result<u64> {
        self.with_client(|c| {
            let r = c
                .query_one("SELECT nextval('turnstone_stream_incarnations')", &[])
                .map_err(db("next stream incarnation"))?;
            Ok(r.get::<_, i64>(0) as u64)
        })
    }

    /// Streams (mapped paths) whose session is a fork of `session`.
    pub fn mapped_forks(&self, session: &str) -> Result<u64> {
        self.with_client(|c| {
            let r = c
                .query_one(
                    "SELECT count(*) FROM turnstone_streams m
                       JOIN turnstone_sessions s ON s.id = m.session
                      WHERE s.parent = $1",
                    &[&session],
                )
                .map_err(db("count forks"))?;
            Ok(r.get::<_, i64>(0) as u64)
        })
    }

    /// Lock `session` against every other holder of this lock on the
    /// database (whatever process), waiting up to 30 s
    /// ([`crate::PgError::Database`] after that). `turnstone serve` holds it
    /// while it decides how to delete a stream (soft while mapped forks
    /// read through it, hard otherwise) and while it makes a fork of it,
    /// so that a fork is never mapped after its source's deletion counted
    /// none. Locks on different sessions may share a hash and then wait
    /// for each other (never for long: the holders do a few statements).
    pub fn lock_stream_session(&self, session: &str) -> Result<SessionLock> {
        let timeout = format!("SET lock_timeout = {}", LOCK_WAIT.as_millis());
        loop {
            let (mut client, pooled) = self.inner.take_client()?;
            let locked = client
                .batch_execute(&timeout)
                .and_then(|()| {
                    client.execute(
                        "SELECT pg_advisory_lock($1, hashtext($2))",
                        &[&LOCK_CLASS, &session],
                    )
                })
                .and_then(|_| client.batch_execute("SET lock_timeout = 0"));
            match locked {
                Ok(()) => {
                    return Ok(SessionLock {
                        inner: self.inner.clone(),
                        client: Some(client),
                        session: session.to_string(),
                    })
                }
                // A pooled connection found dead (the server restarted
                // since it was used): the pool goes, one more try on a new
                // connection.
                Err(e) if pooled && e.is_closed() => self.inner.idle.lock().clear(),
                // A timeout, or the database down: this connection is
                // dropped (with whatever it held).
                Err(e) => return Err(db("lock a stream's session")(e)),
            }
        }
    }

    /// Length, lease epoch and deletion of a session, in one read.
    pub fn lease_row(&self, session: &str) -> Result<LeaseRow> {
        self.with_client(|c| {
            let r = c
                .query_opt(
                    "SELECT len, lease_epoch, deleted FROM turnstone_sessions WHERE id = $1",
                    &[&session],
                )
                .map_err(db("read session"))?
                .ok_or_else(|| crate::PgError::UnknownSession(session.to_string()))?;
            Ok(LeaseRow {
                len: r.get::<_, i64>(0) as u64,
                epoch: r.get(1),
                deleted: r.get(2),
            })
        })
    }
}
