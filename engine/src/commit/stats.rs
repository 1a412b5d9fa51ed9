//! Counters of the write path, readable at any time through
//! [`crate::Store::stats`]. They describe; no decision depends on them.

/// Counters, readable at any time through [`crate::Store::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Events appended in this process.
    pub appends: u64,
    /// Payload bytes appended in this process.
    pub payload_bytes: u64,
    /// Batches written.
    pub batches: u64,
    /// fdatasync calls that made commit batches durable (one per batch).
    pub syncs: u64,
    /// Other fsyncs: new segment files, the directory, checkpoint files.
    pub metadata_syncs: u64,
    /// Bytes written to segment files (headers, padding and retries included).
    pub bytes_written: u64,
    /// Segments created by this process.
    pub segments_created: u64,
    /// Of those, the ones made from a free file
    /// ([`crate::Options::recycle_segments`]).
    pub segments_recycled: u64,
    /// Index checkpoints written (deltas included) / failed, and the bytes
    /// written.
    pub checkpoints_written: u64,
    /// Index checkpoint writes (deltas included) that failed.
    pub checkpoint_errors: u64,
    /// Size of the index checkpoints and deltas written, in bytes.
    pub checkpoint_bytes: u64,
    /// Of `checkpoints_written`, the deltas: the positions added since the
    /// last checkpoint only (FORMAT.md §7.1).
    pub checkpoint_deltas: u64,
    /// Batch writes that failed and were kept for retry.
    pub write_failures: u64,
    /// Zeros the flusher wrote past small batches into preallocated space
    /// (zero extension, [`crate::Options::zero_ahead_bytes`]), with those
    /// that end each batch's write on a page boundary (in a fresh segment
    /// with zero extension on, and the end marker in a recycled segment);
    /// not in `bytes_written`.
    pub zero_fill_bytes: u64,
    /// Batch writes led by a thread waiting for durability rather than by
    /// the flusher thread ([`crate::Options::flush_in_caller`]); the
    /// successful ones are counted in `batches` too.
    pub caller_batches: u64,
    /// Free files of zeros the preparer thread wrote ahead of need
    /// ([`crate::Options::prepare_segments`]), their bytes (not in
    /// `bytes_written` nor `zero_fill_bytes`), and the preparations that
    /// failed (the writer then creates a fresh segment).
    pub prepared_files: u64,
    /// Size of the files counted in `prepared_files`, in bytes.
    pub prepared_bytes: u64,
    /// Segment-file preparations that failed.
    pub prepare_errors: u64,
    /// Batches written around the page cache
    /// ([`crate::Options::direct_writes`]); also counted in `batches`.
    pub direct_batches: u64,
    /// Segments read whole, in order, through the page cache, and the bytes
    /// read: the reader does this for a segment whose exact reads of
    /// uncached frames have cost as much as reading it whole would (many
    /// sessions of a cold segment read back: after a restart, or from a
    /// store written with [`crate::Options::direct_writes`]; the active
    /// segment up to the durable bytes it reads). Counted since open.
    pub segments_read_whole: u64,
    /// Data read by those whole-segment reads, in bytes.
    pub segment_bytes_read_whole: u64,
}
