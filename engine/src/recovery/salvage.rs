//! Salvage (RocksDB's skip-any-corrupted-records): read every frame whose
//! own checksum holds, past any damage, and say what was dropped.
//!
//! Policy over the shared scanner: where the scan of a segment stops, the
//! failing batch is read frame by frame (each frame carries its own
//! frame_crc) and the scan resumes at the next valid batch; zeros where a
//! batch header belongs end the segment's data only if nothing but zeros
//! follows (otherwise they are reported and the scan resumes at the next
//! valid batch too). Header fields a normal open refuses (a header naming
//! another segment, a log that does not start at segment 1, a header whose
//! previous end or first batch says that batches at the end of the previous
//! segment are gone) are reported, and the segment is read under its file
//! name. Kept frames go
//! through the index's rules in log order, so what opens still keeps
//! invariant 2: a session keeps its dense prefix up to its first lost or
//! rule-breaking frame, and every later frame of it is dropped and reported
//! (a seq is never skipped, nothing is invented). A lost `session-define`
//! loses its session and, because compact ids are dense, every session
//! defined after it.
//!
//! A salvage open is read-only: the damaged bytes stay where they are, and no
//! later batch could be appended after them that a normal open would accept.
//! To continue, export the sessions and import them into a new store.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::frame::{
    self, decode_frame, BatchHeader, FrameError, Salt, SegmentHeader, SessionDefine,
    BATCH_HEADER_BYTES, FRAME_HEADER_BYTES, KIND_SESSION_DEFINE, SEGMENT_HEADER_BYTES,
};
use crate::index::Index;
use crate::log::{list_segments, read_segment, segment_path};
use crate::types::{LogPos, SegmentId, SessionId};
use crate::vfs::Vfs;

use super::recovered::Recovered;
use super::scan::{check_batch, evidence_after, probe_after};
use super::{Problem, ProblemKind, RecoveryMode, RecoveryReport};

/// Counts of one salvage pass, folded into problems.
struct Pass {
    index: Index,
    problems: Vec<Problem>,
    frames_kept: u64,
    frames_dropped: u64,
}

impl Pass {
    /// Offer one frame whose own checksum holds to the index; `Err` says why
    /// it was dropped.
    fn keep(
        &mut self,
        session: SessionId,
        kind: u16,
        seq: u64,
        payload: &[u8],
        pos: LogPos,
    ) -> std::result::Result<(), String> {
        let r = if kind == KIND_SESSION_DEFINE {
            SessionDefine::decode(payload)
                .map_err(|e| e.to_string())
                .and_then(|def| self.index.apply_define(session, &def, pos))
        } else {
            self.index.apply_frame(session, seq, pos)
        };
        match r {
            Ok(()) => self.frames_kept += 1,
            Err(_) => self.frames_dropped += 1,
        }
        r
    }

    /// FORMAT.md §14: reclaimed sessions stay gone (their garbage frames are
    /// skipped), and files a compacted segment supersedes are not read
    /// (dropped from `ids`). Returns the last segment each compacted segment
    /// stands for. A manifest that does not load is reported, and the pass
    /// reads on without it.
    fn apply_manifest(
        &mut self,
        vfs: &dyn Vfs,
        dir: &Path,
        ids: &mut Vec<SegmentId>,
    ) -> HashMap<SegmentId, u32> {
        let mut range_ends: HashMap<SegmentId, u32> = Default::default();
        match crate::index::reclaimed::load(vfs, dir) {
            Ok(None) => {}
            Ok(Some((_, r))) => {
                self.index.set_reclaimed(r);
                let mut end: Option<u32> = None;
                ids.retain(|id| {
                    if end.is_some_and(|e| id.0 <= e) {
                        return false;
                    }
                    if let Some(c) = compaction_of(vfs, dir, *id) {
                        end = Some(c.last_segment.0);
                        range_ends.insert(*id, c.last_segment.0);
                    }
                    true
                });
            }
            Err(e) => self.problems.push(Problem {
                kind: ProblemKind::Corruption,
                file: dir.join(crate::index::reclaimed::MANIFEST_FILE),
                offset: 0,
                bytes: 0,
                detail: e.to_string(),
                action:
                    "read on without it: sessions a collection reclaimed may show their garbage"
                        .into(),
            }),
        }
        range_ends
    }
}

