//! The recovery pass on open: scan every batch from the last trusted point,
//! stop at the first one that fails, classify the stop by the rows of
//! FORMAT.md §6.3 ([`super::classify`]), and return a *plan* (the index, the
//! tail, the bytes to zero, the files to remove) that the store applies
//! before anything new is written ([`apply`]). Invariants 1 and 3 of
//! ARCHITECTURE.md.
//!
//! Why the bytes say where the durable region ends: the engine writes at most
//! one batch between two completed fdatasyncs, and a new segment is created only
//! after the previous one's last batch was synced. So at a power cut only the
//! last batch of the last segment can be in flight. A failing batch is a torn
//! tail iff it is in the last segment and no valid batch with a later sequence
//! number follows it (and no index checkpoint claims it was durable).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, Result};
use std::collections::HashMap;

use crate::frame::{
    self, Compaction, HeaderError, Salt, SegmentHeader, SessionDefine, BATCH_FLAG_CLEAN_CLOSE,
    KIND_SESSION_DEFINE, SEGMENT_HEADER_BYTES,
};
use crate::index::checkpoint::Checkpoint;
use crate::index::reclaimed;
use crate::index::Index;
use crate::log::{list_segments, read_segment, segment_path, zero_range};
use crate::types::{LogPos, SegmentId};
use crate::vfs::Vfs;

use super::checkpoint_check::validate_checkpoint;
use super::classify::{classify_bad_header, classify_stop, HeaderFacts, Row, StopFacts};
use super::scan::{check_batch, evidence_after, probe_after, scan_batches};
use super::{Problem, ProblemKind, RecoveryMode, RecoveryReport};

/// The result of the pass, for [`crate::Store::open`] to act on.
pub(crate) struct Recovered {
    pub store_id: Option<[u8; 16]>,
    pub index: Index,
    /// Segments that remain, in order.
    pub segments: Vec<SegmentId>,
    /// Where the next batch goes: segment, offset, batch sequence.
    pub tail: Option<(SegmentId, u32, u64)>,
    pub report: RecoveryReport,
    /// Byte ranges to zero before the first append (torn bytes).
    pub zero_ranges: Vec<(SegmentId, u32, u32)>,
    /// Segment files to remove (a torn new segment, or PointInTime discards).
    pub remove_segments: Vec<SegmentId>,
    pub remove_checkpoint: bool,
}

