//! The one scanner of the log's bytes: validate a batch (header, sequence,
//! body checksum, the frames inside), walk a segment batch after batch, and
//! look past a stopping point for a later valid batch and the torn extent
//! (FORMAT.md §3, §6.3). Recovery, repair, `verify` and `dump` all read the
//! bytes through these functions, so they cannot disagree on what is valid.
//!
//! Pure functions over byte slices: no I/O, and no panic on any bytes
//! (invariant 10 of ARCHITECTURE.md).

use crate::frame::{
    self, decode_frame, BatchHeader, FrameHeader, Salt, BATCH_HEADER_BYTES, FRAME_HEADER_BYTES,
    KIND_SESSION_DEFINE,
};
use crate::types::{LogPos, SegmentId};

/// One frame of a valid batch, as seen by a scan.
#[derive(Debug)]
pub struct ScannedFrame<'a> {
    /// Where the frame header lies in the log.
    pub pos: LogPos,
    /// The decoded frame header (FORMAT.md §4).
    pub header: FrameHeader,
    /// The payload bytes, without padding.
    pub payload: &'a [u8],
}

/// How a scan of one segment's batches ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// Offset just after the last valid batch.
    pub end: u32,
    /// Sequence number the next batch must have.
    pub next_batch_seq: u64,
    /// Offset and flags of the last valid batch.
    pub last_batch: Option<(u32, u32)>,
    /// Where and why scanning stopped, if not at a clean end (zero header or
    /// end of file). `certain` is true when a checksum-valid batch is
    /// malformed: no torn write explains that.
    pub failure: Option<ScanFailure>,
    /// Valid batches scanned.
    pub batches: u64,
    /// Frames in those batches.
    pub frames: u64,
}

/// Why the batch at `offset` is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanFailure {
    /// Offset of the failing batch header in the segment file.
    pub offset: u32,
    /// Which check failed, for a human.
    pub detail: String,
    /// A checksum-valid batch is malformed (§3 (9), (10)): no torn write
    /// explains it.
    pub certain: bool,
}

/// Validate one batch at `off`: header, sequence number, body checksum and
/// the frames inside. Returns the header and the frames.
pub fn check_batch<'a>(
    bytes: &'a [u8],
    salt: &Salt,
    off: usize,
    expected_seq: Option<u64>,
) -> std::result::Result<(BatchHeader, Vec<ScannedFrame<'a>>), ScanFailure> {
    let fail = |detail: String, certain: bool| ScanFailure {
        offset: off as u32,
        detail,
        certain,
    };
    let h = BatchHeader::decode(bytes.get(off..).unwrap_or(&[]), salt)
        .map_err(|e| fail(e.to_string(), false))?;
    if let Some(seq) = expected_seq {
        if h.batch_seq != seq {
            return Err(fail(
                format!("batch sequence {} where {} was expected", h.batch_seq, seq),
                false,
            ));
        }
    }
    let body_start = off + BATCH_HEADER_BYTES;
    let body_end = body_start + h.body_len as usize;
    if body_end > bytes.len() {
        return Err(fail(
            format!(
                "batch body of {} bytes runs past the end of the file ({} bytes)",
                h.body_len,
                bytes.len()
            ),
            false,
        ));
    }
    let body = &bytes[body_start..body_end];
    let crc = salt.crc(body);
    if crc != h.body_crc {
        return Err(fail(
            format!(
                "batch {} body checksum mismatch: stored {:#010x}, computed {:#010x}",
                h.batch_seq, h.body_crc, crc
            ),
            false,
        ));
    }
    let mut frames = Vec::with_capacity(h.frame_count as usize);
    let mut at = 0usize;
    while at < body.len() {
        let fh = decode_frame(&body[at..], salt).map_err(|e| {
            fail(
                format!("checksum-valid batch holds a bad frame at body offset {at}: {e}"),
                true,
            )
        })?;
        // §4: the padding is zero and a define's seq is 0. Both lie under
        // body_crc, which held: no torn write explains either (certain).
        let pad_end = (at + fh.padded_len()).min(body.len());
        if body[at + fh.frame_len as usize..pad_end]
            .iter()
            .any(|b| *b != 0)
        {
            return Err(fail(
                format!(
                    "checksum-valid batch holds non-zero padding after the frame at body offset {at}"
                ),
                true,
            ));
        }
        if fh.kind == KIND_SESSION_DEFINE && fh.seq != 0 {
            return Err(fail(
                format!(
                    "checksum-valid batch holds a session-define frame at body offset {at} with seq {} (must be 0)",
                    fh.seq
                ),
                true,
            ));
        }
        let pos = LogPos::new(salt.segment, (body_start + at) as u32);
        frames.push(ScannedFrame {
            pos,
            header: fh,
            payload: &body[at + FRAME_HEADER_BYTES..at + fh.frame_len as usize],
        });
        at += fh.padded_len();
    }
    if frames.len() != h.frame_count as usize {
        return Err(fail(
            format!(
                "batch says {} frames, body holds {}",
                h.frame_count,
                frames.len()
            ),
            true,
        ));
    }
    Ok((h, frames))
}

