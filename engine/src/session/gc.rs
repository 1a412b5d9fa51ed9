//! Segment collection with the session layer's liveness rules
//! ([`crate::gc::collect`], FORMAT.md §14): a session is dead when its last
//! event is its `session/delete` tombstone (FORMAT.md §10), or when a
//! [`Retention`] rule expires it at this collection. Its frames past every
//! live fork point are reclaimed, and from then on it is not found (like a
//! deleted session).
//!
//! Retention is applied by a collection, not at read time: an expired
//! session stays readable until a collection runs (`turnstone gc
//! --expire-after`). It reads the `ts` of the session's envelopes (§10): a
//! session whose events carry no `ts` (raw engine appends, the server's
//! stream records) never expires.

use std::path::Path;

use serde::Deserialize;

use crate::error::Result;
use crate::gc::{CollectCandidate, CollectOptions, CollectReport};
use crate::session::event::{self, CoreKind};

/// Store-wide retention rules, applied by a collection. `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Expire a session this long after its last event (TTL).
    pub expire_after_ms: Option<u64>,
    /// Expire a session this long after its first event (maximum age).
    pub max_age_ms: Option<u64>,
    /// "Now", milliseconds since the Unix epoch (`None`: the clock).
    pub now_ms: Option<u64>,
}

/// Collect the store in `dir`: every deleted session's garbage.
pub fn collect(dir: impl AsRef<Path>, opts: &CollectOptions) -> Result<CollectReport> {
    collect_with(dir, opts, &Retention::default())
}

/// Collect the store in `dir`: deleted sessions, and the sessions
/// `retention` expires now.
pub fn collect_with(
    dir: impl AsRef<Path>,
    opts: &CollectOptions,
    retention: &Retention,
) -> Result<CollectReport> {
    let r = *retention;
    let now = r.now_ms.unwrap_or_else(event::now_ms);
    crate::gc::collect(dir.as_ref(), opts, &|c| is_dead(c, &r, now))
}

/// The envelope's `ts`, if the payload is an envelope that has one.
fn ts(payload: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Ts {
        ts: Option<u64>,
    }
    serde_json::from_slice::<Ts>(payload).ok()?.ts
}

fn is_dead(c: &CollectCandidate<'_>, r: &Retention, now: u64) -> bool {
    let tombstone = CoreKind::SessionDelete.code();
    if c.last.is_some_and(|(kind, _)| kind == tombstone) {
        return true;
    }
    let older = |ev: Option<(u16, &[u8])>, limit: Option<u64>| match (ev, limit) {
        (Some((_, p)), Some(limit)) => ts(p).is_some_and(|t| now.saturating_sub(t) > limit),
        _ => false,
    };
    older(c.last, r.expire_after_ms) || older(c.first, r.max_age_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand<'a>(first: &'a [u8], last: &'a [u8], last_kind: u16) -> CollectCandidate<'a> {
        CollectCandidate {
            name: "s",
            len: 2,
            first: Some((5, first)),
            last: Some((last_kind, last)),
        }
    }

    #[test]
    fn tombstones_and_retention_decide_who_is_dead() {
        let old = br#"{"v":0,"ts":1000,"data":{}}"#;
        let new = br#"{"v":0,"ts":90000,"data":{}}"#;
        let none = br#"{"v":0,"data":{}}"#;
        let off = Retention::default();
        assert!(!is_dead(&cand(old, old, 5), &off, 100_000));
        assert!(is_dead(
            &cand(new, new, CoreKind::SessionDelete.code()),
            &off,
            100_000
        ));
        let ttl = Retention {
            expire_after_ms: Some(50_000),
            ..off
        };
        assert!(is_dead(&cand(old, old, 5), &ttl, 100_000));
        assert!(
            !is_dead(&cand(old, new, 5), &ttl, 100_000),
            "recent last event"
        );
        assert!(
            !is_dead(&cand(none, none, 5), &ttl, 100_000),
            "no ts: never expires"
        );
        let age = Retention {
            max_age_ms: Some(50_000),
            ..off
        };
        assert!(
            is_dead(&cand(old, new, 5), &age, 100_000),
            "first event too old"
        );
        assert!(!is_dead(&cand(new, new, 5), &age, 100_000));
        assert!(!is_dead(&cand(b"not json", b"\xff", 0xFFFF), &age, 100_000));
    }
}
