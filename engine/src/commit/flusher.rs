//! Writing a batch: take one batch at a time, write it with one `write`,
//! make it durable with one `fdatasync`, publish the durable position, wake
//! the waiters; create the next segment when a batch starts one. The
//! flusher thread does this, and so does a thread waiting for durability
//! when nothing is in flight (it leads the write itself, as in a
//! leader/follower group commit, instead of waking the flusher and sleeping).
//!
//! Invariants kept here (ARCHITECTURE.md 1, 8; FORMAT.md §6.2 rule 1): one
//! batch in flight, whichever thread writes it (a batch is taken only while
//! `inflight` is empty); the durable position moves only after a successful
//! fdatasync; an fdatasync error poisons; a failed write keeps the batch for
//! a retry from our own buffer. And no waiter is left waiting: a panic while
//! a batch is written poisons the store (in whichever thread), and however
//! the flusher thread ends, a drop guard marks it done and wakes every
//! waiter.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::MutexGuard;

use crate::commit::batch::PendingBatch;
use crate::commit::direct::DirectTail;
use crate::commit::queue::{CommitQueue, State};
use crate::error::Result;
use crate::frame::{Salt, BATCH_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::log::{
    create_segment, segment_path, CreateError, SegmentPool, SegmentReader, SegmentSpec,
};
use crate::types::SegmentId;
use crate::vfs::{Vfs, VfsFile};

/// Where the flusher is writing: the current segment file.
#[derive(Debug)]
pub(crate) struct WriterFile {
    pub segment: SegmentId,
    pub path: PathBuf,
    pub file: Arc<dyn VfsFile>,
    /// Offset just after the last batch written to this segment.
    pub end: u32,
    /// Size of the segment file (its preallocation): zero extension never
    /// grows it.
    pub len: u64,
    /// Bytes up to here were written by this process (batches or zeros):
    /// zero extension does not rewrite them.
    pub written_to: u64,
    /// A recycled segment (FORMAT.md §6.2 rule 7): the bytes after the last
    /// batch are stale, so every batch is followed by 32 zero bytes (when
    /// they fit), and nothing is zero-extended (every block was written).
    pub recycled: bool,
    /// The pool was asked for a file for the next segment
    /// ([`SegmentPool::want_prepared`]): as soon as a roll made this
    /// segment, or, for the segment an open found, once it is a quarter full
    /// (so a store that stays small never writes one), and only while
    /// batches are small ([`prepare_helps`]). Asking only at a quarter left
    /// the preparer behind the writer at 256 × 64: a third of the rolls
    /// found no file (docs/DESIGN.md, "Segments prepared ahead").
    pub prepare_asked: bool,
    /// Batches written into this segment by this process, and their bytes:
    /// their mean size says whether zeros written ahead pay
    /// ([`prepare_helps`]).
    pub batches: u64,
    pub batch_bytes: u64,
    /// The bytes before the next batch, for a direct write
    /// ([`FlusherEnv::direct_writes`]).
    pub direct: DirectTail,
}

impl WriterFile {
    /// The writer at offset `end` of segment file `file`, `len` bytes long,
    /// before this process wrote anything past `end` (an earlier run may or
    /// may not have written zeros there: assume not).
    pub fn at(
        segment: SegmentId,
        path: PathBuf,
        file: Arc<dyn VfsFile>,
        end: u32,
        len: u64,
        recycled: bool,
    ) -> WriterFile {
        WriterFile {
            segment,
            path,
            file,
            end,
            len,
            written_to: u64::from(end),
            recycled,
            prepare_asked: false,
            batches: 0,
            batch_bytes: 0,
            direct: DirectTail::default(),
        }
    }
}

/// What the flusher needs besides the queue.
pub(crate) struct FlusherEnv<'a> {
    pub vfs: &'a dyn Vfs,
    pub dir: &'a std::path::Path,
    pub store_id: [u8; 16],
    /// Preallocate new segments to this size.
    pub preallocate_bytes: Option<u64>,
    /// Write an index checkpoint after a segment roll.
    pub checkpoints: bool,
    /// Zero extension step ([`crate::Options::zero_ahead_bytes`]); 0: off.
    pub zero_step_bytes: u64,
    /// Free files that become segments ([`crate::Options::recycle_segments`]).
    pub pool: Option<&'a SegmentPool>,
    /// Readers learn of a new active segment here.
    pub reader: &'a SegmentReader,
    /// The page cache's page size ([`Vfs::page_bytes`]): a recycled
    /// segment's writes end on a multiple of it ([`end_marker_len`]).
    pub page_bytes: u64,
    /// Write batches of recycled segments around the page cache
    /// ([`crate::Options::direct_writes`], [`write_batch`]).
    pub direct_writes: bool,
    /// Writes an index checkpoint of what is durable (the layer above owns it).
    pub checkpoint: &'a dyn Fn() -> Result<()>,
}

