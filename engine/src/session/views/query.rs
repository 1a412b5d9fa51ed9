//! Query: one interface over the sessions of a store, live or persisted
//! (reads go through the store, which sees every appended event).
//!
//! Listing sessions, events by kind and seq range, and full-text search over
//! message text. The search index (`DIR/search.sqlite`, SQLite FTS5 through
//! rusqlite) is a derived projection of the log: it indexes only durable
//! events, remembers per session how far it got and which incarnation of the
//! session it saw, and is dropped and rebuilt when it does not match the
//! store. It can be deleted at any time.

use std::ops::Range;

use crate::backend::Hit;
use crate::error::{Error, Result};
use crate::session::codec::event::{
    AssistantMessage, CompactionSummary, ContentBlock, CoreKind, EventKind, Registry, SessionEvent,
    ToolResult, UserMessage,
};
use crate::session::log::LogRef;
use crate::session::views::catalog::CatalogEntry;
use crate::session::views::replay::replay_range;
#[cfg(feature = "search")]
use crate::session::views::replay::replay_range_of_any;

/// The old name of a listed session: it is the catalog's entry now (one
/// listing, one type).
#[deprecated(since = "0.2.0", note = "one listing: use CatalogEntry")]
pub type SessionSummary = crate::session::views::catalog::CatalogEntry;

/// Every session of the log, in creation order, as its durable events show
/// it (a listing makes nothing durable): [`Catalog::build`] listed whole,
/// for a caller that wants every entry once. A caller that lists again, or
/// wants filters and pages, keeps the [`Catalog`] and refreshes it (a
/// build reads every durable event once; a refresh reads only what is new).
/// Deleted sessions and those the store's retention policy expires are left
/// out.
///
/// [`Catalog`]: crate::session::Catalog
/// [`Catalog::build`]: crate::session::Catalog::build
pub fn list_sessions<'a>(log: impl Into<LogRef<'a>>) -> Result<Vec<CatalogEntry>> {
    let catalog = crate::session::views::catalog::Catalog::build(log)?;
    Ok(catalog
        .list(&crate::session::views::catalog::ListQuery {
            limit: usize::MAX,
            ..Default::default()
        })
        .sessions)
}

/// Durable events of `session` with seq in `range`, optionally only of the
/// given kinds (by name, e.g. `"tool/call"`). Reads only that range and
/// never causes a sync (see [`crate::session::replay()`]).
pub fn events<'a>(
    log: impl Into<LogRef<'a>>,
    registry: &Registry,
    session: &str,
    range: Range<u64>,
    kinds: Option<&[&str]>,
) -> Result<Vec<SessionEvent>> {
    let mut out = Vec::new();
    let it = replay_range(log, session, std::sync::Arc::new(registry.clone()), range)?;
    for ev in it {
        let ev = ev?;
        if kinds.is_none_or(|k| k.contains(&ev.kind.name())) {
            out.push(ev);
        }
    }
    Ok(out)
}

/// The searchable text of an event: message text (thinking and reasoning
/// summaries included), tool results, summaries.
pub fn searchable_text(ev: &SessionEvent) -> Option<String> {
    let texts = |blocks: &[ContentBlock]| -> String {
        let mut out = String::new();
        for b in blocks {
            b.visit_text(&mut |t| {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(t);
            });
        }
        out
    };
    let t = match ev.kind {
        EventKind::Core(CoreKind::UserMessage) => texts(&ev.typed::<UserMessage>()?.content),
        EventKind::Core(CoreKind::AssistantMessage) => {
            texts(&ev.typed::<AssistantMessage>()?.content)
        }
        EventKind::Core(CoreKind::ToolResult) => texts(&ev.typed::<ToolResult>()?.content),
        EventKind::Core(CoreKind::CompactionSummary) => ev.typed::<CompactionSummary>()?.text,
        _ => return None,
    };
    (!t.is_empty()).then_some(t)
}

