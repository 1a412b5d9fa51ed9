//! Group commit: the write-behind buffer, the flusher thread and the durable
//! position that waiters wait on.
//!
//! Appenders encode their frame into the *open batch* under one mutex and
//! return at once with the frame's final log position (batch headers are
//! reserved in front of the first frame, so positions never move). The flusher
//! takes the open batch whenever someone waits for durability (or enough bytes
//! are pending), writes it with one `write` and makes it durable with one
//! `fdatasync`; while it syncs, the next batch fills. So one fdatasync covers
//! every session that appended in the meantime, and no timer is involved.
//!
//! Invariants kept here (ARCHITECTURE.md): 1 (durable prefix: batches are
//! written in order, one at a time, each synced before the next is written, so
//! at a crash only the last batch can be in flight), 7/8 (the durable position
//! moves only after a successful fdatasync; an fdatasync error poisons the store
//! and nothing after it is acknowledged; a failed *write* keeps the batch, in
//! order, for an explicit retry that rewrites it from our own buffer).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use crate::frame::{BatchHeader, Salt, BATCH_HEADER_BYTES};
use crate::index::Index;
use crate::types::{LogPos, SegmentId};

/// A batch being filled or waiting for the flusher.
#[derive(Debug)]
pub(crate) struct PendingBatch {
    pub segment: SegmentId,
    /// Offset of the batch header in the segment file.
    pub offset: u32,
    pub batch_seq: u64,
    /// Header (zeroed until sealed) followed by the padded frames.
    pub buf: Vec<u8>,
    pub frames: u32,
    pub flags: u32,
}

impl PendingBatch {
    pub fn new(segment: SegmentId, offset: u32, batch_seq: u64) -> Self {
        let mut buf = Vec::with_capacity(64 * 1024);
        buf.resize(BATCH_HEADER_BYTES, 0);
        PendingBatch {
            segment,
            offset,
            batch_seq,
            buf,
            frames: 0,
            flags: 0,
        }
    }
    pub fn body_len(&self) -> usize {
        self.buf.len() - BATCH_HEADER_BYTES
    }
    pub fn end(&self) -> LogPos {
        LogPos::new(self.segment, self.offset + self.buf.len() as u32)
    }
    pub fn start(&self) -> LogPos {
        LogPos::new(self.segment, self.offset)
    }
    /// Fill in the header: length, count and the body checksum.
    pub fn seal(&mut self, salt: &Salt) {
        let body = &self.buf[BATCH_HEADER_BYTES..];
        let h = BatchHeader {
            body_len: body.len() as u32,
            batch_seq: self.batch_seq,
            frame_count: self.frames,
            body_crc: salt.crc(body),
            flags: self.flags,
        };
        self.buf[..BATCH_HEADER_BYTES].copy_from_slice(&h.encode(salt));
    }
}

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
    /// Index checkpoints written / failed.
    pub checkpoints_written: u64,
    pub checkpoint_errors: u64,
    /// Batch writes that failed and were kept for retry.
    pub write_failures: u64,
}

/// Everything behind the store mutex.
#[derive(Debug)]
pub(crate) struct State {
    pub index: Index,
    /// Sealed batches waiting for the flusher, in log order.
    pub queued: VecDeque<PendingBatch>,
    /// The batch appenders are filling.
    pub open: Option<PendingBatch>,
    /// Where the next frame (or batch header) goes.
    pub append_end: LogPos,
    pub next_batch_seq: u64,
    /// End of the last batch made durable by a completed fdatasync.
    pub durable: LogPos,
    pub durable_next_batch_seq: u64,
    pub durable_last_batch: Option<(LogPos, u32)>,
    /// The highest position a waiter asked to be durable.
    pub flush_target: LogPos,
    /// A write failed: its batch is back at the front of `queued`.
    pub write_failed: Option<String>,
    /// Bumped at every failed write attempt.
    pub fail_epoch: u64,
    pub retry_requested: bool,
    pub poisoned: Option<(&'static str, String)>,
    pub closing: bool,
    pub flusher_done: bool,
    /// A checkpoint should be written (a segment was rolled).
    pub checkpoint_due: bool,
    pub stats: Stats,
}

impl State {
    pub fn has_work(&self) -> bool {
        !self.queued.is_empty()
            || self
                .open
                .as_ref()
                .is_some_and(|b| b.frames > 0 || b.flags != 0)
    }
    pub fn pending_bytes(&self) -> usize {
        self.queued.iter().map(|b| b.buf.len()).sum::<usize>()
            + self.open.as_ref().map_or(0, |b| b.buf.len())
    }
}

/// Where the flusher is writing: the current segment file.
#[derive(Debug)]
pub(crate) struct WriterFile {
    pub segment: SegmentId,
    pub path: PathBuf,
    pub file: Arc<dyn crate::vfs::VfsFile>,
    /// Offset just after the last batch written to this segment.
    pub end: u32,
}
