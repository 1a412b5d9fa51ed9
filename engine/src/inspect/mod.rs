//! A read-only walk over a store directory (or one segment file) that reports,
//! in log order, every segment header, batch boundary and frame, and every
//! problem found in place: the engine of `turnstone verify` and `dump`.
//!
//! Unlike the recovery pass ([`crate::recovery`]) it never stops at the first
//! damage: after a bad batch it resynchronises on the next valid batch header
//! ([`probe_after`]) and goes on, so one report lists all damage. It classifies
//! each problem with the same rule as recovery (`FORMAT.md` §6): a failing
//! batch in the last segment with no valid batch after it is a torn tail;
//! anything else is corruption. An intact index checkpoint is used only as
//! evidence (row C4): a failure before the position it covers is corruption,
//! since the checkpoint was written after that position was durable. The scan
//! itself never starts from the checkpoint: every byte is checked. It never
//! takes the store lock, never writes, and never panics on any bytes
//! (invariant 10 of ARCHITECTURE.md).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::checkpoint;
use crate::error::{Error, Result};
use crate::frame::{
    self, BatchError, BatchHeader, FrameError, HeaderError, Salt, SegmentHeader, SessionDefine,
    BATCH_FLAG_CLEAN_CLOSE, BATCH_HEADER_BYTES, FLAG_IGNORABLE, FRAME_HEADER_BYTES,
    KIND_SESSION_DEFINE, SEGMENT_HEADER_BYTES,
};
use crate::log::{list_segments, read_segment};
use crate::recovery::{
    check_batch, classify_bad_header, classify_stop, probe_after, HeaderFacts, ProblemKind, Row,
    StopFacts,
};
use crate::types::{LogPos, SegmentId, SessionId};
use crate::vfs::{OsVfs, Vfs};

/// A segment file as found, before its batches.
#[derive(Debug, Clone)]
pub struct SegmentInfo<'a> {
    pub file: &'a Path,
    /// Segment number from the file name (`None` if the name is not one).
    pub id: Option<SegmentId>,
    /// File size in bytes.
    pub size: u64,
    /// The decoded header, if it decodes (its failure is reported as a problem).
    pub header: Option<SegmentHeader>,
    /// No later segment exists: a torn tail is possible only here.
    pub last: bool,
    /// The first bytes of the file (up to the 64-byte header), for hex dumps.
    pub raw_header: &'a [u8],
    /// Where the segment's frames lie, found by hopping from batch header to
    /// batch header (header checksums checked, bodies not: the walk that
    /// follows checks every byte). `None` when the header does not decode.
    pub span: Option<FrameSpan>,
}

/// First and last frame of a segment, by offset, and how many frames the
/// batch headers chain to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FrameSpan {
    pub first: Option<u64>,
    pub last: Option<u64>,
    pub frames: u64,
    /// End of the last batch the hop reached.
    pub data_end: u64,
}

/// A valid commit batch, reported before its frames.
#[derive(Debug, Clone)]
pub struct BatchInfo<'a> {
    pub segment: &'a Path,
    /// Offset of the batch header in the segment file.
    pub offset: u64,
    pub header: BatchHeader,
    /// The 32 header bytes as stored.
    pub raw_header: &'a [u8],
}

impl BatchInfo<'_> {
    /// Whether this (empty) batch marks a clean close.
    pub fn clean_close(&self) -> bool {
        self.header.flags & BATCH_FLAG_CLEAN_CLOSE != 0
    }
    /// Bytes the batch occupies in the file, header included.
    pub fn len(&self) -> u64 {
        (BATCH_HEADER_BYTES + self.header.body_len as usize) as u64
    }
    pub fn is_empty(&self) -> bool {
        self.header.frame_count == 0
    }
}

/// One frame of a valid batch.
#[derive(Debug, Clone)]
pub struct FrameInfo<'a> {
    pub segment: &'a Path,
    pub segment_id: SegmentId,
    /// Offset of the frame in the segment file.
    pub offset: u64,
    /// Frame length in bytes (header plus payload, without padding).
    pub len: u32,
    /// Sequence number of the batch holding the frame.
    pub batch_seq: u64,
    /// Compact session id as written in the frame.
    pub session: SessionId,
    /// The session's string id, from its `session-define` frame (`None` when
    /// that frame was not seen: damage before it, or a lone segment file).
    pub session_name: Option<&'a str>,
    pub seq: u64,
    pub kind: u16,
    pub flags: u16,
    pub payload: &'a [u8],
    /// For a `session-define` frame: what it defines (if it decodes).
    pub define: Option<&'a SessionDefine>,
    /// The frame's bytes as stored: 24-byte header, then the payload.
    pub raw: &'a [u8],
}

impl FrameInfo<'_> {
    pub fn ignorable(&self) -> bool {
        self.flags & FLAG_IGNORABLE != 0
    }
    /// A `session-define` frame (engine bookkeeping, not an event).
    pub fn is_define(&self) -> bool {
        self.kind == KIND_SESSION_DEFINE
    }
}

/// Damage found in place.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InspectProblem {
    pub kind: ProblemKind,
    /// The segment file (for a missing segment: the path it should have).
    pub segment: PathBuf,
    pub offset: u64,
    /// Bytes affected (skipped, or torn).
    pub bytes: u64,
    pub detail: String,
    /// For a checksum failure: the checksum stored in the file and the one
    /// computed over the bytes as found.
    pub checksum: Option<ChecksumMismatch>,
}

/// A checksum that does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ChecksumMismatch {
    /// What the header says the bytes hash to.
    pub stored: u32,
    /// What the bytes hash to now.
    pub computed: u32,
}

/// Where the walk found the end of the log: where a live writer's next batch
/// will go. Used to follow a store as it grows ([`Follower`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub segment: PathBuf,
    pub segment_id: SegmentId,
    /// Offset just after the last valid batch.
    pub offset: u64,
    /// Sequence number the next batch must have.
    pub next_batch_seq: u64,
    pub store_id: [u8; 16],
}

