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

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::frame::{
    decode_frame, encode_frame, BatchHeader, Compaction, Salt, SegmentHeader, BATCH_BODY_BYTES_MAX,
    BATCH_HEADER_BYTES, KIND_SESSION_DEFINE, SEGMENT_HEADER_BYTES,
};
use crate::index::checkpoint;
use crate::index::reclaimed::{self, Reclaimed, MANIFEST_TMP_FILE};
use crate::log::{read_segment, segment_path, SegmentBytes, SegmentPool};
use crate::recovery::{self, check_batch, RecoveryMode};
use crate::types::{LogPos, SegmentId, SessionId};
use crate::vfs::{OsVfs, Vfs};

use super::LOCK_FILE;

mod online;

/// How a collection runs.
#[derive(Debug, Clone)]
pub struct CollectOptions {
    /// The file layer (the simulated one in crash tests).
    pub vfs: Arc<dyn Vfs>,
    /// A sealed segment is rewritten when its live bytes are below this
    /// fraction of its data (0.0 rewrites only segments with no live
    /// frame; 1.0 every segment holding garbage). Default 0.5.
    pub threshold: f64,
    /// Live bytes at most in one compacted file: a longer run of selected
    /// segments is split into several ranges. Default 256 MiB.
    pub max_range_bytes: u64,
    /// Decide and report, change nothing (no repair either).
    pub dry_run: bool,
    /// Also rewrite sealed segments that hold no garbage (every ordinary
    /// sealed segment is selected), so that each session's frames sit
    /// together in the compacted files (FORMAT.md §14.3: frames grouped by
    /// session): the locality a cold read of one session wants (issue 21).
    /// Already compacted files without garbage are left alone.
    pub regroup: bool,
    /// An online collection ([`crate::Store::collect`]) reads and writes at
    /// most this many bytes per second on average (`None`: no limit; the
    /// on-demand collection ignores it).
    pub rate_bytes_per_sec: Option<u64>,
    /// Keep at most this many bytes of live frames in the sealed segments
    /// (retention by size): when over, sessions are evicted (declared
    /// dead) oldest last event first, those the rule allows
    /// ([`CollectCandidate::evicting`]). Counted from the sealed segments
    /// only; the active segment is not.
    pub max_live_bytes: Option<u64>,
}

impl Default for CollectOptions {
    fn default() -> Self {
        CollectOptions {
            vfs: Arc::new(OsVfs),
            threshold: 0.5,
            max_range_bytes: 256 << 20,
            dry_run: false,
            regroup: false,
            rate_bytes_per_sec: None,
            max_live_bytes: None,
        }
    }
}

/// One session, as the liveness rule sees it.
#[derive(Debug)]
pub struct CollectCandidate<'a> {
    pub name: &'a str,
    /// Events, inherited ones included.
    pub len: u64,
    /// Kind and payload of its first own event (a fork's first event after
    /// its fork point; `None` if it has none).
    pub first: Option<(u16, &'a [u8])>,
    /// Kind and payload of its last event (`None` if it has none).
    pub last: Option<(u16, &'a [u8])>,
    /// A writable handle holds the session in this process (an online
    /// collection; always false on demand, where the store is closed).
    /// Retention never expires a held session.
    pub held: bool,
    /// The question is not "is it dead?" but "may it be evicted to bring
    /// the live bytes under `CollectOptions::max_live_bytes`?" (asked of
    /// sessions not dead, oldest last event first).
    pub evicting: bool,
}

/// What a collection did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CollectReport {
    pub dry_run: bool,
    /// Sealed segment files looked at (the last segment is never touched).
    pub segments_examined: u32,
    /// Compacted files written (one per range).
    pub ranges_rewritten: u32,
    /// Segment files removed (the other files of each range).
    pub segment_files_removed: u32,
    /// Sessions dead at this collection that were not reclaimed before.
    pub sessions_reclaimed: u64,
    /// Of those, the ones evicted by `max_live_bytes`.
    pub sessions_evicted: u64,
    /// Bytes of the sealed segment files before.
    pub bytes_before: u64,
    /// Bytes of live frames in them (FORMAT.md §14.1), padding included.
    pub bytes_live: u64,
    /// Bytes of the sealed segment files after.
    pub bytes_after: u64,
    /// `bytes_before - bytes_after` (0 if a rewrite grew the files: one
    /// batch header per session in a compacted file can outweigh a little
    /// garbage).
    pub bytes_reclaimed: u64,
    /// Blob files looked at (FORMAT.md §15; filled by the session layer's
    /// collection, [`crate::session::lifecycle::gc`], after the segments).
    pub blobs_examined: u64,
    /// Blob files no live event references, removed (or, dry, that would be).
    pub blobs_removed: u64,
    /// Their bytes.
    pub blob_bytes_reclaimed: u64,
    pub duration_us: u64,
    /// Bytes of segment files read and written by this collection (an
    /// online collection reads only segments sealed since its last run,
    /// and the ones it rewrites).
    pub bytes_io: u64,
    /// Define frames a rewrite moved (session, old position, new
    /// position): derived files keyed by a session's define position (its
    /// snapshots, FORMAT.md §12 and §17) can follow them
    /// ([`crate::session::views::snapshot::rebase_defines`]).
    #[serde(skip)]
    pub moved_defines: Vec<(String, LogPos, LogPos)>,
    /// An online collection found a session it had decided was dead
    /// written to (or forked) before it could reclaim it, and changed
    /// nothing; the next collection decides again.
    pub retry: bool,
}

