//! The sessions themselves: create, fork (by reference), delete (a flag that
//! also fences the session's writer) and list.
//!
//! Invariant: a session's name is never reused (a deleted session keeps its
//! row), and a fork is created only of a live parent, under a lock on the
//! parent's row, at a seq within its committed length.

use postgres::Client;

use crate::error::{db, PgError, Result};
use crate::{PgLog, SessionInfo};

impl PgLog {
    /// Create an empty session; [`PgError::SessionExists`] if it exists
    /// (deleted or not: a deleted session keeps its name, as in the
    /// embedded store).
    pub fn create_session(&self, session: &str) -> Result<()> {
        self.with_client(|c| {
            let n = c
                .execute(
                    "INSERT INTO turnstone_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
                    &[&session],
                )
                .map_err(db("create session"))?;
            if n == 0 {
                return Err(PgError::SessionExists(session.to_string()));
            }
            Ok(())
        })
    }

    /// Create `child` as a fork of `parent` holding its events `0..upto`
    /// by reference (nothing is copied).
    pub fn fork(&self, parent: &str, upto: u64, child: &str) -> Result<()> {
        self.with_client(|c| {
            let mut tx = c.transaction().map_err(db("begin fork"))?;
            let p = tx
                .query_opt(
                    "SELECT len, deleted FROM turnstone_sessions WHERE id = $1 FOR SHARE",
                    &[&parent],
                )
                .map_err(db("read fork parent"))?
                .ok_or_else(|| PgError::UnknownSession(parent.to_string()))?;
            let (len, deleted): (i64, bool) = (p.get(0), p.get(1));
            if deleted {
                return Err(PgError::SessionDeleted(parent.to_string()));
            }
            if upto > len as u64 {
                return Err(PgError::SeqOutOfRange {
                    session: parent.to_string(),
                    seq: upto,
                    len: len as u64,
                });
            }
            let n = tx
                .execute(
                    "INSERT INTO turnstone_sessions (id, parent, fork_seq, len)
                     VALUES ($1, $2, $3, $3) ON CONFLICT (id) DO NOTHING",
                    &[&child, &parent, &(upto as i64)],
                )
                .map_err(db("create fork"))?;
            if n == 0 {
                return Err(PgError::SessionExists(child.to_string()));
            }
            tx.commit().map_err(db("commit fork"))
        })
    }

    /// Delete a session: it is no longer listed or read, and its writer is
    /// fenced. Its events stay for the forks that reference them.
    pub fn delete(&self, session: &str) -> Result<()> {
        self.with_client(|c| {
            let n = c
                .execute(
                    "UPDATE turnstone_sessions
                        SET deleted = true, lease_epoch = lease_epoch + 1,
                            lease_owner = NULL, lease_expires = NULL
                      WHERE id = $1 AND NOT deleted",
                    &[&session],
                )
                .map_err(db("delete session"))?;
            if n == 0 {
                return Err(self.missing(c, session));
            }
            Ok(())
        })
    }

    fn missing(&self, c: &mut Client, session: &str) -> PgError {
        match c.query_opt(
            "SELECT deleted FROM turnstone_sessions WHERE id = $1",
            &[&session],
        ) {
            Ok(Some(_)) => PgError::SessionDeleted(session.to_string()),
            Ok(None) => PgError::UnknownSession(session.to_string()),
            Err(e) => PgError::Database {
                op: "read session",
                source: e,
            },
        }
    }

    /// Live sessions, oldest first.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>> {
        self.with_client(|c| {
            let rows = c
                .query(
                    "SELECT id, len, parent, fork_seq,
                            (extract(epoch FROM created_at) * 1000)::bigint
                       FROM turnstone_sessions WHERE NOT deleted ORDER BY created_at, id",
                    &[],
                )
                .map_err(db("list sessions"))?;
            Ok(rows
                .iter()
                .map(|r| SessionInfo {
                    id: r.get(0),
                    len: r.get::<_, i64>(1) as u64,
                    parent: r
                        .get::<_, Option<String>>(2)
                        .map(|p| (p, r.get::<_, i64>(3) as u64)),
                    created_ms: r.get(4),
                })
                .collect())
        })
    }
}