/// Run the recovery pass (no writes: the caller applies `zero_ranges` and
/// removals when it opens for writing).
///
/// `exclusive`: the caller holds the store lock, so nothing writes to the
/// last segment while the pass runs, and it is mapped rather than copied
/// (a read-only open copies it: a live writer may still be appending).
pub(crate) fn recover(
    vfs: &dyn Vfs,
    dir: &Path,
    mode: RecoveryMode,
    checkpoint: Option<Checkpoint>,
    checkpoint_problem: Option<String>,
    exclusive: bool,
) -> Result<Recovered> {
    if mode == RecoveryMode::Salvage {
        return super::salvage::salvage(vfs, dir);
    }
    let started = Instant::now();
    let mut ids = list_segments(vfs, dir)?;
    // FORMAT.md §14: the reclaimed sessions, and the compacted segments a
    // collection wrote (only a collected store has them, and a collection
    // that rewrites a segment writes a manifest first).
    let manifest = reclaimed::load(vfs, dir)?;
    let mut compacted: HashMap<SegmentId, Compaction> = HashMap::new();
    let mut superseded = Vec::new();
    if manifest.is_some() {
        let mut range_end: Option<u32> = None;
        ids.retain(|id| {
            if range_end.is_some_and(|end| id.0 <= end) {
                superseded.push(*id);
                return false;
            }
            if let Some(c) = peek_compaction(vfs, &segment_path(dir, *id)) {
                range_end = Some(c.last_segment.0);
                compacted.insert(*id, c);
            }
            true
        });
    }
    let mut out = Recovered {
        store_id: None,
        index: Index::default(),
        segments: Vec::new(),
        tail: None,
        report: RecoveryReport {
            mode,
            segments: ids.len() as u32,
            checkpoint_discarded: checkpoint_problem,
            ..Default::default()
        },
        zero_ranges: Vec::new(),
        remove_segments: superseded,
        remove_checkpoint: false,
    };
    if let Some((_, r)) = &manifest {
        out.index.set_reclaimed(r.clone());
    }
    // Contiguous ids: a missing file in the middle is corruption (a
    // compacted segment stands for the ids up to its last_segment, §14.3).
    for w in ids.windows(2) {
        let end = compacted.get(&w[0]).map_or(w[0].0, |c| c.last_segment.0);
        if w[1].0 != end + 1 {
            let missing = segment_path(dir, SegmentId(w[0].0 + 1));
            let detail = format!(
                "segment file {} is missing between {} and {}",
                missing.display(),
                frame::segment_file_name(w[0]),
                frame::segment_file_name(w[1])
            );
            if mode == RecoveryMode::PointInTime {
                let cut = ids.iter().position(|i| *i == w[1]).expect("listed");
                out.report.problems.push(Problem {
                    kind: ProblemKind::Corruption,
                    file: missing,
                    offset: 0,
                    bytes: 0,
                    detail,
                    action: "discarded later segments".into(),
                });
                out.remove_segments.extend(ids[cut..].iter().copied());
                out.remove_checkpoint = true;
                ids.truncate(cut);
                break;
            }
            return Err(Error::corrupt(missing, 0, detail));
        }
    }

    // Where to start: the checkpoint if it still matches the log.
    let mut start_seg = 0usize;
    let mut start_off = SEGMENT_HEADER_BYTES as u32;
    let mut next_batch_seq: Option<u64> = None;
    let mut last_flags: Option<u32> = None;
    // A checkpoint of this store that no longer matches the log still proves
    // that the log was durable up to its covered position: damage before it
    // is corruption, never a torn tail (invariant 5: checkpoints never lead).
    let mut durable_floor: Option<LogPos> = None;
    // The checkpoint's segment as its check read it: the scan starts there.
    let mut start_bytes = None;
    if let Some(ck) = checkpoint {
        match validate_checkpoint(vfs, dir, &ids, &ck, exclusive) {
            Ok((i, bytes)) => {
                start_seg = i;
                start_bytes = Some(bytes);
                start_off = ck.covered.offset();
                next_batch_seq = Some(ck.next_batch_seq);
                last_flags = Some(ck.last_batch_flags);
                out.store_id = Some(ck.store_id);
                out.index = ck.index;
                if let Some((_, r)) = &manifest {
                    out.index.set_reclaimed(r.clone());
                }
                out.report.checkpoint_used = true;
            }
            Err((why, proves_durable)) => {
                if proves_durable {
                    durable_floor = Some(ck.covered);
                }
                out.report.checkpoint_discarded = Some(why);
                out.remove_checkpoint = true;
            }
        }
    }
    let mut prev_end: Option<u32> = None;
    let mut i = start_seg;
    while i < ids.len() {
        let id = ids[i];
        let path = segment_path(dir, id);
        let is_last = i + 1 == ids.len();
        let bytes = match start_bytes.take() {
            Some(b) if i == start_seg => b,
            _ => read_segment(vfs, &path, !is_last || exclusive)?,
        };
        out.report.segments_scanned += 1;
        let header = match SegmentHeader::decode(&bytes) {
            Ok(h) => h,
            Err(e) => {
                // Is this a torn new segment (only the last one, and only if
                // nothing in it validates as a batch of this store)?
                let salt = out.store_id.map(|s| Salt {
                    store_id: s,
                    segment: id,
                });
                let facts = HeaderFacts {
                    other_version: matches!(e, HeaderError::Version(_)),
                    crc_valid: matches!(e, HeaderError::Invalid(_)),
                    last_segment: is_last,
                    first_segment: i == 0,
                    zeros_after_header: bytes
                        .get(SEGMENT_HEADER_BYTES..)
                        .is_none_or(|rest| rest.iter().all(|b| *b == 0)),
                    has_batch: salt.is_some_and(|s| probe_after(&bytes, &s, 0, 0).0.is_some()),
                    checkpoint_covers: durable_floor.is_some_and(|f| f.segment() >= id),
                    store_id_known: out.store_id.is_some(),
                    all_zero: bytes.iter().all(|b| *b == 0),
                };
                match (classify_bad_header(&facts), e) {
                    (Row::H1, HeaderError::Version(v)) => {
                        return Err(Error::UnsupportedVersion {
                            file: path,
                            found: v,
                            supported: frame::FORMAT_VERSION,
                        })
                    }
                    (Row::H2, e) if mode != RecoveryMode::AbsoluteConsistency => {
                        out.report.problems.push(Problem {
                            kind: ProblemKind::TornTail,
                            file: path.clone(),
                            offset: 0,
                            bytes: bytes.len() as u64,
                            detail: format!(
                                "segment header incomplete ({e}): its creation was interrupted"
                            ),
                            action: "removed the segment file".into(),
                        });
                        out.remove_segments.push(id);
                        break;
                    }
                    (Row::H2, e) => {
                        return Err(Error::TornTailRefused {
                            file: path,
                            offset: 0,
                            detail: e.to_string(),
                        });
                    }
                    (Row::H3, e) => {
                        return Err(Error::NotTurnstone {
                            file: path,
                            what: "segment",
                            detail: e.to_string(),
                        });
                    }
                    (_, e) => {
                        damage(
                            &mut out,
                            mode,
                            &ids,
                            i,
                            path,
                            0,
                            bytes.len() as u64,
                            format!("segment header: {e}"),
                            None,
                        )?;
                        break;
                    }
                }
            }
        };
        // Header fields must agree with the name, the store and the chain.
        let mut mismatch = None;
        if header.segment != id {
            mismatch = Some(format!(
                "header names segment {}, file name {}",
                header.segment.0, id.0
            ));
        } else if out.store_id.is_some_and(|s| s != header.store_id) {
            mismatch = Some("segment belongs to another store (store id differs)".to_string());
        } else if !(i == start_seg && out.report.checkpoint_used)
            && next_batch_seq.is_some_and(|n| n != header.first_batch_seq)
        {
            mismatch = Some(format!(
                "segment starts at batch {} but the previous segment ended before batch {}",
                header.first_batch_seq,
                next_batch_seq.unwrap_or(0)
            ));
        } else if i == 0
            && !out.report.checkpoint_used
            && (id.0 != frame::FIRST_SEGMENT_ID
                || header.first_batch_seq != 0
                || header.prev_segment_end != 0)
        {
            mismatch = Some(format!(
                "the log starts at segment {} (batch {}, previous end {}) but must start at segment {} with batch 0: earlier segment files are missing",
                id.0,
                header.first_batch_seq,
                header.prev_segment_end,
                frame::FIRST_SEGMENT_ID
            ));
        } else if prev_end.is_some_and(|p| p != header.prev_segment_end) {
            mismatch = Some(format!(
                "previous segment ended at offset {} but this header says {}",
                prev_end.unwrap_or(0),
                header.prev_segment_end
            ));
        }
        if let Some(detail) = mismatch {
            damage(
                &mut out,
                mode,
                &ids,
                i,
                path,
                0,
                bytes.len() as u64,
                detail,
                None,
            )?;
            break;
        }
        out.store_id = Some(header.store_id);
        let salt = Salt {
            store_id: header.store_id,
            segment: id,
        };
        let from = if i == start_seg {
            start_off
        } else {
            SEGMENT_HEADER_BYTES as u32
        };
        let first_seq = next_batch_seq.unwrap_or(header.first_batch_seq);
        if let Some(c) = compacted.get(&id).copied() {
            // §14.3: batches back to back to the end of the file, each with
            // the header's first_batch_seq; any failure is corruption (the
            // file was durable before its name existed).
            let failure = if is_last {
                Some((
                    0u64,
                    "a compacted segment is the last segment (collection never compacts the segment appends go to)"
                        .to_string(),
                ))
            } else {
                scan_compacted(
                    &bytes,
                    &salt,
                    from as usize,
                    header.first_batch_seq,
                    &mut out,
                )
            };
            if let Some((offset, detail)) = failure {
                damage(
                    &mut out,
                    mode,
                    &ids,
                    i,
                    path,
                    offset,
                    bytes.len() as u64 - offset,
                    format!("compacted segment: {detail}"),
                    None,
                )?;
                break;
            }
            next_batch_seq = Some(c.next_batch_seq);
            out.segments.push(id);
            // The next header's prev_segment_end names the end of the
            // range's original last segment: not checked (§14.3).
            prev_end = None;
            i += 1;
            continue;
        }
        let index = &mut out.index;
        let scan = scan_batches(&bytes, &salt, from, first_seq, |f| {
            if f.header.kind == KIND_SESSION_DEFINE {
                let def = SessionDefine::decode(f.payload).map_err(|e| e.to_string())?;
                index.apply_define(f.header.session, &def, f.pos)
            } else {
                index.apply_frame(f.header.session, f.header.seq, f.pos)
            }
        });
        out.report.batches_scanned += scan.batches;
        out.report.frames_scanned += scan.frames;
        out.report.bytes_scanned += (scan.end - from) as u64;
        next_batch_seq = Some(scan.next_batch_seq);
        if let Some((_, flags)) = scan.last_batch {
            last_flags = Some(flags);
        }
        out.segments.push(id);
        let failure = scan.failure.as_ref().map(|f| f.certain);
        if !is_last {
            // A sealed segment: the scan ends at the end of data, and bytes
            // after it are not looked at (the next header chains to that end,
            // H4).
            let facts = StopFacts {
                failure,
                ..StopFacts::default()
            };
            if let (Some(f), Row::C2 | Row::C3) = (scan.failure, classify_stop(&facts)) {
                damage(
                    &mut out,
                    mode,
                    &ids,
                    i,
                    path,
                    f.offset as u64,
                    (bytes.len() - f.offset as usize) as u64,
                    format!("{} (in a sealed segment: a later segment exists)", f.detail),
                    Some(scan.next_batch_seq),
                )?;
                break;
            }
            prev_end = Some(scan.end);
            i += 1;
            continue;
        }
        // The last segment: is anything after the end torn, or a later batch?
        // Probe even after a clean-close marker: the next run may have
        // crashed with a torn first batch whose header sector was lost.
        let clean_close =
            scan.failure.is_none() && last_flags.is_some_and(|f| f & BATCH_FLAG_CLEAN_CLOSE != 0);
        let (later, nonzero_end) = probe_after(&bytes, &salt, scan.end, scan.next_batch_seq);
        let nonzero_end = evidence_after(&bytes, scan.end, scan.failure.is_some(), nonzero_end);
        out.report.clean_shutdown = clean_close && later.is_none() && nonzero_end.is_none();
        let stop = scan.failure.as_ref().map_or(scan.end, |f| f.offset);
        let floor = durable_floor.filter(|f| *f > LogPos::new(id, stop));
        let row = classify_stop(&StopFacts {
            last_segment: true,
            failure,
            later_batch: later.is_some(),
            nonzero_after: nonzero_end.is_some(),
            checkpoint_covers: floor.is_some(),
        });
        if matches!(row, Row::C1 | Row::C2 | Row::C4) {
            let (detail, bytes_hit) = match (&scan.failure, later, floor) {
                (Some(f), Some(l), _) => (
                    format!(
                        "{}; a valid later batch at offset {l} proves this region was durable",
                        f.detail
                    ),
                    bytes.len() - f.offset as usize,
                ),
                (Some(f), None, Some(floor)) => (
                    format!(
                        "{}; the index checkpoint proves the log was durable up to {floor}",
                        f.detail
                    ),
                    bytes.len() - f.offset as usize,
                ),
                (Some(f), None, None) => (f.detail.clone(), bytes.len() - f.offset as usize),
                (None, Some(l), _) => (
                    format!(
                        "unreadable bytes between offset {} and a valid later batch at offset {l}",
                        scan.end
                    ),
                    (l - scan.end) as usize,
                ),
                (None, None, _) => (
                    format!(
                        "the log ends at offset {} but the index checkpoint proves it was durable up to {}",
                        scan.end,
                        floor.unwrap_or_default()
                    ),
                    bytes.len() - scan.end as usize,
                ),
            };
            damage(
                &mut out,
                mode,
                &ids,
                i,
                path,
                stop as u64,
                bytes_hit as u64,
                detail,
                Some(scan.next_batch_seq),
            )?;
            break;
        }
        if let (Row::T1 | Row::T2, Some(nz)) = (row, nonzero_end) {
            let detail = scan
                .failure
                .as_ref()
                .map(|f| f.detail.clone())
                .unwrap_or_else(|| "non-zero bytes after the last valid batch".to_string());
            let torn = (nz - scan.end) as u64;
            if mode == RecoveryMode::AbsoluteConsistency {
                return Err(Error::TornTailRefused {
                    file: path,
                    offset: scan.end as u64,
                    detail,
                });
            }
            out.report.problems.push(Problem {
                kind: ProblemKind::TornTail,
                file: path,
                offset: scan.end as u64,
                bytes: torn,
                detail,
                action:
                    "zeroed before the next append (unacknowledged writes of an interrupted commit)"
                        .into(),
            });
            out.zero_ranges.push((id, scan.end, nz));
            out.report.torn_bytes_truncated += torn;
        }
        out.tail = Some((id, scan.end, scan.next_batch_seq));
        break;
    }
    if ids.is_empty() && mode != RecoveryMode::PointInTime {
        if let Some(floor) = durable_floor {
            return Err(Error::corrupt(
                segment_path(dir, floor.segment()),
                0,
                format!(
                    "no segment file is left, but the index checkpoint proves the log was durable up to {floor}"
                ),
            ));
        }
    }
    if out.tail.is_none() {
        // Every segment was sealed and clean, or the last one was removed.
        if let (Some(last), Some(next)) = (out.segments.last().copied(), next_batch_seq) {
            let end = prev_end.unwrap_or(SEGMENT_HEADER_BYTES as u32);
            // The previous segment becomes the last (§6.4): its bytes after
            // the end of data get the last segment's checks (T2, C1), so no
            // debris stays ahead of the next append.
            if let Some(store_id) = out.store_id {
                let path = segment_path(dir, last);
                let bytes = read_segment(vfs, &path, exclusive)?;
                let salt = Salt {
                    store_id,
                    segment: last,
                };
                let (later, nonzero_end) = probe_after(&bytes, &salt, end, next);
                let nonzero_end = evidence_after(&bytes, end, false, nonzero_end);
                let row = classify_stop(&StopFacts {
                    last_segment: true,
                    later_batch: later.is_some(),
                    nonzero_after: nonzero_end.is_some(),
                    ..StopFacts::default()
                });
                match (row, later, nonzero_end) {
                    (Row::C1, Some(l), _) => {
                        let i = ids.iter().position(|s| *s == last).expect("listed");
                        let detail = format!(
                            "unreadable bytes between offset {end} and a valid later batch at offset {l}"
                        );
                        damage(
                            &mut out,
                            mode,
                            &ids,
                            i,
                            path,
                            end as u64,
                            (l - end) as u64,
                            detail,
                            Some(next),
                        )?;
                    }
                    (Row::T2, None, Some(nz)) => {
                        let detail = "non-zero bytes after the last valid batch".to_string();
                        if mode == RecoveryMode::AbsoluteConsistency {
                            return Err(Error::TornTailRefused {
                                file: path,
                                offset: end as u64,
                                detail,
                            });
                        }
                        let torn = (nz - end) as u64;
                        out.report.problems.push(Problem {
                            kind: ProblemKind::TornTail,
                            file: path,
                            offset: end as u64,
                            bytes: torn,
                            detail,
                            action: "zeroed before the next append".into(),
                        });
                        out.zero_ranges.push((last, end, nz));
                        out.report.torn_bytes_truncated += torn;
                    }
                    _ => {}
                }
            }
            if out.tail.is_none() {
                out.tail = Some((last, end, next));
            }
        }
    }
    if let (Some((mid, _)), Some(sid)) = (&manifest, out.store_id) {
        if *mid != sid {
            return Err(Error::corrupt(
                dir.join(reclaimed::MANIFEST_FILE),
                16,
                "gc manifest belongs to another store (store id differs)",
            ));
        }
    }
    out.report.sessions = out.index.sessions.len() as u64;
    out.report.events = out.index.event_count();
    out.report.duration_us = started.elapsed().as_micros() as u64;
    Ok(out)
}