/// A frame of a sealed segment, as the collector walks it.
struct WalkedFrame {
    /// Offset of the frame in its segment file.
    at: u32,
    session: SessionId,
    kind: u16,
    flags: u16,
    seq: u64,
    /// Payload's byte range in its segment's bytes.
    payload: (usize, usize),
    padded: u64,
}

struct Sealed {
    id: SegmentId,
    header: SegmentHeader,
    compaction: Option<Compaction>,
    file_len: u64,
    data_end: u64,
    live_bytes: u64,
    dead_bytes: u64,
    /// It holds a live event frame (not only defines).
    live_events: bool,
    /// Its define frames: (offset, padded length).
    defines: Vec<(u32, u32)>,
}

/// What a collection needs to know of a sealed segment to decide, without
/// reading it again: an online collection keeps these between runs (sealed
/// segments never change but by a collection, which drops the summaries
/// of the files it replaces).
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    header: SegmentHeader,
    compaction: Option<Compaction>,
    file_len: u64,
    data_end: u64,
    /// Padded bytes of define frames (always live).
    define_bytes: u64,
    /// Where they lie: (offset, padded length). A rewrite reads only these
    /// of a file that holds no live event.
    defines: Vec<(u32, u32)>,
    /// Per session, its event frames here: first seq, last seq, padded
    /// bytes.
    sessions: Vec<SessionSpan>,
}

#[derive(Debug, Clone)]
struct SessionSpan {
    session: SessionId,
    first_seq: u64,
    last_seq: u64,
    bytes: u64,
}

/// Summaries by segment id.
pub(crate) type Summaries = HashMap<SegmentId, Summary>;

fn summarize(
    header: SegmentHeader,
    compaction: Option<Compaction>,
    file_len: u64,
    data_end: u64,
    frames: &[WalkedFrame],
) -> Summary {
    let mut define_bytes = 0;
    let mut defines = Vec::new();
    let mut by: std::collections::BTreeMap<SessionId, SessionSpan> = Default::default();
    for f in frames {
        if f.kind == KIND_SESSION_DEFINE {
            define_bytes += f.padded;
            let at = f.payload.0 - crate::frame::FRAME_HEADER_BYTES;
            defines.push((at as u32, f.padded as u32));
            continue;
        }
        let e = by.entry(f.session).or_insert(SessionSpan {
            session: f.session,
            first_seq: f.seq,
            last_seq: f.seq,
            bytes: 0,
        });
        e.first_seq = e.first_seq.min(f.seq);
        e.last_seq = e.last_seq.max(f.seq);
        e.bytes += f.padded;
    }
    Summary {
        header,
        compaction,
        file_len,
        data_end,
        define_bytes,
        defines,
        sessions: by.into_values().collect(),
    }
}

/// One session as a collection sees it, copied out of the index.
struct CensusEntry {
    name: Arc<str>,
    len: u64,
    parent: Option<(SessionId, u64)>,
    first: Option<u64>,
    last: Option<u64>,
    /// Whether the session may be declared dead now (an online collection
    /// only decides on what is durable).
    eligible: bool,
    /// A writable handle holds it in this process (online only).
    held: bool,
}

