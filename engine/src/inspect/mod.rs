//! A read-only walk over a store directory (or one segment file) that reports,
//! in log order, every segment header, batch boundary and frame, and every
//! problem found in place: the engine of `turnstone verify` and `dump`.
//!
//! Unlike the recovery pass (the store's open) it never stops at the first
//! damage: after a bad batch it resynchronises on the next valid batch header
//! ([`crate::recovery::probe_after`]) and goes on, so one report lists all
//! damage. It classifies each problem with the same functions as recovery
//! (`FORMAT.md` §6.3, [`crate::recovery::classify_stop`]): a failing batch in
//! the last segment with no valid batch after it is a torn tail; anything
//! else is corruption. Inside a failing batch it checks every frame on its
//! own and shows those that hold as not trusted (§6.5). An intact index
//! checkpoint is used only as evidence (row C4): a failure before the
//! position it covers is corruption, since the checkpoint was written after
//! that position was durable. The scan itself never starts from the
//! checkpoint: every byte is checked. It never takes the store lock, never
//! writes, and never panics on any bytes
//! (invariant 10 of ARCHITECTURE.md).

mod batches;
mod follow;
mod hop;
#[cfg(test)]
mod tests;
mod walker;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::frame::{
    self, BatchHeader, SegmentHeader, SessionDefine, BATCH_FLAG_CLEAN_CLOSE, BATCH_HEADER_BYTES,
    FLAG_IGNORABLE, KIND_SESSION_DEFINE,
};
use crate::log::list_segments;
use crate::recovery::ProblemKind;
use crate::types::{SegmentId, SessionId};
use crate::vfs::{OsVfs, Vfs};

pub use follow::Follower;
use walker::Walker;

/// A segment file as found, before its batches.
#[derive(Debug, Clone)]
pub struct SegmentInfo<'a> {
    /// Path of the segment file.
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
    /// Offset of the first frame in the file (`None` when there is none).
    pub first: Option<u64>,
    /// Offset of the last frame in the file (`None` when there is none).
    pub last: Option<u64>,
    /// Number of frames the hop found.
    pub frames: u64,
    /// End of the last batch the hop reached.
    pub data_end: u64,
}

/// A valid commit batch, reported before its frames.
#[derive(Debug, Clone)]
pub struct BatchInfo<'a> {
    /// Path of the segment file holding the batch.
    pub segment: &'a Path,
    /// Offset of the batch header in the segment file.
    pub offset: u64,
    /// The decoded batch header (§3).
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
    /// Whether the batch holds no frames (as a clean-close marker does).
    pub fn is_empty(&self) -> bool {
        self.header.frame_count == 0
    }
}

/// One frame of a valid batch.
#[derive(Debug, Clone)]
pub struct FrameInfo<'a> {
    /// Path of the segment file holding the frame.
    pub segment: &'a Path,
    /// Id of that segment.
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
    /// The frame's seq: the event's seq in its session; 0 for a define.
    pub seq: u64,
    /// The frame's kind: 0 for `session-define`, else the event kind.
    pub kind: u16,
    /// The frame's flags (bit 0: ignorable).
    pub flags: u16,
    /// The payload bytes, without header or padding.
    pub payload: &'a [u8],
    /// For a `session-define` frame: what it defines (if it decodes).
    pub define: Option<&'a SessionDefine>,
    /// The frame's bytes as stored: 24-byte header, then the payload.
    pub raw: &'a [u8],
    /// `false` for a frame whose own frame_crc holds inside a batch that
    /// fails: shown so that damage is seen where it is, but recovery keeps
    /// or drops a batch whole and never uses it (FORMAT.md §6.5).
    pub trusted: bool,
}

impl FrameInfo<'_> {
    /// Whether the frame is flagged ignorable: a reader that does not know
    /// its kind may skip it.
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
    /// Torn tail or corruption (FORMAT.md §6.3).
    pub kind: ProblemKind,
    /// The segment file (for a missing segment: the path it should have).
    pub segment: PathBuf,
    /// Where the damage starts in the segment file, in bytes.
    pub offset: u64,
    /// Bytes affected (skipped, or torn).
    pub bytes: u64,
    /// What is wrong, for a human.
    pub detail: String,
    /// For a checksum failure: which checksum, the one stored in the file and
    /// the one computed over the bytes as found.
    pub checksum: Option<ChecksumMismatch>,
    /// For a failing batch whose header decodes and whose body lies in the
    /// file: the frames inside it whose own frame_crc does not hold (FORMAT.md
    /// §6.5). The frames around them that check are reported after this
    /// problem as [`Item::Frame`]s with `trusted: false`.
    pub damaged_frames: Vec<DamagedFrame>,
    /// How many frames of the failing batch check on their own (reported as
    /// untrusted frames).
    pub untrusted_frames: u64,
}

/// A frame inside a failing batch that does not check on its own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DamagedFrame {
    /// Offset of the frame in the segment file.
    pub offset: u64,
    /// Bytes taken as this frame's: its frame_len when that is possible,
    /// else up to the next frame that checks (or the end of the body).
    pub len: u64,
    /// The frame_crc that fails, when frame_len was possible.
    pub checksum: Option<ChecksumMismatch>,
    /// What is wrong with the frame, for a human.
    pub detail: String,
}

/// Which checksum of FORMAT.md failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChecksumOf {
    /// §2 header_crc.
    SegmentHeader,
    /// §3 header_crc.
    BatchHeader,
    /// §3 body_crc.
    BatchBody,
    /// §4 frame_crc.
    Frame,
}

/// A checksum that does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ChecksumMismatch {
    /// Which checksum.
    pub of: ChecksumOf,
    /// What the header says the bytes hash to.
    pub stored: u32,
    /// What the bytes hash to now.
    pub computed: u32,
}

/// Where the walk found the end of the log: where a live writer's next batch
/// will go. Used to follow a store as it grows ([`Follower`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    /// Path of the segment the log ends in.
    pub segment: PathBuf,
    /// Id of that segment.
    pub segment_id: SegmentId,
    /// Offset just after the last valid batch.
    pub offset: u64,
    /// Sequence number the next batch must have.
    pub next_batch_seq: u64,
    /// The store identity (§2), which salts the next batch's checksums.
    pub store_id: [u8; 16],
}

/// One thing the walk reports, in log order.
#[derive(Debug, Clone)]
pub enum Item<'a> {
    /// A segment file, before its batches.
    Segment(SegmentInfo<'a>),
    /// A valid batch, before its frames.
    Batch(BatchInfo<'a>),
    /// A frame (of a valid batch, or an untrusted one of a failing batch).
    Frame(FrameInfo<'a>),
    /// Damage found in place.
    Problem(InspectProblem),
}

/// Totals of a walk.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Segment files walked.
    pub segments: u64,
    /// Valid batches, clean-close markers included.
    pub batches: u64,
    /// All frames, `session-define` frames included.
    pub frames: u64,
    /// Event frames (not `session-define`).
    pub events: u64,
    /// Total payload size of the event frames, in bytes.
    pub payload_bytes: u64,
    /// `session-define` frames seen.
    pub sessions: u64,
    /// Frames reported as not trusted (they check on their own, inside a
    /// failing batch); not counted in `frames`.
    pub untrusted_frames: u64,
    /// Problems classified as a torn tail.
    pub torn_tails: u64,
    /// Problems classified as corruption.
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
    /// Whether the walk found any corruption (a torn tail alone is not).
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
        w.load_manifest(path);
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
                w.load_manifest(dir);
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