/// The compaction facts of segment `id`'s header, if it is a compacted
/// segment. Only the header is read; a file that does not open or read is
/// taken for an ordinary segment here.
fn compaction_of(vfs: &dyn Vfs, dir: &Path, id: SegmentId) -> Option<frame::Compaction> {
    let mut b = [0u8; SEGMENT_HEADER_BYTES];
    let n = vfs
        .open(&segment_path(dir, id), false)
        .and_then(|f| f.read_at(&mut b, 0))
        .unwrap_or(0);
    frame::Compaction::of_header(&b[..n])
}

/// The salvage pass over every segment of `dir` (no checkpoint, no writes).
pub(crate) fn salvage(vfs: &dyn Vfs, dir: &Path) -> Result<Recovered> {
    let started = Instant::now();
    let ids = list_segments(vfs, dir)?;
    let mut walk = Walk::new(vfs, dir, ids);
    walk.report_missing();
    for i in 0..walk.ids.len() {
        walk.segment(i)?;
    }
    Ok(walk.finish(started))
}

/// The state of the salvage walk over the segments, in order.
struct Walk<'a> {
    vfs: &'a dyn Vfs,
    dir: &'a Path,
    /// The segments read, in order (without those a compacted one supersedes).
    ids: Vec<SegmentId>,
    /// For each compacted segment, the last segment of the range it stands
    /// for (§14.3).
    range_ends: HashMap<SegmentId, u32>,
    pass: Pass,
    report: RecoveryReport,
    /// The store id of the first segment whose header decodes: the salt of
    /// every later segment's frames.
    store_id: Option<[u8; 16]>,
    /// The previous segment, if it read without a problem of its own: its id,
    /// the batch that comes next and where its data ends (what the next
    /// segment's header must say, or batches at its end are gone).
    chain: Option<(SegmentId, u64, u32)>,
}