/// Full-text search across the sessions of any log, best matches first,
/// at most `limit` hits, each snippet with the match in brackets.
///
/// The embedded store: its index ([`SearchIndex`], `DIR/search.sqlite`) is
/// opened and brought up to the durable end, then searched (SQLite FTS5;
/// needs the `search` feature, [`Error::Refused`] without it). Another log
/// searches with its own index ([`crate::backend::EventLog::search`]:
/// PostgreSQL's text search over the text the session layer gave it).
///
/// The same on both: durable events only; deleted sessions left out (and,
/// on the embedded store, those its retention policy expires); the
/// searchable text is [`searchable_text`]'s; an event that fork children
/// inherit is found once, under the session that wrote it (so not at all
/// once that session is deleted: [`search_session`] of a fork still finds
/// it). A query of plain words (every one must match) or a `"quoted
/// phrase"` finds the same events on both, case-insensitively. What
/// differs: other query syntax (FTS5's `OR`, `NEAR`, `prefix*`;
/// PostgreSQL's web-search `or`, `-word`), tokenisation beyond plain
/// words (FTS5 folds accents, PostgreSQL's `simple` configuration does
/// not), the ranking of equally good hits, and the snippet's words around
/// the match.
pub fn search<'a>(
    log: impl Into<LogRef<'a>>,
    registry: &Registry,
    query: &str,
    limit: usize,
) -> Result<Vec<Hit>> {
    search_in(log.into(), registry, None, query, limit)
}

/// Full-text search of one session, the events it inherits from its fork
/// ancestors included (deleted ancestors too), every hit reported under
/// `session` at the seq the event has there. A deleted or unknown session
/// is an error ([`Error::is_not_found`]). See [`search`] for what both
/// logs give.
pub fn search_session<'a>(
    log: impl Into<LogRef<'a>>,
    registry: &Registry,
    session: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<Hit>> {
    search_in(log.into(), registry, Some(session), query, limit)
}

/// [`search`] (`session: None`) or [`search_session`] on any log: the
/// log's own search where it indexes text or keeps no files (PostgreSQL; a
/// client process asks its host), the session layer's index in the log's
/// files otherwise (the embedded store).
fn search_in(
    log: LogRef<'_>,
    registry: &Registry,
    session: Option<&str>,
    query: &str,
    limit: usize,
) -> Result<Vec<Hit>> {
    let l = log.as_log();
    if l.indexes_text() || l.files().is_none() {
        return l.search(query, limit, session);
    }
    indexed_search(log, registry, query, limit, session)
}

#[cfg(feature = "search")]
fn indexed_search(
    log: LogRef<'_>,
    registry: &Registry,
    query: &str,
    limit: usize,
    session: Option<&str>,
) -> Result<Vec<Hit>> {
    let mut ix = SearchIndex::open(log)?;
    ix.update(log, registry)?;
    match session {
        None => ix.search(query, limit),
        Some(s) => ix.search_session(log, s, query, limit),
    }
}

#[cfg(not(feature = "search"))]
fn indexed_search(
    log: LogRef<'_>,
    registry: &Registry,
    query: &str,
    limit: usize,
    session: Option<&str>,
) -> Result<Vec<Hit>> {
    let _ = (log, registry, query, limit, session);
    Err(Error::Refused(
        "turnstone was built without the `search` feature: the embedded store has no search index"
            .into(),
    ))
}

/// File name of the search index inside the store directory.
pub const SEARCH_FILE: &str = "search.sqlite";

/// The full-text index over a store's message text.
#[cfg(feature = "search")]
pub struct SearchIndex {
    conn: rusqlite::Connection,
    path: std::path::PathBuf,
}

#[cfg(feature = "search")]
impl SearchIndex {
    fn err(&self, e: rusqlite::Error) -> Error {
        Error::Search {
            path: self.path.clone(),
            detail: e.to_string(),
        }
    }

