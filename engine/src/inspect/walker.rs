//! The walker's state and its walk over segment files and headers: what the
//! chain expects next (batch sequence, previous segment end, session ids),
//! the checkpoint evidence, and the header verdicts (FORMAT.md §6.3 H1-H5,
//! classified by [`crate::recovery::classify_bad_header`]). After damage it
//! forgets what it expected ([`Walker::lose_track`]) and carries on.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;

use crate::error::{Error, Result};
use crate::frame::{self, HeaderError, Salt, SegmentHeader, SessionDefine, SEGMENT_HEADER_BYTES};
use crate::index::checkpoint;
use crate::log::read_segment;
use crate::recovery::{classify_bad_header, HeaderFacts, ProblemKind, Row};
use crate::types::{LogPos, SegmentId};
use crate::vfs::Vfs;

use super::hop::hop_frames;
use super::{ChecksumMismatch, ChecksumOf, InspectProblem, Item, SegmentInfo, Summary};

#[derive(Debug)]
pub(super) struct SessionState {
    pub(super) name: Option<String>,
    pub(super) define: Option<SessionDefine>,
    /// Next expected seq (`None`: unknown, after damage).
    pub(super) next: Option<u64>,
}

pub(super) struct Walker<'v, 'f> {
    pub(super) vfs: &'v dyn Vfs,
    pub(super) visit: &'f mut dyn FnMut(Item<'_>) -> ControlFlow<()>,
    pub(super) summary: Summary,
    /// A fatal error (stops the walk).
    pub(super) error: Option<Error>,
    /// Segments with a lower index in the list are walked without reporting.
    pub(super) quiet_until: Option<usize>,
    pub(super) quiet: bool,
    pub(super) store_id: Option<[u8; 16]>,
    /// Chain state: batch sequence the next batch must have, and where the
    /// previous segment ended (`None`: unknown, after damage).
    pub(super) expected_batch: Option<u64>,
    pub(super) prev_end: Option<u32>,
    pub(super) sessions: HashMap<u32, SessionState>,
    pub(super) names: HashMap<String, u32>,
    /// Compact id the next `session-define` must have (`None`: unknown).
    pub(super) next_define: Option<u32>,
    /// Frames of sessions never defined are tolerated (their define may lie in
    /// skipped bytes, or before a lone segment).
    pub(super) lost_defines: bool,
    /// Whether the first segment has been seen.
    pub(super) seen_first: bool,
    /// The walk covers a whole store directory (its log must start at
    /// segment 1), not a lone segment file.
    pub(super) full_scan: bool,
    /// Evidence from an intact index checkpoint: its store id and the end of
    /// the log it covers (everything before was durable, FORMAT.md §6.3 C4).
    pub(super) checkpoint: Option<([u8; 16], LogPos)>,
    pub(super) stop: bool,
    /// Sessions reclaimed by segment collection (`gc.manifest`, FORMAT.md
    /// §14.2): their frames from `keep` on are garbage, not damage.
    pub(super) reclaimed: std::collections::HashMap<u32, u64>,
    /// The segment being walked is compacted (FORMAT.md §14.3).
    pub(super) compacted: Option<crate::frame::Compaction>,
    /// The last segment id the latest compacted segment stands for.
    pub(super) range_end: Option<u32>,
    /// A `gc.manifest` exists: only then does a compacted header stand for
    /// a range of ids (FORMAT.md §14.3 "Listing", the rule recovery
    /// applies; without one, a compacted range fails contiguity, H5).
    pub(super) manifest_present: bool,
}

