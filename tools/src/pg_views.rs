//! The read commands on a PostgreSQL URL (issue 18): `sessions`, `export`,
//! `replay` and `search` read through [`PgLog`] what they read from a store
//! directory otherwise. The session layer is not on the backend trait yet,
//! so these fold and decode the events here, with the session layer's own
//! functions ([`EntryFold`], [`decode`]).

use std::time::Duration;

use turnstone::session::event::decode;
use turnstone::session::{Catalog, CatalogEntry, EntryFold, Registry, SessionEvent};
use turnstone_pg::{PgError, PgLog};

use crate::place::{connect_reader, pg_failure, redact};
use crate::Failure;

/// Events read per query.
const CHUNK: u64 = 4096;

/// The catalog of a database's live sessions, in creation order: each
/// session's events (inherited ones included) folded as a store's catalog
/// folds them. Reads every event once per session that holds it.
pub fn catalog(url: &str) -> Result<Catalog, Failure> {
    let log = connect_reader(url)?;
    let fail = |e| pg_failure(url, e);
    let mut entries: Vec<CatalogEntry> = Vec::new();
    for s in log.sessions().map_err(fail)? {
        let mut f = EntryFold::new(&s.id, s.parent.clone(), s.len);
        let mut at = 0;
        while at < s.len {
            let end = (at + CHUNK).min(s.len);
            match log.read_range(&s.id, at..end) {
                Ok(events) => {
                    for e in events {
                        f.event(e.seq, e.kind, &e.payload);
                    }
                }
                // Deleted since it was listed: not listed.
                Err(PgError::SessionDeleted(_)) => break,
                Err(e) => return Err(fail(e)),
            }
            at = end;
        }
        if let Some(entry) = f.finish() {
            entries.push(entry);
        }
    }
    log.close();
    Ok(Catalog::from_entries(entries))
}

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

/// Search hits `(session, seq, snippet)`: PostgreSQL text search
/// (`simple` configuration, web-search syntax).
pub fn search(
    url: &str,
    query: &str,
    session: Option<&str>,
    limit: usize,
) -> Result<Vec<(String, u64, String)>, Failure> {
    let hits = match session {
        Some(s) => {
            let (log, _) = open_session(url, s)?;
            let h = log.search_session(s, query, limit);
            log.close();
            h
        }
        None => {
            let log = connect_reader(url)?;
            let h = log.search(query, limit);
            log.close();
            h
        }
    }
    .map_err(|e| pg_failure(url, e))?;
    Ok(hits
        .into_iter()
        .map(|h| (h.session, h.seq, h.snippet))
        .collect())
}
