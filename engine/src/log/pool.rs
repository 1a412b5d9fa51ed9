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

use std::path::{Path, PathBuf};

use parking_lot::Mutex;

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

/// Free files ready to become segments, and the bound on how many are kept.
pub(crate) struct SegmentPool {
    files: Mutex<Vec<PathBuf>>,
    /// At most this many free files are kept (0: recycling off).
    limit: usize,
    /// Only files of exactly this length are kept (the preallocated segment
    /// size): the writer relies on every block being inside the file.
    file_len: u64,
}

impl SegmentPool {
    /// A pool that never holds a file (read-only stores; recycling off).
    pub fn none() -> SegmentPool {
        SegmentPool {
            files: Mutex::new(Vec::new()),
            limit: 0,
            file_len: 0,
        }
    }

    /// The pool of the store in `dir` whose last segment is `last`: its free
    /// files, oldest id first; removed are the ones over `limit`, of another
    /// length, or named with an id of `last` or more (only a point-in-time
    /// cut, which removed segments whose ids will be given again, leaves
    /// those: their stale bytes could carry such an id's salt). Removals are
    /// made durable before this returns.
    pub fn open(
        vfs: &dyn Vfs,
        dir: &Path,
        limit: usize,
        file_len: u64,
        last: SegmentId,
    ) -> Result<SegmentPool> {
        let pool = SegmentPool {
            files: Mutex::new(Vec::new()),
            limit,
            file_len,
        };
        let mut found: Vec<(SegmentId, PathBuf)> = vfs
            .list(dir)
            .map_err(|e| Error::io("list store directory", dir, e))?
            .iter()
            .filter_map(|n| parse_free_file_name(n).map(|id| (id, dir.join(n))))
            .collect();
        found.sort();
        let mut removed = false;
        let mut keep = Vec::new();
        for (id, path) in found {
            let len = vfs
                .open(&path, false)
                .and_then(|f| f.len())
                .map_err(|e| Error::io("stat free segment file", &path, e))?;
            if id >= last || keep.len() >= pool.limit || len != file_len {
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

    /// Take a free file to turn into a segment.
    pub fn take(&self) -> Option<PathBuf> {
        self.files.lock().pop()
    }

    /// Give back a file [`SegmentPool::take`] gave, still under its free name.
    pub fn give_back(&self, path: PathBuf) {
        self.files.lock().push(path);
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