enum FlushError {
    /// The write failed: the batch is kept for an explicit retry.
    Write(String),
    /// fdatasync (or a new segment's fsync) failed: poison.
    Fatal(&'static str, String),
}

/// Marks the flusher done however it exits, and poisons the queue if it
/// exits by a panic, so that no `wait_durable` waits forever.
struct ExitGuard<'a> {
    queue: &'a CommitQueue,
}

impl Drop for ExitGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.queue.lock();
        if std::thread::panicking() && st.poisoned.is_none() {
            st.poisoned = Some((
                "flush",
                "the flusher thread panicked; nothing after the last durable batch is acknowledged"
                    .into(),
            ));
        }
        st.flusher_done = true;
        self.queue.notify_durable(&mut st);
    }
}

/// The flusher loop; returns when the store closes or is poisoned.
///
/// With callers leading their own writes ([`CommitQueue::wait_durable`]),
/// the flusher is left what no waiting thread asks for: batches that fill
/// up (`flush_bytes`), tasks' waits, the drain at close and the index
/// checkpoint after a segment roll. Either way one batch is in flight at a
/// time: a batch is taken only while `inflight` is empty.
pub(crate) fn run(queue: &CommitQueue, env: &FlusherEnv<'_>) {
    let _guard = ExitGuard { queue };
    let mut st = queue.lock();
    loop {
        if st.poisoned.is_some() {
            return;
        }
        if st.inflight.is_none() {
            let has_work = st.has_work();
            if st.closing && (!has_work || st.write_failed.is_some()) {
                return;
            }
            let stalled = st.write_failed.is_some() && !st.retry_requested;
            let wanted = st.flush_target > st.durable
                || st.pending_bytes() >= queue.flush_bytes
                || st.closing;
            // Without waiters leading writes, a roll's checkpoint is written
            // before the next batch is taken: it then covers exactly the
            // batches up to the roll, and a steady load cannot put it off.
            // With them, it runs beside their writes (it covers what is
            // durable when it starts).
            let checkpoint_first = st.checkpoint_due && !queue.leaders();
            if has_work && wanted && !stalled && !checkpoint_first {
                let batch = take(&mut st);
                drop(st);
                st = flush(queue, env, batch);
                continue;
            }
            if st.checkpoint_due {
                st.checkpoint_due = false;
                drop(st);
                if (env.checkpoint)().is_err() {
                    queue.lock().stats.checkpoint_errors += 1;
                }
                st = queue.lock();
                continue;
            }
        }
        queue.work_cv.wait(&mut st);
    }
}

/// Take the next batch to write (the oldest queued, else the open one) and
/// mark it in flight. The caller checked that nothing is in flight and that
/// there is work.
pub(crate) fn take(st: &mut State) -> PendingBatch {
    assert!(st.inflight.is_none(), "one batch in flight");
    st.retry_requested = false;
    let b = match st.queued.pop_front() {
        Some(b) => b,
        None => st.open.take().expect("has work"),
    };
    st.inflight = Some((b.batch_seq, b.end()));
    b
}