impl<'a> Walk<'a> {
    /// A walk over `ids` after the collection manifest has had its say
    /// (reclaimed sessions, superseded files).
    fn new(vfs: &'a dyn Vfs, dir: &'a Path, mut ids: Vec<SegmentId>) -> Walk<'a> {
        let mut pass = Pass {
            index: Index::default(),
            problems: Vec::new(),
            frames_kept: 0,
            frames_dropped: 0,
        };
        let range_ends = pass.apply_manifest(vfs, dir, &mut ids);
        let report = RecoveryReport {
            mode: RecoveryMode::Salvage,
            segments: ids.len() as u32,
            ..Default::default()
        };
        Walk {
            vfs,
            dir,
            ids,
            range_ends,
            pass,
            report,
            store_id: None,
            chain: None,
        }
    }

    /// Gaps in the ids are reported, not refused: salvage reads on with the
    /// segments that are there. A compacted segment stands for the ids up to
    /// the end of its range.
    fn report_missing(&mut self) {
        let end_of = |id: SegmentId| self.range_ends.get(&id).copied().unwrap_or(id.0);
        for w in self.ids.windows(2).filter(|w| w[1].0 != end_of(w[0]) + 1) {
            self.pass.problems.push(Problem {
                kind: ProblemKind::Corruption,
                file: segment_path(self.dir, SegmentId(end_of(w[0]) + 1)),
                offset: 0,
                bytes: 0,
                detail: format!(
                    "segment files between {} and {} are missing",
                    w[0].0, w[1].0
                ),
                action: "read on with the segments that are there".into(),
            });
        }
    }

    /// Read segment `i` (index into `ids`): its header says which store id
    /// salts its frames, then its batches are salvaged. It extends the chain
    /// only if it read without a problem of its own.
    fn segment(&mut self, i: usize) -> Result<()> {
        let id = self.ids[i];
        let path = segment_path(self.dir, id);
        let prev = self.chain.take();
        let bytes = read_segment(self.vfs, &path, false)?;
        self.report.segments_scanned += 1;
        self.report.bytes_scanned += bytes.len() as u64;
        let Some((salt_id, first_seq)) = self.header(i, &path, &bytes, prev)? else {
            return Ok(());
        };
        self.store_id = Some(salt_id);
        let salt = Salt {
            store_id: salt_id,
            segment: id,
        };
        let is_last = i + 1 == self.ids.len();
        let problems_before = self.pass.problems.len();
        let (next_seq, end) = salvage_segment(
            &mut self.pass,
            &mut self.report,
            &path,
            &bytes,
            &salt,
            is_last,
        );
        if let (Some(next), true) = (
            next_seq.or(first_seq),
            self.pass.problems.len() == problems_before,
        ) {
            self.chain = Some((id, next, end));
        }
        Ok(())
    }

    /// Segment `i`'s header: the store id its frames check under and its
    /// first batch sequence (`None` if the header does not decode), or
    /// `Ok(None)` to skip the segment. Only another format version, or a
    /// first segment that is no segment, is refused outright.
    fn header(
        &mut self,
        i: usize,
        path: &Path,
        bytes: &[u8],
        prev: Option<(SegmentId, u64, u32)>,
    ) -> Result<Option<([u8; 16], Option<u64>)>> {
        match SegmentHeader::decode(bytes) {
            Ok(h) if self.store_id.is_some_and(|s| s != h.store_id) => {
                self.pass.problems.push(Problem {
                    kind: ProblemKind::Corruption,
                    file: path.to_path_buf(),
                    offset: 0,
                    bytes: bytes.len() as u64,
                    detail: "segment belongs to another store (store id differs)".into(),
                    action: "skipped the whole segment".into(),
                });
                Ok(None)
            }
            Ok(h) => {
                if let Some(detail) = self.header_mismatch(i, &h, prev) {
                    self.pass.problems.push(Problem {
                        kind: ProblemKind::Corruption,
                        file: path.to_path_buf(),
                        offset: 0,
                        bytes: SEGMENT_HEADER_BYTES as u64,
                        detail,
                        action: "read the segment's batches as the file name says".into(),
                    });
                }
                Ok(Some((h.store_id, Some(h.first_batch_seq))))
            }
            Err(frame::HeaderError::Version(v)) => Err(Error::UnsupportedVersion {
                file: path.to_path_buf(),
                found: v,
                supported: frame::FORMAT_VERSION,
            }),
            Err(e) => match self.store_id {
                Some(s) => {
                    self.pass.problems.push(Problem {
                        kind: ProblemKind::Corruption,
                        file: path.to_path_buf(),
                        offset: 0,
                        bytes: SEGMENT_HEADER_BYTES as u64,
                        detail: format!("segment header: {e}"),
                        action: "read the segment's batches with the store id of the others".into(),
                    });
                    Ok(Some((s, None)))
                }
                None if i == 0 => Err(Error::NotTurnstone {
                    file: path.to_path_buf(),
                    what: "segment",
                    detail: e.to_string(),
                }),
                None => Ok(None),
            },
        }
    }

    /// What a normal open refuses in a header that decodes, salvage reports
    /// and reads on: the frames check under the file's own name (a copy of
    /// another segment's file keeps none). `prev` is the chain the previous
    /// segment left: checked only between adjacent ids, and not at all once
    /// a collection compacted segments (their headers chain to the original
    /// range, §14.3).
    fn header_mismatch(
        &self,
        i: usize,
        h: &SegmentHeader,
        prev: Option<(SegmentId, u64, u32)>,
    ) -> Option<String> {
        let id = self.ids[i];
        if h.segment != id {
            Some(format!(
                "header names segment {}, file name {}",
                h.segment.0, id.0
            ))
        } else if i == 0
            && (id.0 != frame::FIRST_SEGMENT_ID
                || h.first_batch_seq != 0
                || h.prev_segment_end != 0)
        {
            Some(format!(
                "the log starts at segment {} (batch {}), not at segment {} with batch 0: earlier segment files are missing",
                id.0,
                h.first_batch_seq,
                frame::FIRST_SEGMENT_ID
            ))
        } else {
            prev.filter(|(p, next, end)| {
                // After a compacted segment, prev_segment_end names its
                // range's original end: not checked (§14.3).
                p.0 + 1 == id.0
                    && !self.range_ends.contains_key(p)
                    && (h.first_batch_seq != *next || h.prev_segment_end != *end)
            })
            .map(|(p, next, end)| {
                format!(
                    "segment {} ends at offset {end} before batch {next}, but this header says offset {} and batch {}: batches at the end of segment {} are missing",
                    p.0, h.prev_segment_end, h.first_batch_seq, p.0
                )
            })
        }
    }

    /// The plan of a salvage open: the index of every frame kept, the report
    /// of what was dropped, and nothing to zero or remove (read-only).
    fn finish(self, started: Instant) -> Recovered {
        let Walk {
            ids,
            pass,
            mut report,
            store_id,
            ..
        } = self;
        report.sessions = pass.index.sessions.len() as u64;
        report.events = pass.index.event_count();
        report.frames_scanned = pass.frames_kept + pass.frames_dropped;
        report.problems = pass.problems;
        report.duration_us = started.elapsed().as_micros() as u64;
        let last = ids.last().copied();
        Recovered {
            store_id,
            index: pass.index,
            segments: ids,
            tail: last.map(|s| (s, SEGMENT_HEADER_BYTES as u32, 0)),
            report,
            zero_ranges: Vec::new(),
            remove_segments: Vec::new(),
            remove_checkpoint: false,
        }
    }
}

