//! Segment collection (FORMAT.md §14): rewrite sealed segments whose live
//! fraction is low into compacted segments holding only their live frames,
//! grouped by session, and remove the files of the ranges they replace.
//!
//! It runs on demand on a store directory ([`collect`]): it takes the
//! store's lock (so no writer runs meanwhile), runs the recovery pass and its
//! repairs like a writable open, decides what is live, and then performs
//! the steps of §14.4, each durable before the next: the manifest of
//! reclaimed sessions, the removal of the index checkpoint, and per range
//! a temp file, its fdatasync, the rename over the range's first id, the
//! directory fsync, the removal of the range's other files and a directory
//! fsync. The crash argument is §14.4's: after a power cut at any of these
//! operations the store opens with the same sessions and events.
//!
//! Which sessions are dead is the caller's to say (the engine treats
//! payloads as opaque): [`crate::session::lifecycle::gc::collect`] passes the session
//! layer's rule (the last event is a `session/delete` tombstone).
//!
//! The module is split by idea, each file keeping one part of the
//! argument:
//! - `types`: the options, the candidate the liveness rule is asked about,
//!   and the report (re-exported here);
//! - `read`: reading sealed segments, every frame checked;
//! - `summary`: what is kept of a sealed segment between online runs;
//! - `plan`: step 1, deciding what is dead and which ranges to rewrite;
//! - `steps`: step 3 (the checkpoint goes) and the removal of an
//!   interrupted collection's temp files;
//! - `rewrite`: step 4, the compacted files and the removal of the files
//!   they supersede;
//! - `throttle`: pacing, and stopping an online collection;
//! - `online`: the collection of an open store ([`crate::Store::collect`]).

use std::path::Path;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::index::reclaimed;
use crate::recovery::{self, RecoveryMode};
use crate::types::SegmentId;

use super::LOCK_FILE;

mod online;
mod plan;
mod read;
mod rewrite;
mod steps;
mod summary;
mod throttle;
mod types;

use plan::{make_plan, Census};
use rewrite::rewrite_ranges;
use steps::{remove_checkpoints, remove_stale_temps};
pub(crate) use summary::Summaries;
use throttle::Throttle;
pub use types::{CollectCandidate, CollectOptions, CollectReport};

fn check_threshold(opts: &CollectOptions) -> Result<()> {
    if !(0.0..=1.0).contains(&opts.threshold) {
        return Err(Error::InvalidArgument(format!(
            "gc threshold {} is not between 0 and 1",
            opts.threshold
        )));
    }
    Ok(())
}

/// Collect the store in `dir` (FORMAT.md §14.4). `is_dead` says which
/// sessions not yet reclaimed are dead.
pub fn collect(
    dir: &Path,
    opts: &CollectOptions,
    is_dead: &dyn Fn(&CollectCandidate<'_>) -> bool,
) -> Result<CollectReport> {
    let started = Instant::now();
    let vfs = opts.vfs.as_ref();
    if !vfs.is_dir(dir) {
        return Err(Error::NoStore {
            dir: dir.to_path_buf(),
            detail: "no such directory".into(),
        });
    }
    check_threshold(opts)?;
    let _lock = vfs
        .lock_exclusive(&dir.join(LOCK_FILE))
        .map_err(|e| Error::Locked {
            dir: dir.to_path_buf(),
            detail: e.to_string(),
        })?;
    // Recover (and, unless dry, repair) like a writable open, with a full
    // scan: the collection reads every sealed segment anyway, and the
    // segments a checkpoint covers are not listed by a scan from it.
    let rec = recovery::recover(vfs, dir, RecoveryMode::TolerateTornTail, None, None, true)?;
    let had_bad_checkpoint = false;
    let (Some(store_id), Some((tail_seg, _, _))) = (rec.store_id, rec.tail) else {
        return Err(Error::NoStore {
            dir: dir.to_path_buf(),
            detail: "no segment files".into(),
        });
    };
    if !opts.dry_run {
        recovery::apply(vfs, dir, &rec, had_bad_checkpoint)?;
        remove_stale_temps(vfs, dir)?;
    }
    let census = Census::of(&rec.index, |_| true);
    let sealed_ids: Vec<SegmentId> = rec
        .segments
        .iter()
        .copied()
        .filter(|s| *s < tail_seg)
        .collect();
    let mut report = CollectReport {
        dry_run: opts.dry_run,
        ..Default::default()
    };
    let mut throttle = Throttle::new(None, None);
    let plan = make_plan(
        vfs,
        dir,
        store_id,
        &census,
        &sealed_ids,
        tail_seg,
        opts,
        is_dead,
        &mut report,
        &mut throttle,
        &mut Summaries::new(),
    )?;
    if !plan.ranges.is_empty() && !opts.dry_run {
        // Step 2: the manifest, before any tombstone goes. It is written
        // whenever a segment is rewritten, even with no entry (a regroup of
        // a store with nothing dead): recovery looks for compacted headers
        // only in a store that has one (§14.3).
        if plan.manifest != census.reclaimed || !vfs.exists(&dir.join(reclaimed::MANIFEST_FILE)) {
            reclaimed::write(vfs, dir, store_id, &plan.manifest)?;
        }
        // Step 3: no checkpoint names positions in the files that change.
        remove_checkpoints(vfs, dir)?;
    }
    rewrite_ranges(
        vfs,
        dir,
        store_id,
        &plan,
        opts,
        &mut report,
        &mut throttle,
        &mut |tmp, dst, _, _| {
            vfs.rename(tmp, dst)
                .map_err(|e| Error::io("rename compacted segment", dst, e))
        },
        None,
    )?;
    report.duration_us = started.elapsed().as_micros() as u64;
    Ok(report)
}