/// The sessions of a store at one moment (§14.1's input).
struct Census {
    sessions: Vec<CensusEntry>,
    reclaimed: Reclaimed,
}

impl Census {
    fn of(ix: &crate::index::Index, eligible: impl Fn(Option<u64>) -> bool) -> Census {
        let sessions = ix
            .sessions
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let id = SessionId(i as u32);
                let last = ix.last_position(id);
                CensusEntry {
                    name: e.name.clone(),
                    len: e.len(),
                    parent: e.parent,
                    first: ix.position(id, e.inherited()),
                    last,
                    eligible: eligible(last),
                    held: false,
                }
            })
            .collect();
        Census {
            sessions,
            reclaimed: ix.reclaimed.clone(),
        }
    }
}

/// What a collection decided before it changes anything.
struct Plan {
    manifest: Reclaimed,
    need: Vec<u64>,
    sealed: Vec<Sealed>,
    ranges: Vec<std::ops::Range<usize>>,
    /// `first_batch_seq` of the segment after the last sealed one.
    tail_first_batch_seq: u64,
    /// Session names by compact id (for `moved_defines`).
    names: Vec<Arc<str>>,
}

impl Plan {
    fn live(&self, f: &WalkedFrame) -> bool {
        f.kind == KIND_SESSION_DEFINE
            || self
                .need
                .get(f.session.0 as usize)
                .is_none_or(|n| f.seq < *n)
    }
}

/// A frame a rewrite moved: `(session, None)` for its define frame, or
/// `(session, Some(seq))` for an event frame, and where it lies now.
type Moved = (SessionId, Option<u64>, LogPos);

/// Puts a range's durable compacted file in place: `(tmp, dst, (first id,
/// last id), moved frames)`.
type Install<'a> = dyn FnMut(&Path, &Path, (SegmentId, SegmentId), Vec<Moved>) -> Result<()> + 'a;

/// Sleeps so that a collection's reads and writes stay under a rate, and
/// stops an online collection when its store closes.
struct Throttle<'a> {
    rate: Option<u64>,
    started: Instant,
    bytes: u64,
    stop: Option<&'a std::sync::atomic::AtomicBool>,
}

impl<'a> Throttle<'a> {
    fn new(rate: Option<u64>, stop: Option<&'a std::sync::atomic::AtomicBool>) -> Throttle<'a> {
        Throttle {
            rate,
            started: Instant::now(),
            bytes: 0,
            stop,
        }
    }
    fn stopped(&self) -> Result<()> {
        match self.stop {
            Some(s) if s.load(std::sync::atomic::Ordering::SeqCst) => Err(Error::Closed),
            _ => Ok(()),
        }
    }
    fn consume(&mut self, bytes: u64) -> Result<()> {
        self.stopped()?;
        self.bytes += bytes;
        let Some(rate) = self.rate.filter(|r| *r > 0) else {
            return Ok(());
        };
        let due = std::time::Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        while let Some(wait) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(wait.min(std::time::Duration::from_millis(50)));
            self.stopped()?;
        }
        Ok(())
    }
}

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

/// Step 3 of §14.4: remove `index.ckpt`, its deltas and their temporary
/// files, durably.
fn remove_checkpoints(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    checkpoint::remove(vfs, dir)?;
    for tmp in [checkpoint::CHECKPOINT_TMP_FILE, checkpoint::DELTA_TMP_FILE] {
        let tmp = dir.join(tmp);
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)
                .map_err(|e| Error::io("remove stale checkpoint", &tmp, e))?;
        }
    }
    vfs.sync_dir(dir)
        .map_err(|e| Error::io("fsync directory", dir, e))
}

