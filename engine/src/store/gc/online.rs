//! Online collection: [`Store::collect`] runs FORMAT.md §14.4 on a store
//! that is open for writing, while appends, syncs, reads and subscriptions
//! go on.
//!
//! Why the steps of §14.4 stay correct with writers running:
//! - Only segments before the durable position's segment are examined
//!   (`sealed`): every frame in them is durable and indexed, and appends go
//!   to later segments only. The active segment is never touched.
//! - Who is dead is decided from a census of the index taken under its
//!   lock, counting only sessions whose last event is durable (a tombstone
//!   not yet durable could vanish in a crash after the manifest names its
//!   session). Retention never expires a session held by a writable handle.
//! - Before the manifest is written, the reclaimed set is installed in the
//!   index under its write lock, after checking that no session decided
//!   dead gained an event or a fork since the census (if one did, nothing
//!   changes: `retry`). From then on appends and forks under those names
//!   are refused, exactly as after a reopen.
//! - While ranges are rewritten, index checkpoints are not written (the
//!   existing one is removed, step 3), so none names positions in files
//!   about to change.
//! - Each range's compacted file is written and fdatasynced with nothing
//!   held; then, under the collection gate's write side (readers hold its
//!   read side from copying positions out of the index until they have
//!   walked them), the file is renamed over the range's first id, the
//!   index positions of the moved frames are replaced and the reader's open
//!   files and maps of the range are dropped. A read therefore sees either
//!   the old files with the old positions or the new file with the new
//!   ones. Files already open or mapped by a finished read stay valid (a
//!   rename or removal does not change an open file's bytes).
//! - Closing the store stops a collection at its next segment or range
//!   (`Closed`), and waits for it, before the directory lock is released.
//! - The crash argument is §14.4's unchanged: the files on disk go through
//!   the same states, and frames appended meanwhile lie after the ranges.
//!
//! Blob files (FORMAT.md §15) are not this module's: the session layer's
//! `collect_live` sweeps them after the segments, under a
//! [`crate::blobs::BlobSweep`] (a writer's pinned blobs are kept).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::error::Result;
use crate::log::list_segments;
use crate::types::SegmentId;
use crate::vfs::Vfs;

use super::plan::Plan;
use super::rewrite::Moved;
use super::{
    check_threshold, make_plan, reclaimed, remove_checkpoints, remove_stale_temps, rewrite_ranges,
    Census, CollectCandidate, CollectOptions, CollectReport, Throttle,
};
use crate::error::Error;
use crate::store::{write_checkpoint, CheckpointWhy, Shared, Store};

