//! The read commands on a PostgreSQL URL (issue 18): `export` and `replay`
//! read through [`PgLog`] what they read from a store directory otherwise,
//! decoding with the session layer's own [`decode`]. (`sessions` and
//! `search` go through the session layer on the database's log:
//! `Catalog::build`, `session::search`.)

use std::time::Duration;

use turnstone::session::internals::decode;
use turnstone::session::{Registry, SessionEvent};
use turnstone_pg::{PgError, PgLog};

use crate::place::{connect_reader, pg_failure, redact};
use crate::Failure;

/// Events read per query.
const CHUNK: u64 = 4096;

/// A connected log and the length of one of its live sessions.
pub fn open_session(url: &str, session: &str) -> Result<(PgLog, u64), Failure> {
    let log = connect_reader(url)?;
    match log.session_len(session) {
        Ok(n) => Ok((log, n)),
        Err(PgError::UnknownSession(_) | PgError::SessionDeleted(_)) => {
            log.close();
            Err(Failure::usage(format!(
                "database {} has no session {session:?} (`turnstone sessions URL` lists them)",
                redact(url)
            )))
        }
        Err(e) => Err(pg_failure(url, e)),
    }
}

/// Every event of `session` from seq 0, in chunks, as engine events.
pub fn for_each_event(
    log: &PgLog,
    url: &str,
    session: &str,
    len: u64,
    mut f: impl FnMut(turnstone::Event) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let mut at = 0;
    while at < len {
        let end = (at + CHUNK).min(len);
        for e in log
            .read_range(session, at..end)
            .map_err(|e| pg_failure(url, e))?
        {
            f(engine_event(e))?;
        }
        at = end;
    }
    Ok(())
}

fn engine_event(e: turnstone_pg::Event) -> turnstone::Event {
    turnstone::Event {
        seq: turnstone::Seq(e.seq),
        kind: e.kind,
        flags: e.flags,
        payload: e.payload,
        // A database has no log positions.
        pos: turnstone::LogPos::default(),
    }
}

/// A session event decoded from a database row.
pub fn session_event(
    session: &str,
    e: &turnstone_pg::Event,
    registry: &Registry,
) -> Result<SessionEvent, Failure> {
    decode(e.seq, e.kind, e.flags, &e.payload, registry).map_err(|err| {
        Failure::io(format!(
            "session {session:?}: event at seq {} cannot be decoded: {err:?}",
            e.seq
        ))
    })
}

/// The events of `session` from seq 0; with `follow`, then every event
/// committed after, as PostgreSQL notifies them (Ctrl-C ends it).
pub fn replay(
    url: &str,
    session: &str,
    follow: bool,
    mut f: impl FnMut(SessionEvent) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let (log, len) = open_session(url, session)?;
    let registry = Registry::new();
    if follow {
        let mut sub = log.subscribe(session, 0).map_err(|e| pg_failure(url, e))?;
        loop {
            if let Some(e) = sub
                .next_timeout(Duration::from_secs(3600))
                .map_err(|e| pg_failure(url, e))?
            {
                f(session_event(session, &e, &registry)?)?;
            }
        }
    }
    let mut at = 0;
    while at < len {
        let end = (at + CHUNK).min(len);
        for e in log
            .read_range(session, at..end)
            .map_err(|e| pg_failure(url, e))?
        {
            f(session_event(session, &e, &registry)?)?;
        }
        at = end;
    }
    log.close();
    Ok(())
}