/// Step 1 of §14.4: decide the dead sessions and `need` (§14.1), walk the
/// sealed segments `sealed_ids` (every segment before `tail_seg`) and
/// select the ranges to rewrite.
#[allow(clippy::too_many_arguments)]
fn make_plan(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    census: &Census,
    sealed_ids: &[SegmentId],
    tail_seg: SegmentId,
    opts: &CollectOptions,
    is_dead: &dyn Fn(&CollectCandidate<'_>) -> bool,
    report: &mut CollectReport,
    throttle: &mut Throttle<'_>,
    summaries: &mut Summaries,
) -> Result<Plan> {
    let at = Place { vfs, dir, store_id };
    let listed = list_sealed(&at, sealed_ids, throttle, summaries)?;
    let dead = decide_dead(&at, census, &listed, summaries, opts, is_dead, report)?;
    let need = needs(census, &dead);
    let n = census.sessions.len();
    let manifest: Reclaimed = (0..n)
        .filter(|i| dead[*i])
        .map(|i| (SessionId(i as u32), need[i]))
        .collect();
    let mut plan = Plan {
        manifest,
        need,
        sealed: Vec::new(),
        ranges: Vec::new(),
        tail_first_batch_seq: 0,
        names: census.sessions.iter().map(|e| e.name.clone()).collect(),
    };
    weigh_sealed(&at, &mut plan, &listed, summaries, report, throttle)?;
    plan.ranges = select_ranges(&plan.sealed, opts);
    if !plan.ranges.is_empty() {
        let path = segment_path(dir, tail_seg);
        let b = read_segment(vfs, &path, true)?;
        plan.tail_first_batch_seq = SegmentHeader::decode(&b)
            .map(|h| h.first_batch_seq)
            .map_err(|e| Error::corrupt(&path, 0, format!("segment header: {e}")))?;
    } else {
        report.sessions_reclaimed = 0; // nothing written: nothing reclaimed yet
    }
    Ok(plan)
}

/// Where a collection reads: the store's files and its id.
struct Place<'a> {
    vfs: &'a dyn Vfs,
    dir: &'a Path,
    store_id: [u8; 16],
}

/// The sealed segments to examine, their summaries loaded into
/// `summaries` (read once; an online collection keeps them). A file inside
/// the range of a compacted file before it is superseded (§14.3; an
/// interrupted removal) and skipped.
fn list_sealed(
    at: &Place<'_>,
    sealed_ids: &[SegmentId],
    throttle: &mut Throttle<'_>,
    summaries: &mut Summaries,
) -> Result<Vec<SegmentId>> {
    let Place { vfs, dir, store_id } = *at;
    let mut listed: Vec<SegmentId> = Vec::new();
    let mut covered_to: Option<SegmentId> = None;
    for id in sealed_ids.iter().copied() {
        if covered_to.is_some_and(|c| id <= c) {
            continue;
        }
        let sum = match summaries.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let (bytes, frames, data_end, header, compaction) =
                    load_segment(vfs, dir, store_id, id)?;
                throttle.consume(data_end)?;
                v.insert(summarize(
                    header,
                    compaction,
                    bytes.len() as u64,
                    data_end,
                    &frames,
                ))
            }
        };
        covered_to = sum.compaction.map(|c| c.last_segment);
        listed.push(id);
    }

    Ok(listed)
}

