//! Recycled segment files (FORMAT.md §1, §2, §6.2 rule 7): a collection
//! that would remove a sealed segment file of the full segment size renames
//! it to `NNNNNNNNNN.tseg.free` instead, up to a bound, and the writer turns
//! such a file into its next segment rather than creating one. Every block
//! of a recycled file was written before, so a batch written into it is an
//! overwrite: its fdatasync flushes data without converting unwritten
//! extents, and no zeros need to be written ahead of it (the device writes
//! each segment byte once, not twice).
//!
//! Invariant kept here: a free file is used for segment `K` only if no id
//! it ever carried is `K` or more, so none of its stale bytes validates
//! under `K`'s salt (§6.2 rule 5). A free file's name carries the newest id
//! it had, and ids only grow, except after a point-in-time cut removed
//! segments whose ids will be given again: [`SegmentPool::open`] removes
//! every free file named with an id at or above the last segment's.
//!
//! A fresh store has no collected files to recycle, so a *preparer* thread
//! makes one ahead of need ([`crate::Options::prepare_segments`]): when the
//! writer rolls to a new segment (or its first segment in this process is a
//! quarter full) while its batches are small, and the pool is empty, it writes a file of zeros of the
//! segment size under a temporary name, fdatasyncs it and renames it to
//! `0000000000.tseg.free` (id 0: it never carried a segment id, so it may
//! become any segment). The zeros are written off the
//! hot path, and the writer's next segment is an overwrite like a recycled
//! one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::frame;
use crate::types::SegmentId;
use crate::vfs::Vfs;

/// Suffix of a free file's name: the segment file name it had, then this.
pub(crate) const FREE_SUFFIX: &str = ".free";

/// Path of the free file that segment `id`'s file becomes.
pub(crate) fn free_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(format!("{}{FREE_SUFFIX}", frame::segment_file_name(id)))
}

/// The id a free file's name carries (`None`: not a free file's name).
pub(crate) fn parse_free_file_name(name: &str) -> Option<SegmentId> {
    frame::parse_segment_file_name(name.strip_suffix(FREE_SUFFIX)?)
}

/// The id in a prepared file's name: no segment has it (ids start at
/// [`frame::FIRST_SEGMENT_ID`]), so the file may become any segment.
pub(crate) const PREPARED_ID: SegmentId = SegmentId(0);

/// The name a prepared file is written under before its rename; removed at
/// a writable open (a power cut while it was written leaves it).
pub(crate) fn prepare_tmp_path(dir: &Path) -> PathBuf {
    dir.join(format!(
        "{}{FREE_SUFFIX}.tmp",
        frame::segment_file_name(PREPARED_ID)
    ))
}

/// Zeros are written in pieces of this size, so a close stops the
/// preparer quickly.
const PREPARE_CHUNK: usize = 1 << 20;

/// The preparer fdatasyncs after every this many bytes of zeros, so the
/// device takes them in pieces and the writer's fdatasyncs wait less behind
/// them: at 256 × 8 the 99.9th percentile wait was 6–8 ms this way against
/// 9–15 ms with one fdatasync per file, at the same events/s. (Before the
/// writer asked only while batches are small, one per file had been chosen:
/// at 256 × 64 the 4 MiB syncs left the preparer behind the writer;
/// docs/DESIGN.md, "Segments prepared ahead".)
const PREPARE_SYNC_BYTES: u64 = 4 << 20;

/// Free files ready to become segments, and the bound on how many are kept.
pub(crate) struct SegmentPool {
    files: Mutex<Vec<PathBuf>>,
    /// At most this many free files are kept (0: recycling off).
    limit: usize,
    /// Only files of exactly this length are kept (the preallocated segment
    /// size): the writer relies on every block being inside the file.
    file_len: u64,
    /// Whether a preparer thread makes free files of zeros.
    prepare: bool,
    prepared: Mutex<Prepared>,
    prepared_cv: Condvar,
    /// Set at close: the preparer stops at its next piece.
    stop: AtomicBool,
    /// Files the preparer finished (each `file_len` bytes of zeros).
    prepared_files: AtomicU64,
    /// Preparations that failed (the writer creates fresh segments instead).
    prepare_errors: AtomicU64,
    /// The most recent failure's message (what, and which file).
    last_prepare_error: Mutex<Option<String>>,
}