/// Walk one segment's batches, reading failing batches frame by frame and
/// resuming at the next valid batch. Only the last segment can end in a torn
/// tail; damage anywhere else is corruption. Returns the sequence number
/// after the last valid batch (`None` if there was none) and where it ended.
fn salvage_segment(
    pass: &mut Pass,
    report: &mut RecoveryReport,
    path: &Path,
    bytes: &[u8],
    salt: &Salt,
    is_last: bool,
) -> (Option<u64>, u32) {
    let mut off = SEGMENT_HEADER_BYTES;
    let (mut next_seq, mut end) = (None, SEGMENT_HEADER_BYTES as u32);
    loop {
        let end_of_data = bytes
            .get(off..off + BATCH_HEADER_BYTES)
            .is_none_or(|h| h.iter().all(|b| *b == 0));
        if end_of_data {
            // Zeros, or too few bytes for a batch header: the end of data,
            // unless non-zero bytes follow (a zeroed batch header, debris,
            // a cut header). Say so, and read on at a valid batch after it.
            let (later, nonzero_end) = probe_after(bytes, salt, off as u32, 0);
            let nonzero_end = evidence_after(bytes, off as u32, false, nonzero_end);
            let Some(end) = later.or(nonzero_end) else {
                break;
            };
            let end = end as usize;
            pass.problems.push(Problem {
                kind: damage_kind(later, is_last),
                file: path.to_path_buf(),
                offset: off as u64,
                bytes: end.saturating_sub(off) as u64,
                detail: match later {
                    Some(_) => "no batch header where the data goes on".into(),
                    None => "non-zero bytes after the end of data".into(),
                },
                action: resumed(later),
            });
            match later {
                Some(l) => {
                    off = l as usize;
                    continue;
                }
                None => break,
            }
        }
        match check_batch(bytes, salt, off, None) {
            Ok((h, frames)) => {
                report.batches_scanned += 1;
                for f in &frames {
                    let h = &f.header;
                    if let Err(why) = pass.keep(h.session, h.kind, h.seq, f.payload, f.pos) {
                        pass.problems.push(dropped(path, f.pos, h.frame_len, why));
                    }
                }
                off += BATCH_HEADER_BYTES + h.body_len as usize;
                (next_seq, end) = (Some(h.batch_seq + 1), off as u32);
            }
            Err(failure) => {
                let (later, nonzero_end) = probe_after(bytes, salt, off as u32, 0);
                let nonzero_end = evidence_after(bytes, off as u32, true, nonzero_end);
                let resume = later.map(|l| l as usize);
                let (kept, lost) = salvage_batch(pass, path, bytes, salt, off);
                let end = resume
                    .or(nonzero_end.map(|n| n as usize))
                    .unwrap_or(bytes.len());
                pass.problems.push(Problem {
                    kind: damage_kind(later, is_last),
                    file: path.to_path_buf(),
                    offset: off as u64,
                    bytes: end.saturating_sub(off) as u64,
                    detail: failure.detail,
                    action: format!(
                        "salvaged: kept {kept} frames of this batch whose own checksum holds, dropped {lost}; {}",
                        resumed(later)
                    ),
                });
                match resume {
                    Some(l) => off = l,
                    None => break,
                }
            }
        }
    }
    (next_seq, end)
}

