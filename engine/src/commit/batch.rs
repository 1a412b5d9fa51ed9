//! One commit batch while it fills and waits for the flusher (FORMAT.md §3).
//!
//! Invariant kept here: positions never move. The batch header is reserved
//! in front of the first frame, so a frame's [`LogPos`] is final the moment
//! it is encoded; sealing only fills in the header.

use crate::frame::{BatchHeader, Salt, BATCH_HEADER_BYTES};
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