/// Write and sync a batch taken with [`take`], publish the outcome and wake
/// whoever it concerns; returns the queue locked again.
pub(crate) fn flush<'q>(
    queue: &'q CommitQueue,
    env: &FlusherEnv<'_>,
    mut batch: PendingBatch,
) -> MutexGuard<'q, State> {
    // A panic while the batch is in flight (in a file layer, say) would
    // leave it unpublished and its waiters waiting: it poisons the store
    // instead, and the thread that led the write gets the poison like
    // every other waiter.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut w = queue.writer.lock();
        let w = w.as_mut().expect("the writer is set at open");
        write_batch(env, w, &mut batch)
    }))
    .unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(FlushError::Fatal(
            "flush",
            format!(
                "a thread writing a batch panicked ({what}); nothing after the last durable batch is acknowledged"
            ),
        ))
    });
    let mut st = queue.lock();
    st.inflight = None;
    match result {
        Ok(Written {
            segment,
            zeros,
            direct,
        }) => {
            st.stats.zero_fill_bytes += zeros;
            st.stats.direct_batches += direct as u64;
            // Batches become durable one at a time, in log order: the
            // durable position only moves forward, to a batch's end.
            assert!(
                batch.end() > st.durable,
                "durable position moves forward: batch {} ends at {:?}, durable is {:?}",
                batch.batch_seq,
                batch.end(),
                st.durable
            );
            assert_eq!(
                batch.batch_seq, st.durable_next_batch_seq,
                "batches become durable in order"
            );
            st.durable = batch.end();
            st.durable_next_batch_seq = batch.batch_seq + 1;
            st.durable_last_batch = Some((batch.start(), batch.flags));
            st.write_failed = None;
            st.stats.batches += 1;
            st.stats.syncs += 1;
            st.stats.bytes_written += batch.buf.len() as u64;
            // Keep the buffer for a later batch (bounded: two, of at
            // most 4 MiB each).
            if st.spare_bufs.len() < 2 && batch.buf.capacity() <= 4 << 20 {
                st.spare_bufs.push(std::mem::take(&mut batch.buf));
            }
            if segment != NewSegment::None {
                st.stats.segments_created += 1;
                st.stats.segments_recycled += (segment == NewSegment::Recycled) as u64;
                // The new segment's fdatasync and the directory fsync.
                st.stats.metadata_syncs += 2;
                if env.checkpoints {
                    st.checkpoint_due = true;
                    queue.work_cv.notify_one();
                }
            }
            queue.notify_batch_durable(&mut st, batch.batch_seq, &batch.sessions);
            queue.hand_off(&st);
            st = queue.unpark_outside(st);
        }
        Err(FlushError::Write(detail)) => {
            st.stats.write_failures += 1;
            st.queued.push_front(batch);
            st.write_failed = Some(detail);
            st.fail_epoch += 1;
            queue.notify_durable(&mut st);
            queue.work_cv.notify_one();
        }
        Err(FlushError::Fatal(op, detail)) => {
            st.poisoned = Some((op, detail));
            queue.notify_durable(&mut st);
            queue.work_cv.notify_all();
        }
    }
    st
}

/// Whether writing a batch created its segment, and how.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum NewSegment {
    /// The batch went into the segment being written.
    None,
    /// A new segment file was created (and preallocated).
    Fresh,
    /// A new segment was made from a freed file (FORMAT.md §6.2 rule 7).
    Recycled,
}

/// What writing one batch did.
struct Written {
    /// Whether a new segment was created, and how.
    segment: NewSegment,
    /// The zeros written after the batch ([`zero_extend`], the end marker of
    /// a recycled segment).
    zeros: u64,
    /// The batch was written around the page cache.
    direct: bool,
}

