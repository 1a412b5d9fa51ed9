//! The recovery pass on open: validate every batch from the last trusted
//! point, stop at the first one that fails, and decide *torn tail* (a power
//! cut explains it: lose only unacknowledged events) or *corruption* (no power
//! cut explains it: refuse, naming file and offset). Invariants 1 and 3 of
//! ARCHITECTURE.md; the rule is `format-spec/FORMAT.md` §6.
//!
//! Why the bytes say where the durable region ends: the engine writes at most
//! one batch between two completed fdatasyncs, and a new segment is created only
//! after the previous one's last batch was synced. So at a power cut only the
//! last batch of the last segment can be in flight. A failing batch is a torn
//! tail iff it is in the last segment and no valid batch with a later sequence
//! number follows it (and no index checkpoint claims it was durable).

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::frame::{
    self, decode_frame, BatchError, BatchHeader, FrameHeader, HeaderError, Salt, SegmentHeader,
    SessionDefine, BATCH_FLAG_CLEAN_CLOSE, BATCH_HEADER_BYTES, FRAME_HEADER_BYTES,
    KIND_SESSION_DEFINE, SEGMENT_HEADER_BYTES,
};
use crate::index::Index;
use crate::log::{list_segments, read_segment, segment_path, zero_range};
use crate::types::{LogPos, SegmentId};
use crate::vfs::Vfs;

/// What to do with damage found on open, modelled on RocksDB's WAL recovery
/// modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryMode {
    /// Any torn tail or corruption refuses the open.
    AbsoluteConsistency,
    /// Truncate a torn tail (default); refuse corruption.
    #[default]
    TolerateTornTail,
    /// Stop at the first damage of any kind and discard everything after it
    /// (torn or corrupt): the store opens at the last consistent point.
    PointInTime,
}

/// What kind of damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    TornTail,
    Corruption,
}

/// One piece of damage found by the recovery pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    pub file: PathBuf,
    pub offset: u64,
    /// Bytes affected (torn bytes zeroed, or bytes discarded/skipped).
    pub bytes: u64,
    pub detail: String,
    /// What recovery did about it.
    pub action: String,
}

/// What the recovery pass did; returned by [`crate::Store::open`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoveryReport {
    pub mode: RecoveryMode,
    pub segments: u32,
    pub segments_scanned: u32,
    pub batches_scanned: u64,
    pub frames_scanned: u64,
    pub bytes_scanned: u64,
    pub checkpoint_used: bool,
    /// Why an index checkpoint was present but not used.
    pub checkpoint_discarded: Option<String>,
    /// The last run ended with a clean close.
    pub clean_shutdown: bool,
    pub torn_bytes_truncated: u64,
    pub sessions: u64,
    pub events: u64,
    pub problems: Vec<Problem>,
    pub duration_us: u64,
}

/// One valid batch, as seen by a scan.
#[derive(Debug)]
pub struct ScannedFrame<'a> {
    pub pos: LogPos,
    pub header: FrameHeader,
    pub payload: &'a [u8],
}

/// How a scan of one segment's batches ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// Offset just after the last valid batch.
    pub end: u32,
    pub next_batch_seq: u64,
    /// Offset and flags of the last valid batch.
    pub last_batch: Option<(u32, u32)>,
    /// Where and why scanning stopped, if not at a clean end (zero header or
    /// end of file). `certain` is true when a checksum-valid batch is
    /// malformed: no torn write explains that.
    pub failure: Option<ScanFailure>,
    pub batches: u64,
    pub frames: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanFailure {
    pub offset: u32,
    pub detail: String,
    pub certain: bool,
}

/// Validate one batch at `off`: header, sequence number, body checksum and
/// the frames inside. Returns the header and the frames.
pub fn check_batch<'a>(
    bytes: &'a [u8],
    salt: &Salt,
    off: usize,
    expected_seq: Option<u64>,
) -> std::result::Result<(BatchHeader, Vec<ScannedFrame<'a>>), ScanFailure> {
    let fail = |detail: String, certain: bool| ScanFailure {
        offset: off as u32,
        detail,
        certain,
    };
    let h = BatchHeader::decode(bytes.get(off..).unwrap_or(&[]), salt)
        .map_err(|e| fail(e.to_string(), false))?;
    if let Some(seq) = expected_seq {
        if h.batch_seq != seq {
            return Err(fail(
                format!("batch sequence {} where {} was expected", h.batch_seq, seq),
                false,
            ));
        }
    }
    let body_start = off + BATCH_HEADER_BYTES;
    let body_end = body_start + h.body_len as usize;
    if body_end > bytes.len() {
        return Err(fail(
            format!(
                "batch body of {} bytes runs past the end of the file ({} bytes)",
                h.body_len,
                bytes.len()
            ),
            false,
        ));
    }
    let body = &bytes[body_start..body_end];
    let crc = salt.crc(body);
    if crc != h.body_crc {
        return Err(fail(
            format!(
                "batch {} body checksum mismatch: stored {:#010x}, computed {:#010x}",
                h.batch_seq, h.body_crc, crc
            ),
            false,
        ));
    }
    let mut frames = Vec::with_capacity(h.frame_count as usize);
    let mut at = 0usize;
    while at < body.len() {
        let fh = decode_frame(&body[at..], salt).map_err(|e| {
            fail(
                format!("checksum-valid batch holds a bad frame at body offset {at}: {e}"),
                true,
            )
        })?;
        let pos = LogPos::new(salt.segment, (body_start + at) as u32);
        frames.push(ScannedFrame {
            pos,
            header: fh,
            payload: &body[at + FRAME_HEADER_BYTES..at + fh.frame_len as usize],
        });
        at += fh.padded_len();
    }
    if frames.len() != h.frame_count as usize {
        return Err(fail(
            format!(
                "batch says {} frames, body holds {}",
                h.frame_count,
                frames.len()
            ),
            true,
        ));
    }
    Ok((h, frames))
}