/// §14.1: which sessions are dead (already reclaimed, dead by `is_dead`,
/// or evicted to bring the live bytes under `opts.max_live_bytes`).
fn decide_dead(
    at: &Place<'_>,
    census: &Census,
    listed: &[SegmentId],
    summaries: &Summaries,
    opts: &CollectOptions,
    is_dead: &dyn Fn(&CollectCandidate<'_>) -> bool,
    report: &mut CollectReport,
) -> Result<Vec<bool>> {
    let Place { vfs, dir, store_id } = *at;
    let n = census.sessions.len();
    let mut cache: HashMap<SegmentId, SegmentBytes> = HashMap::new();
    let mut dead: Vec<bool> = (0..n)
        .map(|i| census.reclaimed.contains_key(&SessionId(i as u32)))
        .collect();
    let mut ask = |i: usize, evicting: bool| -> Result<bool> {
        let e = &census.sessions[i];
        let last = match e.last {
            None => None,
            Some(p) => Some(frame_at(vfs, dir, store_id, &mut cache, LogPos(p))?),
        };
        let first = match e.first {
            None => None,
            Some(p) => Some(frame_at(vfs, dir, store_id, &mut cache, LogPos(p))?),
        };
        Ok(is_dead(&CollectCandidate {
            name: &e.name,
            len: e.len,
            first: first.as_ref().map(|(k, p)| (*k, p.as_slice())),
            last: last.as_ref().map(|(k, p)| (*k, p.as_slice())),
            held: e.held,
            evicting,
        }))
    };
    for (i, d) in dead.iter_mut().enumerate() {
        if *d || !census.sessions[i].eligible {
            continue;
        }
        if ask(i, false)? {
            *d = true;
            report.sessions_reclaimed += 1;
        }
    }
    if let Some(max) = opts.max_live_bytes {
        // Over the budget: evict the sessions whose last event is oldest
        // first, as far as the rule lets (an estimate: a session's bytes
        // are counted whole, also where a live fork still reads a prefix).
        let mut own = vec![0u64; n];
        let mut live_total = 0u64;
        for id in listed {
            let sum = &summaries[id];
            live_total += sum.define_bytes;
            for span in &sum.sessions {
                if let Some(b) = own.get_mut(span.session.0 as usize) {
                    *b += span.bytes;
                }
            }
        }
        live_total += (0..n).filter(|i| !dead[*i]).map(|i| own[i]).sum::<u64>();
        let mut order: Vec<usize> = (0..n)
            .filter(|i| !dead[*i] && census.sessions[*i].eligible)
            .collect();
        order.sort_by_key(|i| census.sessions[*i].last.unwrap_or(0));
        for i in order {
            if live_total <= max {
                break;
            }
            if own[i] > 0 && ask(i, true)? {
                dead[i] = true;
                live_total -= own[i];
                report.sessions_reclaimed += 1;
                report.sessions_evicted += 1;
            }
        }
    }
    Ok(dead)
}

/// The live and dead bytes of each listed sealed segment, into
/// `plan.sealed` (a segment where a dead fork parent's prefix ends is
/// counted frame by frame).
fn weigh_sealed(
    at: &Place<'_>,
    plan: &mut Plan,
    listed: &[SegmentId],
    summaries: &Summaries,
    report: &mut CollectReport,
    throttle: &mut Throttle<'_>,
) -> Result<()> {
    let Place { vfs, dir, store_id } = *at;
    for id in listed.iter().copied() {
        let sum = &summaries[&id];
        let (mut live_bytes, mut dead_bytes) = (sum.define_bytes, 0);
        let mut live_events = false;
        let mut partial = false;
        for span in &sum.sessions {
            let need = plan
                .need
                .get(span.session.0 as usize)
                .copied()
                .unwrap_or(u64::MAX);
            if need > span.last_seq {
                live_bytes += span.bytes;
                live_events = true;
            } else if need <= span.first_seq {
                dead_bytes += span.bytes;
            } else {
                partial = true;
            }
        }
        if partial {
            // A dead fork parent's prefix ends inside this segment: count
            // frame by frame.
            let (_, frames, data_end, _, _) = load_segment(vfs, dir, store_id, id)?;
            throttle.consume(data_end)?;
            (live_bytes, dead_bytes, live_events) = (0, 0, false);
            for f in &frames {
                if plan.live(f) {
                    live_bytes += f.padded;
                    live_events |= f.kind != KIND_SESSION_DEFINE;
                } else {
                    dead_bytes += f.padded;
                }
            }
        }
        report.segments_examined += 1;
        report.bytes_before += sum.file_len;
        report.bytes_live += live_bytes;
        plan.sealed.push(Sealed {
            id,
            header: sum.header,
            compaction: sum.compaction,
            file_len: sum.file_len,
            data_end: sum.data_end,
            live_bytes,
            dead_bytes,
            live_events,
            defines: sum.defines.clone(),
        });
    }

    Ok(())
}

/// The runs of selected sealed segments, cut into ranges of at most
/// `opts.max_range_bytes` live bytes (a run's first segment always goes).
fn select_ranges(sealed: &[Sealed], opts: &CollectOptions) -> Vec<std::ops::Range<usize>> {
    // Selected: holds garbage, and no live event or live bytes below the
    // threshold (defines are always live, §14.1).
    let selected = |s: &Sealed| {
        (opts.regroup && s.compaction.is_none())
            || (s.dead_bytes > 0
                && (!s.live_events || (s.live_bytes as f64) < opts.threshold * s.data_end as f64))
    };
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    let mut i = 0;
    while i < sealed.len() {
        if !selected(&sealed[i]) {
            i += 1;
            continue;
        }
        let start = i;
        let mut bytes = 0;
        while i < sealed.len()
            && selected(&sealed[i])
            && (i == start || bytes + sealed[i].live_bytes <= opts.max_range_bytes)
        {
            bytes += sealed[i].live_bytes;
            i += 1;
        }
        ranges.push(start..i);
    }
    ranges
}

/// `need` of §14.1 for every session, given which are dead: a live
/// session's length; a dead one's, the longest prefix its live fork
/// descendants read (never more than the manifest already keeps).
fn needs(census: &Census, dead: &[bool]) -> Vec<u64> {
    let n = census.sessions.len();
    let mut need = vec![0u64; n];
    let mut reach = vec![0u64; n];
    for i in (0..n).rev() {
        let e = &census.sessions[i];
        need[i] = if dead[i] {
            let r = reach[i];
            census
                .reclaimed
                .get(&SessionId(i as u32))
                .map_or(r, |k| r.min(*k))
        } else {
            e.len
        };
        if let Some((p, upto)) = e.parent {
            if (p.0 as usize) < i {
                let r = &mut reach[p.0 as usize];
                *r = (*r).max(need[i].min(upto));
            }
        }
    }
    need
}

/// Step 4 of §14.4 for every range of `plan` (or, dry, only its report).
/// `install(tmp, dst, moved)` puts the durable compacted file in place
/// (a rename) and tells the caller where the range's live frames lie now.
/// The files a range no longer needs are offered to `pool` (an online
/// collection: they may become free files), else removed.
#[allow(clippy::too_many_arguments)]
fn rewrite_ranges(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    plan: &Plan,
    opts: &CollectOptions,
    report: &mut CollectReport,
    throttle: &mut Throttle<'_>,
    install: &mut Install<'_>,
    pool: Option<&SegmentPool>,
) -> Result<()> {
    let sealed = &plan.sealed;
    let mut after = report.bytes_before;
    for r in &plan.ranges {
        let files = &sealed[r.clone()];
        let first = &files[0];
        let last = &files[files.len() - 1];
        let compaction = Compaction {
            last_segment: last.compaction.map_or(last.id, |c| c.last_segment),
            next_batch_seq: sealed
                .get(r.end)
                .map_or(plan.tail_first_batch_seq, |s| s.header.first_batch_seq),
        };
        let header = compaction.encode_header(&first.header);
        // Read the range's files (a dry run too: its report is exact).
        let mut loaded: Vec<(SegmentBytes, Vec<WalkedFrame>)> = Vec::new();
        for s in files {
            if s.live_events {
                let (bytes, frames, data_end, _, _) = load_segment(vfs, dir, store_id, s.id)?;
                throttle.consume(data_end)?;
                loaded.push((bytes, frames));
            } else {
                // Only its define frames are live: read just those.
                let (bytes, frames) = load_defines(vfs, dir, store_id, s.id, &s.defines)?;
                throttle.consume(bytes.len() as u64)?;
                loaded.push((bytes, frames));
            }
        }
        // The live frames of the range, grouped by session (§14.3).
        let mut order: Vec<(u32, bool, u64, usize, usize)> = Vec::new();
        for (fi, (_, frames)) in loaded.iter().enumerate() {
            for (k, f) in frames.iter().enumerate() {
                if plan.live(f) {
                    order.push((f.session.0, f.kind != KIND_SESSION_DEFINE, f.seq, fi, k));
                }
            }
        }
        order.sort_unstable();
        let salt = Salt {
            store_id,
            segment: first.id,
        };
        let mut batches: Vec<Vec<u8>> = Vec::new();
        let mut moved: Vec<Moved> = Vec::with_capacity(order.len());
        let mut defines: Vec<(String, LogPos, LogPos)> = Vec::new();
        let mut body: Vec<u8> = Vec::new();
        let mut count = 0u32;
        let mut cur: Option<u32> = None;
        // Where the next batch starts in the file.
        let mut batch_at = SEGMENT_HEADER_BYTES;
        let flush = |body: &mut Vec<u8>,
                     count: &mut u32,
                     batches: &mut Vec<Vec<u8>>,
                     batch_at: &mut usize| {
            if *count == 0 {
                return;
            }
            let h = BatchHeader {
                body_len: body.len() as u32,
                batch_seq: first.header.first_batch_seq,
                frame_count: *count,
                body_crc: salt.crc(body),
                flags: 0,
            };
            let mut b = h.encode(&salt).to_vec();
            b.append(body);
            *batch_at += b.len();
            batches.push(b);
            *count = 0;
        };
        for (sess, _, _, fi, k) in &order {
            let f = &loaded[*fi].1[*k];
            if cur != Some(*sess) || body.len() + f.padded as usize > BATCH_BODY_BYTES_MAX {
                flush(&mut body, &mut count, &mut batches, &mut batch_at);
                cur = Some(*sess);
            }
            let at = batch_at + BATCH_HEADER_BYTES + body.len();
            moved.push((
                f.session,
                (f.kind != KIND_SESSION_DEFINE).then_some(f.seq),
                LogPos::new(first.id, at as u32),
            ));
            if f.kind == KIND_SESSION_DEFINE {
                let from = LogPos::new(files[*fi].id, f.at);
                let to = LogPos::new(first.id, at as u32);
                if from != to {
                    if let Some(name) = plan.names.get(f.session.0 as usize) {
                        defines.push((name.to_string(), from, to));
                    }
                }
            }
            let payload = &loaded[*fi].0[f.payload.0..f.payload.1];
            encode_frame(&mut body, &salt, f.session, f.kind, f.flags, f.seq, payload);
            count += 1;
        }
        flush(&mut body, &mut count, &mut batches, &mut batch_at);
        let new_len = batch_at as u64;
        after -= files.iter().map(|s| s.file_len).sum::<u64>();
        after += new_len;
        report.ranges_rewritten += 1;
        report.segment_files_removed += files.len() as u32 - 1;
        if opts.dry_run {
            continue;
        }
        // Step 4: temp file, fdatasync, rename over the first id, directory
        // fsync; then the range's other files, directory fsync.
        let dst = segment_path(dir, first.id);
        let tmp = dst.with_extension("tseg.tmp");
        let f = vfs
            .create_truncate(&tmp)
            .map_err(|e| Error::io("create compacted segment", &tmp, e))?;
        f.write_all_at(&header, 0)
            .map_err(|e| Error::io("write compacted segment", &tmp, e))?;
        let mut at = SEGMENT_HEADER_BYTES as u64;
        for b in &batches {
            f.write_all_at(b, at)
                .map_err(|e| Error::io("write compacted segment", &tmp, e))?;
            at += b.len() as u64;
            throttle.consume(b.len() as u64)?;
        }
        f.sync_data()
            .map_err(|e| Error::io("fsync compacted segment", &tmp, e))?;
        drop(f);
        throttle.stopped()?;
        install(&tmp, &dst, (first.id, compaction.last_segment), moved)?;
        report.moved_defines.append(&mut defines);
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
        if files.len() > 1 {
            for s in &files[1..] {
                let p = segment_path(dir, s.id);
                match pool {
                    Some(pool) => pool.offer(vfs, dir, s.id, &p)?,
                    None => vfs
                        .remove(&p)
                        .map_err(|e| Error::io("remove collected segment", &p, e))?,
                }
            }
            vfs.sync_dir(dir)
                .map_err(|e| Error::io("fsync directory", dir, e))?;
        }
    }
    report.bytes_after = after;
    // A rewrite can grow a range a little (a batch header per session
    // where the frames shared batches): nothing reclaimed then.
    report.bytes_reclaimed = report.bytes_before.saturating_sub(after);
    report.bytes_io = throttle.bytes;
    Ok(())
}

/// Read and check a sealed segment: its bytes, frames, end of data,
/// header and compaction fields.
#[allow(clippy::type_complexity)]
fn load_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    id: SegmentId,
) -> Result<(
    SegmentBytes,
    Vec<WalkedFrame>,
    u64,
    SegmentHeader,
    Option<Compaction>,
)> {
    let path = segment_path(dir, id);
    let bytes = read_segment(vfs, &path, true)?;
    let header = SegmentHeader::decode(&bytes)
        .map_err(|e| Error::corrupt(&path, 0, format!("segment header: {e}")))?;
    let compaction = Compaction::of_header(&bytes);
    let salt = Salt {
        store_id,
        segment: id,
    };
    let (frames, data_end) = walk(&bytes, &salt)
        .map_err(|(off, why)| Error::corrupt(&path, off, format!("while collecting: {why}")))?;
    Ok((bytes, frames, data_end as u64, header, compaction))
}

