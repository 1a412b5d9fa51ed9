//! The segment files a recovery pass reads, as the directory and the gc
//! manifest present them (FORMAT.md §14): the compacted segments a
//! collection wrote, the files they stand for, and the scan of a compacted
//! segment (§14.3: batches back to back, any failure is corruption).

use std::collections::HashMap;
use std::path::Path;

use crate::error::Result;
use crate::frame::{
    self, Compaction, Salt, SessionDefine, KIND_SESSION_DEFINE, SEGMENT_HEADER_BYTES,
};
use crate::index::reclaimed;
use crate::log::{list_segments, segment_path};
use crate::types::SegmentId;
use crate::vfs::Vfs;

use super::recovered::Recovered;
use super::scan::check_batch;

/// The segment files the pass reads, as the directory and the gc manifest
/// present them.
pub(super) struct Layout {
    pub ids: Vec<SegmentId>,
    /// The gc manifest's store id and reclaimed sessions (a collected store).
    pub manifest: Option<([u8; 16], reclaimed::Reclaimed)>,
    /// Compacted segments, by the id they are named after.
    pub compacted: HashMap<SegmentId, Compaction>,
    /// Files a compacted segment stands for (§14.3), to remove.
    pub superseded: Vec<SegmentId>,
}

impl Layout {
    /// FORMAT.md §14: the reclaimed sessions, and the compacted segments a
    /// collection wrote (only a collected store has them, and a collection
    /// that rewrites a segment writes a manifest first).
    pub(super) fn load(vfs: &dyn Vfs, dir: &Path) -> Result<Layout> {
        let mut ids = list_segments(vfs, dir)?;
        let manifest = reclaimed::load(vfs, dir)?;
        let mut compacted: HashMap<SegmentId, Compaction> = HashMap::new();
        let mut superseded = Vec::new();
        if manifest.is_some() {
            let mut range_end: Option<u32> = None;
            ids.retain(|id| {
                if range_end.is_some_and(|end| id.0 <= end) {
                    superseded.push(*id);
                    return false;
                }
                if let Some(c) = peek_compaction(vfs, &segment_path(dir, *id)) {
                    range_end = Some(c.last_segment.0);
                    compacted.insert(*id, c);
                }
                true
            });
        }
        Ok(Layout {
            ids,
            manifest,
            compacted,
            superseded,
        })
    }
}

/// The compaction fields of the segment at `path`, reading its 64-byte
/// header only; `None` for an ordinary or unreadable one (the scan names
/// what is wrong with it).
fn peek_compaction(vfs: &dyn Vfs, path: &Path) -> Option<Compaction> {
    let f = vfs.open(path, false).ok()?;
    let mut b = [0u8; SEGMENT_HEADER_BYTES];
    let n = f.read_at(&mut b, 0).ok()?;
    Compaction::of_header(&b[..n])
}

/// Scan a compacted segment (§14.3) into the index; the offset and reason
/// of the first failure.
pub(super) fn scan_compacted(
    bytes: &[u8],
    salt: &Salt,
    from: usize,
    batch_seq: u64,
    out: &mut Recovered,
) -> Option<(u64, String)> {
    let mut off = from;
    while off < bytes.len() {
        let (h, frames) = match check_batch(bytes, salt, off, Some(batch_seq)) {
            Ok(x) => x,
            Err(f) => return Some((f.offset as u64, f.detail)),
        };
        if h.flags != 0 {
            return Some((off as u64, format!("batch flags {:#x}, must be 0", h.flags)));
        }
        for f in &frames {
            let r = if f.header.kind == KIND_SESSION_DEFINE {
                SessionDefine::decode(f.payload)
                    .map_err(|e| e.to_string())
                    .and_then(|def| out.index.apply_define(f.header.session, &def, f.pos))
            } else {
                out.index.apply_frame(f.header.session, f.header.seq, f.pos)
            };
            if let Err(detail) = r {
                return Some((
                    off as u64,
                    format!("frame at offset {}: {detail}", f.pos.offset()),
                ));
            }
        }
        out.report.batches_scanned += 1;
        out.report.frames_scanned += frames.len() as u64;
        off += frame::BATCH_HEADER_BYTES + h.body_len as usize;
    }
    out.report.bytes_scanned += (bytes.len() - from) as u64;
    None
}
