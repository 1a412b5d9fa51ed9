//! One commit batch while it fills and waits for the flusher (FORMAT.md §3).
//!
//! Invariant kept here: positions never move. The batch header is reserved
//! in front of the first frame, so a frame's [`LogPos`] is final the moment
//! it is encoded; sealing only fills in the header.
//!
//! The body checksum (FORMAT.md §3) is fed frame by frame as appenders
//! encode them, while the bytes are still in cache and while the flusher is
//! busy with the previous batch, so sealing does not read the whole body a
//! second time on the flusher's serial path.

use crate::frame::{BatchHeader, Salt, BATCH_HEADER_BYTES};
use crate::types::{LogPos, SegmentId, SessionId};

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
    /// The sessions with frames in this batch (consecutive repeats
    /// dropped): whose followers to wake when it is durable.
    pub sessions: Vec<SessionId>,
    /// `salted_crc` of `buf[BATCH_HEADER_BYTES..]` so far (FORMAT.md §3
    /// body_crc); `None` until the first frame.
    body_crc: Option<crc32fast::Hasher>,
}

impl PendingBatch {
    /// A batch at `offset` of `segment`, filling `buf` (a recycled buffer,
    /// cleared here, or a new one).
    pub fn new(segment: SegmentId, offset: u32, batch_seq: u64, buf: Option<Vec<u8>>) -> Self {
        let mut buf = buf.unwrap_or_else(|| Vec::with_capacity(64 * 1024));
        buf.clear();
        buf.resize(BATCH_HEADER_BYTES, 0);
        PendingBatch {
            segment,
            offset,
            batch_seq,
            buf,
            frames: 0,
            flags: 0,
            sessions: Vec::new(),
            body_crc: None,
        }
    }
    /// Feed the body checksum with the bytes appended since `from` (a frame
    /// and its padding, just encoded).
    pub fn note_appended(&mut self, salt: &Salt, from: usize) {
        debug_assert!(from >= BATCH_HEADER_BYTES);
        self.body_crc
            .get_or_insert_with(|| salt.hasher())
            .update(&self.buf[from..]);
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
        let body_crc = match &self.body_crc {
            Some(h) => h.clone().finalize(),
            None => salt.crc(body),
        };
        // The paired check: the incremental checksum is the one a reader
        // computes over the whole body.
        debug_assert_eq!(body_crc, salt.crc(body), "incremental body_crc");
        let h = BatchHeader {
            body_len: body.len() as u32,
            batch_seq: self.batch_seq,
            frame_count: self.frames,
            body_crc,
            flags: self.flags,
        };
        self.buf[..BATCH_HEADER_BYTES].copy_from_slice(&h.encode(salt));
    }
}