/// The compaction fields of the segment at `path`, reading its 64-byte
/// header only; `None` for an ordinary or unreadable one (the scan names
/// what is wrong with it).
fn peek_compaction(vfs: &dyn Vfs, path: &Path) -> Option<Compaction> {
    let f = vfs.open(path, false).ok()?;
    let mut b = [0u8; SEGMENT_HEADER_BYTES];
    let n = f.read_at(&mut b, 0).ok()?;
    Compaction::of_header(&b[..n])
}

/// Scan a compacted segment (§14.3) into the index; the offset and reason
/// of the first failure.
fn scan_compacted(
    bytes: &[u8],
    salt: &Salt,
    from: usize,
    batch_seq: u64,
    out: &mut Recovered,
) -> Option<(u64, String)> {
    let mut off = from;
    while off < bytes.len() {
        let (h, frames) = match check_batch(bytes, salt, off, Some(batch_seq)) {
            Ok(x) => x,
            Err(f) => return Some((f.offset as u64, f.detail)),
        };
        if h.flags != 0 {
            return Some((off as u64, format!("batch flags {:#x}, must be 0", h.flags)));
        }
        for f in &frames {
            let r = if f.header.kind == KIND_SESSION_DEFINE {
                SessionDefine::decode(f.payload)
                    .map_err(|e| e.to_string())
                    .and_then(|def| out.index.apply_define(f.header.session, &def, f.pos))
            } else {
                out.index.apply_frame(f.header.session, f.header.seq, f.pos)
            };
            if let Err(detail) = r {
                return Some((
                    off as u64,
                    format!("frame at offset {}: {detail}", f.pos.offset()),
                ));
            }
        }
        out.report.batches_scanned += 1;
        out.report.frames_scanned += frames.len() as u64;
        off += frame::BATCH_HEADER_BYTES + h.body_len as usize;
    }
    out.report.bytes_scanned += (bytes.len() - from) as u64;
    None
}

