//! Removing deleted sessions' events from the database
//! ([`PgLog::collect_deleted`]): what the embedded store's segment
//! collection does for its segment files (FORMAT.md §14), so that a
//! database's size follows its live data too.
//!
//! A deleted session keeps its row (its name is never reused, as in the
//! embedded store) but its events are removed, except the prefix its forks
//! still read by reference. A fork `c` of `p` at `fork_seq` reads `p`'s
//! chain below `fork_seq`, so `p` keeps its rows below
//! `min(need(c), fork_seq)` for every child `c`, where `need` of a live
//! session is its length and `need` of a deleted one is what its own
//! children need of it, computed the same way (children first). A deleted
//! session gets no new fork ([`PgLog::fork`] refuses it under a row lock),
//! and the need of its children only shrinks (a live child may be deleted
//! later), so a collection computed from one read of the sessions never
//! removes an event any reader can still reach. Rows removed are freed for
//! reuse by PostgreSQL's (auto)vacuum; the files do not shrink.
//!
//! A deleted session whose need is 0 is emptied for good: it is marked
//! `collected` and never read again. Each collection reads only the
//! deleted sessions not marked yet and their descendants (what their need
//! depends on), so its cost follows the deleted sessions forks still
//! read, not every session the database ever held.

use std::collections::HashMap;

use crate::error::{db, Result};
use crate::PgLog;

/// What one collection removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgCollectReport {
    /// Deleted sessions examined (those not emptied for good before).
    pub deleted_sessions: u64,
    /// Events removed.
    pub events_removed: u64,
    /// Snapshots (projection caches, state snapshots) of deleted sessions
    /// removed.
    pub snapshots_removed: u64,
}

/// One session as the collection reads it.
struct Node {
    parent: Option<String>,
    fork_seq: u64,
    len: u64,
    deleted: bool,
}

/// How many of each session's events (by seq) a reader can still reach:
/// a live session all of its length, a deleted one what its children
/// read of it (0 without children).
fn needs(nodes: &HashMap<String, Node>) -> HashMap<&str, u64> {
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for (id, n) in nodes {
        if let Some(p) = &n.parent {
            children.entry(p.as_str()).or_default().push(id.as_str());
        }
    }
    let mut need: HashMap<&str, u64> = HashMap::with_capacity(nodes.len());
    // Children before parents, without recursion (fork chains can be deep).
    for root in nodes.keys() {
        if need.contains_key(root.as_str()) {
            continue;
        }
        let mut stack: Vec<(&str, bool)> = vec![(root.as_str(), false)];
        while let Some((id, expanded)) = stack.pop() {
            if need.contains_key(id) {
                continue;
            }
            let kids = children.get(id).map(Vec::as_slice).unwrap_or(&[]);
            if !expanded {
                stack.push((id, true));
                for k in kids {
                    if !need.contains_key(k) {
                        stack.push((k, false));
                    }
                }
                continue;
            }
            let n = &nodes[id];
            let v = if !n.deleted {
                n.len
            } else {
                kids.iter()
                    .map(|k| need[k].min(nodes[*k].fork_seq))
                    .max()
                    .unwrap_or(0)
            };
            need.insert(id, v);
        }
    }
    need
}