    /// Open (or create) the index of a log that keeps files (the embedded
    /// store: [`crate::backend::EventLog::files`]). An index built for
    /// another log is dropped.
    pub fn open<'a>(log: impl Into<LogRef<'a>>) -> Result<SearchIndex> {
        let log = log.into().as_log();
        let Some((dir, _)) = log.files() else {
            return Err(Error::Refused(format!(
                "the {} log keeps no files for a search index; it searches itself",
                log.backend()
            )));
        };
        let path = dir.join(SEARCH_FILE);
        let conn = rusqlite::Connection::open(&path).map_err(|e| Error::Search {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        let ix = SearchIndex { conn, path };
        ix.conn
            .execute_batch(
                "PRAGMA journal_mode=WAL;
                 CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS indexed(session TEXT PRIMARY KEY, define_pos INTEGER NOT NULL, next_seq INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS deleted(session TEXT PRIMARY KEY);
                 CREATE TABLE IF NOT EXISTS expired(session TEXT PRIMARY KEY);
                 CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(session UNINDEXED, seq UNINDEXED, body);",
            )
            .map_err(|e| ix.err(e))?;
        let id: String = log.log_id().iter().map(|b| format!("{b:02x}")).collect();
        let stored: Option<String> = ix
            .conn
            .query_row("SELECT value FROM meta WHERE key='store_id'", [], |r| {
                r.get(0)
            })
            .ok();
        if stored.as_deref() != Some(id.as_str()) {
            ix.conn
                .execute_batch(
                    "DELETE FROM docs; DELETE FROM indexed; DELETE FROM deleted; DELETE FROM expired; DELETE FROM meta;",
                )
                .map_err(|e| ix.err(e))?;
            ix.conn
                .execute("INSERT INTO meta(key, value) VALUES('store_id', ?1)", [&id])
                .map_err(|e| ix.err(e))?;
        }
        Ok(ix)
    }

    /// Index every durable event not indexed yet. Returns the number of
    /// events read. A session whose incarnation changed is re-indexed.
    pub fn update<'a>(&mut self, log: impl Into<LogRef<'a>>, registry: &Registry) -> Result<u64> {
        let log = log.into();
        let listing = log.listing()?;
        let listed: std::collections::HashSet<&str> =
            listing.iter().map(|l| l.name.as_str()).collect();
        let mut read = 0u64;
        let tx = self.conn.transaction().map_err(|e| Error::Search {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        let serr = |e: rusqlite::Error| Error::Search {
            path: std::path::PathBuf::from(SEARCH_FILE),
            detail: e.to_string(),
        };
        // Sessions a segment collection reclaimed (FORMAT.md §14) are no
        // longer listed, and their tombstone may never have been indexed:
        // leave them out of searches across sessions from now on.
        let gone: Vec<String> = {
            let mut q = tx.prepare("SELECT session FROM indexed").map_err(serr)?;
            let names = q
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(serr)?
                .filter_map(|n| n.ok())
                .filter(|n| !listed.contains(n.as_str()))
                .collect();
            names
        };
        for name in &gone {
            tx.execute("INSERT OR IGNORE INTO deleted(session) VALUES(?1)", [name])
                .map_err(serr)?;
        }
        for info in &listing {
            let Some((_, define_pos)) = log.as_log().incarnation(&info.name)? else {
                continue;
            };
            let row: Option<(i64, i64)> = tx
                .query_row(
                    "SELECT define_pos, next_seq FROM indexed WHERE session=?1",
                    [&info.name],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .ok();
            let inherited = info.parent.as_ref().map_or(0, |(_, n)| *n);
            let mut next = match row {
                Some((pos, next)) if pos as u64 == define_pos.0 => next as u64,
                Some(_) => {
                    tx.execute("DELETE FROM docs WHERE session=?1", [&info.name])
                        .map_err(serr)?;
                    tx.execute("DELETE FROM deleted WHERE session=?1", [&info.name])
                        .map_err(serr)?;
                    inherited
                }
                None => inherited,
            };
            // Only what is durable: the index never leads the log.
            let end = info.durable_len;
            if next >= end {
                continue;
            }
            let registry = std::sync::Arc::new(registry.clone());
            for ev in replay_range_of_any(log, &info.name, registry, next..u64::MAX)? {
                let ev = ev?;
                if ev.seq >= end {
                    break;
                }
                read += 1;
                if ev.kind == EventKind::Core(CoreKind::SessionDelete) {
                    // Its text stays (fork children inherit it), but a
                    // search across sessions no longer finds it.
                    tx.execute(
                        "INSERT OR IGNORE INTO deleted(session) VALUES(?1)",
                        [&info.name],
                    )
                    .map_err(serr)?;
                }
                if let Some(text) = searchable_text(&ev) {
                    tx.execute(
                        "INSERT INTO docs(session, seq, body) VALUES(?1, ?2, ?3)",
                        rusqlite::params![info.name, ev.seq as i64, text],
                    )
                    .map_err(serr)?;
                }
                next = ev.seq + 1;
            }
            tx.execute(
                "INSERT INTO indexed(session, define_pos, next_seq) VALUES(?1, ?2, ?3)
                 ON CONFLICT(session) DO UPDATE SET define_pos=excluded.define_pos, next_seq=excluded.next_seq",
                rusqlite::params![info.name, define_pos.0 as i64, next as i64],
            )
            .map_err(serr)?;
        }
        // Sessions the store's retention policy expires now (FORMAT.md
        // §18): left out of searches across sessions, like deleted ones
        // (two reads per session when the store has a policy).
        tx.execute("DELETE FROM expired", []).map_err(serr)?;
        let policy = crate::session::lifecycle::retention::Policy::of_log(log)?;
        if !policy.is_empty() {
            let now = crate::session::codec::envelope::now_ms();
            for info in &listing {
                if policy.keeps(&info.name) {
                    continue;
                }
                let (created, updated) =
                    crate::session::lifecycle::retention::session_times(log, &info.name)?;
                if policy.expired(&info.name, created, updated, now) {
                    tx.execute(
                        "INSERT OR IGNORE INTO expired(session) VALUES(?1)",
                        [&info.name],
                    )
                    .map_err(serr)?;
                }
            }
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(read)
    }

    /// Search message text across sessions (deleted sessions, and those the
    /// store's retention policy expires, left out as of the last
    /// [`SearchIndex::update`]); best matches first. `query` is
    /// FTS5 syntax; if it does not parse it is searched as a plain phrase.
    ///
    /// An event that fork children inherit is indexed once, under the session
    /// that wrote it; [`SearchIndex::search_session`] searches one session
    /// with its inherited prefix.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store.clone(), "s1", Arc::new(Registry::new())).unwrap();
    /// s.append(UserMessage { content: vec![ContentBlock::text("the disk is full")] }, SurfaceOp::Append).unwrap();
    /// s.flush().unwrap(); // search indexes durable events only
    /// let mut ix = SearchIndex::open(&store).unwrap();
    /// ix.update(&store, &Registry::new()).unwrap();
    /// let hits = ix.search("disk", 10).unwrap();
    /// assert_eq!((hits[0].session.as_str(), hits[0].seq), ("s1", 0));
    /// ```
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Hit>> {
        self.run_search(query, limit, &[], None)
    }

    /// Search one session's message text, the events it inherits from its
    /// fork ancestors included (each hit is reported under `session`, at the
    /// seq the event has there, which is the seq it has in the ancestor).
    /// Unknown sessions are an [`Error::UnknownSession`].
    pub fn search_session<'a>(
        &self,
        log: impl Into<LogRef<'a>>,
        session: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Hit>> {
        let log = log.into();
        crate::session::lifecycle::delete::check_not_deleted(log, session)?;
        if log.appended_len(session)?.is_none() {
            return Err(Error::UnknownSession(session.to_string()));
        }
        let log = log.as_log();
        // (session, seq bound): the session's own events, then each
        // ancestor's events below the prefix the chain inherits.
        let mut chain: Vec<(String, u64)> = vec![(session.to_string(), u64::MAX)];
        let mut parent = log.parent(session)?;
        let mut bound = u64::MAX;
        while let Some((p, n)) = parent {
            bound = bound.min(n);
            parent = match log.parent(&p) {
                Ok(pp) => pp,
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e),
            };
            chain.push((p, bound));
        }
        self.run_search(query, limit, &chain, Some(session))
    }

    fn run_search(
        &self,
        query: &str,
        limit: usize,
        chain: &[(String, u64)],
        report_as: Option<&str>,
    ) -> Result<Vec<Hit>> {
        let mut filter = String::new();
        let mut params: Vec<rusqlite::types::Value> = vec![
            rusqlite::types::Value::Null, // the query, set below
            rusqlite::types::Value::Integer(limit.min(i64::MAX as usize) as i64),
        ];
        for (i, (s, bound)) in chain.iter().enumerate() {
            filter.push_str(if i == 0 { " AND (" } else { " OR " });
            params.push(rusqlite::types::Value::Text(s.clone()));
            filter.push_str(&format!("(session = ?{}", params.len()));
            if *bound != u64::MAX {
                params.push(rusqlite::types::Value::Integer(
                    (*bound).min(i64::MAX as u64) as i64,
                ));
                filter.push_str(&format!(" AND seq < ?{}", params.len()));
            }
            filter.push(')');
        }
        if !chain.is_empty() {
            filter.push(')');
        } else {
            filter.push_str(
                " AND session NOT IN (SELECT session FROM deleted) \
                 AND session NOT IN (SELECT session FROM expired)",
            );
        }
        let sql = format!(
            "SELECT session, seq, snippet(docs, 2, '[', ']', '…', 12) FROM docs WHERE docs MATCH ?1{filter} ORDER BY rank LIMIT ?2"
        );
        let run = |q: &str| -> rusqlite::Result<Vec<Hit>> {
            let mut st = self.conn.prepare(&sql)?;
            let mut params = params.clone();
            params[0] = rusqlite::types::Value::Text(q.to_string());
            let rows = st.query_map(rusqlite::params_from_iter(params.iter()), |r| {
                Ok(Hit {
                    session: match report_as {
                        Some(s) => s.to_string(),
                        None => r.get(0)?,
                    },
                    seq: r.get::<_, i64>(1)? as u64,
                    snippet: r.get(2)?,
                })
            })?;
            rows.collect()
        };
        match run(query) {
            Ok(h) => Ok(h),
            Err(_) => {
                let phrase = format!("\"{}\"", query.replace('"', "\"\""));
                run(&phrase).map_err(|e| self.err(e))
            }
        }
    }
}