/// Scan the batches of one segment from `start`, feeding each frame of every
/// valid batch to `visit` (a batch is checked whole before any of its frames
/// is visited). A visitor error is a certain failure.
pub fn scan_batches(
    bytes: &[u8],
    salt: &Salt,
    start: u32,
    first_batch_seq: u64,
    mut visit: impl FnMut(&ScannedFrame<'_>) -> std::result::Result<(), String>,
) -> SegmentScan {
    let mut scan = SegmentScan {
        end: start,
        next_batch_seq: first_batch_seq,
        last_batch: None,
        failure: None,
        batches: 0,
        frames: 0,
    };
    let mut off = start as usize;
    loop {
        if off + BATCH_HEADER_BYTES > bytes.len() {
            break; // end of file
        }
        if bytes[off..off + BATCH_HEADER_BYTES].iter().all(|b| *b == 0) {
            break; // clean end of written data
        }
        match check_batch(bytes, salt, off, Some(scan.next_batch_seq)) {
            Err(f) => {
                scan.failure = Some(f);
                break;
            }
            Ok((h, frames)) => {
                for f in &frames {
                    if let Err(detail) = visit(f) {
                        // Reported at the batch: a batch is kept or dropped
                        // whole (its earlier frames were already visited).
                        scan.failure = Some(ScanFailure {
                            offset: off as u32,
                            detail: format!("frame at offset {}: {detail}", f.pos.offset()),
                            certain: true,
                        });
                        return scan;
                    }
                }
                scan.frames += frames.len() as u64;
                scan.batches += 1;
                scan.last_batch = Some((off as u32, h.flags));
                scan.next_batch_seq += 1;
                off += BATCH_HEADER_BYTES + h.body_len as usize;
                scan.end = off as u32;
            }
        }
    }
    scan
}

/// The salt a segment file's batches validate with when its header does
/// not decode: the store id already known (`known`), else the one the
/// damaged header still holds (bytes 16..32; a checksum mismatch may leave
/// it intact). `None` when no batch in the file validates with either: the
/// fact §6.3 H2 and H3 turn on, for the open and the inspection walk alike.
pub fn batch_salt(bytes: &[u8], known: Option<[u8; 16]>, segment: SegmentId) -> Option<Salt> {
    let in_header = bytes.get(16..32).map(|raw| {
        let mut s = [0u8; 16];
        s.copy_from_slice(raw);
        s
    });
    known
        .into_iter()
        .chain(in_header.filter(|h| known != Some(*h)))
        .map(|store_id| Salt { store_id, segment })
        .find(|salt| probe_after(bytes, salt, 0, 0).0.is_some())
}

/// Look past a stopping point: the offset of any later valid batch (sequence
/// `>= min_seq`), and the end of the last non-zero byte (the torn extent).
pub fn probe_after(
    bytes: &[u8],
    salt: &Salt,
    from: u32,
    min_seq: u64,
) -> (Option<u32>, Option<u32>) {
    let from_usize = (from as usize).min(bytes.len());
    let nonzero_end = last_nonzero(&bytes[from_usize..])
        .map(|p| (from_usize + p + 1).min(u32::MAX as usize) as u32);
    if nonzero_end.is_none() {
        return (None, None); // all zero: no batch can follow
    }
    // Only 8-aligned offsets holding the batch magic can start a batch; a
    // recycled segment's stale tail is tens of MiB, so they are found with
    // a vectorised substring search rather than by stepping.
    let start = frame::align_up(from_usize + 1);
    let magic = frame::BATCH_MAGIC.to_le_bytes();
    let later = bytes
        .get(start..)
        .into_iter()
        .flat_map(|tail| memchr::memmem::find_iter(tail, &magic).map(move |p| start + p))
        .filter(|off| off % frame::ALIGN == 0 && off + BATCH_HEADER_BYTES <= bytes.len())
        .find(|&off| check_batch(bytes, salt, off, None).is_ok_and(|(h, _)| h.batch_seq >= min_seq))
        .map(|off| off as u32);
    (later, nonzero_end)
}

/// The end of the torn extent after a stop at `end` in a segment (FORMAT.md
/// §6.3), from `nonzero_end`, where the probe found the last non-zero
/// byte. In a recycled segment (§6.2 rule 7) the bytes after the end of
/// data are stale, not evidence: a stop at the end of data has no torn
/// extent, and a stop at an invalid batch (`failed`) has its 32 header
/// bytes, which the repair zeroes so that the scan ends there.
pub fn evidence_after(
    bytes: &[u8],
    end: u32,
    failed: bool,
    nonzero_end: Option<u32>,
) -> Option<u32> {
    if !frame::header_is_recycled(bytes) {
        return nonzero_end;
    }
    let header_end = (end as usize + BATCH_HEADER_BYTES).min(bytes.len()) as u32;
    (failed && header_end > end).then_some(header_end)
}

/// Index of the last non-zero byte. Runs on every open over the unused,
/// zero-filled rest of the active segment, so it compares 8 bytes at a time.
fn last_nonzero(bytes: &[u8]) -> Option<usize> {
    let tail = bytes.len() % 8;
    if let Some(p) = bytes[bytes.len() - tail..].iter().rposition(|b| *b != 0) {
        return Some(bytes.len() - tail + p);
    }
    let words = &bytes[..bytes.len() - tail];
    let w = words
        .chunks_exact(8)
        .rposition(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")) != 0)?;
    let p = words[w * 8..w * 8 + 8].iter().rposition(|b| *b != 0)?;
    Some(w * 8 + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_finds_nonzero_extent() {
        let salt = Salt {
            store_id: [1; 16],
            segment: SegmentId(1),
        };
        let mut b = vec![0u8; 256];
        b[100] = 9;
        assert_eq!(probe_after(&b, &salt, 64, 0), (None, Some(101)));
        assert_eq!(probe_after(&vec![0u8; 256], &salt, 64, 0), (None, None));
        assert_eq!(last_nonzero(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0]), Some(9));
        assert_eq!(last_nonzero(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]), Some(0));
        assert_eq!(last_nonzero(&[0u8; 17]), None);
        assert_eq!(last_nonzero(&[]), None);
        // A start past the end is not a panic.
        assert_eq!(probe_after(&b, &salt, 10_000, 0), (None, None));
        assert!(check_batch(&b, &salt, 250, None).is_err());
    }

    /// FORMAT.md §4: padding and a define's seq are checked, and inside a
    /// checksum-valid body their failure is certain (row C2).
    #[test]
    fn padding_and_define_seq_are_checked() {
        use crate::frame::{encode_frame, BatchHeader, SEGMENT_HEADER_BYTES};
        use crate::types::SessionId;
        let salt = Salt {
            store_id: [7; 16],
            segment: SegmentId(1),
        };
        let batch = |kind: u16, seq: u64, dirty_pad: bool| {
            let mut body = Vec::new();
            encode_frame(&mut body, &salt, SessionId(0), kind, 0, seq, b"abc");
            if dirty_pad {
                // frame_len is 27: bytes 27..32 are padding.
                body[30] = 1;
            }
            let h = BatchHeader {
                body_len: body.len() as u32,
                batch_seq: 0,
                frame_count: 1,
                body_crc: salt.crc(&body),
                flags: 0,
            };
            let mut bytes = vec![0u8; SEGMENT_HEADER_BYTES];
            bytes.extend_from_slice(&h.encode(&salt));
            bytes.extend_from_slice(&body);
            bytes
        };
        assert!(check_batch(&batch(5, 0, false), &salt, SEGMENT_HEADER_BYTES, Some(0)).is_ok());
        for bad in [batch(5, 0, true), batch(KIND_SESSION_DEFINE, 3, false)] {
            let f = check_batch(&bad, &salt, SEGMENT_HEADER_BYTES, Some(0)).unwrap_err();
            assert!(f.certain, "{}", f.detail);
        }
    }
}