/// Read only the define frames of a sealed segment, at `defines`
/// ((offset, padded length), from its summary), each checked: bytes holding
/// them back to back, and the frames with payload ranges in those bytes.
fn load_defines(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    id: SegmentId,
    defines: &[(u32, u32)],
) -> Result<(SegmentBytes, Vec<WalkedFrame>)> {
    let path = segment_path(dir, id);
    let file = vfs
        .open(&path, false)
        .map_err(|e| Error::io("open segment", &path, e))?;
    let salt = Salt {
        store_id,
        segment: id,
    };
    let mut buf = Vec::new();
    let mut frames = Vec::with_capacity(defines.len());
    for (at, padded) in defines {
        let start = buf.len();
        buf.resize(start + *padded as usize, 0);
        let n = file
            .read_at(&mut buf[start..], *at as u64)
            .map_err(|e| Error::io("read define frame", &path, e))?;
        if n < *padded as usize {
            return Err(Error::corrupt(
                &path,
                *at as u64,
                "define frame cut short by the end of the segment",
            ));
        }
        let h = decode_frame(&buf[start..], &salt)
            .map_err(|e| Error::corrupt(&path, *at as u64, format!("define frame: {e}")))?;
        if h.kind != KIND_SESSION_DEFINE {
            return Err(Error::corrupt(
                &path,
                *at as u64,
                format!("expected a define frame, found kind {}", h.kind),
            ));
        }
        let p = start + crate::frame::FRAME_HEADER_BYTES;
        frames.push(WalkedFrame {
            at: *at,
            session: h.session,
            kind: h.kind,
            flags: h.flags,
            seq: h.seq,
            payload: (p, start + h.frame_len as usize),
            padded: *padded as u64,
        });
    }
    Ok((SegmentBytes::Owned(buf), frames))
}

