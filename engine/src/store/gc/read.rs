//! Reading sealed segments as the collector sees them: every frame of a
//! segment ([`load_segment`], [`walk`]), only its define frames
//! ([`load_defines`]), or one frame by position ([`frame_at`]).
//!
//! Invariant: the collector copies and weighs only frames that check.
//! Whole segments are walked batch by batch with recovery's own
//! [`check_batch`] (ordinary and compacted segments alike, FORMAT.md
//! §14.3), and single frames are decoded against the segment's salt; a
//! frame that does not check is corruption, reported with its file and
//! offset, never skipped.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::frame::{
    decode_frame, Compaction, Salt, SegmentHeader, BATCH_HEADER_BYTES, KIND_SESSION_DEFINE,
    SEGMENT_HEADER_BYTES,
};
use crate::log::{read_segment, segment_path, SegmentBytes};
use crate::recovery::check_batch;
use crate::types::{LogPos, SegmentId, SessionId};
use crate::vfs::Vfs;

/// A frame of a sealed segment, as the collector walks it.
pub(super) struct WalkedFrame {
    /// Offset of the frame in its segment file.
    pub(super) at: u32,
    pub(super) session: SessionId,
    pub(super) kind: u16,
    pub(super) flags: u16,
    pub(super) seq: u64,
    /// Payload's byte range in its segment's bytes.
    pub(super) payload: (usize, usize),
    pub(super) padded: u64,
}

/// Read and check a sealed segment: its bytes, frames, end of data,
/// header and compaction fields.
#[allow(clippy::type_complexity)]
pub(super) fn load_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    id: SegmentId,
) -> Result<(
    SegmentBytes,
    Vec<WalkedFrame>,
    u64,
    SegmentHeader,
    Option<Compaction>,
)> {
    let path = segment_path(dir, id);
    let bytes = read_segment(vfs, &path, true)?;
    let header = SegmentHeader::decode(&bytes)
        .map_err(|e| Error::corrupt(&path, 0, format!("segment header: {e}")))?;
    let compaction = Compaction::of_header(&bytes);
    let salt = Salt {
        store_id,
        segment: id,
    };
    let (frames, data_end) = walk(&bytes, &salt)
        .map_err(|(off, why)| Error::corrupt(&path, off, format!("while collecting: {why}")))?;
    Ok((bytes, frames, data_end as u64, header, compaction))
}

/// Read only the define frames of a sealed segment, at `defines`
/// ((offset, padded length), from its summary), each checked: bytes holding
/// them back to back, and the frames with payload ranges in those bytes.
pub(super) fn load_defines(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    id: SegmentId,
    defines: &[(u32, u32)],
) -> Result<(SegmentBytes, Vec<WalkedFrame>)> {
    let path = segment_path(dir, id);
    let file = vfs
        .open(&path, false)
        .map_err(|e| Error::io("open segment", &path, e))?;
    let salt = Salt {
        store_id,
        segment: id,
    };
    let mut buf = Vec::new();
    let mut frames = Vec::with_capacity(defines.len());
    for (at, padded) in defines {
        let start = buf.len();
        buf.resize(start + *padded as usize, 0);
        let n = file
            .read_at(&mut buf[start..], *at as u64)
            .map_err(|e| Error::io("read define frame", &path, e))?;
        if n < *padded as usize {
            return Err(Error::corrupt(
                &path,
                *at as u64,
                "define frame cut short by the end of the segment",
            ));
        }
        let h = decode_frame(&buf[start..], &salt)
            .map_err(|e| Error::corrupt(&path, *at as u64, format!("define frame: {e}")))?;
        if h.kind != KIND_SESSION_DEFINE {
            return Err(Error::corrupt(
                &path,
                *at as u64,
                format!("expected a define frame, found kind {}", h.kind),
            ));
        }
        let p = start + crate::frame::FRAME_HEADER_BYTES;
        frames.push(WalkedFrame {
            at: *at,
            session: h.session,
            kind: h.kind,
            flags: h.flags,
            seq: h.seq,
            payload: (p, start + h.frame_len as usize),
            padded: *padded as u64,
        });
    }
    Ok((SegmentBytes::Owned(buf), frames))
}

/// Kind and payload of the frame at `pos`.
pub(super) fn frame_at(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    cache: &mut HashMap<SegmentId, SegmentBytes>,
    pos: LogPos,
) -> Result<(u16, Vec<u8>)> {
    let seg = pos.segment();
    let path = segment_path(dir, seg);
    let bytes = match cache.entry(seg) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(read_segment(vfs, &path, true)?),
    };
    let off = pos.offset() as usize;
    let salt = Salt {
        store_id,
        segment: seg,
    };
    let h = decode_frame(bytes.get(off..).unwrap_or(&[]), &salt)
        .map_err(|e| Error::corrupt(&path, off as u64, format!("frame: {e}")))?;
    let start = off + crate::frame::FRAME_HEADER_BYTES;
    Ok((h.kind, bytes[start..off + h.frame_len as usize].to_vec()))
}

/// Every frame of a segment whose batches recovery accepted (an ordinary or
/// a compacted one), and the end of its data.
#[allow(clippy::type_complexity)]
fn walk(
    bytes: &[u8],
    salt: &Salt,
) -> std::result::Result<(Vec<WalkedFrame>, usize), (u64, String)> {
    let mut out = Vec::new();
    let mut off = SEGMENT_HEADER_BYTES;
    while off + BATCH_HEADER_BYTES <= bytes.len()
        && bytes[off..off + BATCH_HEADER_BYTES].iter().any(|b| *b != 0)
    {
        let (h, frames) =
            check_batch(bytes, salt, off, None).map_err(|f| (f.offset as u64, f.detail))?;
        for f in frames {
            let start = f.pos.offset() as usize + crate::frame::FRAME_HEADER_BYTES;
            out.push(WalkedFrame {
                at: f.pos.offset(),
                session: f.header.session,
                kind: f.header.kind,
                flags: f.header.flags,
                seq: f.header.seq,
                payload: (start, start + f.payload.len()),
                padded: f.header.padded_len() as u64,
            });
        }
        off += BATCH_HEADER_BYTES + h.body_len as usize;
    }
    Ok((out, off))
}
