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
    let started = std::time::Instant::now();
    let mut report = crate::gc::collect(dir.as_ref(), opts, &|c| is_dead(c, &r, now))?;
    collect_blobs(dir.as_ref(), opts, &mut report)?;
    report.duration_us = started.elapsed().as_micros() as u64;
    Ok(report)
}

/// Remove the blob files (FORMAT.md §15) that no live event references,
/// after the segments are collected: the store is opened for writing, so
/// its lock keeps every writer out while the live set is computed and the
/// files are removed, then the blob directory is fsynced. Live: every blob
/// an event of a session that is not deleted references, its inherited
/// events included (a fork keeps its deleted parent's blobs). A blob that
/// a live event references but that is missing or damaged stops the
/// collection with that error before anything is removed. A crash between
/// removals leaves only unreferenced blobs, removed or not.
fn collect_blobs(dir: &Path, opts: &CollectOptions, report: &mut CollectReport) -> Result<()> {
    // A store without blob files is not opened at all (an open for writing
    // and its close would touch the log).
    let any = std::fs::read_dir(dir.join(crate::blobs::BLOB_DIR))
        .map(|rd| {
            rd.flatten().any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.ends_with(&format!(".{}", crate::blobs::BLOB_EXT)))
            })
        })
        .unwrap_or(false);
    if !any {
        return Ok(());
    }
    let store_opts = crate::Options {
        vfs: opts.vfs.clone(),
        read_only: opts.dry_run,
        ..Default::default()
    };
    let store = crate::Store::open_with(dir, store_opts)?;
    let present = store.blobs().list()?;
    report.blobs_examined = present.len() as u64;
    if !present.is_empty() {
        let live = crate::session::blob_refs::referenced_blobs(&store)?;
        for h in present.iter().filter(|h| !live.contains(*h)) {
            report.blobs_removed += 1;
            report.blob_bytes_reclaimed += if opts.dry_run {
                store.blobs().file_bytes(h)
            } else {
                store.blobs().remove(h)?
            };
        }
        if !opts.dry_run && report.blobs_removed > 0 {
            store.blobs().sync()?;
        }
    }
    store.close()
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