/// Apply a plan to the bytes, before anything new is written (FORMAT.md
/// §6.4), each step durable. A checkpoint that no longer matches goes first:
/// once the log is cut it would claim durability for bytes that are gone.
pub(crate) fn apply(
    vfs: &dyn Vfs,
    dir: &Path,
    rec: &Recovered,
    had_bad_checkpoint: bool,
) -> Result<()> {
    if rec.remove_checkpoint || had_bad_checkpoint {
        crate::index::checkpoint::remove(vfs, dir)?;
    }
    for (seg, from, to) in &rec.zero_ranges {
        zero_range(vfs, &segment_path(dir, *seg), *from, *to)?;
    }
    let mut dir_dirty = false;
    for seg in &rec.remove_segments {
        let p = segment_path(dir, *seg);
        if vfs.exists(&p) {
            vfs.remove(&p)
                .map_err(|e| Error::io("remove segment", &p, e))?;
            dir_dirty = true;
        }
    }
    for tmp in [
        crate::index::checkpoint::CHECKPOINT_TMP_FILE,
        crate::index::checkpoint::DELTA_TMP_FILE,
    ] {
        let tmp = dir.join(tmp);
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)
                .map_err(|e| Error::io("remove stale checkpoint", &tmp, e))?;
            dir_dirty = true;
        }
    }
    if dir_dirty {
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(())
}