impl<'v, 'f> Walker<'v, 'f> {
    pub(super) fn new(
        vfs: &'v dyn Vfs,
        visit: &'f mut dyn FnMut(Item<'_>) -> ControlFlow<()>,
    ) -> Self {
        Walker {
            vfs,
            visit,
            summary: Summary::default(),
            error: None,
            quiet_until: None,
            quiet: false,
            store_id: None,
            expected_batch: None,
            prev_end: None,
            sessions: HashMap::new(),
            names: HashMap::new(),
            next_define: Some(0),
            lost_defines: false,
            seen_first: false,
            full_scan: false,
            checkpoint: None,
            stop: false,
            reclaimed: Default::default(),
            compacted: None,
            range_end: None,
            manifest_present: false,
        }
    }

    /// Read `gc.manifest` of `dir` (FORMAT.md §14.2); one that does not
    /// check is reported as corruption.
    pub(super) fn load_manifest(&mut self, dir: &Path) {
        match crate::index::reclaimed::load(self.vfs, dir) {
            Ok(None) => {}
            Ok(Some((_, r))) => {
                self.reclaimed = r.into_iter().map(|(id, keep)| (id.0, keep)).collect();
                self.manifest_present = true;
            }
            Err(e) => {
                // Reported; the walk reads on without its sessions, and with
                // the compacted ranges as recovery would list them.
                self.manifest_present = true;
                let file = dir.join(crate::index::reclaimed::MANIFEST_FILE);
                self.problem(ProblemKind::Corruption, &file, 0, 0, e.to_string());
            }
        }
    }

    /// Read the index checkpoint of `dir`, if intact, as evidence only.
    pub(super) fn load_checkpoint(&mut self, dir: &Path) {
        let path = dir.join(checkpoint::CHECKPOINT_FILE);
        // A checkpoint is small; a huge file there is not one (and not read).
        let size = self.vfs.open(&path, false).and_then(|f| f.len());
        if !size.is_ok_and(|n| n <= 1 << 30) {
            return;
        }
        if let Ok(Some(Ok(ck))) = checkpoint::load(self.vfs, dir) {
            self.checkpoint = Some((ck.store_id, ck.covered));
        }
    }

    /// The end of the log an intact checkpoint of this store proves durable,
    /// if `pos` lies before it.
    pub(super) fn proven_durable(&self, pos: LogPos) -> Option<LogPos> {
        let (id, covered) = self.checkpoint?;
        (self.store_id == Some(id) && pos < covered).then_some(covered)
    }

    /// The store id from the segments, else from an intact checkpoint.
    pub(super) fn known_store_id(&self) -> Option<[u8; 16]> {
        self.store_id.or(self.checkpoint.map(|(id, _)| id))
    }

    pub(super) fn result(self) -> Result<Summary> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.summary),
        }
    }

    pub(super) fn emit(&mut self, item: Item<'_>) {
        if self.quiet || self.stop {
            return;
        }
        if (self.visit)(item).is_break() {
            self.stop = true;
            self.summary.stopped = true;
        }
    }

    pub(super) fn problem(
        &mut self,
        kind: ProblemKind,
        segment: &Path,
        offset: u64,
        bytes: u64,
        detail: String,
    ) {
        self.problem_with(kind, segment, offset, bytes, detail, None);
    }

    pub(super) fn problem_with(
        &mut self,
        kind: ProblemKind,
        segment: &Path,
        offset: u64,
        bytes: u64,
        detail: String,
        checksum: Option<ChecksumMismatch>,
    ) {
        if self.quiet {
            return;
        }
        self.report(InspectProblem {
            kind,
            segment: segment.to_path_buf(),
            offset,
            bytes,
            detail,
            checksum,
            damaged_frames: Vec::new(),
            untrusted_frames: 0,
        });
    }

    /// Count a problem in the summary and show it: the one place every
    /// problem goes through.
    pub(super) fn report(&mut self, p: InspectProblem) {
        match p.kind {
            ProblemKind::TornTail => self.summary.torn_tails += 1,
            ProblemKind::Corruption => self.summary.corruptions += 1,
        }
        // Damage after a clean-close marker: the last run did not end cleanly.
        self.summary.clean_close = false;
        self.emit(Item::Problem(p));
    }

    /// Forget what the chain and the sessions expect next: bytes were skipped.
    pub(super) fn lose_track(&mut self) {
        self.expected_batch = None;
        self.prev_end = None;
        self.next_define = None;
        self.lost_defines = true;
        for s in self.sessions.values_mut() {
            s.next = None;
        }
    }

    /// Walk `ids[from..upto]` of the segments in `dir`.
    pub(super) fn walk_segments(
        &mut self,
        dir: &Path,
        ids: &[SegmentId],
        from: usize,
        upto: usize,
    ) {
        let total = ids.len();
        for (i, id) in ids.iter().copied().enumerate().take(upto).skip(from) {
            if self.stop || self.error.is_some() {
                return;
            }
            self.quiet = self.quiet_until.is_some_and(|q| i < q);
            if self.range_end.is_some_and(|end| id.0 <= end) {
                // Superseded by a compacted segment (FORMAT.md §14.3):
                // recovery ignores it and a writable open removes it.
                continue;
            }
            let prev_end_id = match self.range_end {
                Some(end) if i > 0 && end >= ids[i - 1].0 => end,
                _ if i > 0 => ids[i - 1].0,
                _ => 0,
            };
            if i > 0 && id.0 != prev_end_id.wrapping_add(1) {
                let missing = dir.join(frame::segment_file_name(SegmentId(prev_end_id + 1)));
                let detail = format!(
                    "segment file {} is missing between {} and {}",
                    missing.display(),
                    frame::segment_file_name(ids[i - 1]),
                    frame::segment_file_name(id)
                );
                self.problem(ProblemKind::Corruption, &missing, 0, 0, detail);
                self.lose_track();
            }
            let path = dir.join(frame::segment_file_name(id));
            self.walk_segment(&path, Some(id), i + 1 == total, i == 0);
        }
    }

    /// Walk one segment file. `first`: the first segment of the walk.
    pub(super) fn walk_segment(
        &mut self,
        path: &Path,
        id: Option<SegmentId>,
        last: bool,
        first: bool,
    ) {
        let size = match self
            .vfs
            .open(path, false)
            .and_then(|f| f.len())
            .map_err(|e| Error::io("open segment", path, e))
        {
            Ok(s) => s,
            Err(e) => {
                self.error = Some(e);
                return;
            }
        };
        self.summary.segments += u64::from(!self.quiet);
        if size > u32::MAX as u64 {
            // Offsets are 32-bit: no segment is this large.
            self.emit(Item::Segment(SegmentInfo {
                file: path,
                id,
                size,
                header: None,
                last,
                raw_header: &[],
                span: None,
            }));
            if first && self.store_id.is_none() {
                self.error = Some(Error::NotTurnstone {
                    file: path.to_path_buf(),
                    what: "segment",
                    detail: format!("file has {size} bytes, more than any segment"),
                });
                return;
            }
            let detail = format!("segment file has {size} bytes, more than any segment can hold");
            self.problem(ProblemKind::Corruption, path, 0, size, detail);
            self.lose_track();
            return;
        }
        let bytes = match read_segment(self.vfs, path, false) {
            Ok(b) => b,
            Err(e) => {
                self.error = Some(e);
                return;
            }
        };
        let bytes: &[u8] = &bytes;
        let header = SegmentHeader::decode(bytes);
        self.compacted = crate::frame::Compaction::of_header(bytes);
        if let Some(c) = self.compacted.filter(|_| self.manifest_present) {
            self.range_end = Some(c.last_segment.0);
        }
        let span = header.as_ref().ok().map(|h| {
            let salt = Salt {
                store_id: h.store_id,
                segment: id.unwrap_or(h.segment),
            };
            hop_frames(bytes, &salt)
        });
        self.emit(Item::Segment(SegmentInfo {
            file: path,
            id,
            size: bytes.len() as u64,
            header: header.as_ref().ok().copied(),
            last,
            raw_header: &bytes[..bytes.len().min(SEGMENT_HEADER_BYTES)],
            span,
        }));
        let is_first = !self.seen_first;
        self.seen_first = true;
        let salt = match header {
            Ok(h) => match self.check_header(path, id, &h, is_first, bytes.len() as u64) {
                Some(salt) => salt,
                None => return,
            },
            Err(e) => match self.bad_header(path, id, bytes, e, last, first) {
                Some(salt) => salt,
                None => return,
            },
        };
        if last && self.full_scan && self.compacted.is_some() {
            // FORMAT.md §14.3: collection never compacts the segment appends
            // go to, and the segment after a range exists before it is
            // rewritten.
            let detail = "compacted segment: a compacted segment is the last segment (collection never compacts the segment appends go to)".to_string();
            self.problem(ProblemKind::Corruption, path, 0, bytes.len() as u64, detail);
        }
        self.walk_batches(path, bytes, &salt, last);
        if let Some(c) = self.compacted.take() {
            // The next segment follows the range (FORMAT.md §14.3): its
            // prev_segment_end names the range's original end, not checked.
            if self.expected_batch.is_some() {
                self.expected_batch = Some(c.next_batch_seq);
            }
            self.prev_end = None;
        }
    }

    /// Check a decoded header against the file name and the chain; return the
    /// salt of the segment's batches.
    pub(super) fn check_header(
        &mut self,
        path: &Path,
        id: Option<SegmentId>,
        h: &SegmentHeader,
        is_first: bool,
        size: u64,
    ) -> Option<Salt> {
        let mut mismatch = Vec::new();
        if let Some(id) = id.filter(|id| *id != h.segment) {
            mismatch.push(format!(
                "header names segment {}, the file name segment {}",
                h.segment.0, id.0
            ));
        }
        let foreign = self.store_id.is_some_and(|s| s != h.store_id);
        if foreign {
            mismatch.push("segment belongs to another store (store id differs)".to_string());
        }
        if let Some(n) = self.expected_batch.filter(|n| *n != h.first_batch_seq) {
            mismatch.push(format!(
                "segment starts at batch {} but the previous segment ended before batch {n}",
                h.first_batch_seq
            ));
        }
        if let Some(p) = self.prev_end.filter(|p| *p != h.prev_segment_end) {
            mismatch.push(format!(
                "previous segment ended at offset {p} but this header says {}",
                h.prev_segment_end
            ));
        }
        if foreign {
            // FORMAT.md §6.5: its batches, salted with another store's id,
            // would read as sessions that are not in this store. Not walked.
            let detail = format!(
                "{}; its batches are not walked (they are not this store's events)",
                mismatch.join("; ")
            );
            self.problem(ProblemKind::Corruption, path, 0, size, detail);
            self.lose_track();
            self.summary.tail = None;
            return None;
        }
        if !mismatch.is_empty() {
            let detail = mismatch.join("; ");
            self.problem(
                ProblemKind::Corruption,
                path,
                0,
                SEGMENT_HEADER_BYTES as u64,
                detail,
            );
            self.lose_track();
        }
        let starts_log = id.unwrap_or(h.segment).0 == frame::FIRST_SEGMENT_ID
            && h.first_batch_seq == 0
            && h.prev_segment_end == 0;
        if is_first && self.full_scan && !starts_log && mismatch.is_empty() {
            // FORMAT.md §6.3 H4: a store's log starts at segment 1, batch 0.
            let detail = format!(
                "the log starts at segment {} (batch {}, previous end {}) but must start at segment {} with batch 0: earlier segment files are missing",
                id.unwrap_or(h.segment).0,
                h.first_batch_seq,
                h.prev_segment_end,
                frame::FIRST_SEGMENT_ID
            );
            self.problem(
                ProblemKind::Corruption,
                path,
                0,
                SEGMENT_HEADER_BYTES as u64,
                detail,
            );
            self.lose_track();
        } else if is_first && h.first_batch_seq != 0 {
            // Earlier segments are not part of this walk.
            self.lose_track();
        }
        if self.store_id.is_none() {
            self.store_id = Some(h.store_id);
        }
        self.expected_batch = Some(h.first_batch_seq);
        Some(Salt {
            store_id: h.store_id,
            segment: id.unwrap_or(h.segment),
        })
    }

    /// A header that does not decode: a torn creation (last segment only),
    /// not a turnstone file (first segment, nothing known), or corruption.
    /// Returns a salt to scan the batches with if one validates any batch.
    pub(super) fn bad_header(
        &mut self,
        path: &Path,
        id: Option<SegmentId>,
        bytes: &[u8],
        e: HeaderError,
        last: bool,
        first: bool,
    ) -> Option<Salt> {
        // The store id we know, or the one the damaged header holds.
        let seg = id.unwrap_or_else(|| {
            SegmentId(match bytes.get(32..36) {
                Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                None => 0,
            })
        });
        let salt = crate::recovery::batch_salt(bytes, self.known_store_id(), seg);
        // FORMAT.md §6.3 H1-H4, the rule recovery applies: creation writes
        // only the header over zeros, so a torn creation leaves zeros after
        // byte 64; a header whose checksum is valid (with an impossible
        // field) was not torn; and a segment an intact checkpoint of this
        // store reaches was complete.
        let facts = HeaderFacts {
            other_version: matches!(e, HeaderError::Version(_)),
            crc_valid: matches!(e, HeaderError::Invalid(_)),
            last_segment: last,
            first_segment: first,
            zeros_after_header: bytes
                .get(SEGMENT_HEADER_BYTES..)
                .is_none_or(|rest| rest.iter().all(|b| *b == 0)),
            has_batch: salt.is_some(),
            checkpoint_covers: self.checkpoint.is_some_and(|(cid, c)| {
                self.store_id.is_none_or(|s| s == cid) && c.segment() >= seg
            }),
            // Known from an earlier segment, as recovery knows it: the
            // checkpoint is derived and does not change a verdict.
            store_id_known: self.store_id.is_some(),
            all_zero: bytes.iter().all(|b| *b == 0),
        };
        match (classify_bad_header(&facts), &e) {
            // FORMAT.md §6.3 H1, in any segment: the store (or the rest of
            // it) is of another version; nothing of it is read as this one's.
            (Row::H1, HeaderError::Version(v)) => {
                self.error = Some(Error::UnsupportedVersion {
                    file: path.to_path_buf(),
                    found: *v,
                    supported: frame::FORMAT_VERSION,
                });
                return None;
            }
            (Row::H2, _) => {
                let detail =
                    format!("segment header incomplete ({e}): its creation was interrupted");
                self.problem(ProblemKind::TornTail, path, 0, bytes.len() as u64, detail);
                return None;
            }
            (Row::H3, _) => {
                self.error = Some(Error::NotTurnstone {
                    file: path.to_path_buf(),
                    what: "segment",
                    detail: e.to_string(),
                });
                return None;
            }
            // H4.
            _ => {}
        }
        let checksum = match e {
            HeaderError::BadChecksum { expected, found } => Some(ChecksumMismatch {
                of: ChecksumOf::SegmentHeader,
                stored: found,
                computed: expected,
            }),
            _ => None,
        };
        let detail = format!("segment header: {e}");
        let n = if salt.is_some() {
            SEGMENT_HEADER_BYTES as u64
        } else {
            bytes.len() as u64
        };
        self.problem_with(ProblemKind::Corruption, path, 0, n, detail, checksum);
        self.lose_track();
        if let Some(s) = salt {
            if self.store_id.is_none() {
                self.store_id = Some(s.store_id);
            }
        }
        salt
    }
}
