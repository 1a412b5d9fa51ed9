//! Step 4 of FORMAT.md §14.4: rewrite each selected range of sealed
//! segments into one compacted segment (§14.3) holding exactly the range's
//! live frames, grouped by session, and retire the range's other files
//! ([`rewrite_ranges`]).
//!
//! Invariant (§14.4's crash argument): per range, the compacted file is
//! written under a temp name (`N.tseg.tmp`, never a name recovery reads)
//! and fdatasynced before `install` renames it over the range's first id;
//! the directory is fsynced before the range's other files are removed (or
//! offered to the pool) and again after. So `N.tseg` is at every moment
//! either the old segment or the complete compacted one, and the files it
//! supersedes go only once it is durable.

use std::path::Path;

use crate::error::{Error, Result};
use crate::frame::{
    encode_frame, BatchHeader, Compaction, Salt, BATCH_BODY_BYTES_MAX, BATCH_HEADER_BYTES,
    KIND_SESSION_DEFINE, SEGMENT_HEADER_BYTES,
};
use crate::log::{segment_path, SegmentBytes, SegmentPool};
use crate::types::{LogPos, SegmentId, SessionId};
use crate::vfs::Vfs;

use super::plan::{Plan, Sealed};
use super::read::{load_defines, load_segment, WalkedFrame};
use super::throttle::Throttle;
use super::{CollectOptions, CollectReport};

/// A frame a rewrite moved: `(session, None)` for its define frame, or
/// `(session, Some(seq))` for an event frame, and where it lies now.
pub(super) type Moved = (SessionId, Option<u64>, LogPos);

/// Puts a range's durable compacted file in place: `(tmp, dst, (first id,
/// last id), moved frames)`.
pub(super) type Install<'a> =
    dyn FnMut(&Path, &Path, (SegmentId, SegmentId), Vec<Moved>) -> Result<()> + 'a;

/// A file of a range as read for its rewrite: its bytes and the frames
/// walked in them.
type LoadedFile = (SegmentBytes, Vec<WalkedFrame>);

/// A live frame of a range, in the order of the compacted file: (session,
/// event rather than define, seq, index of its file in the range, index of
/// the frame in that file).
type Slot = (u32, bool, u64, usize, usize);

/// A range's compacted file as encoded in memory, before it is written.
struct Compacted {
    /// The batches, back to back after the segment header.
    batches: Vec<Vec<u8>>,
    /// Where every copied frame lies in the compacted file.
    moved: Vec<Moved>,
    /// Define frames whose position changed: (session name, old position,
    /// new position).
    defines: Vec<(String, LogPos, LogPos)>,
    /// The end of the file (where a next batch would start).
    batch_at: usize,
}

/// Step 4 of §14.4 for every range of `plan` (or, dry, only its report).
/// `install(tmp, dst, moved)` puts the durable compacted file in place
/// (a rename) and tells the caller where the range's live frames lie now.
/// The files a range no longer needs are offered to `pool` (an online
/// collection: they may become free files), else removed.
#[allow(clippy::too_many_arguments)]
pub(super) fn rewrite_ranges(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    plan: &Plan,
    opts: &CollectOptions,
    report: &mut CollectReport,
    throttle: &mut Throttle<'_>,
    install: &mut Install<'_>,
    pool: Option<&SegmentPool>,
) -> Result<()> {
    let sealed = &plan.sealed;
    let mut after = report.bytes_before;
    for r in &plan.ranges {
        let files = &sealed[r.clone()];
        let first = &files[0];
        let last = &files[files.len() - 1];
        let compaction = Compaction {
            last_segment: last.compaction.map_or(last.id, |c| c.last_segment),
            next_batch_seq: sealed
                .get(r.end)
                .map_or(plan.tail_first_batch_seq, |s| s.header.first_batch_seq),
        };
        let header = compaction.encode_header(&first.header);
        // Read the range's files (a dry run too: its report is exact).
        let loaded = load_range(vfs, dir, store_id, files, throttle)?;
        // The live frames of the range, grouped by session (§14.3).
        let order = live_order(plan, &loaded);
        let Compacted {
            batches,
            moved,
            mut defines,
            batch_at,
        } = encode_range(plan, store_id, files, &loaded, &order);
        let new_len = batch_at as u64;
        after -= files.iter().map(|s| s.file_len).sum::<u64>();
        after += new_len;
        report.ranges_rewritten += 1;
        report.segment_files_removed += files.len() as u32 - 1;
        if opts.dry_run {
            continue;
        }
        // Step 4: temp file, fdatasync, rename over the first id, directory
        // fsync; then the range's other files, directory fsync.
        let dst = segment_path(dir, first.id);
        let tmp = dst.with_extension("tseg.tmp");
        write_compacted(vfs, &tmp, &header, &batches, throttle)?;
        throttle.stopped()?;
        install(&tmp, &dst, (first.id, compaction.last_segment), moved)?;
        report.moved_defines.append(&mut defines);
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
        retire_superseded(vfs, dir, files, pool)?;
    }
    report.bytes_after = after;
    // A rewrite can grow a range a little (a batch header per session
    // where the frames shared batches): nothing reclaimed then.
    report.bytes_reclaimed = report.bytes_before.saturating_sub(after);
    report.bytes_io = throttle.bytes;
    Ok(())
}

