//! Full-text search over the events' searchable text (PostgreSQL text
//! search, `simple` configuration): across every live session
//! ([`PgLog::search`]), or along one session's fork chain
//! ([`PgLog::search_session`]).
//!
//! Invariant: the search across sessions reports no deleted session's
//! events; a session's search sees exactly the events the session reads
//! (its own and those it inherits below each fork seq), all reported under
//! its name.

use crate::error::{db, Result};
use crate::read::session_row;
use crate::{Hit, PgLog};

impl PgLog {
    /// Full-text search over the searchable text of every live session's
    /// committed events (PostgreSQL text search, `simple` configuration;
    /// the query in web-search syntax: words, `"a phrase"`, `or`, `-word`).
    /// Best matches first, the match in brackets in the snippet, as the
    /// embedded store's search reports it.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Hit>> {
        self.with_client(|c| {
            let rows = c
                .query(
                    "SELECT e.session, e.seq, ts_headline('simple', e.text, q, 'StartSel=[, StopSel=], MaxFragments=1, MaxWords=24, MinWords=8')
                       FROM turnstone_events e
                       JOIN turnstone_sessions s ON s.id = e.session AND NOT s.deleted,
                            websearch_to_tsquery('simple', $1) AS q
                      WHERE e.text IS NOT NULL AND to_tsvector('simple', e.text) @@ q
                      ORDER BY ts_rank(to_tsvector('simple', e.text), q) DESC, e.session, e.seq
                      LIMIT $2",
                    &[&query, &(limit.min(i64::MAX as usize) as i64)],
                )
                .map_err(db("search"))?;
            Ok(rows
                .iter()
                .map(|r| Hit {
                    session: r.get(0),
                    seq: r.get::<_, i64>(1) as u64,
                    snippet: r.get(2),
                })
                .collect())
        })
    }

    /// Search one session, the events it inherits from its fork ancestors
    /// included; every hit is reported under `session`.
    pub fn search_session(&self, session: &str, query: &str, limit: usize) -> Result<Vec<Hit>> {
        self.with_client(|c| {
            // (session, seq bound) of each link of the chain.
            let mut chain = vec![(session.to_string(), i64::MAX)];
            let mut row = session_row(c, session, true)?;
            let mut bound = i64::MAX;
            while let Some(p) = row.parent.take() {
                bound = bound.min(row.fork_seq as i64);
                row = session_row(c, &p, false)?;
                chain.push((p, bound));
            }
            let (names, bounds): (Vec<String>, Vec<i64>) = chain.into_iter().unzip();
            let rows = c
                .query(
                    "SELECT e.seq, ts_headline('simple', e.text, q, 'StartSel=[, StopSel=], MaxFragments=1, MaxWords=24, MinWords=8')
                       FROM unnest($3::text[], $4::bigint[]) AS l(session, bound)
                       JOIN turnstone_events e ON e.session = l.session AND e.seq < l.bound,
                            websearch_to_tsquery('simple', $1) AS q
                      WHERE e.text IS NOT NULL AND to_tsvector('simple', e.text) @@ q
                      ORDER BY ts_rank(to_tsvector('simple', e.text), q) DESC, e.seq
                      LIMIT $2",
                    &[&query, &(limit.min(i64::MAX as usize) as i64), &names, &bounds],
                )
                .map_err(db("search"))?;
            Ok(rows
                .iter()
                .map(|r| Hit {
                    session: session.to_string(),
                    seq: r.get::<_, i64>(0) as u64,
                    snippet: r.get(1),
                })
                .collect())
        })
    }
}
