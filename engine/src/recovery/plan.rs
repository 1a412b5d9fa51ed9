//! The recovery pass on open: scan every batch from the last trusted point,
//! stop at the first one that fails, classify the stop by the rows of
//! FORMAT.md §6.3 ([`super::classify`]), and return a *plan* (the index, the
//! tail, the bytes to zero, the files to remove) that the store applies
//! before anything new is written ([`super::apply`]). Invariants 1 and 3 of
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
use crate::log::{read_segment, segment_path, SegmentBytes};
use crate::types::{LogPos, SegmentId};
use crate::vfs::Vfs;

use super::checkpoint_check::validate_checkpoint;
use super::classify::{classify_bad_header, classify_stop, HeaderFacts, Row, StopFacts};
use super::layout::{scan_compacted, Layout};
use super::recovered::Recovered;
use super::scan::{batch_salt, evidence_after, probe_after, scan_batches, SegmentScan as Scan};
use super::{Problem, ProblemKind, RecoveryMode, RecoveryReport};

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
    let layout = Layout::load(vfs, dir)?;
    let mut pass = Pass::new(vfs, dir, mode, exclusive, layout, checkpoint_problem);
    pass.check_contiguous()?;
    pass.start_from(checkpoint);
    let mut i = pass.start_seg;
    while i < pass.ids.len() {
        match pass.segment(i)? {
            Flow::Next => i += 1,
            Flow::Stop => break,
        }
    }
    pass.finish()?;
    let mut out = pass.out;
    check_postconditions(&out);
    out.report.sessions = out.index.sessions.len() as u64;
    out.report.events = out.index.event_count();
    out.report.duration_us = started.elapsed().as_micros() as u64;
    Ok(out)
}

/// What the plan promises the open that applies it (assertions: a
/// violation is a bug in the pass, never a property of the files).
fn check_postconditions(out: &Recovered) {
    // Segments stay in log order, and none is both kept and removed.
    assert!(
        out.segments.windows(2).all(|w| w[0] < w[1]),
        "kept segments in order"
    );
    assert!(
        out.remove_segments
            .iter()
            .all(|r| !out.segments.contains(r)),
        "a segment is kept or removed, not both"
    );
    let Some((seg, off, _)) = out.tail else {
        assert!(out.zero_ranges.is_empty(), "no tail, nothing to zero");
        return;
    };
    // The next batch goes into the last kept segment, after its header.
    assert_eq!(
        out.segments.last(),
        Some(&seg),
        "the tail is the last segment"
    );
    assert!(
        off as usize >= SEGMENT_HEADER_BYTES,
        "the tail follows the header"
    );
    // Only bytes past the end of data are zeroed (never a durable batch).
    for &(z, from, to) in &out.zero_ranges {
        assert!(
            z == seg && from >= off && from < to,
            "zeroed range {z:?}:{from}..{to} lies past the tail {seg:?}:{off}"
        );
    }
    // Every recovered frame lies before where the next batch goes.
    let tail = LogPos::new(seg, off).0;
    debug_assert!(
        out.index
            .sessions
            .iter()
            .all(|e| e.define_pos.0 < tail && e.positions.last().is_none_or(|p| *p < tail)),
        "every recovered frame lies before the tail"
    );
}

/// Whether the pass goes on to the next segment.
enum Flow {
    Next,
    Stop,
}

/// The state of one recovery pass as it walks the segments in order.
struct Pass<'a> {
    vfs: &'a dyn Vfs,
    dir: &'a Path,
    mode: RecoveryMode,
    exclusive: bool,
    ids: Vec<SegmentId>,
    manifest: Option<([u8; 16], reclaimed::Reclaimed)>,
    compacted: HashMap<SegmentId, Compaction>,
    out: Recovered,
    /// Where the scan starts: a segment (index into `ids`) and an offset.
    start_seg: usize,
    start_off: u32,
    /// The checkpoint's segment as its check read it: the scan starts there.
    start_bytes: Option<SegmentBytes>,
    next_batch_seq: Option<u64>,
    last_flags: Option<u32>,
    /// A checkpoint of this store that no longer matches the log still proves
    /// that the log was durable up to its covered position: damage before it
    /// is corruption, never a torn tail (invariant 5: checkpoints never lead).
    durable_floor: Option<LogPos>,
    /// The end of data of the previous sealed segment, for the chain check.
    prev_end: Option<u32>,
}

