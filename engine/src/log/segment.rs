//! Segment files (`format-spec/FORMAT.md` §1, §2): their names, creation
//! (preallocate, header, fdatasync, directory fsync), listing, whole-file
//! reads, and zeroing a torn tail.
//!
//! Invariant kept here (FORMAT.md §6.2 rule 2): a segment is durable, header
//! included, before any batch is written into it, and a failure before its
//! fsync is retryable (nothing was claimed durable) while a failed fsync is
//! fatal for the store.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::pool::SegmentPool;
use crate::error::{Error, Result};
use crate::frame::{self, SegmentHeader, BATCH_HEADER_BYTES, FORMAT_VERSION, SEGMENT_HEADER_BYTES};
use crate::types::SegmentId;
use crate::vfs::{MappedBytes, Vfs, VfsFile};

/// Path of segment `id` in store directory `dir`.
pub(crate) fn segment_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(frame::segment_file_name(id))
}

/// List segment ids in the directory, sorted.
pub fn list_segments(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<SegmentId>> {
    let mut ids: Vec<SegmentId> = vfs
        .list(dir)
        .map_err(|e| Error::io("list store directory", dir, e))?
        .iter()
        .filter_map(|n| frame::parse_segment_file_name(n))
        .collect();
    ids.sort();
    Ok(ids)
}

/// Bytes of one segment, mapped or read.
pub enum SegmentBytes {
    Mapped(MappedBytes),
    Owned(Vec<u8>),
}

impl Deref for SegmentBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            SegmentBytes::Mapped(m) => m,
            SegmentBytes::Owned(v) => v,
        }
    }
}

/// Read a whole segment: mapped when `map` (sealed segments, or the last one
/// while the store lock is held and nothing writes to it), else copied with
/// pread (the active segment of a store another process may be writing).
pub fn read_segment(vfs: &dyn Vfs, path: &Path, map: bool) -> Result<SegmentBytes> {
    let file = vfs
        .open(path, false)
        .map_err(|e| Error::io("open segment", path, e))?;
    let len = file.len().map_err(|e| Error::io("stat segment", path, e))?;
    if len > frame::SEGMENT_BYTES_MAX {
        return Err(Error::corrupt(
            path,
            frame::SEGMENT_BYTES_MAX,
            format!("segment file has {len} bytes; segments are at most 4 GiB"),
        ));
    }
    if map {
        return file
            .map()
            .map(SegmentBytes::Mapped)
            .map_err(|e| Error::io("map segment", path, e));
    }
    let mut buf = vec![0u8; len as usize];
    let n = file
        .read_at(&mut buf, 0)
        .map_err(|e| Error::io("read segment", path, e))?;
    buf.truncate(n);
    Ok(SegmentBytes::Owned(buf))
}

/// Zero the non-zero bytes of `[from, to)` (to = u32::MAX: to the end of the
/// file) and make that durable (FORMAT.md §6.4).
pub(crate) fn zero_range(vfs: &dyn Vfs, path: &Path, from: u32, to: u32) -> Result<()> {
    let file = vfs
        .open(path, true)
        .map_err(|e| Error::io("open segment for truncation", path, e))?;
    let len = file.len().map_err(|e| Error::io("stat segment", path, e))?;
    let end = (to as u64).min(len);
    if end <= from as u64 {
        return Ok(());
    }
    let mut buf = vec![0u8; (end - from as u64) as usize];
    let n = file
        .read_at(&mut buf, from as u64)
        .map_err(|e| Error::io("read torn tail", path, e))?;
    buf.truncate(n);
    if let Some(last) = buf.iter().rposition(|b| *b != 0) {
        let zeros = vec![0u8; last + 1];
        file.write_all_at(&zeros, from as u64)
            .map_err(|e| Error::io("zero torn tail", path, e))?;
        file.sync_data()
            .map_err(|e| Error::io("fsync after zeroing torn tail", path, e))?;
    }
    Ok(())
}

/// How a segment is created.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentSpec {
    pub store_id: [u8; 16],
    pub id: SegmentId,
    pub first_batch_seq: u64,
    pub prev_segment_end: u32,
    /// Preallocate (and so zero) this many bytes; `None`: grow as written.
    pub preallocate_bytes: Option<u64>,
}

/// Why a segment could not be created.
#[derive(Debug)]
pub(crate) enum CreateError {
    /// Before any fsync: nothing was claimed durable; the creation can be
    /// retried and reuses the leftover file.
    Retryable(Error),
    /// An fsync failed: the store must be poisoned.
    Fatal(Error),
}

impl CreateError {
    pub fn into_error(self) -> Error {
        match self {
            CreateError::Retryable(e) | CreateError::Fatal(e) => e,
        }
    }
}