/// Clears `gc_active` however the collection ends.
struct Active<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Store {
    /// Collect this store's sealed segments now, while it stays open for
    /// appends and reads (FORMAT.md §14.4; how it stays correct with
    /// writers running is in this module's documentation). `is_dead` says
    /// which sessions not yet reclaimed are dead
    /// ([`crate::session::lifecycle::gc::Background`] passes the session layer's
    /// rule). Reads and writes of the collection average at most
    /// `opts.rate_bytes_per_sec`. One collection runs at a time (a second
    /// call waits). Blob files are not collected here.
    pub fn collect(
        &self,
        opts: &CollectOptions,
        is_dead: &dyn Fn(&CollectCandidate<'_>) -> bool,
    ) -> Result<CollectReport> {
        self.check_writable()?;
        check_threshold(opts)?;
        let sh = &*self.shared;
        let _one = sh.gc_running.lock();
        if sh.gc_stop.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        sh.commit.lock().check_usable()?;
        let started = Instant::now();
        let vfs = sh.vfs.as_ref();
        let dir = sh.dir.as_path();
        if !opts.dry_run {
            // What an interrupted collection left (FORMAT.md §14: removed
            // by the next collection). Under the gate: no collection of
            // this store is writing one now.
            remove_stale_temps(vfs, dir)?;
        }
        // Segments before the durable position's are sealed and durable.
        let durable = sh.commit.durable();
        let tail_seg = durable.segment();
        let mut census = {
            let ix = sh.index.read();
            Census::of(&ix, |last| last.is_none_or(|p| p < durable.0))
        };
        for e in &mut census.sessions {
            e.held = self.live.live_since(&e.name).is_some();
        }
        let sealed_ids: Vec<SegmentId> = list_segments(vfs, dir)?
            .into_iter()
            .filter(|s| *s < tail_seg)
            .collect();
        let mut report = CollectReport {
            dry_run: opts.dry_run,
            ..Default::default()
        };
        let mut throttle = Throttle::new(opts.rate_bytes_per_sec, Some(&sh.gc_stop));
        let plan = make_plan(
            vfs,
            dir,
            sh.store_id,
            &census,
            &sealed_ids,
            tail_seg,
            opts,
            is_dead,
            &mut report,
            &mut throttle,
            &mut sh.gc_summaries.lock(),
        )?;
        if plan.ranges.is_empty() || opts.dry_run {
            rewrite_ranges(
                vfs,
                dir,
                sh.store_id,
                &plan,
                opts,
                &mut report,
                &mut throttle,
                &mut |_, _, _, _| unreachable!("a dry run installs nothing"),
                None,
            )?;
            report.duration_us = started.elapsed().as_micros() as u64;
            return Ok(report);
        }

        // Install the reclaimed set in the index, unless a session decided
        // dead changed since the census.
        if let Some(retry) = install_reclaimed(sh, &census, &plan, &report, started) {
            return Ok(retry);
        }
        // Step 2.
        if plan.manifest != census.reclaimed || !vfs.exists(&dir.join(reclaimed::MANIFEST_FILE)) {
            reclaimed::write(vfs, dir, sh.store_id, &plan.manifest)?;
        }
        // Step 3: no checkpoint is written from now until the end, and the
        // one on disk goes.
        sh.gc_active.store(true, Ordering::SeqCst);
        let active = Active(&sh.gc_active);
        {
            let mut last = sh.checkpoint_lock.lock();
            remove_checkpoints(vfs, dir)?;
            // The next roll writes one whatever its size.
            *last = None;
        }
        // Step 4, each range swapped in under the gate.
        rewrite_ranges(
            vfs,
            dir,
            sh.store_id,
            &plan,
            opts,
            &mut report,
            &mut throttle,
            &mut |tmp, dst, range, moved| swap_in(sh, vfs, tmp, dst, range, moved),
            Some(&sh.pool),
        )?;
        drop(active);
        if sh.opts.checkpoints {
            // Derived: a failure only costs the next open a longer scan.
            if write_checkpoint(sh, CheckpointWhy::Collect).is_err() {
                sh.commit.lock().stats.checkpoint_errors += 1;
            }
        }
        report.duration_us = started.elapsed().as_micros() as u64;
        Ok(report)
    }
}

/// Install the reclaimed set of `plan` in the index, under its write lock,
/// unless a session decided dead gained an event or a fork since the
/// census: then nothing changes and the report to return is `Some` (a
/// `retry`). From a `None` on, appends and forks under the reclaimed names
/// are refused, so the manifest may be written.
fn install_reclaimed(
    sh: &Shared,
    census: &Census,
    plan: &Plan,
    report: &CollectReport,
    started: Instant,
) -> Option<CollectReport> {
    let mut ix = sh.index.write();
    let n = census.sessions.len();
    let grew = plan.manifest.keys().any(|id| {
        !census.reclaimed.contains_key(id)
            && ix.sessions[id.0 as usize].len() != census.sessions[id.0 as usize].len
    });
    let forked = ix.sessions[n..].iter().any(|e| {
        e.parent
            .is_some_and(|(p, _)| plan.manifest.contains_key(&p))
    });
    if grew || forked {
        return Some(CollectReport {
            dry_run: false,
            retry: true,
            segments_examined: report.segments_examined,
            duration_us: started.elapsed().as_micros() as u64,
            ..Default::default()
        });
    }
    ix.set_reclaimed(plan.manifest.clone());
    sh.gc_generation.fetch_add(1, Ordering::SeqCst);
    None
}

/// An online collection's `install` for one range (step 4): under the
/// collection gate's write side, rename the durable compacted file `tmp`
/// over `dst`, point the index at the `moved` frames, and drop what the
/// reader and the kept summaries knew of the range's files `first ..= last`.
fn swap_in(
    sh: &Shared,
    vfs: &dyn Vfs,
    tmp: &Path,
    dst: &Path,
    (first, last): (SegmentId, SegmentId),
    moved: Vec<Moved>,
) -> Result<()> {
    let _gate = sh.gc_gate.write();
    vfs.rename(tmp, dst)
        .map_err(|e| Error::io("rename compacted segment", dst, e))?;
    let mut ix = sh.index.write();
    for (sid, seq, pos) in moved {
        let Some(e) = ix.sessions.get_mut(sid.0 as usize) else {
            continue;
        };
        match seq {
            None => e.define_pos = pos,
            Some(q) => {
                let own = q.checked_sub(e.inherited()).map(|o| o as usize);
                if let Some(slot) = own.and_then(|o| e.positions.get_mut(o)) {
                    *slot = pos.0;
                }
            }
        }
    }
    sh.gc_generation.fetch_add(1, Ordering::SeqCst);
    drop(ix);
    sh.reader.forget(first, last);
    sh.gc_summaries
        .lock()
        .retain(|id, _| *id < first || *id > last);
    Ok(())
}