/// Read a range's files, in order: the whole file when it holds a live
/// event, else only its define frames (the only live ones), each read
/// counted by `throttle`.
fn load_range(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    files: &[Sealed],
    throttle: &mut Throttle<'_>,
) -> Result<Vec<LoadedFile>> {
    let mut loaded: Vec<LoadedFile> = Vec::new();
    for s in files {
        if s.live_events {
            let (bytes, frames, data_end, _, _) = load_segment(vfs, dir, store_id, s.id)?;
            throttle.consume(data_end)?;
            loaded.push((bytes, frames));
        } else {
            // Only its define frames are live: read just those.
            let (bytes, frames) = load_defines(vfs, dir, store_id, s.id, &s.defines)?;
            throttle.consume(bytes.len() as u64)?;
            loaded.push((bytes, frames));
        }
    }
    Ok(loaded)
}

/// The live frames of a loaded range (§14.1), sorted into the compacted
/// file's order (§14.3): by session, its define first, then its events in
/// seq order.
fn live_order(plan: &Plan, loaded: &[LoadedFile]) -> Vec<Slot> {
    let mut order: Vec<Slot> = Vec::new();
    for (fi, (_, frames)) in loaded.iter().enumerate() {
        for (k, f) in frames.iter().enumerate() {
            if plan.live(f) {
                order.push((f.session.0, f.kind != KIND_SESSION_DEFINE, f.seq, fi, k));
            }
        }
    }
    order.sort_unstable();
    order
}

/// Encode the frames of `order` as the compacted file of the range `files`
/// (§14.3), salted with its first id: batches of one session each, at most
/// `BATCH_BODY_BYTES_MAX` of body, every one with the first file's
/// `first_batch_seq` and flags 0; and where each frame lands.
fn encode_range(
    plan: &Plan,
    store_id: [u8; 16],
    files: &[Sealed],
    loaded: &[LoadedFile],
    order: &[Slot],
) -> Compacted {
    let first = &files[0];
    let salt = Salt {
        store_id,
        segment: first.id,
    };
    let mut batches: Vec<Vec<u8>> = Vec::new();
    let mut moved: Vec<Moved> = Vec::with_capacity(order.len());
    let mut defines: Vec<(String, LogPos, LogPos)> = Vec::new();
    let mut body: Vec<u8> = Vec::new();
    let mut count = 0u32;
    let mut cur: Option<u32> = None;
    // Where the next batch starts in the file.
    let mut batch_at = SEGMENT_HEADER_BYTES;
    let flush =
        |body: &mut Vec<u8>, count: &mut u32, batches: &mut Vec<Vec<u8>>, batch_at: &mut usize| {
            if *count == 0 {
                return;
            }
            let h = BatchHeader {
                body_len: body.len() as u32,
                batch_seq: first.header.first_batch_seq,
                frame_count: *count,
                body_crc: salt.crc(body),
                flags: 0,
            };
            let mut b = h.encode(&salt).to_vec();
            b.append(body);
            *batch_at += b.len();
            batches.push(b);
            *count = 0;
        };
    for (sess, _, _, fi, k) in order {
        let f = &loaded[*fi].1[*k];
        if cur != Some(*sess) || body.len() + f.padded as usize > BATCH_BODY_BYTES_MAX {
            flush(&mut body, &mut count, &mut batches, &mut batch_at);
            cur = Some(*sess);
        }
        let at = batch_at + BATCH_HEADER_BYTES + body.len();
        moved.push((
            f.session,
            (f.kind != KIND_SESSION_DEFINE).then_some(f.seq),
            LogPos::new(first.id, at as u32),
        ));
        if f.kind == KIND_SESSION_DEFINE {
            let from = LogPos::new(files[*fi].id, f.at);
            let to = LogPos::new(first.id, at as u32);
            if from != to {
                if let Some(name) = plan.names.get(f.session.0 as usize) {
                    defines.push((name.to_string(), from, to));
                }
            }
        }
        let payload = &loaded[*fi].0[f.payload.0..f.payload.1];
        encode_frame(&mut body, &salt, f.session, f.kind, f.flags, f.seq, payload);
        count += 1;
    }
    flush(&mut body, &mut count, &mut batches, &mut batch_at);
    Compacted {
        batches,
        moved,
        defines,
        batch_at,
    }
}

/// Write a range's compacted file under its temp name `tmp` (`header`, then
/// the batches back to back, each write counted by `throttle`) and
/// fdatasync it: it is durable before a name recovery reads points at it.
fn write_compacted(
    vfs: &dyn Vfs,
    tmp: &Path,
    header: &[u8],
    batches: &[Vec<u8>],
    throttle: &mut Throttle<'_>,
) -> Result<()> {
    let f = vfs
        .create_truncate(tmp)
        .map_err(|e| Error::io("create compacted segment", tmp, e))?;
    f.write_all_at(header, 0)
        .map_err(|e| Error::io("write compacted segment", tmp, e))?;
    let mut at = SEGMENT_HEADER_BYTES as u64;
    for b in batches {
        f.write_all_at(b, at)
            .map_err(|e| Error::io("write compacted segment", tmp, e))?;
        at += b.len() as u64;
        throttle.consume(b.len() as u64)?;
    }
    f.sync_data()
        .map_err(|e| Error::io("fsync compacted segment", tmp, e))?;
    drop(f);
    Ok(())
}

/// Once a range's compacted file is installed and the directory fsynced:
/// the range's other files (now superseded, §14.3) are offered to `pool`
/// or else removed, then the directory is fsynced again.
fn retire_superseded(
    vfs: &dyn Vfs,
    dir: &Path,
    files: &[Sealed],
    pool: Option<&SegmentPool>,
) -> Result<()> {
    if files.len() > 1 {
        for s in &files[1..] {
            let p = segment_path(dir, s.id);
            match pool {
                Some(pool) => pool.offer(vfs, dir, s.id, &p)?,
                None => vfs
                    .remove(&p)
                    .map_err(|e| Error::io("remove collected segment", &p, e))?,
            }
        }
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(())
}
