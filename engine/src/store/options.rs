//! How a store is opened ([`Options`]) and the facts it gives about a
//! session ([`SessionMeta`], [`SessionInfo`]). Plain data: no invariant
//! beyond what each field says.

use std::sync::Arc;

use crate::frame;
use crate::recovery::RecoveryMode;
use crate::types::{LogPos, SegmentId, SessionId};
use crate::vfs::{OsVfs, Vfs};

/// Name of the lock file inside a store directory.
pub const LOCK_FILE: &str = "LOCK";
/// First segment number of a new store.
pub const FIRST_SEGMENT: SegmentId = SegmentId(frame::FIRST_SEGMENT_ID);

/// How to open a store.
#[derive(Debug, Clone)]
pub struct Options {
    /// Segment size; a segment rolls when the next batch would not fit.
    /// Not recorded in the store: each open may give another, which applies
    /// to the segment being written from then on and to the segments it
    /// creates (a segment already written keeps its length; readers take
    /// each segment's own; free files of another length are removed at
    /// open, [`Options::recycle_segments`]). It also bounds the largest
    /// event group.
    pub segment_bytes: u32,
    /// What to do with damage found on open.
    pub recovery_mode: RecoveryMode,
    /// Open without the lock, without changing a byte; appends are refused.
    pub read_only: bool,
    /// Pending bytes that make the flusher write without anyone waiting.
    pub flush_bytes: usize,
    /// Preallocate (and so zero) each segment when it is created.
    pub preallocate: bool,
    /// Write index checkpoints (FORMAT.md §7) at every segment roll and at
    /// close: a whole one first (and after an online collection), then
    /// deltas of the positions added since (§7.1, about 8 bytes per event
    /// of the segment), until the deltas add up to the whole one's size,
    /// when a whole one is written again. An open reads the checkpoint and
    /// its deltas and scans the log only from where they end.
    pub checkpoints: bool,
    /// Zero extension (with `preallocate`, on file layers where it helps,
    /// [`crate::vfs::Vfs::zero_ahead_helps`]): when a batch smaller than an
    /// eighth of this reaches preallocated space not yet written, the
    /// flusher also writes zeros from the batch's end to the next multiple
    /// of this many bytes, before the batch's one fdatasync. The batches
    /// that follow then overwrite written blocks, and their fdatasyncs flush
    /// data without a file-system journal commit. Costs those zeros in
    /// device bytes (up to one extra write of each segment byte). 0: off.
    pub zero_ahead_bytes: u32,
    /// A thread waiting for durability, when no other thread waits and no
    /// batch is in flight, writes and syncs the next batch itself
    /// (leader/follower group commit) instead of waking the flusher thread
    /// and sleeping until it is done: two thread hand-offs fewer for a lone
    /// writer (about 1.1x its durable appends/s here). With several waiters
    /// the flusher writes, chaining batches. Still one batch in flight at a
    /// time. Off by default: with 8 and 64 writer threads it measured about
    /// 0.93x of the flusher-only path (docs/DESIGN.md).
    pub flush_in_caller: bool,
    /// Keep up to this many segment files that an online collection
    /// ([`Store::collect`](crate::Store::collect), the session layer's
    /// background collector) frees, of the full segment size and with
    /// `preallocate`, as free files, and make new segments from them instead
    /// of new files (FORMAT.md §6.2 rule 7). A recycled segment is
    /// overwritten rather than filled: no zeros are written ahead of the
    /// batches and no unwritten extent is converted at an fdatasync, so each
    /// segment byte reaches the device once (docs/DESIGN.md,
    /// "Recycled segments"). The cost is disk: up to this many segment files
    /// beyond the live data. It pays when it covers the segments written
    /// between two collections. 0 (the default): off, collected files are
    /// removed.
    pub recycle_segments: usize,
    /// Write the next segment's file ahead of need, off the write path
    /// (with `preallocate`, on file layers where zeroing ahead helps,
    /// [`crate::vfs::Vfs::zero_ahead_helps`]): when the writer rolls to a
    /// new segment (or the segment it opened with is a quarter full), its
    /// batches are small (under 128 KiB on average: larger ones amortise a
    /// journal commit themselves) and no free file is at hand, a background
    /// thread writes a file of zeros of
    /// the segment size, fdatasyncs it and keeps it as a free file
    /// (`0000000000.tseg.free`, FORMAT.md §6.2 rule 7). The next segment is
    /// made from it like a recycled one: its batches
    /// overwrite written blocks, so their fdatasyncs flush data without a
    /// file-system journal commit, and the flusher writes no zeros. Costs
    /// one segment file of disk beyond the log, and the zeros in device
    /// bytes (as zero extension does). A store that never fills a quarter of
    /// a segment never writes one. On by default.
    pub prepare_segments: bool,
    /// Write the batches of recycled segments (free files,
    /// [`Options::recycle_segments`], and prepared ones,
    /// [`Options::prepare_segments`]) around the page cache, with direct
    /// I/O where the file system takes it (`O_DIRECT`). Each write starts at
    /// the device block boundary (512 bytes on most devices) before its
    /// batch, carrying again the bytes of the batch before it up to there,
    /// and ends at the next one with the end marker (FORMAT.md §6.2 rule 7).
    /// Through the page cache a batch's write instead starts and ends on
    /// page boundaries (4096 bytes): the page that two batches share is
    /// written to the device twice. So direct writes cut device bytes (1.34
    /// to 1.21 times the payload at 256 × 8, docs/DESIGN.md)
    /// and the copy into the page cache. The cost: what was just written is
    /// not cached, so reads of it (a session opened or replayed soon after,
    /// a follower of the log) read the device: exact reads of each
    /// session's frames, until they have cost what reading the segment
    /// whole would, then the segment whole through the page cache
    /// ([`crate::Stats::segments_read_whole`]). Reading back every session
    /// of a 3-second 256 × 8 fleet took about 3.5 µs per event against
    /// about 2 µs with the batches in the page cache (58 µs with exact reads
    /// only; docs/DESIGN.md, "A segment read whole"). A segment's first batch, and
    /// every batch on a file layer without direct I/O, go through the page
    /// cache as before. Off by default.
    pub direct_writes: bool,
    /// The file layer.
    pub vfs: Arc<dyn Vfs>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_bytes: 64 << 20,
            recovery_mode: RecoveryMode::default(),
            read_only: false,
            flush_bytes: 1 << 20,
            preallocate: true,
            checkpoints: true,
            zero_ahead_bytes: 1 << 20,
            flush_in_caller: false,
            recycle_segments: 0,
            prepare_segments: true,
            direct_writes: false,
            vfs: Arc::new(OsVfs),
        }
    }
}

/// Where a session stands in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMeta {
    /// The session's compact id in the log.
    pub id: SessionId,
    /// Events appended, inherited ones included (durable or not).
    pub len: u64,
    /// Events `0..durable_len` are durable.
    pub durable_len: u64,
    /// Position of the `session-define` frame: identifies this incarnation
    /// of the session id in this store.
    pub define_pos: LogPos,
    /// Fork parent name and the number of events inherited from it.
    pub parent: Option<(String, u64)>,
}

/// Facts about one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session's string id.
    pub name: String,
    /// The session's compact id in the log.
    pub id: SessionId,
    /// Events appended, inherited ones included.
    pub len: u64,
    /// Fork parent name and the number of events inherited from it.
    pub parent: Option<(String, u64)>,
}