/// The preparer's slot: one prepared file at most.
#[derive(Default)]
struct Prepared {
    file: Option<PathBuf>,
    /// The writer asked for one.
    wanted: bool,
    /// The prepared file was taken and is being turned into a segment under
    /// its free name: the preparer must not rename a new file over it.
    lent: bool,
}

/// What the preparer did, for [`crate::Store::stats`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PrepareCounts {
    pub files: u64,
    pub bytes: u64,
    pub errors: u64,
}

impl SegmentPool {
    /// A pool that never holds a file (read-only stores; recycling off).
    pub fn none() -> SegmentPool {
        SegmentPool::empty(0, 0, false)
    }

    fn empty(limit: usize, file_len: u64, prepare: bool) -> SegmentPool {
        SegmentPool {
            files: Mutex::new(Vec::new()),
            limit,
            file_len,
            prepare,
            prepared: Mutex::new(Prepared::default()),
            prepared_cv: Condvar::new(),
            stop: AtomicBool::new(false),
            prepared_files: AtomicU64::new(0),
            prepare_errors: AtomicU64::new(0),
            last_prepare_error: Mutex::new(None),
        }
    }

    /// The pool of the store in `dir` whose last segment is `last`: its free
    /// files, oldest id first; removed are the ones over `limit`, of another
    /// length, or named with an id of `last` or more (only a point-in-time
    /// cut, which removed segments whose ids will be given again, leaves
    /// those: their stale bytes could carry such an id's salt). A prepared
    /// file (id 0) is kept if `prepare` is on and it has the length; a
    /// preparation a power cut interrupted (its temporary file) is removed.
    /// Removals are made durable before this returns.
    pub fn open(
        vfs: &dyn Vfs,
        dir: &Path,
        limit: usize,
        file_len: u64,
        last: SegmentId,
        prepare: bool,
    ) -> Result<SegmentPool> {
        let pool = SegmentPool::empty(limit, file_len, prepare);
        let mut removed = false;
        let tmp = prepare_tmp_path(dir);
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)
                .map_err(|e| Error::io("remove unfinished prepared file", &tmp, e))?;
            removed = true;
        }
        let mut found: Vec<(SegmentId, PathBuf)> = vfs
            .list(dir)
            .map_err(|e| Error::io("list store directory", dir, e))?
            .iter()
            .filter_map(|n| parse_free_file_name(n).map(|id| (id, dir.join(n))))
            .collect();
        found.sort();
        let mut keep = Vec::new();
        for (id, path) in found {
            let len = vfs
                .open(&path, false)
                .and_then(|f| f.len())
                .map_err(|e| Error::io("stat free segment file", &path, e))?;
            if id == PREPARED_ID {
                if prepare && len == file_len {
                    pool.prepared.lock().file = Some(path);
                } else {
                    vfs.remove(&path)
                        .map_err(|e| Error::io("remove prepared file", &path, e))?;
                    removed = true;
                }
            } else if id >= last || keep.len() >= pool.limit || len != file_len {
                vfs.remove(&path)
                    .map_err(|e| Error::io("remove free segment file", &path, e))?;
                removed = true;
            } else {
                keep.push(path);
            }
        }
        if removed {
            vfs.sync_dir(dir)
                .map_err(|e| Error::io("fsync directory", dir, e))?;
        }
        *pool.files.lock() = keep;
        Ok(pool)
    }

    /// Take a free file to turn into a segment: a collected one first, else
    /// the prepared one.
    pub fn take(&self) -> Option<PathBuf> {
        if let Some(f) = self.files.lock().pop() {
            return Some(f);
        }
        let mut p = self.prepared.lock();
        let f = p.file.take();
        p.lent |= f.is_some();
        f
    }

    /// The writer is done with a file [`SegmentPool::take`] gave (it became
    /// a segment, or was given back): the preparer may write the next.
    pub fn done_with_taken(&self) {
        let mut p = self.prepared.lock();
        if p.lent {
            p.lent = false;
            self.prepared_cv.notify_one();
        }
    }

    /// Give back a file [`SegmentPool::take`] gave, still under its free name.
    pub fn give_back(&self, path: PathBuf) {
        let name = path.file_name().and_then(|n| n.to_str());
        if name.and_then(parse_free_file_name) == Some(PREPARED_ID) {
            self.prepared.lock().file = Some(path);
        } else {
            self.files.lock().push(path);
        }
    }

    /// Whether this pool wants a preparer thread.
    pub fn prepares(&self) -> bool {
        self.prepare
    }

    /// The writer began a segment (or filled a quarter of its first): have a
    /// file ready for the next one, unless the pool holds one already.
    pub fn want_prepared(&self) {
        if !self.prepare || !self.files.lock().is_empty() {
            return;
        }
        let mut p = self.prepared.lock();
        if p.file.is_none() && !p.wanted {
            p.wanted = true;
            self.prepared_cv.notify_one();
        }
    }

    /// What the preparer did so far.
    pub fn prepare_counts(&self) -> PrepareCounts {
        PrepareCounts {
            files: self.prepared_files.load(Ordering::Relaxed),
            bytes: self.prepared_files.load(Ordering::Relaxed) * self.file_len,
            errors: self.prepare_errors.load(Ordering::Relaxed),
        }
    }

    /// The message of the preparer's most recent failure, if any.
    pub fn last_prepare_error(&self) -> Option<String> {
        self.last_prepare_error.lock().clone()
    }

    /// End [`SegmentPool::run_preparer`] (at close, before the directory
    /// lock is released): it stops at its next piece and removes what it
    /// had not finished.
    pub fn stop_preparer(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _p = self.prepared.lock();
        self.prepared_cv.notify_all();
    }

    /// The preparer thread: whenever the writer asks and the slot is empty,
    /// write a file of zeros of the segment size and put it in the slot.
    /// A failure is counted and the next request tries again; meanwhile the
    /// writer creates fresh segments, as without a preparer.
    pub fn run_preparer(&self, vfs: &dyn Vfs, dir: &Path) {
        loop {
            {
                let mut p = self.prepared.lock();
                // `!lent`: while a prepared file is being renamed into a
                // segment, its free name is in use. It cannot become lent
                // while this thread prepares (the slot is empty).
                let ready = |p: &Prepared| p.wanted && p.file.is_none() && !p.lent;
                while !self.stop.load(Ordering::SeqCst) && !ready(&p) {
                    self.prepared_cv.wait(&mut p);
                }
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                p.wanted = false;
            }
            match self.prepare_one(vfs, dir) {
                Ok(Some(path)) => {
                    self.prepared_files.fetch_add(1, Ordering::Relaxed);
                    self.prepared.lock().file = Some(path);
                }
                Ok(None) => return,
                Err(e) => {
                    self.prepare_errors.fetch_add(1, Ordering::Relaxed);
                    *self.last_prepare_error.lock() = Some(e.to_string());
                    let _ = vfs.remove(&prepare_tmp_path(dir));
                }
            }
        }
    }

    /// Write one prepared file: zeros under the temporary name, an
    /// fdatasync every [`PREPARE_SYNC_BYTES`] and at the end, rename, fsync
    /// the directory. `None`: stopped by a close (the
    /// temporary file is removed).
    fn prepare_one(&self, vfs: &dyn Vfs, dir: &Path) -> Result<Option<PathBuf>> {
        let tmp = prepare_tmp_path(dir);
        let at_tmp = |what: &'static str| {
            let tmp = &tmp;
            move |e| Error::io(what, tmp, e)
        };
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)
                .map_err(at_tmp("remove an unfinished prepared file"))?;
        }
        let file = vfs
            .create_new(&tmp)
            .map_err(at_tmp("create a prepared file"))?;
        file.allocate(self.file_len)
            .map_err(at_tmp("allocate a prepared file"))?;
        let mut at = 0u64;
        while at < self.file_len {
            if self.stop.load(Ordering::SeqCst) {
                drop(file);
                vfs.remove(&tmp)
                    .map_err(at_tmp("remove an unfinished prepared file"))?;
                return Ok(None);
            }
            let n = (self.file_len - at).min(PREPARE_CHUNK as u64) as usize;
            file.write_zeros(at, n)
                .map_err(at_tmp("write zeros of a prepared file"))?;
            at += n as u64;
            if at.is_multiple_of(PREPARE_SYNC_BYTES) && at < self.file_len {
                file.sync_data()
                    .map_err(at_tmp("fdatasync a prepared file"))?;
            }
        }
        file.sync_data()
            .map_err(at_tmp("fdatasync a prepared file"))?;
        let to = free_path(dir, PREPARED_ID);
        vfs.rename(&tmp, &to)
            .map_err(at_tmp("rename a prepared file to its free name"))?;
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync the directory of a prepared file", dir, e))?;
        Ok(Some(to))
    }

    /// A collection no longer needs sealed segment `id`: rename its file to
    /// a free name if the pool has room and the file has the segment size,
    /// else remove it. The caller fsyncs the directory afterwards, as after
    /// a removal.
    pub fn offer(&self, vfs: &dyn Vfs, dir: &Path, id: SegmentId, path: &Path) -> Result<()> {
        let mut files = self.files.lock();
        let fits = files.len() < self.limit
            && vfs
                .open(path, false)
                .and_then(|f| f.len())
                .is_ok_and(|len| len == self.file_len);
        if fits {
            let to = free_path(dir, id);
            vfs.rename(path, &to)
                .map_err(|e| Error::io("rename collected segment to a free file", path, e))?;
            files.push(to);
        } else {
            vfs.remove(path)
                .map_err(|e| Error::io("remove collected segment", path, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::OsVfs;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const LEN: u64 = 64 * 1024;

    fn write(path: &Path, len: u64, byte: u8) {
        std::fs::write(path, vec![byte; len as usize]).unwrap();
    }

    #[test]
    fn collected_files_are_taken_before_the_prepared_one() {
        let dir = tempfile::tempdir().unwrap();
        write(&free_path(dir.path(), SegmentId(3)), LEN, 7);
        write(&free_path(dir.path(), PREPARED_ID), LEN, 0);
        let pool = SegmentPool::open(&OsVfs, dir.path(), 4, LEN, SegmentId(9), true).unwrap();
        let first = pool.take().unwrap();
        assert_eq!(first, free_path(dir.path(), SegmentId(3)));
        let second = pool.take().unwrap();
        assert_eq!(second, free_path(dir.path(), PREPARED_ID));
        assert_eq!(pool.take(), None);
        // Given back, each returns to its own place.
        pool.give_back(second.clone());
        pool.done_with_taken();
        pool.give_back(first.clone());
        assert_eq!(pool.take(), Some(first));
        assert_eq!(pool.take(), Some(second));
    }

    #[test]
    fn without_the_preparer_open_removes_a_prepared_file() {
        let dir = tempfile::tempdir().unwrap();
        let prepared = free_path(dir.path(), PREPARED_ID);
        write(&prepared, LEN, 0);
        let pool = SegmentPool::open(&OsVfs, dir.path(), 4, LEN, SegmentId(9), false).unwrap();
        assert!(!prepared.exists());
        assert_eq!(pool.take(), None);
    }

    /// While a taken prepared file is still under its free name (being made
    /// a segment), the preparer must not write a new one over that name.
    #[test]
    fn the_preparer_waits_while_the_prepared_file_is_lent() {
        let dir = tempfile::tempdir().unwrap();
        let pool =
            Arc::new(SegmentPool::open(&OsVfs, dir.path(), 0, LEN, SegmentId(2), true).unwrap());
        let p2 = pool.clone();
        let d2 = dir.path().to_path_buf();
        let preparer = std::thread::spawn(move || p2.run_preparer(&OsVfs, &d2));
        let wait_for_file = |pool: &SegmentPool| {
            let start = Instant::now();
            while pool.prepare_counts().files == 0 || pool.prepared.lock().file.is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "no prepared file"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        pool.want_prepared();
        wait_for_file(&pool);
        let taken = pool.take().unwrap();
        // Mark the lent file, as the writer's new header would.
        std::fs::write(&taken, vec![9u8; LEN as usize]).unwrap();
        pool.want_prepared();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(pool.prepare_counts().files, 1);
        assert_eq!(std::fs::read(&taken).unwrap(), vec![9u8; LEN as usize]);
        // Renamed to its segment name: the preparer may go on.
        let segment = dir.path().join(frame::segment_file_name(SegmentId(2)));
        std::fs::rename(&taken, &segment).unwrap();
        pool.done_with_taken();
        let start = Instant::now();
        while pool.prepare_counts().files < 2 {
            assert!(start.elapsed() < Duration::from_secs(20), "no second file");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(std::fs::read(&segment).unwrap(), vec![9u8; LEN as usize]);
        assert_eq!(std::fs::read(&taken).unwrap(), vec![0u8; LEN as usize]);
        pool.stop_preparer();
        preparer.join().unwrap();
        assert!(!prepare_tmp_path(dir.path()).exists());
        assert_eq!(pool.prepare_counts().errors, 0);
    }
}