/// Damage that no power cut explains at segment `i`: refuse, or (PointInTime,
/// Salvage) cut the log there and discard everything after it. `next_seq` is
/// the batch sequence the next batch would have had at the cut.
#[allow(clippy::too_many_arguments)]
fn damage(
    out: &mut Recovered,
    mode: RecoveryMode,
    ids: &[SegmentId],
    i: usize,
    path: PathBuf,
    offset: u64,
    bytes: u64,
    detail: String,
    next_seq: Option<u64>,
) -> Result<()> {
    if mode != RecoveryMode::PointInTime {
        return Err(Error::corrupt(path, offset, detail));
    }
    out.report.problems.push(Problem {
        kind: ProblemKind::Corruption,
        file: path,
        offset,
        bytes,
        detail,
        action: "discarded from here to the end of the log (point-in-time recovery)".into(),
    });
    let id = ids[i];
    out.remove_checkpoint = true;
    out.remove_segments.extend(ids[i + 1..].iter().copied());
    match next_seq {
        Some(next) if offset >= SEGMENT_HEADER_BYTES as u64 => {
            // Frames of the cut batch may already be indexed.
            out.index =
                std::mem::take(&mut out.index).prefix_before(LogPos::new(id, offset as u32));
            out.zero_ranges.push((id, offset as u32, u32::MAX));
            if !out.segments.contains(&id) {
                out.segments.push(id);
            }
            out.tail = Some((id, offset as u32, next));
        }
        _ => {
            out.remove_segments.push(id);
            out.segments.retain(|s| *s != id);
        }
    }
    Ok(())
}