/// Write and sync one batch; create its segment first if it starts one.
fn write_batch(
    env: &FlusherEnv<'_>,
    w: &mut WriterFile,
    batch: &mut PendingBatch,
) -> std::result::Result<Written, FlushError> {
    let mut rolled = NewSegment::None;
    let mut prev_mean = 0;
    if batch.segment != w.segment {
        debug_assert_eq!(batch.segment.0, w.segment.0 + 1);
        // A full disk (or any failure) before the new segment's fsync is a
        // failed write: the batch is kept and the creation retried; a failed
        // fsync poisons like any other.
        let spec = SegmentSpec {
            store_id: env.store_id,
            id: batch.segment,
            first_batch_seq: batch.batch_seq,
            prev_segment_end: w.end,
            preallocate_bytes: env.preallocate_bytes,
        };
        let new = create_segment(env.vfs, env.dir, &spec, env.pool).map_err(|e| match e {
            CreateError::Fatal(e) => FlushError::Fatal("segment creation", e.to_string()),
            CreateError::Retryable(e) => FlushError::Write(e.to_string()),
        })?;
        // The old segment is sealed from now on: reads may map it.
        env.reader.set_active(batch.segment, Some(new.file.clone()));
        prev_mean = mean_batch(w);
        let len = if new.recycled {
            new.len
        } else {
            env.preallocate_bytes.unwrap_or(0)
        };
        *w = WriterFile::at(
            batch.segment,
            segment_path(env.dir, batch.segment),
            new.file,
            SEGMENT_HEADER_BYTES as u32,
            len,
            new.recycled,
        );
        rolled = if new.recycled {
            NewSegment::Recycled
        } else {
            NewSegment::Fresh
        };
    }
    debug_assert_eq!(batch.offset, w.end, "batches are written back to back");
    let salt = Salt {
        store_id: env.store_id,
        segment: batch.segment,
    };
    batch.seal(&salt);
    let data_len = batch.buf.len();
    let end = batch.offset as u64 + data_len as u64;
    // In a recycled segment, with direct writes on, the batch goes around
    // the page cache when the bytes before it are known: from the device
    // block boundary before it, with its end marker to the next one.
    let direct = (env.direct_writes && w.recycled)
        .then(|| w.file.direct_write_align())
        .flatten()
        .and_then(|align| {
            let marker = end_marker_len(true, false, w.len, end, align as u64);
            let (at, buf) = w
                .direct
                .stage(batch.offset as u64, &batch.buf, marker, align)?;
            let written = w.file.write_direct(buf, at)?;
            Some(written.map(|()| marker))
        });
    let wrote_direct = direct.is_some();
    let marker = match direct {
        Some(written) => {
            written.map_err(|e| FlushError::Write(format!("{}: {e}", w.path.display())))?
        }
        None => {
            let marker = end_marker_len(
                w.recycled,
                env.zero_step_bytes > 0,
                w.len,
                end,
                env.page_bytes,
            );
            // The end marker (the page fill of a fresh segment) goes out in
            // the batch's own write: zeros appended to the sealed buffer for
            // the call, then cut off.
            batch.buf.resize(data_len + marker, 0);
            let written = w.file.write_all_at(&batch.buf, batch.offset as u64);
            batch.buf.truncate(data_len);
            written.map_err(|e| FlushError::Write(format!("{}: {e}", w.path.display())))?;
            marker
        }
    };
    if env.direct_writes {
        w.direct.wrote(batch.offset as u64, &batch.buf);
        w.direct.trim();
    }
    let zeros = if w.recycled {
        w.written_to = w.written_to.max(end + marker as u64);
        marker as u64
    } else {
        zero_extend(env, w, batch, marker as u64)?
    };
    w.file
        .sync_data()
        .map_err(|e| FlushError::Fatal("fdatasync", format!("{}: {e}", w.path.display())))?;
    w.end = batch.offset + batch.buf.len() as u32;
    w.batches += 1;
    w.batch_bytes += batch.buf.len() as u64;
    // At a roll the segment just sealed tells the batch size; later, once a
    // quarter is written, this one does.
    let mean = if rolled != NewSegment::None {
        Some(prev_mean)
    } else if u64::from(w.end) * 4 >= w.len {
        Some(mean_batch(w))
    } else {
        None
    };
    if !w.prepare_asked && mean.is_some_and(prepare_helps) {
        w.prepare_asked = true;
        if let Some(pool) = env.pool {
            pool.want_prepared();
        }
    }
    Ok(Written {
        segment: rolled,
        zeros,
        direct: wrote_direct,
    })
}

/// Batches at least this large on average make the writer stop asking for
/// prepared files ([`prepare_helps`]).
const PREPARE_BATCH_MAX: u64 = 128 << 10;

/// Mean size of the batches this process wrote into `w` (0: none yet).
fn mean_batch(w: &WriterFile) -> u64 {
    w.batch_bytes.checked_div(w.batches).unwrap_or(0)
}

/// Whether a prepared file (zeros written ahead by the pool's preparer)
/// pays for the segment after this one, given the mean batch of the
/// segment being written (or the one just sealed): by the rule zero
/// extension follows with its default step, only while batches are small
/// (under 128 KiB on average). Large batches amortise the journal commit of
/// an unwritten extent themselves, and near the device's bandwidth the
/// zeros cost more than they save: at 256 × 64 (batches of ~200 KB)
/// preparing every segment gave the same events/s, 1.4x the device bytes
/// and twice the 99.9th percentile wait (docs/DESIGN.md).
fn prepare_helps(mean_batch: u64) -> bool {
    mean_batch < PREPARE_BATCH_MAX
}

/// Zero extension: a small batch that reaches space this process has not
/// written yet (preallocated, so *unwritten* extents) is followed, before
/// its fdatasync, by zeros up to the next multiple of the step. That one
/// fdatasync writes the extent conversion for the whole step (a journal
/// commit where the file system has a journal, a metadata write where it
/// has none); the batches after it overwrite written blocks and their
/// fdatasyncs flush data only. Large batches are left alone: they amortise
/// the conversion themselves, and near the device's bandwidth
/// the extra zeros cost more than they save (docs/DESIGN.md).
///
/// The zeros go after the batch in flight, inside the preallocated file,
/// where the bytes are zero already (FORMAT.md §6.2 rule 3): a power cut
/// during them leaves the same bytes. The batch's write ran on to a page
/// boundary (`fill` zeros, [`end_marker_len`]), so the zeros after it start
/// on one and go around the page cache where the file system allows
/// ([`VfsFile::write_zeros`]): no copy of the step into cache pages nobody
/// reads, and no write-back of them. Returns the zero bytes written after
/// the batch, its page fill included.
fn zero_extend(
    env: &FlusherEnv<'_>,
    w: &mut WriterFile,
    batch: &PendingBatch,
    fill: u64,
) -> std::result::Result<u64, FlushError> {
    let end = batch.offset as u64 + batch.buf.len() as u64;
    let filled = end + fill;
    let step = env.zero_step_bytes;
    let small = (batch.buf.len() as u64) < step / 8;
    if step == 0 || end <= w.written_to || !small {
        w.written_to = w.written_to.max(filled);
        return Ok(fill);
    }
    let to = (end.div_ceil(step) * step).min(w.len);
    if to > filled {
        w.file
            .write_zeros(filled, (to - filled) as usize)
            .map_err(|e| FlushError::Write(format!("{}: {e}", w.path.display())))?;
    }
    w.written_to = to.max(filled);
    Ok(to.max(filled) - end)
}