/// Kind and payload of the frame at `pos`.
fn frame_at(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    cache: &mut HashMap<SegmentId, SegmentBytes>,
    pos: LogPos,
) -> Result<(u16, Vec<u8>)> {
    let seg = pos.segment();
    let path = segment_path(dir, seg);
    let bytes = match cache.entry(seg) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(read_segment(vfs, &path, true)?),
    };
    let off = pos.offset() as usize;
    let salt = Salt {
        store_id,
        segment: seg,
    };
    let h = decode_frame(bytes.get(off..).unwrap_or(&[]), &salt)
        .map_err(|e| Error::corrupt(&path, off as u64, format!("frame: {e}")))?;
    let start = off + crate::frame::FRAME_HEADER_BYTES;
    Ok((h.kind, bytes[start..off + h.frame_len as usize].to_vec()))
}

/// Every frame of a segment whose batches recovery accepted (an ordinary or
/// a compacted one), and the end of its data.
#[allow(clippy::type_complexity)]
fn walk(
    bytes: &[u8],
    salt: &Salt,
) -> std::result::Result<(Vec<WalkedFrame>, usize), (u64, String)> {
    let mut out = Vec::new();
    let mut off = SEGMENT_HEADER_BYTES;
    while off + BATCH_HEADER_BYTES <= bytes.len()
        && bytes[off..off + BATCH_HEADER_BYTES].iter().any(|b| *b != 0)
    {
        let (h, frames) =
            check_batch(bytes, salt, off, None).map_err(|f| (f.offset as u64, f.detail))?;
        for f in frames {
            let start = f.pos.offset() as usize + crate::frame::FRAME_HEADER_BYTES;
            out.push(WalkedFrame {
                at: f.pos.offset(),
                session: f.header.session,
                kind: f.header.kind,
                flags: f.header.flags,
                seq: f.header.seq,
                payload: (start, start + f.payload.len()),
                padded: f.header.padded_len() as u64,
            });
        }
        off += BATCH_HEADER_BYTES + h.body_len as usize;
    }
    Ok((out, off))
}

/// Remove what an interrupted collection left: `gc.manifest.tmp` and
/// `*.tseg.tmp` (never names recovery reads, FORMAT.md §14).
fn remove_stale_temps(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    let names = vfs
        .list(dir)
        .map_err(|e| Error::io("list store directory", dir, e))?;
    let mut removed = false;
    for n in names {
        if n == MANIFEST_TMP_FILE || n.ends_with(".tseg.tmp") {
            let p = dir.join(&n);
            vfs.remove(&p)
                .map_err(|e| Error::io("remove stale collection file", &p, e))?;
            removed = true;
        }
    }
    if removed {
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(())
}
