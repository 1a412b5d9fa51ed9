//! Reads of what is committed: a session's row, length and parent,
//! [`PgLog::read_range`] through the fork chain ([`read_chain`]), and the
//! snapshots (projection caches).
//!
//! Invariant: a fork reads its events below its fork seq from its parent
//! chain (deleted ancestors included: a fork keeps what it references) and
//! the rest from its own rows; only committed events are read.

use postgres::Client;

use crate::error::{db, PgError, Result};
use crate::{Event, PgLog};

impl PgLog {
    /// `(parent, fork seq)` of a fork (deleted sessions included: a fork
    /// keeps its parent).
    pub fn parent(&self, session: &str) -> Result<Option<(String, u64)>> {
        self.with_client(|c| {
            let row = session_row(c, session, false)?;
            Ok(row.parent.map(|p| (p, row.fork_seq)))
        })
    }

    /// Committed length of a session (inherited events included).
    pub fn session_len(&self, session: &str) -> Result<u64> {
        self.with_client(|c| Ok(session_row(c, session, true)?.len))
    }

    /// Committed events `range` of a session, inherited ones included.
    pub fn read_range(&self, session: &str, range: std::ops::Range<u64>) -> Result<Vec<Event>> {
        self.with_client(|c| {
            let row = session_row(c, session, true)?;
            if range.end > row.len {
                return Err(PgError::SeqOutOfRange {
                    session: session.to_string(),
                    seq: range.end,
                    len: row.len,
                });
            }
            let mut out = Vec::new();
            read_chain(c, session, row, range.clone(), &mut out)?;
            Ok(out)
        })
    }

    /// Store a snapshot (a projection cache) of a session at `upto`.
    pub fn put_snapshot(&self, session: &str, name: &str, upto: u64, data: &[u8]) -> Result<()> {
        self.with_client(|c| {
            c.execute(
                "INSERT INTO turnstone_snapshots (session, name, upto, data) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (session, name) DO UPDATE SET upto = excluded.upto, data = excluded.data",
                &[&session, &name, &(upto as i64), &data],
            )
            .map_err(db("write snapshot"))?;
            Ok(())
        })
    }

    /// A snapshot: `(upto, data)`.
    pub fn snapshot(&self, session: &str, name: &str) -> Result<Option<(u64, Vec<u8>)>> {
        self.with_client(|c| {
            let row = c
                .query_opt(
                    "SELECT upto, data FROM turnstone_snapshots WHERE session = $1 AND name = $2",
                    &[&session, &name],
                )
                .map_err(db("read snapshot"))?;
            Ok(row.map(|r| (r.get::<_, i64>(0) as u64, r.get(1))))
        })
    }
}

pub(crate) struct Row {
    pub(crate) len: u64,
    pub(crate) parent: Option<String>,
    pub(crate) fork_seq: u64,
}

pub(crate) fn session_row(c: &mut Client, session: &str, live: bool) -> Result<Row> {
    let r = c
        .query_opt(
            "SELECT len, parent, fork_seq, deleted FROM turnstone_sessions WHERE id = $1",
            &[&session],
        )
        .map_err(db("read session"))?
        .ok_or_else(|| PgError::UnknownSession(session.to_string()))?;
    if live && r.get::<_, bool>(3) {
        return Err(PgError::SessionDeleted(session.to_string()));
    }
    Ok(Row {
        len: r.get::<_, i64>(0) as u64,
        parent: r.get(1),
        fork_seq: r.get::<_, i64>(2) as u64,
    })
}

/// Events `range` of `session`: those below its fork seq from its parent
/// chain (deleted ancestors included: a fork keeps what it references).
pub(crate) fn read_chain(
    c: &mut Client,
    session: &str,
    row: Row,
    range: std::ops::Range<u64>,
    out: &mut Vec<Event>,
) -> Result<()> {
    let own_from = if row.parent.is_some() {
        row.fork_seq
    } else {
        0
    };
    if let Some(parent) = &row.parent {
        if range.start < own_from {
            let prow = session_row(c, parent, false)?;
            read_chain(c, parent, prow, range.start..range.end.min(own_from), out)?;
        }
    }
    let lo = range.start.max(own_from);
    if lo < range.end {
        let rows = c
            .query(
                "SELECT seq, kind, flags, payload FROM turnstone_events
                  WHERE session = $1 AND seq >= $2 AND seq < $3 ORDER BY seq",
                &[&session, &(lo as i64), &(range.end as i64)],
            )
            .map_err(db("read events"))?;
        out.extend(rows.iter().map(|r| Event {
            seq: r.get::<_, i64>(0) as u64,
            kind: r.get::<_, i32>(1) as u16,
            flags: r.get::<_, i32>(2) as u16,
            payload: r.get(3),
        }));
    }
    Ok(())
}