impl PgLog {
    /// Remove the events of deleted sessions that no fork reads (see the
    /// module's documentation), and their snapshots. Safe to run while
    /// writers append and readers read, from any number of processes at
    /// once.
    pub fn collect_deleted(&self) -> Result<PgCollectReport> {
        self.with_client(|c| {
            let rows = c
                .query(
                    "WITH RECURSIVE sub AS (
                        SELECT id, parent, fork_seq, len, deleted, collected
                          FROM turnstone_sessions WHERE deleted AND NOT collected
                        UNION
                        SELECT s.id, s.parent, s.fork_seq, s.len, s.deleted, s.collected
                          FROM turnstone_sessions s JOIN sub ON s.parent = sub.id
                    )
                    SELECT id, parent, fork_seq, len, deleted, collected FROM sub",
                    &[],
                )
                .map_err(db("read sessions"))?;
            // Only the candidates (deleted, not emptied yet) are collected;
            // their descendants are read for their needs.
            let candidates: Vec<String> = rows
                .iter()
                .filter(|r| r.get::<_, bool>(4) && !r.get::<_, bool>(5))
                .map(|r| r.get(0))
                .collect();
            let nodes: HashMap<String, Node> = rows
                .iter()
                .map(|r| {
                    (
                        r.get::<_, String>(0),
                        Node {
                            parent: r.get(1),
                            fork_seq: r.get::<_, i64>(2).max(0) as u64,
                            len: r.get::<_, i64>(3).max(0) as u64,
                            deleted: r.get(4),
                        },
                    )
                })
                .collect();
            let need = needs(&nodes);
            let mut ids: Vec<&str> = Vec::new();
            let mut keep: Vec<i64> = Vec::new();
            let mut emptied: Vec<&str> = Vec::new();
            for id in &candidates {
                let v = need[id.as_str()];
                ids.push(id);
                keep.push(v as i64);
                if v == 0 {
                    emptied.push(id);
                }
            }
            let mut report = PgCollectReport {
                deleted_sessions: ids.len() as u64,
                ..Default::default()
            };
            if ids.is_empty() {
                return Ok(report);
            }
            report.events_removed = c
                .execute(
                    "DELETE FROM turnstone_events e
                      USING unnest($1::text[], $2::bigint[]) AS k(session, keep)
                      WHERE e.session = k.session AND e.seq >= k.keep",
                    &[&ids, &keep],
                )
                .map_err(db("remove deleted sessions' events"))?;
            report.snapshots_removed = c
                .execute(
                    "DELETE FROM turnstone_snapshots WHERE session = ANY($1::text[])",
                    &[&ids],
                )
                .map_err(db("remove deleted sessions' snapshots"))?;
            // Emptied for good (nothing can need them again): not read by
            // later collections. A crash before this only repeats the work.
            c.execute(
                "UPDATE turnstone_sessions SET collected = true WHERE id = ANY($1::text[])",
                &[&emptied],
            )
            .map_err(db("mark deleted sessions collected"))?;
            Ok(report)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(parent: Option<&str>, fork_seq: u64, len: u64, deleted: bool) -> Node {
        Node {
            parent: parent.map(str::to_string),
            fork_seq,
            len,
            deleted,
        }
    }

    #[test]
    fn a_deleted_session_keeps_what_its_live_descendants_read() {
        let mut n = HashMap::new();
        // a (deleted, 10 events) <- b at 6 (deleted, 12) <- c at 8 (live, 9)
        n.insert("a".to_string(), node(None, 0, 10, true));
        n.insert("b".to_string(), node(Some("a"), 6, 12, true));
        n.insert("c".to_string(), node(Some("b"), 8, 9, false));
        // d (deleted, 5) with a deleted child e: nothing needed.
        n.insert("d".to_string(), node(None, 0, 5, true));
        n.insert("e".to_string(), node(Some("d"), 3, 4, true));
        // f live with a deleted fork g: f needs all of itself.
        n.insert("f".to_string(), node(None, 0, 7, false));
        n.insert("g".to_string(), node(Some("f"), 7, 9, true));
        let need = needs(&n);
        assert_eq!(need["c"], 9);
        assert_eq!(need["b"], 8, "c reads b's chain below 8");
        assert_eq!(need["a"], 6, "b's need reaches a only below b's fork seq");
        assert_eq!((need["d"], need["e"]), (0, 0));
        assert_eq!((need["f"], need["g"]), (7, 0));
    }

    #[test]
    fn a_deep_fork_chain_needs_no_recursion() {
        let mut n = HashMap::new();
        n.insert("s0".to_string(), node(None, 0, 2, true));
        for i in 1..100_000u64 {
            let parent = format!("s{}", i - 1);
            n.insert(format!("s{i}"), node(Some(&parent), 1, 2, true));
        }
        n.get_mut("s99999").unwrap().deleted = false;
        let need = needs(&n);
        assert_eq!(need["s99999"], 2);
        assert_eq!(need["s0"], 1);
    }
}