/// Scan the batches of one segment from `start`, feeding each frame of every
/// valid batch to `visit` (a batch is checked whole before any of its frames
/// is visited). A visitor error is a certain failure.
pub fn scan_batches(
    bytes: &[u8],
    salt: &Salt,
    start: u32,
    first_batch_seq: u64,
    mut visit: impl FnMut(&ScannedFrame<'_>) -> std::result::Result<(), String>,
) -> SegmentScan {
    let mut scan = SegmentScan {
        end: start,
        next_batch_seq: first_batch_seq,
        last_batch: None,
        failure: None,
        batches: 0,
        frames: 0,
    };
    let mut off = start as usize;
    loop {
        if off + BATCH_HEADER_BYTES > bytes.len() {
            break; // end of file
        }
        if bytes[off..off + BATCH_HEADER_BYTES].iter().all(|b| *b == 0) {
            break; // clean end of written data
        }
        match check_batch(bytes, salt, off, Some(scan.next_batch_seq)) {
            Err(f) => {
                scan.failure = Some(f);
                break;
            }
            Ok((h, frames)) => {
                for f in &frames {
                    if let Err(detail) = visit(f) {
                        // Reported at the batch: a batch is kept or dropped
                        // whole (its earlier frames were already visited).
                        scan.failure = Some(ScanFailure {
                            offset: off as u32,
                            detail: format!("frame at offset {}: {detail}", f.pos.offset()),
                            certain: true,
                        });
                        return scan;
                    }
                }
                scan.frames += frames.len() as u64;
                scan.batches += 1;
                scan.last_batch = Some((off as u32, h.flags));
                scan.next_batch_seq += 1;
                off += BATCH_HEADER_BYTES + h.body_len as usize;
                scan.end = off as u32;
            }
        }
    }
    scan
}

/// Look past a stopping point: the offset of any later valid batch (sequence
/// `>= min_seq`), and the end of the last non-zero byte (the torn extent).
pub fn probe_after(
    bytes: &[u8],
    salt: &Salt,
    from: u32,
    min_seq: u64,
) -> (Option<u32>, Option<u32>) {
    let from_usize = (from as usize).min(bytes.len());
    let nonzero_end = last_nonzero(&bytes[from_usize..])
        .map(|p| (from_usize + p + 1).min(u32::MAX as usize) as u32);
    if nonzero_end.is_none() {
        return (None, None); // all zero: no batch can follow
    }
    let mut later = None;
    let mut off = frame::align_up(from_usize + 1);
    while off + BATCH_HEADER_BYTES <= bytes.len() {
        if bytes[off..off + 4] == frame::BATCH_MAGIC.to_le_bytes() {
            if let Ok((h, _)) = check_batch(bytes, salt, off, None) {
                if h.batch_seq >= min_seq {
                    later = Some(off as u32);
                    break;
                }
            }
        }
        off += frame::ALIGN;
    }
    (later, nonzero_end)
}

/// Index of the last non-zero byte. Runs on every open over the unused,
/// zero-filled rest of the active segment, so it compares 8 bytes at a time.
fn last_nonzero(bytes: &[u8]) -> Option<usize> {
    let tail = bytes.len() % 8;
    if let Some(p) = bytes[bytes.len() - tail..].iter().rposition(|b| *b != 0) {
        return Some(bytes.len() - tail + p);
    }
    let words = &bytes[..bytes.len() - tail];
    let w = words
        .chunks_exact(8)
        .rposition(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")) != 0)?;
    let p = words[w * 8..w * 8 + 8].iter().rposition(|b| *b != 0)?;
    Some(w * 8 + p)
}

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
    let started = Instant::now();
    let mut ids = list_segments(vfs, dir)?;
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
        remove_segments: Vec::new(),
        remove_checkpoint: false,
    };
    // Contiguous ids: a missing file in the middle is corruption.
    for w in ids.windows(2) {
        if w[1].0 != w[0].0 + 1 {
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
    if let Some(ck) = checkpoint {
        match validate_checkpoint(vfs, dir, &ids, &ck, exclusive) {
            Ok(i) => {
                start_seg = i;
                start_off = ck.covered.offset();
                next_batch_seq = Some(ck.next_batch_seq);
                last_flags = Some(ck.last_batch_flags);
                out.store_id = Some(ck.store_id);
                out.index = ck.index;
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
        let bytes = read_segment(vfs, &path, !is_last || exclusive)?;
        out.report.segments_scanned += 1;
        let header = match SegmentHeader::decode(&bytes) {
            Ok(h) => h,
            Err(HeaderError::Version(v)) => {
                return Err(Error::UnsupportedVersion {
                    file: path,
                    found: v,
                    supported: frame::FORMAT_VERSION,
                })
            }
            Err(e) => {
                // A torn new segment: only the last one, and only if nothing in it
                // validates as a batch of this store.
                let salt = out.store_id.map(|s| Salt {
                    store_id: s,
                    segment: id,
                });
                let has_batch = salt
                    .map(|s| probe_after(&bytes, &s, 0, 0).0.is_some())
                    .unwrap_or(false);
                // Creation writes only the header over zeros, so a torn creation
                // leaves zeros after byte 64, and a header whose checksum is valid
                // (with an impossible field) was not torn.
                let zeros_after_header = bytes
                    .get(SEGMENT_HEADER_BYTES..)
                    .is_none_or(|rest| rest.iter().all(|b| *b == 0));
                let crc_valid = matches!(e, HeaderError::Invalid(_));
                let covered = durable_floor.is_some_and(|f| f.segment() >= id);
                let torn_creation = is_last
                    && !has_batch
                    && !crc_valid
                    && !covered
                    && zeros_after_header
                    && (out.store_id.is_some() || bytes.iter().all(|b| *b == 0));
                if torn_creation && mode != RecoveryMode::AbsoluteConsistency {
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
                if torn_creation {
                    return Err(Error::TornTailRefused {
                        file: path,
                        offset: 0,
                        detail: e.to_string(),
                    });
                }
                if i == 0 && out.store_id.is_none() {
                    return Err(Error::NotTurnstone {
                        file: path,
                        what: "segment",
                        detail: e.to_string(),
                    });
                }
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
        if !is_last {
            if let Some(f) = scan.failure {
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
        out.report.clean_shutdown = clean_close && later.is_none() && nonzero_end.is_none();
        let floor_after = |off: u32| durable_floor.filter(|f| *f > LogPos::new(id, off));
        if let Some(f) = &scan.failure {
            if f.certain || later.is_some() || floor_after(f.offset).is_some() {
                let detail = match (later, floor_after(f.offset)) {
                    (Some(l), _) => format!(
                        "{}; a valid later batch at offset {l} proves this region was durable",
                        f.detail
                    ),
                    (None, Some(floor)) => format!(
                        "{}; the index checkpoint proves the log was durable up to {floor}",
                        f.detail
                    ),
                    (None, None) => f.detail.clone(),
                };
                damage(
                    &mut out,
                    mode,
                    &ids,
                    i,
                    path,
                    f.offset as u64,
                    (bytes.len() - f.offset as usize) as u64,
                    detail,
                    Some(scan.next_batch_seq),
                )?;
                break;
            }
        } else if let Some(l) = later {
            let detail = format!(
                "unreadable bytes between offset {} and a valid later batch at offset {l}",
                scan.end
            );
            damage(
                &mut out,
                mode,
                &ids,
                i,
                path,
                scan.end as u64,
                (l - scan.end) as u64,
                detail,
                Some(scan.next_batch_seq),
            )?;
            break;
        } else if let Some(floor) = floor_after(scan.end) {
            let detail = format!(
                "the log ends at offset {} but the index checkpoint proves it was durable up to {floor}",
                scan.end
            );
            damage(
                &mut out,
                mode,
                &ids,
                i,
                path,
                scan.end as u64,
                (bytes.len() - scan.end as usize) as u64,
                detail,
                Some(scan.next_batch_seq),
            )?;
            break;
        }
        if let Some(nz) = nonzero_end {
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
                match probe_after(&bytes, &salt, end, next) {
                    (Some(l), _) => {
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
                    (None, Some(nz)) => {
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
                    (None, None) => {}
                }
            }
            if out.tail.is_none() {
                out.tail = Some((last, end, next));
            }
        }
    }
    out.report.sessions = out.index.sessions.len() as u64;
    out.report.events = out.index.event_count();
    out.report.duration_us = started.elapsed().as_micros() as u64;
    Ok(out)
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
        crate::checkpoint::remove(vfs, dir)?;
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
    let tmp = dir.join(crate::checkpoint::CHECKPOINT_TMP_FILE);
    if vfs.exists(&tmp) {
        vfs.remove(&tmp)
            .map_err(|e| Error::io("remove stale checkpoint", &tmp, e))?;
        dir_dirty = true;
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

/// Check that a checkpoint still describes this log: same store, its segment
/// exists, and the batch it says it ends with is there, valid, at that place.
/// On a mismatch, the flag says whether the checkpoint still proves that the
/// log was durable up to its covered position (it belongs to this store).
fn validate_checkpoint(
    vfs: &dyn Vfs,
    dir: &Path,
    ids: &[SegmentId],
    ck: &Checkpoint,
    exclusive: bool,
) -> std::result::Result<usize, (String, bool)> {
    // A missing or unreadable covered segment cannot come from a power cut
    // (a segment is durable, header included, before any batch goes into it,
    // and a checkpoint never leads the log): the checkpoint still proves
    // that the log was durable up to its position, so the scan calls the
    // loss corruption instead of taking the segment for a torn creation.
    let seg = ck.covered.segment();
    let i = ids.iter().position(|s| *s == seg).ok_or_else(|| {
        (
            format!("checkpoint refers to missing segment {}", seg.0),
            true,
        )
    })?;
    // The segments before the checkpoint are not read; their names must
    // still be the ones a full scan accepts (it starts at segment 1), or the
    // verdict would depend on a derived file.
    if ids.first().is_some_and(|f| f.0 != frame::FIRST_SEGMENT_ID) {
        return Err((
            format!(
                "the log starts at segment {} instead of {}",
                ids[0].0,
                frame::FIRST_SEGMENT_ID
            ),
            false,
        ));
    }
    let path = segment_path(dir, seg);
    let bytes = read_segment(vfs, &path, i + 1 < ids.len() || exclusive)
        .map_err(|e| (e.to_string(), false))?;
    let header =
        SegmentHeader::decode(&bytes).map_err(|e| (format!("segment header: {e}"), true))?;
    if header.store_id != ck.store_id {
        return Err(("checkpoint belongs to another store".into(), false));
    }
    if ck.next_batch_seq == 0 {
        return Err(("checkpoint covers no batch".into(), false));
    }
    check_checkpoint_tail(&bytes, ck, seg, &header).map_err(|why| (why, true))?;
    Ok(i)
}

/// The batch a checkpoint says it ends with is there, valid, at that place.
fn check_checkpoint_tail(
    bytes: &[u8],
    ck: &Checkpoint,
    seg: SegmentId,
    header: &SegmentHeader,
) -> std::result::Result<(), String> {
    let last = ck.last_batch;
    if last.segment() != seg {
        // The covered batch ended the previous segment; this segment must start
        // with the next batch sequence.
        if header.first_batch_seq != ck.next_batch_seq
            || ck.covered.offset() != SEGMENT_HEADER_BYTES as u32
        {
            return Err("checkpoint does not match the segment chain".into());
        }
        return Ok(());
    }
    let salt = Salt {
        store_id: ck.store_id,
        segment: seg,
    };
    let off = last.offset() as usize;
    if off + BATCH_HEADER_BYTES > bytes.len() {
        return Err("checkpoint's last batch lies past the end of the segment".into());
    }
    match BatchHeader::decode(&bytes[off..off + BATCH_HEADER_BYTES], &salt) {
        Ok(h)
            if h.batch_seq + 1 == ck.next_batch_seq
                && off + BATCH_HEADER_BYTES + h.body_len as usize
                    == ck.covered.offset() as usize =>
        {
            Ok(())
        }
        Ok(_) => Err("checkpoint's last batch does not match the log".into()),
        Err(BatchError::Zero) => {
            Err("checkpoint leads the log (its last batch is not there)".into())
        }
        Err(e) => Err(format!("checkpoint's last batch: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_finds_nonzero_extent() {
        let salt = Salt {
            store_id: [1; 16],
            segment: SegmentId(1),
        };
        let mut b = vec![0u8; 256];
        b[100] = 9;
        assert_eq!(probe_after(&b, &salt, 64, 0), (None, Some(101)));
        assert_eq!(probe_after(&vec![0u8; 256], &salt, 64, 0), (None, None));
        assert_eq!(last_nonzero(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0]), Some(9));
        assert_eq!(last_nonzero(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]), Some(0));
        assert_eq!(last_nonzero(&[0u8; 17]), None);
        assert_eq!(last_nonzero(&[]), None);
        // A start past the end is not a panic.
        assert_eq!(probe_after(&b, &salt, 10_000, 0), (None, None));
        assert!(check_batch(&b, &salt, 250, None).is_err());
    }
}