/// A segment file just created: where batches go from now on.
pub(crate) struct NewSegment {
    pub file: Arc<dyn VfsFile>,
    /// Made from a free file (§6.2 rule 7): bytes after the end of data are
    /// stale, so the writer keeps 32 zero bytes after its last batch.
    pub recycled: bool,
    /// The file's length.
    pub len: u64,
}

/// Create a segment file: from a free file of `pool` if it has one (write
/// the recycled header and the zeros after it, fdatasync, rename to the
/// segment's name, fsync the directory), else a new file (preallocate,
/// write its header, fdatasync, fsync the directory). Only then may a batch
/// be written into it.
pub(crate) fn create_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    spec: &SegmentSpec,
    pool: Option<&SegmentPool>,
) -> std::result::Result<NewSegment, CreateError> {
    let path = segment_path(dir, spec.id);
    let header = SegmentHeader {
        version: FORMAT_VERSION,
        store_id: spec.store_id,
        segment: spec.id,
        first_batch_seq: spec.first_batch_seq,
        prev_segment_end: spec.prev_segment_end,
    };
    // A leftover of an earlier failed attempt under the segment's name is
    // reused below; a free file is taken only when there is none.
    if let Some(pool) = pool.filter(|_| !vfs.exists(&path)) {
        if let Some(free) = pool.take() {
            let made = match recycle(vfs, dir, &header, &free, &path) {
                Ok(seg) => Ok(seg),
                Err(CreateError::Retryable(e)) => {
                    // Still a free file under its free name (the rename is
                    // the last step that can fail retryably): keep it for
                    // the retry.
                    if vfs.exists(&free) {
                        pool.give_back(free);
                    }
                    Err(CreateError::Retryable(e))
                }
                Err(e) => Err(e),
            };
            pool.done_with_taken();
            return made;
        }
    }
    let retryable = CreateError::Retryable;
    let file = match vfs.create_new(&path) {
        Ok(f) => f,
        // A leftover from an earlier failed attempt in this process: reuse it.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => vfs
            .open(&path, true)
            .map_err(|e| retryable(Error::io("open segment", &path, e)))?,
        Err(e) => return Err(retryable(Error::io("create segment", &path, e))),
    };
    if let Some(bytes) = spec.preallocate_bytes {
        file.allocate(bytes)
            .map_err(|e| retryable(Error::io("preallocate segment", &path, e)))?;
    }
    file.write_all_at(&header.encode(), 0)
        .map_err(|e| retryable(Error::io("write segment header", &path, e)))?;
    file.sync_data()
        .map_err(|e| CreateError::Fatal(Error::io("fsync new segment", &path, e)))?;
    vfs.sync_dir(dir)
        .map_err(|e| CreateError::Fatal(Error::io("fsync directory", dir, e)))?;
    let len = file
        .len()
        .map_err(|e| CreateError::Fatal(Error::io("stat new segment", &path, e)))?;
    Ok(NewSegment {
        file,
        recycled: false,
        len,
    })
}

/// Turn the free file `free` into segment `header.segment` at `path`
/// (FORMAT.md §6.2 rule 7). Until the rename, the file is still a free file
/// whatever it holds: a crash leaves it in the pool.
fn recycle(
    vfs: &dyn Vfs,
    dir: &Path,
    header: &SegmentHeader,
    free: &Path,
    path: &Path,
) -> std::result::Result<NewSegment, CreateError> {
    let retryable = CreateError::Retryable;
    let file = vfs
        .open(free, true)
        .map_err(|e| retryable(Error::io("open free segment file", free, e)))?;
    let len = file
        .len()
        .map_err(|e| retryable(Error::io("stat free segment file", free, e)))?;
    let mut head = vec![0u8; SEGMENT_HEADER_BYTES + BATCH_HEADER_BYTES];
    head[..SEGMENT_HEADER_BYTES].copy_from_slice(&header.encode_recycled());
    file.write_all_at(&head, 0)
        .map_err(|e| retryable(Error::io("write recycled segment header", free, e)))?;
    file.sync_data()
        .map_err(|e| CreateError::Fatal(Error::io("fsync recycled segment", free, e)))?;
    vfs.rename(free, path)
        .map_err(|e| retryable(Error::io("rename free file to a segment", free, e)))?;
    // The handle outlives the free name, which the next prepared file
    // takes (`log/pool.rs`): reads that open the file again must find this
    // one.
    file.renamed(path);
    vfs.sync_dir(dir)
        .map_err(|e| CreateError::Fatal(Error::io("fsync directory", dir, e)))?;
    Ok(NewSegment {
        file,
        recycled: true,
        len,
    })
}