/// One thing the walk reports, in log order.
#[derive(Debug, Clone)]
pub enum Item<'a> {
    Segment(SegmentInfo<'a>),
    Batch(BatchInfo<'a>),
    Frame(FrameInfo<'a>),
    Problem(InspectProblem),
}

/// Totals of a walk.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub segments: u64,
    pub batches: u64,
    /// All frames, `session-define` frames included.
    pub frames: u64,
    /// Event frames (not `session-define`).
    pub events: u64,
    pub payload_bytes: u64,
    /// `session-define` frames seen.
    pub sessions: u64,
    pub torn_tails: u64,
    pub corruptions: u64,
    /// The last valid batch of the walk marks a clean close.
    pub clean_close: bool,
    /// The visitor asked to stop before the end.
    pub stopped: bool,
    /// End of the valid log in the last segment walked (`None` when damage
    /// there left it unknown, or the walk stopped early).
    #[serde(skip)]
    pub tail: Option<Tail>,
}

impl Summary {
    pub fn is_corrupt(&self) -> bool {
        self.corruptions > 0
    }
}

/// Walk `path` (a store directory or one segment file) on the real file
/// system. See [`walk_with`].
pub fn walk(path: &Path, visit: impl FnMut(Item<'_>) -> ControlFlow<()>) -> Result<Summary> {
    walk_with(&OsVfs, path, visit)
}

/// Walk `path`, a store directory or one segment file, calling `visit` with
/// every [`Item`] in log order; `visit` may stop the walk early.
///
/// Damage is reported as [`Item::Problem`], never as an error. Errors are for
/// what prevents a walk: the path does not exist, is not a store (no segment
/// files; the first segment is not a turnstone segment), has an unsupported
/// format version, or cannot be read.
///
/// For a lone segment file inside a store directory, the earlier segments are
/// scanned silently first, so that session names and seq checks are exact.
pub fn walk_with(
    vfs: &dyn Vfs,
    path: &Path,
    mut visit: impl FnMut(Item<'_>) -> ControlFlow<()>,
) -> Result<Summary> {
    let mut w = Walker::new(vfs, &mut visit);
    if vfs.is_dir(path) {
        let ids = list_segments(vfs, path)?;
        if ids.is_empty() {
            return Err(Error::NoStore {
                dir: path.to_path_buf(),
                detail: "no segment files (*.tseg) in the directory".into(),
            });
        }
        w.load_checkpoint(path);
        w.full_scan = true;
        w.walk_segments(path, &ids, 0, ids.len());
        w.result()
    } else if vfs.exists(path) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let id = frame::parse_segment_file_name(name);
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        let dir = dir.unwrap_or(Path::new("."));
        let siblings = match id {
            Some(_) => list_segments(vfs, dir).unwrap_or_default(),
            None => Vec::new(),
        };
        match id.and_then(|id| siblings.iter().position(|s| *s == id)) {
            Some(at) => {
                // Scan the earlier segments quietly (for session names and
                // seqs), then this one. If they cannot be read, walk it alone.
                w.quiet_until = Some(at);
                // With no earlier segment beside it, the file is walked as a
                // lone segment (a copy), not as the start of a store.
                w.full_scan = at > 0;
                w.load_checkpoint(dir);
                w.walk_segments(dir, &siblings, 0, at);
                if w.error.is_some() {
                    w = Walker::new(vfs, w.visit);
                    w.load_checkpoint(dir);
                    w.lose_track();
                }
                w.walk_segments(dir, &siblings, at, at + 1);
                w.result()
            }
            None => {
                let last = !siblings.iter().any(|s| Some(*s) > id);
                w.walk_segment(path, id, last, true);
                w.result()
            }
        }
    } else {
        Err(Error::NoStore {
            dir: path.to_path_buf(),
            detail: "no such file or directory".into(),
        })
    }
}

#[derive(Debug)]
struct SessionState {
    name: Option<String>,
    define: Option<SessionDefine>,
    /// Next expected seq (`None`: unknown, after damage).
    next: Option<u64>,
}

struct Walker<'v, 'f> {
    vfs: &'v dyn Vfs,
    visit: &'f mut dyn FnMut(Item<'_>) -> ControlFlow<()>,
    summary: Summary,
    /// A fatal error (stops the walk).
    error: Option<Error>,
    /// Segments with a lower index in the list are walked without reporting.
    quiet_until: Option<usize>,
    quiet: bool,
    store_id: Option<[u8; 16]>,
    /// Chain state: batch sequence the next batch must have, and where the
    /// previous segment ended (`None`: unknown, after damage).
    expected_batch: Option<u64>,
    prev_end: Option<u32>,
    sessions: HashMap<u32, SessionState>,
    names: HashMap<String, u32>,
    /// Compact id the next `session-define` must have (`None`: unknown).
    next_define: Option<u32>,
    /// Frames of sessions never defined are tolerated (their define may lie in
    /// skipped bytes, or before a lone segment).
    lost_defines: bool,
    /// Whether the first segment has been seen.
    seen_first: bool,
    /// The walk covers a whole store directory (its log must start at
    /// segment 1), not a lone segment file.
    full_scan: bool,
    /// Evidence from an intact index checkpoint: its store id and the end of
    /// the log it covers (everything before was durable, FORMAT.md §6.3 C4).
    checkpoint: Option<([u8; 16], LogPos)>,
    stop: bool,
}

impl<'v, 'f> Walker<'v, 'f> {
    fn new(vfs: &'v dyn Vfs, visit: &'f mut dyn FnMut(Item<'_>) -> ControlFlow<()>) -> Self {
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
        }
    }

    /// Read the index checkpoint of `dir`, if intact, as evidence only.
    fn load_checkpoint(&mut self, dir: &Path) {
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
    fn proven_durable(&self, pos: LogPos) -> Option<LogPos> {
        let (id, covered) = self.checkpoint?;
        (self.store_id == Some(id) && pos < covered).then_some(covered)
    }

    /// The store id from the segments, else from an intact checkpoint.
    fn known_store_id(&self) -> Option<[u8; 16]> {
        self.store_id.or(self.checkpoint.map(|(id, _)| id))
    }

    fn result(self) -> Result<Summary> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.summary),
        }
    }

    fn emit(&mut self, item: Item<'_>) {
        if self.quiet || self.stop {
            return;
        }
        if (self.visit)(item).is_break() {
            self.stop = true;
            self.summary.stopped = true;
        }
    }

    fn problem(
        &mut self,
        kind: ProblemKind,
        segment: &Path,
        offset: u64,
        bytes: u64,
        detail: String,
    ) {
        self.problem_with(kind, segment, offset, bytes, detail, None);
    }

    fn problem_with(
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
        match kind {
            ProblemKind::TornTail => self.summary.torn_tails += 1,
            ProblemKind::Corruption => self.summary.corruptions += 1,
        }
        // Damage after a clean-close marker: the last run did not end cleanly.
        self.summary.clean_close = false;
        self.emit(Item::Problem(InspectProblem {
            kind,
            segment: segment.to_path_buf(),
            offset,
            bytes,
            detail,
            checksum,
        }));
    }

    /// Forget what the chain and the sessions expect next: bytes were skipped.
    fn lose_track(&mut self) {
        self.expected_batch = None;
        self.prev_end = None;
        self.next_define = None;
        self.lost_defines = true;
        for s in self.sessions.values_mut() {
            s.next = None;
        }
    }

    /// Walk `ids[from..upto]` of the segments in `dir`.
    fn walk_segments(&mut self, dir: &Path, ids: &[SegmentId], from: usize, upto: usize) {
        let total = ids.len();
        for (i, id) in ids.iter().copied().enumerate().take(upto).skip(from) {
            if self.stop || self.error.is_some() {
                return;
            }
            self.quiet = self.quiet_until.is_some_and(|q| i < q);
            if i > 0 && id.0 != ids[i - 1].0.wrapping_add(1) {
                let missing = dir.join(frame::segment_file_name(SegmentId(ids[i - 1].0 + 1)));
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
    fn walk_segment(&mut self, path: &Path, id: Option<SegmentId>, last: bool, first: bool) {
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
            Ok(h) => self.check_header(path, id, &h, is_first),
            Err(e) => match self.bad_header(path, id, bytes, e, last, first) {
                Some(salt) => salt,
                None => return,
            },
        };
        self.walk_batches(path, bytes, &salt, last);
    }

    /// Check a decoded header against the file name and the chain; return the
    /// salt of the segment's batches.
    fn check_header(
        &mut self,
        path: &Path,
        id: Option<SegmentId>,
        h: &SegmentHeader,
        is_first: bool,
    ) -> Salt {
        let mut mismatch = Vec::new();
        if let Some(id) = id.filter(|id| *id != h.segment) {
            mismatch.push(format!(
                "header names segment {}, the file name segment {}",
                h.segment.0, id.0
            ));
        }
        if self.store_id.is_some_and(|s| s != h.store_id) {
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
        Salt {
            store_id: h.store_id,
            segment: id.unwrap_or(h.segment),
        }
    }

    /// A header that does not decode: a torn creation (last segment only),
    /// not a turnstone file (first segment, nothing known), or corruption.
    /// Returns a salt to scan the batches with if one validates any batch.
    fn bad_header(
        &mut self,
        path: &Path,
        id: Option<SegmentId>,
        bytes: &[u8],
        e: HeaderError,
        last: bool,
        first: bool,
    ) -> Option<Salt> {
        // Candidate salts: the store id we know, or the one the damaged header
        // holds (a checksum mismatch may leave it intact).
        let seg = id.unwrap_or_else(|| {
            SegmentId(match bytes.get(32..36) {
                Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                None => 0,
            })
        });
        let mut candidates = Vec::new();
        if let Some(s) = self.known_store_id() {
            candidates.push(s);
        }
        if let Some(raw) = bytes.get(16..32) {
            let mut s = [0u8; 16];
            s.copy_from_slice(raw);
            if !candidates.contains(&s) {
                candidates.push(s);
            }
        }
        let salt = candidates
            .into_iter()
            .map(|store_id| Salt {
                store_id,
                segment: seg,
            })
            .find(|salt| probe_after(bytes, salt, 0, 0).0.is_some());
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
            store_id_known: self.known_store_id().is_some(),
            all_zero: bytes.iter().all(|b| *b == 0),
        };
        match (classify_bad_header(&facts), &e) {
            // Nothing to walk: the store itself is of another version.
            (Row::H1, HeaderError::Version(v)) if first && self.store_id.is_none() => {
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
            // H1 in a later segment (reported, and the walk goes on), H4.
            _ => {}
        }
        let checksum = match e {
            HeaderError::BadChecksum { expected, found } => Some(ChecksumMismatch {
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

    /// Walk the batches of one segment from the header on, resynchronising
    /// after damage.
    fn walk_batches(&mut self, path: &Path, bytes: &[u8], salt: &Salt, last: bool) {
        let len = bytes.len();
        let mut off = SEGMENT_HEADER_BYTES;
        // End of the last valid batch (`None` once damage made it unknown).
        let mut end = Some(off as u32);
        let mut damaged = false;
        while !self.stop && off <= len {
            let at_end = off + BATCH_HEADER_BYTES > len
                || bytes[off..off + BATCH_HEADER_BYTES].iter().all(|b| *b == 0);
            let failure = if at_end {
                None
            } else {
                match check_batch(bytes, salt, off, self.expected_batch) {
                    Ok((h, frames)) => {
                        self.summary.batches += u64::from(!self.quiet);
                        self.summary.clean_close = h.flags & BATCH_FLAG_CLEAN_CLOSE != 0;
                        self.emit(Item::Batch(BatchInfo {
                            segment: path,
                            offset: off as u64,
                            header: h,
                            raw_header: &bytes[off..off + BATCH_HEADER_BYTES],
                        }));
                        for f in &frames {
                            self.frame(path, salt.segment, h.batch_seq, f, bytes);
                        }
                        self.expected_batch = Some(h.batch_seq + 1);
                        off += BATCH_HEADER_BYTES + h.body_len as usize;
                        end = Some(off as u32);
                        continue;
                    }
                    Err(f) => Some(f),
                }
            };
            // Stopped: at a clean end of data, or at a batch that fails.
            let min_seq = self.expected_batch.unwrap_or(0);
            let (later, nonzero_end) = probe_after(bytes, salt, off as u32, min_seq);
            if let Some(l) = later {
                let detail = match &failure {
                    Some(f) => format!(
                        "{}; a valid later batch at offset {l} proves this region was durable",
                        f.detail
                    ),
                    None => format!(
                        "unreadable bytes between offset {off} and a valid later batch at offset {l}"
                    ),
                };
                let skipped = l as u64 - off as u64;
                let sum = failure.as_ref().and_then(|_| checksum_at(bytes, salt, off));
                let row = classify_stop(&StopFacts {
                    last_segment: last,
                    failure: failure.as_ref().map(|f| f.certain),
                    later_batch: true,
                    nonzero_after: true,
                    checkpoint_covers: false,
                });
                self.problem_with(
                    row.kind().unwrap_or(ProblemKind::Corruption),
                    path,
                    off as u64,
                    skipped,
                    detail,
                    sum,
                );
                self.lose_track();
                damaged = true;
                off = l as usize;
                continue;
            }
            let torn = nonzero_end.map_or(0, |nz| (nz as u64).saturating_sub(off as u64));
            let proven = if last {
                self.proven_durable(LogPos::new(salt.segment, off as u32))
            } else {
                None
            };
            let row = classify_stop(&StopFacts {
                last_segment: last,
                failure: failure.as_ref().map(|f| f.certain),
                later_batch: false,
                nonzero_after: torn > 0,
                checkpoint_covers: proven.is_some(),
            });
            if let Some(kind) = row.kind() {
                let sum = failure.as_ref().and_then(|_| checksum_at(bytes, salt, off));
                let mut detail = match failure {
                    Some(f) => f.detail,
                    None if torn > 0 => "non-zero bytes after the last valid batch".to_string(),
                    None => "the log ends here".to_string(),
                };
                if let Some(c) = proven {
                    detail.push_str(&format!(
                        "; an intact index checkpoint covers the log up to {c}, so this region was durable"
                    ));
                }
                if kind == ProblemKind::Corruption {
                    if !last {
                        detail.push_str(" (in a sealed segment: a later segment exists)");
                    }
                    damaged = true;
                }
                self.problem_with(kind, path, off as u64, torn, detail, sum);
            }
            break;
        }
        if damaged {
            end = None;
        }
        if damaged || self.stop {
            self.lose_track();
        }
        self.prev_end = end;
        self.summary.tail = match (end, self.expected_batch, self.stop) {
            (Some(end), Some(next), false) => Some(Tail {
                segment: path.to_path_buf(),
                segment_id: salt.segment,
                offset: end as u64,
                next_batch_seq: next,
                store_id: salt.store_id,
            }),
            _ => None,
        };
    }

    fn frame(
        &mut self,
        path: &Path,
        segment_id: SegmentId,
        batch_seq: u64,
        f: &crate::recovery::ScannedFrame<'_>,
        bytes: &[u8],
    ) {
        let h = &f.header;
        let offset = f.pos.offset() as u64;
        self.summary.frames += u64::from(!self.quiet);
        let mut issue: Option<String> = None;
        if h.kind == KIND_SESSION_DEFINE {
            match SessionDefine::decode(f.payload) {
                Err(e) => issue = Some(format!("session-define frame: {e}")),
                Ok(def) => {
                    self.summary.sessions += u64::from(!self.quiet);
                    issue = self.define(h.session, &def);
                    let next = def.parent.map_or(0, |(_, upto)| upto);
                    self.sessions.insert(
                        h.session.0,
                        SessionState {
                            name: Some(def.name.clone()),
                            define: Some(def),
                            next: Some(next),
                        },
                    );
                }
            }
        } else {
            if !self.quiet {
                self.summary.events += 1;
                self.summary.payload_bytes += f.payload.len() as u64;
            }
            let lost = self.lost_defines;
            match self.sessions.get_mut(&h.session.0) {
                None => {
                    if !lost {
                        issue = Some(format!("frame for undefined session id {}", h.session.0));
                    }
                    self.sessions.insert(
                        h.session.0,
                        SessionState {
                            name: None,
                            define: None,
                            next: Some(h.seq.wrapping_add(1)),
                        },
                    );
                }
                Some(s) => {
                    if let Some(n) = s.next.filter(|n| *n != h.seq) {
                        issue = Some(format!(
                            "session {}: frame has seq {} but the next seq is {n} (seqs must be dense)",
                            s.name.as_deref().map_or_else(|| format!("#{}", h.session.0), |n| format!("{n:?}")),
                            h.seq
                        ));
                    }
                    s.next = Some(h.seq.wrapping_add(1));
                }
            }
        }
        if let Some(detail) = issue {
            self.problem(
                ProblemKind::Corruption,
                path,
                offset,
                h.frame_len as u64,
                detail,
            );
        }
        if self.quiet || self.stop {
            return;
        }
        let state = self.sessions.get(&h.session.0);
        let item = Item::Frame(FrameInfo {
            segment: path,
            segment_id,
            offset,
            len: h.frame_len,
            batch_seq,
            session: h.session,
            session_name: state.and_then(|s| s.name.as_deref()),
            seq: h.seq,
            kind: h.kind,
            flags: h.flags,
            payload: f.payload,
            define: if h.kind == KIND_SESSION_DEFINE {
                state.and_then(|s| s.define.as_ref())
            } else {
                None
            },
            raw: bytes
                .get(offset as usize..offset as usize + h.frame_len as usize)
                .unwrap_or(&[]),
        });
        if (self.visit)(item).is_break() {
            self.stop = true;
            self.summary.stopped = true;
        }
    }

    /// Check a `session-define` against what is known; returns the problem.
    fn define(&mut self, id: SessionId, def: &SessionDefine) -> Option<String> {
        let mut issue = None;
        if let Some(n) = self.next_define.filter(|n| *n != id.0) {
            issue = Some(format!(
                "session-define for compact id {} but the next id is {n}",
                id.0
            ));
        } else if self.names.get(&def.name).is_some_and(|k| *k != id.0) {
            issue = Some(format!("session {:?} defined twice", def.name));
        } else if self.sessions.contains_key(&id.0) && !self.lost_defines {
            issue = Some(format!("compact session id {} defined twice", id.0));
        } else if let Some((p, upto)) = def.parent {
            match self.sessions.get(&p.0) {
                None if !self.lost_defines => {
                    issue = Some(format!("fork parent {} does not exist", p.0));
                }
                Some(ps) if ps.next.is_some_and(|n| upto > n) => {
                    issue = Some(format!(
                        "fork inherits {upto} events but the parent has {}",
                        ps.next.unwrap_or(0)
                    ));
                }
                _ => {}
            }
        }
        self.next_define = Some(id.0.wrapping_add(1));
        self.names.insert(def.name.clone(), id.0);
        issue
    }
}

/// Hop from batch header to batch header (and frame header to frame header)
/// to find where a segment's frames lie. Cheap: batch bodies are not
/// checksummed. After a header that does not decode it resynchronises on the
/// next batch magic whose header decodes.
fn hop_frames(bytes: &[u8], salt: &Salt) -> FrameSpan {
    let len = bytes.len();
    let mut span = FrameSpan {
        first: None,
        last: None,
        frames: 0,
        data_end: SEGMENT_HEADER_BYTES.min(len) as u64,
    };
    let header_at = |off: usize| -> Option<BatchHeader> {
        let h = BatchHeader::decode(&bytes[off..off + BATCH_HEADER_BYTES], salt).ok()?;
        (off + BATCH_HEADER_BYTES + h.body_len as usize <= len).then_some(h)
    };
    let mut off = SEGMENT_HEADER_BYTES;
    while off + BATCH_HEADER_BYTES <= len {
        let h = match header_at(off) {
            Some(h) => h,
            None => {
                let mut at = off + frame::ALIGN;
                let mut found = None;
                while at + BATCH_HEADER_BYTES <= len {
                    if bytes[at..at + 4] == frame::BATCH_MAGIC.to_le_bytes() {
                        if let Some(h) = header_at(at) {
                            found = Some((at, h));
                            break;
                        }
                    }
                    at += frame::ALIGN;
                }
                match found {
                    Some((at, h)) => {
                        off = at;
                        h
                    }
                    None => break,
                }
            }
        };
        let mut at = off + BATCH_HEADER_BYTES;
        let end = at + h.body_len as usize;
        while at + FRAME_HEADER_BYTES <= end {
            let flen = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
                as usize;
            if flen < FRAME_HEADER_BYTES || at + flen > end {
                break;
            }
            span.first.get_or_insert(at as u64);
            span.last = Some(at as u64);
            span.frames += 1;
            at += frame::align_up(flen);
        }
        off = end;
        span.data_end = end as u64;
    }
    span
}

/// The checksum that fails for the batch at `off`, if a checksum is what
/// fails: the batch header's, the body's, or (in a checksum-valid body) a
/// frame's.
fn checksum_at(bytes: &[u8], salt: &Salt, off: usize) -> Option<ChecksumMismatch> {
    if off + BATCH_HEADER_BYTES > bytes.len() {
        return None;
    }
    let h = match BatchHeader::decode(&bytes[off..off + BATCH_HEADER_BYTES], salt) {
        Ok(h) => h,
        Err(BatchError::BadHeaderChecksum { expected, found }) => {
            return Some(ChecksumMismatch {
                stored: found,
                computed: expected,
            })
        }
        Err(_) => return None,
    };
    let body =
        bytes.get(off + BATCH_HEADER_BYTES..off + BATCH_HEADER_BYTES + h.body_len as usize)?;
    let crc = salt.crc(body);
    if crc != h.body_crc {
        return Some(ChecksumMismatch {
            stored: h.body_crc,
            computed: crc,
        });
    }
    let mut at = 0;
    while at < body.len() {
        match frame::decode_frame(&body[at..], salt) {
            Ok(fh) => at += fh.padded_len(),
            Err(FrameError::BadChecksum { expected, found }) => {
                return Some(ChecksumMismatch {
                    stored: found,
                    computed: expected,
                })
            }
            Err(_) => return None,
        }
    }
    None
}

/// Follows a store as a live writer appends to it, read-only (like
/// `tail -f`): start from the [`Tail`] of a [`walk`], then [`Follower::poll`]
/// now and then. It reads only whole batches that validate; a batch still
/// being written is simply not there yet. When the writer rolls to the next
/// segment (created only after the last batch of this one was durable), it
/// moves on.
pub struct Follower<'v> {
    vfs: &'v dyn Vfs,
    dir: PathBuf,
    tail: Tail,
    file: Option<std::sync::Arc<dyn crate::vfs::VfsFile>>,
    sessions: HashMap<u32, (String, Option<SessionDefine>)>,
}

impl<'v> Follower<'v> {
    /// `names`: compact session id → string id, from the frames seen so far.
    pub fn new(vfs: &'v dyn Vfs, dir: &Path, tail: Tail, names: HashMap<u32, String>) -> Self {
        Follower {
            vfs,
            dir: dir.to_path_buf(),
            tail,
            file: None,
            sessions: names.into_iter().map(|(k, v)| (k, (v, None))).collect(),
        }
    }

    /// Where the next batch is expected.
    pub fn tail(&self) -> &Tail {
        &self.tail
    }

    /// Report every batch and frame appended since the last poll (and a
    /// [`Item::Segment`] when the writer moved to a new segment). Returns the
    /// number of frames reported; stops early when `visit` breaks.
    pub fn poll(&mut self, visit: &mut dyn FnMut(Item<'_>) -> ControlFlow<()>) -> Result<u64> {
        let mut n = 0;
        let mut rechecked = false;
        loop {
            let path = self.tail.segment.clone();
            let file = match &self.file {
                Some(f) => f.clone(),
                None => {
                    let f = self
                        .vfs
                        .open(&path, false)
                        .map_err(|e| Error::io("open segment", &path, e))?;
                    self.file = Some(f.clone());
                    f
                }
            };
            let salt = Salt {
                store_id: self.tail.store_id,
                segment: self.tail.segment_id,
            };
            let mut head = [0u8; BATCH_HEADER_BYTES];
            let got = file
                .read_at(&mut head, self.tail.offset)
                .map_err(|e| Error::io("read segment", &path, e))?;
            if got == BATCH_HEADER_BYTES && head.iter().any(|b| *b != 0) {
                let Ok(h) = BatchHeader::decode(&head, &salt) else {
                    return Ok(n); // still being written
                };
                let total = BATCH_HEADER_BYTES + h.body_len as usize;
                let mut buf = vec![0u8; total];
                let got = file
                    .read_at(&mut buf, self.tail.offset)
                    .map_err(|e| Error::io("read segment", &path, e))?;
                if got < total {
                    return Ok(n);
                }
                let Ok((h, frames)) = check_batch(&buf, &salt, 0, Some(self.tail.next_batch_seq))
                else {
                    return Ok(n);
                };
                let base = self.tail.offset;
                let mut stop = (visit)(Item::Batch(BatchInfo {
                    segment: &path,
                    offset: base,
                    header: h,
                    raw_header: &buf[..BATCH_HEADER_BYTES],
                }))
                .is_break();
                for f in &frames {
                    let fh = &f.header;
                    let at = f.pos.offset() as usize;
                    if fh.kind == KIND_SESSION_DEFINE {
                        if let Ok(def) = SessionDefine::decode(f.payload) {
                            self.sessions
                                .insert(fh.session.0, (def.name.clone(), Some(def)));
                        }
                    }
                    if stop {
                        continue;
                    }
                    let state = self.sessions.get(&fh.session.0);
                    let item = Item::Frame(FrameInfo {
                        segment: &path,
                        segment_id: salt.segment,
                        offset: base + at as u64,
                        len: fh.frame_len,
                        batch_seq: h.batch_seq,
                        session: fh.session,
                        session_name: state.map(|s| s.0.as_str()),
                        seq: fh.seq,
                        kind: fh.kind,
                        flags: fh.flags,
                        payload: f.payload,
                        define: if fh.kind == KIND_SESSION_DEFINE {
                            state.and_then(|s| s.1.as_ref())
                        } else {
                            None
                        },
                        raw: &buf[at..at + fh.frame_len as usize],
                    });
                    n += 1;
                    stop = (visit)(item).is_break();
                }
                self.tail.offset += total as u64;
                self.tail.next_batch_seq += 1;
                if stop {
                    return Ok(n);
                }
                continue;
            }
            // Nothing new here: has the writer moved on to the next segment?
            let next_id = SegmentId(self.tail.segment_id.0 + 1);
            let next = self.dir.join(frame::segment_file_name(next_id));
            if !self.vfs.exists(&next) {
                return Ok(n);
            }
            let nf = self
                .vfs
                .open(&next, false)
                .map_err(|e| Error::io("open segment", &next, e))?;
            let mut hb = [0u8; SEGMENT_HEADER_BYTES];
            let got = nf
                .read_at(&mut hb, 0)
                .map_err(|e| Error::io("read segment", &next, e))?;
            let Ok(hdr) = SegmentHeader::decode(&hb[..got]) else {
                return Ok(n); // being created
            };
            if hdr.store_id != self.tail.store_id || hdr.first_batch_seq < self.tail.next_batch_seq
            {
                return Ok(n);
            }
            if hdr.first_batch_seq > self.tail.next_batch_seq {
                // A batch landed here after the read above: read this segment again.
                if rechecked {
                    return Ok(n);
                }
                rechecked = true;
                continue;
            }
            let size = nf.len().map_err(|e| Error::io("stat segment", &next, e))?;
            let stop = (visit)(Item::Segment(SegmentInfo {
                file: &next,
                id: Some(next_id),
                size,
                header: Some(hdr),
                last: true,
                raw_header: &hb,
                span: None,
            }))
            .is_break();
            self.tail = Tail {
                segment: next,
                segment_id: next_id,
                offset: SEGMENT_HEADER_BYTES as u64,
                next_batch_seq: self.tail.next_batch_seq,
                store_id: self.tail.store_id,
            };
            self.file = Some(nf);
            rechecked = false;
            if stop {
                return Ok(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Options, Store};
    use rand::{Rng, RngCore, SeedableRng};

    fn collect(path: &Path) -> Result<(Summary, Vec<String>)> {
        let mut lines = Vec::new();
        let s = walk(path, |item| {
            lines.push(match item {
                Item::Segment(s) => format!("segment {}", s.file.display()),
                Item::Batch(b) => format!("batch {} at {}", b.header.batch_seq, b.offset),
                Item::Frame(f) => format!(
                    "frame {:?} {} {} at {} len {}",
                    f.session_name, f.seq, f.kind, f.offset, f.len
                ),
                Item::Problem(p) => format!("problem {:?} at {} {}", p.kind, p.offset, p.detail),
            });
            ControlFlow::Continue(())
        })?;
        Ok((s, lines))
    }

    fn make_store(dir: &Path, events: u32) {
        let store = Store::open_with(
            dir,
            Options {
                segment_bytes: 16 * 1024,
                ..Default::default()
            },
        )
        .unwrap();
        for i in 0..events {
            let s = format!("s{}", i % 5);
            let payload = vec![b'a' + (i % 26) as u8; (i as usize * 31) % 700];
            let a = store.append(&s, 1 + (i % 9) as u16, 0, &payload).unwrap();
            if i % 7 == 0 {
                store.wait_durable(a.end).unwrap();
            }
        }
        store.close().unwrap();
    }

    #[test]
    fn clean_store_walks_every_frame_in_order() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path(), 400);
        let mut next: HashMap<String, u64> = HashMap::new();
        let s = walk(dir.path(), |item| {
            if let Item::Frame(f) = item {
                if !f.is_define() {
                    let name = f.session_name.expect("name known").to_string();
                    let n = next.entry(name).or_default();
                    assert_eq!(f.seq, *n);
                    *n += 1;
                }
            }
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(s.events, 400, "{s:?}");
        assert_eq!(s.sessions, 5);
        assert_eq!((s.torn_tails, s.corruptions), (0, 0), "{s:?}");
        assert!(s.clean_close);
        assert!(s.segments > 3, "{s:?}");
        // A lone segment from the middle resolves names through earlier ones.
        let seg3 = dir.path().join(frame::segment_file_name(SegmentId(3)));
        let (s3, lines) = collect(&seg3).unwrap();
        assert_eq!(s3.segments, 1);
        assert_eq!(s3.corruptions, 0, "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("Some(\"s")), "{lines:?}");
    }

    #[test]
    fn flipped_byte_in_sealed_segment_is_corruption_and_walk_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path(), 400);
        let clean = collect(dir.path()).unwrap().0;
        let seg = dir.path().join(frame::segment_file_name(SegmentId(2)));
        let mut b = std::fs::read(&seg).unwrap();
        b[SEGMENT_HEADER_BYTES + BATCH_HEADER_BYTES + 30] ^= 0x40;
        std::fs::write(&seg, &b).unwrap();
        let (s, lines) = collect(dir.path()).unwrap();
        assert!(s.corruptions >= 1, "{lines:?}");
        assert_eq!(s.torn_tails, 0);
        assert!(
            s.events < clean.events && s.events > clean.events / 2,
            "{s:?}"
        );
        assert!(s.clean_close, "walk reached the end");
    }

    #[test]
    fn truncated_last_segment_is_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path(), 400);
        let (clean, _) = collect(dir.path()).unwrap();
        let last = *list_segments(&OsVfs, dir.path()).unwrap().last().unwrap();
        let path = dir.path().join(frame::segment_file_name(last));
        // Cut in the middle of the last batch holding frames.
        let mut last_frame = 0;
        walk(dir.path(), |item| {
            if let Item::Frame(f) = item {
                if f.segment == path {
                    last_frame = f.offset + f.len as u64 / 2;
                }
            }
            ControlFlow::Continue(())
        })
        .unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(last_frame).unwrap();
        // The checkpoint written at close covers the cut bytes: they were
        // durable, so no power cut explains this (FORMAT.md §6.3 C4).
        let (s, lines) = collect(dir.path()).unwrap();
        assert_eq!((s.torn_tails, s.corruptions), (0, 1), "{lines:?}");
        assert!(lines.last().unwrap().contains("checkpoint covers"));
        // Without it, the same bytes are a torn tail.
        std::fs::remove_file(dir.path().join(checkpoint::CHECKPOINT_FILE)).unwrap();
        let (s, lines) = collect(dir.path()).unwrap();
        assert_eq!((s.torn_tails, s.corruptions), (1, 0), "{lines:?}");
        assert!(s.events < clean.events);
    }

    #[test]
    fn raw_bytes_span_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path(), 400);
        let mut spans: Vec<(FrameSpan, u64)> = Vec::new();
        let s = walk(dir.path(), |item| {
            match item {
                Item::Segment(s) => {
                    assert_eq!(s.raw_header.len(), SEGMENT_HEADER_BYTES);
                    assert_eq!(&s.raw_header[..8], b"TSTNSEG\0");
                    spans.push((s.span.expect("header decodes"), 0));
                }
                Item::Batch(b) => {
                    assert_eq!(b.raw_header.len(), BATCH_HEADER_BYTES);
                    assert_eq!(b.raw_header[..4], frame::BATCH_MAGIC.to_le_bytes());
                }
                Item::Frame(f) => {
                    assert_eq!(f.raw.len(), f.len as usize);
                    assert_eq!(&f.raw[..4], &f.len.to_le_bytes());
                    assert_eq!(&f.raw[FRAME_HEADER_BYTES..], f.payload);
                    let (span, n) = spans.last_mut().unwrap();
                    if *n == 0 {
                        assert_eq!(span.first, Some(f.offset));
                    }
                    *n += 1;
                    if *n == span.frames {
                        assert_eq!(span.last, Some(f.offset));
                    }
                }
                Item::Problem(p) => panic!("{p:?}"),
            }
            ControlFlow::Continue(())
        })
        .unwrap();
        for (span, n) in &spans {
            assert_eq!(span.frames, *n);
        }
        let tail = s.tail.expect("tail of a clean store");
        let last = *list_segments(&OsVfs, dir.path()).unwrap().last().unwrap();
        assert_eq!(tail.segment_id, last);
        assert_eq!(tail.next_batch_seq, s.batches);
    }

    #[test]
    fn follower_sees_appends_and_segment_rolls() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path(), 50);
        let store = Store::open_with(
            dir.path(),
            Options {
                segment_bytes: 16 * 1024,
                ..Default::default()
            },
        )
        .unwrap();
        let mut names = HashMap::new();
        let s = walk(dir.path(), |item| {
            if let Item::Frame(f) = item {
                if let Some(d) = f.define {
                    names.insert(f.session.0, d.name.clone());
                }
            }
            ControlFlow::Continue(())
        })
        .unwrap();
        let mut fl = Follower::new(&OsVfs, dir.path(), s.tail.unwrap(), names);
        let mut seen: Vec<(String, u64)> = Vec::new();
        let mut segments = 0;
        let mut poll = |fl: &mut Follower<'_>, seen: &mut Vec<(String, u64)>| {
            fl.poll(&mut |item| {
                match item {
                    Item::Frame(f) if !f.is_define() => {
                        seen.push((f.session_name.unwrap().to_string(), f.seq))
                    }
                    Item::Segment(_) => segments += 1,
                    _ => {}
                }
                ControlFlow::Continue(())
            })
            .unwrap()
        };
        assert_eq!(poll(&mut fl, &mut seen), 0);
        let mut want = Vec::new();
        for i in 0..300u64 {
            let name = format!("s{}", i % 7);
            let a = store.append(&name, 1, 0, &vec![b'x'; 300]).unwrap();
            want.push((name, a.seq.0));
            if i % 10 == 9 {
                store.wait_durable(a.end).unwrap();
                poll(&mut fl, &mut seen);
            }
        }
        store.sync().unwrap();
        poll(&mut fl, &mut seen);
        assert_eq!(seen, want);
        assert!(segments >= 3, "{segments}");
        store.close().unwrap();
    }

    #[test]
    fn checksum_mismatch_is_reported() {
        let dir =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../format-spec/vectors/mid-log-corruption");
        let mut probs = Vec::new();
        walk(&dir, |item| {
            if let Item::Problem(p) = item {
                probs.push(p);
            }
            ControlFlow::Continue(())
        })
        .unwrap();
        let c = probs[0].checksum.expect("a body checksum failed");
        assert_ne!(c.stored, c.computed);
        assert!(probs[0].detail.contains(&format!("{:#010x}", c.stored)));
    }

    /// FORMAT.md §6.3: only a header torn over zeros (H2) is a torn tail; a
    /// bad last header with data after it, or a log that does not start at
    /// segment 1, is corruption (H4), as the store says.
    #[test]
    fn bad_headers_agree_with_recovery() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path(), 200);
        std::fs::remove_file(dir.path().join(checkpoint::CHECKPOINT_FILE)).unwrap();
        let ids = list_segments(&OsVfs, dir.path()).unwrap();
        let last = dir
            .path()
            .join(frame::segment_file_name(*ids.last().unwrap()));
        let orig = std::fs::read(&last).unwrap();
        // Half a header over zeros: an interrupted creation.
        let mut b = vec![0u8; orig.len()];
        b[..32].copy_from_slice(&orig[..32]);
        std::fs::write(&last, &b).unwrap();
        let (s, lines) = collect(dir.path()).unwrap();
        assert_eq!((s.torn_tails, s.corruptions), (1, 0), "{lines:?}");
        // The same with bytes after the header: corruption.
        b[200] = 7;
        std::fs::write(&last, &b).unwrap();
        let (s, lines) = collect(dir.path()).unwrap();
        assert_eq!((s.torn_tails, s.corruptions), (0, 1), "{lines:?}");
        std::fs::write(&last, &orig).unwrap();
        // A store whose first segment is gone.
        let first = dir.path().join(frame::segment_file_name(ids[0]));
        let seg1 = std::fs::read(&first).unwrap();
        std::fs::remove_file(&first).unwrap();
        let (s, lines) = collect(dir.path()).unwrap();
        assert!(s.corruptions >= 1, "{lines:?}");
        assert!(lines
            .iter()
            .any(|l| l.contains("earlier segment files are missing")));
        // A lone copy of a later segment is no store: no such problem.
        let lone = tempfile::tempdir().unwrap();
        let copy = lone.path().join(frame::segment_file_name(ids[1]));
        std::fs::copy(dir.path().join(frame::segment_file_name(ids[1])), &copy).unwrap();
        let (s, lines) = collect(&copy).unwrap();
        assert_eq!(s.corruptions, 0, "{lines:?}");
        std::fs::write(&first, &seg1).unwrap();
        assert_eq!(collect(dir.path()).unwrap().0.corruptions, 0);
    }

    #[test]
    fn missing_and_not_a_store_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            walk(&dir.path().join("nope"), |_| ControlFlow::Continue(())),
            Err(Error::NoStore { .. })
        ));
        assert!(matches!(
            walk(dir.path(), |_| ControlFlow::Continue(())),
            Err(Error::NoStore { .. })
        ));
        let f = dir.path().join("0000000001.tseg");
        std::fs::write(
            &f,
            b"hello, not a segment at all; hello, not a segment at all!!!!!!!!!",
        )
        .unwrap();
        assert!(matches!(
            walk(&f, |_| ControlFlow::Continue(())),
            Err(Error::NotTurnstone { .. })
        ));
        assert!(matches!(
            walk(dir.path(), |_| ControlFlow::Continue(())),
            Err(Error::NotTurnstone { .. })
        ));
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Every vector of `format-spec/vectors` walks to the verdict, problems,
    /// batches and events its `expected.json` states (FORMAT.md §6.3).
    #[test]
    fn format_spec_vectors() {
        use serde_json::{json, Value};
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../format-spec/vectors");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .expect("format-spec/vectors")
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("expected.json").exists())
            .collect();
        dirs.sort();
        assert!(dirs.len() >= 10, "{dirs:?}");
        for dir in dirs {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
            let exp: Value = serde_json::from_str(&text).unwrap();
            let outcome = exp["outcome"].as_str().unwrap();
            let (mut batches, mut problems) = (Vec::new(), Vec::new());
            let mut events: HashMap<String, Vec<Value>> = HashMap::new();
            let file = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
            let r = walk(&dir, |item| {
                match item {
                    Item::Batch(b) => batches.push(json!({
                        "batch_seq": b.header.batch_seq, "body_len": b.header.body_len,
                        "file": file(b.segment), "flags": b.header.flags,
                        "frame_count": b.header.frame_count, "offset": b.offset,
                    })),
                    Item::Frame(f) if !f.is_define() => events
                        .entry(f.session_name.unwrap_or("?").to_string())
                        .or_default()
                        .push(json!({
                            "flags": f.flags, "kind": f.kind,
                            "payload": hex(f.payload), "seq": f.seq,
                        })),
                    Item::Problem(p) => problems.push(json!({
                        "kind": match p.kind {
                            ProblemKind::TornTail => "torn-tail",
                            ProblemKind::Corruption => "corruption",
                        },
                        "file": file(&p.segment), "offset": p.offset,
                    })),
                    _ => {}
                }
                ControlFlow::Continue(())
            });
            match outcome {
                "not-turnstone" => {
                    assert!(
                        matches!(r, Err(Error::NotTurnstone { .. })),
                        "{name}: {r:?}"
                    );
                    continue;
                }
                "unsupported-version" => {
                    assert!(
                        matches!(r, Err(Error::UnsupportedVersion { .. })),
                        "{name}: {r:?}"
                    );
                    continue;
                }
                _ => {}
            }
            let s = r.unwrap_or_else(|e| panic!("{name}: {e}"));
            let pit = &exp["modes"]["point-in-time"];
            // The first problem is the one recovery reports (it stops there).
            let want: Vec<Value> = pit["problems"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| json!({"kind": p["kind"], "file": p["file"], "offset": p["offset"]}))
                .collect();
            assert_eq!(problems.first(), want.first(), "{name}: {problems:?}");
            let verdict = if s.corruptions > 0 {
                "corruption"
            } else if s.torn_tails > 0 {
                "torn-tail"
            } else {
                "ok"
            };
            assert_eq!(verdict, outcome, "{name}");
            // Every batch found is one that was written, at its place.
            let written = exp["batches"].as_array().unwrap();
            for b in &batches {
                assert!(written.contains(b), "{name}: unexpected batch {b}");
            }
            if outcome == "ok" {
                assert_eq!(&batches, written, "{name}");
            }
            if outcome != "corruption" {
                assert_eq!(s.clean_close, pit["clean_shutdown"] == true, "{name}");
                // Each session's own events (a fork inherits the rest).
                for sess in pit["sessions"].as_array().unwrap() {
                    let upto = sess["parent"]["upto"].as_u64().unwrap_or(0);
                    let own: Vec<&Value> = sess["events"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|e| e["seq"].as_u64().unwrap() >= upto)
                        .collect();
                    let got = events
                        .remove(sess["name"].as_str().unwrap())
                        .unwrap_or_default();
                    assert_eq!(got.iter().collect::<Vec<_>>(), own, "{name}: {sess}");
                }
            }
        }
    }

    /// Random bytes, truncations and flips of a real store: never a panic.
    #[test]
    fn never_panics_on_any_bytes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let base = tempfile::tempdir().unwrap();
        make_store(base.path(), 300);
        let ids = list_segments(&OsVfs, base.path()).unwrap();
        let originals: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| std::fs::read(base.path().join(frame::segment_file_name(*id))).unwrap())
            .collect();
        let ckpt = std::fs::read(base.path().join(checkpoint::CHECKPOINT_FILE)).unwrap();
        let work = tempfile::tempdir().unwrap();
        for round in 0..300 {
            for e in std::fs::read_dir(work.path()).unwrap() {
                std::fs::remove_file(e.unwrap().path()).unwrap();
            }
            for (id, orig) in ids.iter().zip(&originals) {
                let mut b = orig.clone();
                match round % 5 {
                    0 => {
                        let n = rng.gen_range(0..b.len() + 1);
                        b.truncate(n);
                    }
                    1 => {
                        for _ in 0..rng.gen_range(1..20) {
                            let i = rng.gen_range(0..b.len());
                            b[i] = rng.gen();
                        }
                    }
                    2 => {
                        let n = rng.gen_range(0..4096);
                        b = vec![0; n];
                        rng.fill_bytes(&mut b);
                    }
                    3 => {
                        // Random bytes behind a valid segment header.
                        rng.fill_bytes(&mut b[SEGMENT_HEADER_BYTES..]);
                    }
                    _ => {
                        // Plausible batch magics at random places.
                        for _ in 0..50 {
                            let i = rng.gen_range(0..b.len() / 8) * 8;
                            if i + 4 <= b.len() {
                                b[i..i + 4].copy_from_slice(&frame::BATCH_MAGIC.to_le_bytes());
                            }
                        }
                        let n = rng.gen_range(0..b.len() + 1);
                        b.truncate(n);
                    }
                }
                if rng.gen_bool(0.1) {
                    continue; // a missing segment
                }
                std::fs::write(work.path().join(frame::segment_file_name(*id)), &b).unwrap();
            }
            if round % 2 == 0 {
                // A damaged checkpoint whose checksum still matches.
                let mut c = ckpt.clone();
                for _ in 0..rng.gen_range(0..8) {
                    let i = rng.gen_range(0..c.len());
                    c[i] = rng.gen();
                }
                let n = rng.gen_range(4..c.len() + 1);
                c.truncate(n);
                let crc = crc32fast::hash(&c[..n - 4]);
                c[n - 4..].copy_from_slice(&crc.to_le_bytes());
                std::fs::write(work.path().join(checkpoint::CHECKPOINT_FILE), &c).unwrap();
            }
            let _ = collect(work.path());
            for id in &ids {
                let _ = collect(&work.path().join(frame::segment_file_name(*id)));
            }
        }
        // Short files of every small length.
        for n in 0..200usize {
            let p = work.path().join("x.tseg");
            let mut b = originals[0][..n.min(originals[0].len())].to_vec();
            if n % 2 == 1 {
                rng.fill_bytes(&mut b);
            }
            std::fs::write(&p, &b).unwrap();
            let _ = collect(&p);
        }
    }
}
