//! Whether an index checkpoint still describes the log (FORMAT.md §7): same
//! store, its segment exists, and the batch it says it ends with is there,
//! valid, at that place. A checkpoint of this store that no longer matches
//! is still evidence: it proves the log was durable up to its covered
//! position (row C4 of §6.3; invariant 5, derived files never lead the log).

use std::path::Path;

use crate::frame::{
    self, BatchError, BatchHeader, Salt, SegmentHeader, BATCH_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::index::checkpoint::Checkpoint;
use crate::log::{read_segment, segment_path, SegmentBytes};
use crate::types::SegmentId;
use crate::vfs::Vfs;

/// Check that a checkpoint still describes this log: same store, its segment
/// exists, and the batch it says it ends with is there, valid, at that place.
/// On a mismatch, the flag says whether the checkpoint still proves that the
/// log was durable up to its covered position (it belongs to this store).
/// On a match: the index in `ids` of the checkpoint's segment and that
/// segment's bytes, which the scan goes on from (read once: a read-only
/// open copies the last segment whole).
pub(super) fn validate_checkpoint(
    vfs: &dyn Vfs,
    dir: &Path,
    ids: &[SegmentId],
    ck: &Checkpoint,
    exclusive: bool,
) -> std::result::Result<(usize, SegmentBytes), (String, bool)> {
    // A missing or unreadable covered segment cannot come from a power cut
    // (a segment is durable, header included, before any batch goes into it,
    // and a checkpoint never leads the log): the checkpoint still proves
    // that the log was durable up to its position, so the scan calls the
    // loss corruption instead of taking the segment for a torn creation.
    let seg = ck.covered.segment();
    let i = ids.iter().position(|s| *s == seg).ok_or_else(|| {
        (
            format!("checkpoint refers to missing segment {}", seg.0),
            true,
        )
    })?;
    // The segments before the checkpoint are not read; their names must
    // still be the ones a full scan accepts (it starts at segment 1), or the
    // verdict would depend on a derived file.
    if ids.first().is_some_and(|f| f.0 != frame::FIRST_SEGMENT_ID) {
        return Err((
            format!(
                "the log starts at segment {} instead of {}",
                ids[0].0,
                frame::FIRST_SEGMENT_ID
            ),
            false,
        ));
    }
    let path = segment_path(dir, seg);
    let bytes = read_segment(vfs, &path, i + 1 < ids.len() || exclusive)
        .map_err(|e| (e.to_string(), false))?;
    let header =
        SegmentHeader::decode(&bytes).map_err(|e| (format!("segment header: {e}"), true))?;
    if header.store_id != ck.store_id {
        return Err(("checkpoint belongs to another store".into(), false));
    }
    if header.segment != seg {
        return Err((
            format!(
                "segment header names segment {}, file name {}",
                header.segment.0, seg.0
            ),
            true,
        ));
    }
    // The segments the checkpoint covers are not scanned, but their headers
    // must check (FORMAT.md §7): otherwise a segment of another version,
    // another store or another id would open under the checkpoint and fail
    // only at a read. A failure sends the open to a full scan, which names
    // the damage by its row (H1, H4).
    for id in &ids[..i] {
        check_covered_header(vfs, dir, *id, ck.store_id).map_err(|why| (why, true))?;
    }
    if ck.next_batch_seq == 0 {
        return Err(("checkpoint covers no batch".into(), false));
    }
    check_checkpoint_tail(&bytes, ck, seg, &header).map_err(|why| (why, true))?;
    Ok((i, bytes))
}

/// The 64-byte header of a segment a checkpoint covers decodes, names the
/// segment and the store.
fn check_covered_header(
    vfs: &dyn Vfs,
    dir: &Path,
    id: SegmentId,
    store_id: [u8; 16],
) -> std::result::Result<(), String> {
    let path = segment_path(dir, id);
    let mut buf = [0u8; SEGMENT_HEADER_BYTES];
    let n = vfs
        .open(&path, false)
        .and_then(|f| f.read_at(&mut buf, 0))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let h = SegmentHeader::decode(&buf[..n])
        .map_err(|e| format!("{}: segment header: {e}", path.display()))?;
    if h.segment != id || h.store_id != store_id {
        return Err(format!(
            "{}: the header names segment {} of {} store",
            path.display(),
            h.segment.0,
            if h.store_id == store_id {
                "this"
            } else {
                "another"
            }
        ));
    }
    Ok(())
}

/// The batch a checkpoint says it ends with is there, valid, at that place.
fn check_checkpoint_tail(
    bytes: &[u8],
    ck: &Checkpoint,
    seg: SegmentId,
    header: &SegmentHeader,
) -> std::result::Result<(), String> {
    let last = ck.last_batch;
    if last.segment() != seg {
        // The covered batch ended the previous segment; this segment must start
        // with the next batch sequence.
        if header.first_batch_seq != ck.next_batch_seq
            || ck.covered.offset() != SEGMENT_HEADER_BYTES as u32
        {
            return Err("checkpoint does not match the segment chain".into());
        }
        return Ok(());
    }
    let salt = Salt {
        store_id: ck.store_id,
        segment: seg,
    };
    let off = last.offset() as usize;
    if off + BATCH_HEADER_BYTES > bytes.len() {
        return Err("checkpoint's last batch lies past the end of the segment".into());
    }
    match BatchHeader::decode(&bytes[off..off + BATCH_HEADER_BYTES], &salt) {
        Ok(h)
            if h.batch_seq + 1 == ck.next_batch_seq
                && off + BATCH_HEADER_BYTES + h.body_len as usize
                    == ck.covered.offset() as usize =>
        {
            Ok(())
        }
        Ok(_) => Err("checkpoint's last batch does not match the log".into()),
        Err(BatchError::Zero) => {
            Err("checkpoint leads the log (its last batch is not there)".into())
        }
        Err(e) => Err(format!("checkpoint's last batch: {e}")),
    }
}