impl<'a> Pass<'a> {
    fn new(
        vfs: &'a dyn Vfs,
        dir: &'a Path,
        mode: RecoveryMode,
        exclusive: bool,
        layout: Layout,
        checkpoint_problem: Option<String>,
    ) -> Pass<'a> {
        let mut out = Recovered {
            store_id: None,
            index: Index::default(),
            segments: Vec::new(),
            tail: None,
            report: RecoveryReport {
                mode,
                segments: layout.ids.len() as u32,
                checkpoint_discarded: checkpoint_problem,
                ..Default::default()
            },
            zero_ranges: Vec::new(),
            remove_segments: layout.superseded,
            remove_checkpoint: false,
        };
        if let Some((_, r)) = &layout.manifest {
            out.index.set_reclaimed(r.clone());
        }
        Pass {
            vfs,
            dir,
            mode,
            exclusive,
            ids: layout.ids,
            manifest: layout.manifest,
            compacted: layout.compacted,
            out,
            start_seg: 0,
            start_off: SEGMENT_HEADER_BYTES as u32,
            start_bytes: None,
            next_batch_seq: None,
            last_flags: None,
            durable_floor: None,
            prev_end: None,
        }
    }

    /// Contiguous ids: a missing file in the middle is corruption (a
    /// compacted segment stands for the ids up to its last_segment, §14.3).
    fn check_contiguous(&mut self) -> Result<()> {
        let ids = &mut self.ids;
        let out = &mut self.out;
        for w in ids.windows(2) {
            let end = self
                .compacted
                .get(&w[0])
                .map_or(w[0].0, |c| c.last_segment.0);
            if w[1].0 != end + 1 {
                let missing = segment_path(self.dir, SegmentId(w[0].0 + 1));
                let detail = format!(
                    "segment file {} is missing between {} and {}",
                    missing.display(),
                    frame::segment_file_name(w[0]),
                    frame::segment_file_name(w[1])
                );
                if self.mode == RecoveryMode::PointInTime {
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
        Ok(())
    }

    /// Where to start: the checkpoint if it still matches the log.
    fn start_from(&mut self, checkpoint: Option<Checkpoint>) {
        let Some(ck) = checkpoint else { return };
        match validate_checkpoint(self.vfs, self.dir, &self.ids, &ck, self.exclusive) {
            Ok((i, bytes)) => {
                self.start_seg = i;
                self.start_bytes = Some(bytes);
                self.start_off = ck.covered.offset();
                self.next_batch_seq = Some(ck.next_batch_seq);
                self.last_flags = Some(ck.last_batch_flags);
                self.out.store_id = Some(ck.store_id);
                self.out.index = ck.index;
                if let Some((_, r)) = &self.manifest {
                    self.out.index.set_reclaimed(r.clone());
                }
                self.out.report.checkpoint_used = true;
            }
            Err((why, proves_durable)) => {
                if proves_durable {
                    self.durable_floor = Some(ck.covered);
                }
                self.out.report.checkpoint_discarded = Some(why);
                self.out.remove_checkpoint = true;
            }
        }
    }

    /// Scan segment `i` (index into `ids`) into the index.
    fn segment(&mut self, i: usize) -> Result<Flow> {
        let id = self.ids[i];
        let path = segment_path(self.dir, id);
        let is_last = i + 1 == self.ids.len();
        let bytes = match self.start_bytes.take() {
            Some(b) if i == self.start_seg => b,
            _ => read_segment(self.vfs, &path, !is_last || self.exclusive)?,
        };
        self.out.report.segments_scanned += 1;
        let header = match SegmentHeader::decode(&bytes) {
            Ok(h) => h,
            Err(e) => {
                self.bad_header(i, path, &bytes, e)?;
                return Ok(Flow::Stop);
            }
        };
        if let Some(detail) = self.chain_mismatch(i, &header) {
            self.damage(i, path, 0, bytes.len() as u64, detail, None)?;
            return Ok(Flow::Stop);
        }
        self.out.store_id = Some(header.store_id);
        let salt = Salt {
            store_id: header.store_id,
            segment: id,
        };
        let from = if i == self.start_seg {
            self.start_off
        } else {
            SEGMENT_HEADER_BYTES as u32
        };
        if let Some(c) = self.compacted.get(&id).copied() {
            return self.compacted_segment(i, path, &bytes, &salt, from, &header, c);
        }
        let first_seq = self.next_batch_seq.unwrap_or(header.first_batch_seq);
        let index = &mut self.out.index;
        let scan = scan_batches(&bytes, &salt, from, first_seq, |f| {
            if f.header.kind == KIND_SESSION_DEFINE {
                let def = SessionDefine::decode(f.payload).map_err(|e| e.to_string())?;
                index.apply_define(f.header.session, &def, f.pos)
            } else {
                index.apply_frame(f.header.session, f.header.seq, f.pos)
            }
        });
        self.out.report.batches_scanned += scan.batches;
        self.out.report.frames_scanned += scan.frames;
        self.out.report.bytes_scanned += (scan.end - from) as u64;
        self.next_batch_seq = Some(scan.next_batch_seq);
        if let Some((_, flags)) = scan.last_batch {
            self.last_flags = Some(flags);
        }
        self.out.segments.push(id);
        if !is_last {
            return self.sealed_end(i, path, &bytes, scan);
        }
        self.last_end(i, path, &bytes, &salt, scan)?;
        Ok(Flow::Stop)
    }

    /// A segment header that does not decode: which row of §6.3 it is, and
    /// what the pass does about it (every way out stops the scan).
    fn bad_header(&mut self, i: usize, path: PathBuf, bytes: &[u8], e: HeaderError) -> Result<()> {
        let id = self.ids[i];
        let is_last = i + 1 == self.ids.len();
        // Is this a torn new segment (only the last one, and only if
        // nothing in it validates as a batch of this store)?
        let known = self.out.store_id;
        // A batch of this store, or of the store id the damaged header still
        // holds: then the file is a damaged turnstone segment, never "not a
        // store" (§6.3 H3), as the inspection walk finds it.
        let has_batch = batch_salt(bytes, known, id).is_some();
        let facts = HeaderFacts {
            other_version: matches!(e, HeaderError::Version(_)),
            crc_valid: matches!(e, HeaderError::Invalid(_)),
            last_segment: is_last,
            first_segment: i == 0,
            zeros_after_header: bytes
                .get(SEGMENT_HEADER_BYTES..)
                .is_none_or(|rest| rest.iter().all(|b| *b == 0)),
            has_batch,
            checkpoint_covers: self.durable_floor.is_some_and(|f| f.segment() >= id),
            store_id_known: known.is_some(),
            all_zero: bytes.iter().all(|b| *b == 0),
        };
        match (classify_bad_header(&facts), e) {
            (Row::H1, HeaderError::Version(v)) => Err(Error::UnsupportedVersion {
                file: path,
                found: v,
                supported: frame::FORMAT_VERSION,
            }),
            (Row::H2, e) if self.mode != RecoveryMode::AbsoluteConsistency => {
                self.out.report.problems.push(Problem {
                    kind: ProblemKind::TornTail,
                    file: path,
                    offset: 0,
                    bytes: bytes.len() as u64,
                    detail: format!(
                        "segment header incomplete ({e}): its creation was interrupted"
                    ),
                    action: "removed the segment file".into(),
                });
                self.out.remove_segments.push(id);
                Ok(())
            }
            (Row::H2, e) => Err(Error::TornTailRefused {
                file: path,
                offset: 0,
                detail: e.to_string(),
            }),
            (Row::H3, e) => Err(Error::NotTurnstone {
                file: path,
                what: "segment",
                detail: e.to_string(),
            }),
            (_, e) => self.damage(
                i,
                path,
                0,
                bytes.len() as u64,
                format!("segment header: {e}"),
                None,
            ),
        }
    }

    /// Header fields must agree with the name, the store and the chain: what
    /// disagrees, if anything.
    fn chain_mismatch(&self, i: usize, header: &SegmentHeader) -> Option<String> {
        let id = self.ids[i];
        let checkpoint_used = self.out.report.checkpoint_used;
        if header.segment != id {
            Some(format!(
                "header names segment {}, file name {}",
                header.segment.0, id.0
            ))
        } else if self.out.store_id.is_some_and(|s| s != header.store_id) {
            Some("segment belongs to another store (store id differs)".to_string())
        } else if !(i == self.start_seg && checkpoint_used)
            && self
                .next_batch_seq
                .is_some_and(|n| n != header.first_batch_seq)
        {
            Some(format!(
                "segment starts at batch {} but the previous segment ended before batch {}",
                header.first_batch_seq,
                self.next_batch_seq.unwrap_or(0)
            ))
        } else if i == 0
            && !checkpoint_used
            && (id.0 != frame::FIRST_SEGMENT_ID
                || header.first_batch_seq != 0
                || header.prev_segment_end != 0)
        {
            Some(format!(
                "the log starts at segment {} (batch {}, previous end {}) but must start at segment {} with batch 0: earlier segment files are missing",
                id.0,
                header.first_batch_seq,
                header.prev_segment_end,
                frame::FIRST_SEGMENT_ID
            ))
        } else if self.prev_end.is_some_and(|p| p != header.prev_segment_end) {
            Some(format!(
                "previous segment ended at offset {} but this header says {}",
                self.prev_end.unwrap_or(0),
                header.prev_segment_end
            ))
        } else {
            None
        }
    }

    /// §14.3: batches back to back to the end of the file, each with the
    /// header's first_batch_seq; any failure is corruption (the file was
    /// durable before its name existed).
    #[allow(clippy::too_many_arguments)]
    fn compacted_segment(
        &mut self,
        i: usize,
        path: PathBuf,
        bytes: &[u8],
        salt: &Salt,
        from: u32,
        header: &SegmentHeader,
        c: Compaction,
    ) -> Result<Flow> {
        let failure = if i + 1 == self.ids.len() {
            Some((
                0u64,
                "a compacted segment is the last segment (collection never compacts the segment appends go to)"
                    .to_string(),
            ))
        } else {
            scan_compacted(
                bytes,
                salt,
                from as usize,
                header.first_batch_seq,
                &mut self.out,
            )
        };
        if let Some((offset, detail)) = failure {
            self.damage(
                i,
                path,
                offset,
                bytes.len() as u64 - offset,
                format!("compacted segment: {detail}"),
                None,
            )?;
            return Ok(Flow::Stop);
        }
        self.next_batch_seq = Some(c.next_batch_seq);
        self.out.segments.push(self.ids[i]);
        // The next header's prev_segment_end names the end of the range's
        // original last segment: not checked (§14.3).
        self.prev_end = None;
        Ok(Flow::Next)
    }

    /// A sealed segment: the scan ends at the end of data, and bytes after it
    /// are not looked at (the next header chains to that end, H4).
    fn sealed_end(&mut self, i: usize, path: PathBuf, bytes: &[u8], scan: Scan) -> Result<Flow> {
        let facts = StopFacts {
            failure: scan.failure.as_ref().map(|f| f.certain),
            ..StopFacts::default()
        };
        if let (Some(f), Row::C2 | Row::C3) = (scan.failure, classify_stop(&facts)) {
            self.damage(
                i,
                path,
                f.offset as u64,
                (bytes.len() - f.offset as usize) as u64,
                format!("{} (in a sealed segment: a later segment exists)", f.detail),
                Some(scan.next_batch_seq),
            )?;
            return Ok(Flow::Stop);
        }
        self.prev_end = Some(scan.end);
        Ok(Flow::Next)
    }

    /// The last segment: is anything after the end torn, or a later batch?
    /// Probe even after a clean-close marker: the next run may have crashed
    /// with a torn first batch whose header sector was lost.
    fn last_end(
        &mut self,
        i: usize,
        path: PathBuf,
        bytes: &[u8],
        salt: &Salt,
        scan: Scan,
    ) -> Result<()> {
        let id = self.ids[i];
        let clean_close = scan.failure.is_none()
            && self
                .last_flags
                .is_some_and(|f| f & BATCH_FLAG_CLEAN_CLOSE != 0);
        let (later, nonzero_end) = probe_after(bytes, salt, scan.end, scan.next_batch_seq);
        let nonzero_end = evidence_after(bytes, scan.end, scan.failure.is_some(), nonzero_end);
        self.out.report.clean_shutdown = clean_close && later.is_none() && nonzero_end.is_none();
        let stop = scan.failure.as_ref().map_or(scan.end, |f| f.offset);
        let floor = self.durable_floor.filter(|f| *f > LogPos::new(id, stop));
        let row = classify_stop(&StopFacts {
            last_segment: true,
            failure: scan.failure.as_ref().map(|f| f.certain),
            later_batch: later.is_some(),
            nonzero_after: nonzero_end.is_some(),
            checkpoint_covers: floor.is_some(),
        });
        if matches!(row, Row::C1 | Row::C2 | Row::C4) {
            let (detail, bytes_hit) = corruption_detail(&scan, bytes.len(), later, floor);
            return self.damage(
                i,
                path,
                stop as u64,
                bytes_hit as u64,
                detail,
                Some(scan.next_batch_seq),
            );
        }
        if let (Row::T1 | Row::T2, Some(nz)) = (row, nonzero_end) {
            let detail = scan
                .failure
                .as_ref()
                .map(|f| f.detail.clone())
                .unwrap_or_else(|| "non-zero bytes after the last valid batch".to_string());
            self.torn_tail(
                id,
                path,
                scan.end,
                nz,
                detail,
                "zeroed before the next append (unacknowledged writes of an interrupted commit)",
            )?;
        }
        self.out.tail = Some((id, scan.end, scan.next_batch_seq));
        Ok(())
    }

    /// Bytes from `end` to `nz` that a power cut explains: refused in
    /// AbsoluteConsistency, else zeroed before the next append.
    fn torn_tail(
        &mut self,
        id: SegmentId,
        path: PathBuf,
        end: u32,
        nz: u32,
        detail: String,
        action: &str,
    ) -> Result<()> {
        if self.mode == RecoveryMode::AbsoluteConsistency {
            return Err(Error::TornTailRefused {
                file: path,
                offset: end as u64,
                detail,
            });
        }
        let torn = (nz - end) as u64;
        self.out.report.problems.push(Problem {
            kind: ProblemKind::TornTail,
            file: path,
            offset: end as u64,
            bytes: torn,
            detail,
            action: action.into(),
        });
        self.out.zero_ranges.push((id, end, nz));
        self.out.report.torn_bytes_truncated += torn;
        Ok(())
    }

    /// After the walk: no segment left, a store without a tail, and the
    /// manifest's store id.
    fn finish(&mut self) -> Result<()> {
        if self.ids.is_empty() && self.mode != RecoveryMode::PointInTime {
            if let Some(floor) = self.durable_floor {
                return Err(Error::corrupt(
                    segment_path(self.dir, floor.segment()),
                    0,
                    format!(
                        "no segment file is left, but the index checkpoint proves the log was durable up to {floor}"
                    ),
                ));
            }
        }
        if self.out.tail.is_none() {
            self.previous_becomes_last()?;
        }
        if let (Some((mid, _)), Some(sid)) = (&self.manifest, self.out.store_id) {
            if *mid != sid {
                return Err(Error::corrupt(
                    self.dir.join(reclaimed::MANIFEST_FILE),
                    16,
                    "gc manifest belongs to another store (store id differs)",
                ));
            }
        }
        Ok(())
    }

    /// Every segment was sealed and clean, or the last one was removed: the
    /// previous segment becomes the last (§6.4). Its bytes after the end of
    /// data get the last segment's checks (T2, C1), so no debris stays ahead
    /// of the next append.
    fn previous_becomes_last(&mut self) -> Result<()> {
        let (Some(last), Some(next)) = (self.out.segments.last().copied(), self.next_batch_seq)
        else {
            return Ok(());
        };
        let end = self.prev_end.unwrap_or(SEGMENT_HEADER_BYTES as u32);
        if let Some(store_id) = self.out.store_id {
            let path = segment_path(self.dir, last);
            let bytes = read_segment(self.vfs, &path, self.exclusive)?;
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
                    let i = self.ids.iter().position(|s| *s == last).expect("listed");
                    let detail = format!(
                        "unreadable bytes between offset {end} and a valid later batch at offset {l}"
                    );
                    self.damage(i, path, end as u64, (l - end) as u64, detail, Some(next))?;
                }
                (Row::T2, None, Some(nz)) => {
                    let detail = "non-zero bytes after the last valid batch".to_string();
                    self.torn_tail(last, path, end, nz, detail, "zeroed before the next append")?;
                }
                _ => {}
            }
        }
        if self.out.tail.is_none() {
            self.out.tail = Some((last, end, next));
        }
        Ok(())
    }

    /// Damage that no power cut explains at segment `i`: refuse, or
    /// (PointInTime) cut the log there and discard everything after it.
    /// `next_seq` is the batch sequence the next batch would have had at the
    /// cut.
    fn damage(
        &mut self,
        i: usize,
        path: PathBuf,
        offset: u64,
        bytes: u64,
        detail: String,
        next_seq: Option<u64>,
    ) -> Result<()> {
        if self.mode != RecoveryMode::PointInTime {
            return Err(Error::corrupt(path, offset, detail));
        }
        let out = &mut self.out;
        out.report.problems.push(Problem {
            kind: ProblemKind::Corruption,
            file: path,
            offset,
            bytes,
            detail,
            action: "discarded from here to the end of the log (point-in-time recovery)".into(),
        });
        let id = self.ids[i];
        out.remove_checkpoint = true;
        out.remove_segments
            .extend(self.ids[i + 1..].iter().copied());
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
}

/// What the last segment's corruption (rows C1, C2, C4) says, and how many
/// bytes it covers.
fn corruption_detail(
    scan: &Scan,
    len: usize,
    later: Option<u32>,
    floor: Option<LogPos>,
) -> (String, usize) {
    match (&scan.failure, later, floor) {
        (Some(f), Some(l), _) => (
            format!(
                "{}; a valid later batch at offset {l} proves this region was durable",
                f.detail
            ),
            len - f.offset as usize,
        ),
        (Some(f), None, Some(floor)) => (
            format!(
                "{}; the index checkpoint proves the log was durable up to {floor}",
                f.detail
            ),
            len - f.offset as usize,
        ),
        (Some(f), None, None) => (f.detail.clone(), len - f.offset as usize),
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
            len - scan.end as usize,
        ),
    }
}