/// The end marker's length after a batch: in a recycled segment, the bytes
/// after the batch in flight become zeros in the same write and fdatasync
/// (FORMAT.md §6.2 rule 7), at least 32 of them, so whatever a power cut
/// keeps of it, the bytes at the end of the last durable batch are an end
/// of data or this one torn batch, never a stale one. None in a fresh
/// segment (its space is zero already), nor when fewer than 32 bytes are
/// left (that is an end of data already).
///
/// The marker runs on to the next page boundary (`page`, the page cache's
/// page size; the end of the file at the latest), so that the write ends
/// on one. A recycled file's pages are often not cached (an online
/// collection freed it long after it was written): a buffered write that
/// ended inside such a page would make the kernel read the page from the
/// device before copying the batch in, one synchronous read in every
/// batch's write. The write's last page goes to the device whole at the
/// fdatasync whatever it holds, so the zeros cost no device bytes; the
/// next batch starts inside that page, now cached.
///
/// In a fresh segment with zero extension on (`fill`), the write runs on
/// to the next page boundary too, with no minimum (its space is zero
/// already: the zeros change no byte). Zero extension writes its zeros
/// around the page cache from that boundary on ([`zero_extend`]), so the
/// pages after it are not cached either, and the same read would wait in
/// every batch's write without the fill.
///
/// `recycled` and `len` are the segment's ([`WriterFile`]), `end` the
/// offset just after the batch.
fn end_marker_len(recycled: bool, fill: bool, len: u64, end: u64, page: u64) -> usize {
    let min_end = if recycled {
        end + BATCH_HEADER_BYTES as u64
    } else if fill {
        end
    } else {
        return 0;
    };
    if min_end > len {
        return 0;
    }
    let to = min_end.next_multiple_of(page.max(1)).min(len);
    (to - end) as usize
}

#[cfg(test)]
mod tests {
    use super::end_marker_len;

    const SEG: u64 = 64 << 10;

    #[test]
    fn the_end_marker_runs_to_the_next_page_boundary() {
        // Only in a recycled segment, or a fresh one with zero extension.
        assert_eq!(end_marker_len(false, false, SEG, 100, 4096), 0);
        // To the boundary after the batch's end ...
        assert_eq!(end_marker_len(true, false, SEG, 100, 4096), 4096 - 100);
        assert_eq!(end_marker_len(true, false, SEG, 4064, 4096), 32);
        // ... but never fewer than 32 bytes: the one after.
        assert_eq!(end_marker_len(true, false, SEG, 4072, 4096), 8192 - 4072);
        assert_eq!(end_marker_len(true, false, SEG, 4096, 4096), 4096);
        // Cut at the end of the file; none when 32 bytes do not fit.
        assert_eq!(end_marker_len(true, false, SEG, SEG - 40, 4096), 40);
        assert_eq!(end_marker_len(true, false, SEG, SEG - 32, 4096), 32);
        assert_eq!(end_marker_len(true, false, SEG, SEG - 31, 4096), 0);
        // Another page size.
        assert_eq!(end_marker_len(true, false, SEG, 100, 16384), 16384 - 100);
        // A fresh segment with zero extension: to the boundary, no minimum.
        assert_eq!(end_marker_len(false, true, SEG, 100, 4096), 4096 - 100);
        assert_eq!(end_marker_len(false, true, SEG, 4072, 4096), 24);
        assert_eq!(end_marker_len(false, true, SEG, 4096, 4096), 0);
        assert_eq!(end_marker_len(false, true, SEG, SEG - 8, 4096), 8);
        // Past a file that is not preallocated (it would grow it): none.
        assert_eq!(end_marker_len(false, true, 0, 100, 4096), 0);
    }
}
