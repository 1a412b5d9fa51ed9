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

use crate::error::{db, Result};
use crate::PgLog;

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
    ) -> Result<bool> {
        self.with_client(|c| {
            let n = c
                .execute(
                    "INSERT INTO turnstone_streams (path, session, touched_ms) VALUES ($1, $2, $4)
                     ON CONFLICT (path) DO UPDATE
                        SET session = excluded.session, touched_ms = excluded.touched_ms
                      WHERE turnstone_streams.session = $3",
                    &[&path, &session, &replacing, &now_ms],
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
