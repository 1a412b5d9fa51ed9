//! Cheap looks at a segment that do not validate everything: where its frames
//! lie (hopping from header to header) and which checksum a failing batch
//! fails. Never panics on any bytes.

use crate::frame::{
    self, decode_frame, BatchError, BatchHeader, FrameError, Salt, BATCH_HEADER_BYTES,
    FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};

use crate::recovery::ScannedFrame;
use crate::types::LogPos;

use super::{ChecksumMismatch, ChecksumOf, DamagedFrame, FrameSpan};

/// Hop from batch header to batch header (and frame header to frame header)
/// to find where a segment's frames lie. Cheap: batch bodies are not
/// checksummed. After a header that does not decode it resynchronises on the
/// next batch magic whose header decodes.
pub(super) fn hop_frames(bytes: &[u8], salt: &Salt) -> FrameSpan {
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
pub(super) fn checksum_at(bytes: &[u8], salt: &Salt, off: usize) -> Option<ChecksumMismatch> {
    if off + BATCH_HEADER_BYTES > bytes.len() {
        return None;
    }
    let h = match BatchHeader::decode(&bytes[off..off + BATCH_HEADER_BYTES], salt) {
        Ok(h) => h,
        Err(BatchError::BadHeaderChecksum { expected, found }) => {
            return Some(ChecksumMismatch {
                of: ChecksumOf::BatchHeader,
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
            of: ChecksumOf::BatchBody,
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
                    of: ChecksumOf::Frame,
                    stored: found,
                    computed: expected,
                })
            }
            Err(_) => return None,
        }
    }
    None
}

/// A frame of a failing batch, checked on its own.
pub(super) enum BodyFrame<'a> {
    /// Its frame_crc holds: shown, not trusted.
    Intact(ScannedFrame<'a>),
    Damaged(DamagedFrame),
}

/// Walk the body of the failing batch at `off` frame by frame, checking each
/// frame's own checksum (FORMAT.md §6.5). `None` when the batch header does
/// not decode or its body does not lie in the file: then nothing inside can
/// be located. After a frame whose length is impossible, the walk resumes at
/// the next 8-aligned offset where a frame checks.
/// Returns the batch's sequence number and its frames.
pub(super) fn body_frames<'a>(
    bytes: &'a [u8],
    salt: &Salt,
    off: usize,
) -> Option<(u64, Vec<BodyFrame<'a>>)> {
    let h = BatchHeader::decode(bytes.get(off..off + BATCH_HEADER_BYTES)?, salt).ok()?;
    let start = off + BATCH_HEADER_BYTES;
    let end = start.checked_add(h.body_len as usize)?;
    let body = bytes.get(start..end)?;
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + FRAME_HEADER_BYTES <= body.len() {
        let offset = (start + at) as u64;
        match decode_frame(&body[at..], salt) {
            Ok(fh) => {
                out.push(BodyFrame::Intact(ScannedFrame {
                    pos: LogPos::new(salt.segment, offset as u32),
                    header: fh,
                    payload: &body[at + FRAME_HEADER_BYTES..at + fh.frame_len as usize],
                }));
                at += fh.padded_len();
            }
            Err(FrameError::BadChecksum { expected, found }) => {
                let len = u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
                out.push(BodyFrame::Damaged(DamagedFrame {
                    offset,
                    len: len as u64,
                    checksum: Some(ChecksumMismatch {
                        of: ChecksumOf::Frame,
                        stored: found,
                        computed: expected,
                    }),
                    detail: format!(
                        "frame checksum mismatch: stored {found:#010x}, computed {expected:#010x}"
                    ),
                }));
                at += frame::align_up(len as usize);
            }
            Err(e) => {
                // The extent is unknown: up to the next frame that checks.
                let mut next = at + frame::ALIGN;
                while next + FRAME_HEADER_BYTES <= body.len()
                    && decode_frame(&body[next..], salt).is_err()
                {
                    next += frame::ALIGN;
                }
                let next = next.min(body.len());
                out.push(BodyFrame::Damaged(DamagedFrame {
                    offset,
                    len: (next - at) as u64,
                    checksum: None,
                    detail: format!("{e}; skipped to the next frame that checks"),
                }));
                at = next;
            }
        }
    }
    Some((h.batch_seq, out))
}