/// Read the failing batch at `off` frame by frame; returns (kept, dropped).
fn salvage_batch(
    pass: &mut Pass,
    path: &Path,
    bytes: &[u8],
    salt: &Salt,
    off: usize,
) -> (u64, u64) {
    let Some(h) = bytes
        .get(off..off + BATCH_HEADER_BYTES)
        .and_then(|b| BatchHeader::decode(b, salt).ok())
    else {
        return (0, 0);
    };
    let start = off + BATCH_HEADER_BYTES;
    let Some(body) = bytes.get(start..start + h.body_len as usize) else {
        return (0, 0);
    };
    let (mut kept, mut lost) = (0, 0);
    let mut at = 0usize;
    while at + FRAME_HEADER_BYTES <= body.len() {
        let pos = LogPos::new(salt.segment, (start + at) as u32);
        match decode_frame(&body[at..], salt) {
            Ok(fh) => {
                let payload = &body[at + FRAME_HEADER_BYTES..at + fh.frame_len as usize];
                match pass.keep(fh.session, fh.kind, fh.seq, payload, pos) {
                    Ok(()) => kept += 1,
                    Err(why) => {
                        lost += 1;
                        pass.problems.push(dropped(path, pos, fh.frame_len, why));
                    }
                }
                at += fh.padded_len();
            }
            Err(e) => {
                lost += 1;
                pass.frames_dropped += 1;
                let len = u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
                let next = match e {
                    FrameError::BadChecksum { .. } => at + frame::align_up(len as usize),
                    _ => {
                        // Unknown extent: up to the next frame that checks.
                        let mut n = at + frame::ALIGN;
                        while n + FRAME_HEADER_BYTES <= body.len()
                            && decode_frame(&body[n..], salt).is_err()
                        {
                            n += frame::ALIGN;
                        }
                        n
                    }
                };
                pass.problems.push(Problem {
                    kind: ProblemKind::Corruption,
                    file: path.to_path_buf(),
                    offset: pos.offset() as u64,
                    bytes: (next.min(body.len()) - at) as u64,
                    detail: format!("frame: {e}"),
                    action: "dropped the frame".into(),
                });
                at = next;
            }
        }
    }
    (kept, lost)
}

fn dropped(path: &Path, pos: LogPos, frame_len: u32, why: String) -> Problem {
    Problem {
        kind: ProblemKind::Corruption,
        file: path.to_path_buf(),
        offset: pos.offset() as u64,
        bytes: frame_len as u64,
        detail: why,
        action:
            "dropped the frame: it checks, but an earlier loss leaves its session no place for it"
                .into(),
    }
}

/// Damage after which no valid batch follows in the last segment is a torn
/// tail; anything else is corruption (FORMAT.md §6.3).
fn damage_kind(later: Option<u32>, is_last: bool) -> ProblemKind {
    if later.is_none() && is_last {
        ProblemKind::TornTail
    } else {
        ProblemKind::Corruption
    }
}

/// Where a salvage scan goes on after damage, as a problem's action says.
fn resumed(later: Option<u32>) -> String {
    match later {
        Some(l) => format!("resumed at the valid batch at offset {l}"),
        None => "nothing valid follows in this segment".into(),
    }
}
