//! The file layer: every byte the engine reads or writes goes through [`Vfs`].
//!
//! Two implementations: [`OsVfs`] (std::fs + fs2 + memmap2) for real stores, and
//! [`crate::sim::SimVfs`] (in memory, with crash and fault injection) for tests,
//! fuzzing and the torture harness. Keeping the engine generic over this trait
//! lets the same engine code be crashed at any point and checked (invariants 1,
//! 3 and 8 of ARCHITECTURE.md).

use std::fmt;

use std::io;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

/// Read-only bytes of a whole file: a memory map for real files, a copy in the
/// simulator. Reads of sealed segments borrow from this without copying.
pub type MappedBytes = Arc<dyn Deref<Target = [u8]> + Send + Sync>;

/// One open file.
#[allow(clippy::len_without_is_empty)]
pub trait VfsFile: Send + Sync + fmt::Debug {
    /// Read up to `buf.len()` bytes at `offset`; returns the number read (0 at EOF).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Write all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Make written data (and the size, if it changed) durable: fdatasync.
    fn sync_data(&self) -> io::Result<()>;
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Truncate or extend (with zeros) to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserve `len` bytes on the device (zero-filled), extending the file.
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Read exactly `buf.len()` bytes at `offset` of a file that is still
    /// being appended to, where the caller guarantees that these bytes were
    /// written and are never written again, or only with the same values
    /// (durable frames of the active segment, read by the process that
    /// writes it; a direct write rewrites the end of the batch before its
    /// own, [`VfsFile::write_direct`]). Returns the number read
    /// (less at EOF). The real file system serves this from a growing
    /// read-only map instead of a system call per read; the default is
    /// [`VfsFile::read_at`].
    fn read_stable(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at(buf, offset)
    }
    /// Lend the `len` bytes at `offset` to `f`, under the contract of
    /// [`VfsFile::read_stable`]; `Ok(false)` (and `f` not called) if the file
    /// ends before. The real file system lends them straight from its map,
    /// without a copy; the default copies them into a buffer first.
    fn lend_stable(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        let mut buf = vec![0u8; len];
        if self.read_stable(&mut buf, offset)? < len {
            return Ok(false);
        }
        f(&buf);
        Ok(true)
    }
    /// Read up to `buf.len()` bytes at `offset`, under the contract of
    /// [`VfsFile::read_stable`] (bytes that were made durable and are never
    /// written again: a sealed segment, durable frames of the active one),
    /// for a sparse read: one of many small reads scattered over a large
    /// file. Returns the number read (less at EOF). Unlike a mapped or plain
    /// read, a real file system fetches no read-ahead window for it: cached
    /// bytes are copied from the page cache; bytes that fill most of the
    /// pages that hold them are read through the page cache, those pages
    /// only; a few bytes in a page are read with direct I/O, only the device
    /// blocks that hold them (and are not cached afterwards). The default is
    /// [`VfsFile::read_at`].
    fn read_sparse(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at(buf, offset)
    }
    /// Whether the page cache holds every byte of `offset..offset + len`,
    /// so that reading them costs no device I/O. The default (and the
    /// answer when the file ends before, or the kernel does not say) is
    /// `false`.
    fn is_cached(&self, _offset: u64, _len: usize) -> bool {
        false
    }
    /// Map the whole file read-only. The caller must only map files that
    /// nothing writes to while the map lives (sealed segments, or the active
    /// one during recovery under the store lock).
    fn map(&self) -> io::Result<MappedBytes>;
    /// The file was renamed to `to` (by [`Vfs::rename`]) while this handle
    /// is open. A file layer that opens the file again by name (for direct
    /// I/O, say) must use the new name from now on: the old one may name
    /// another file soon (a prepared segment file's name is given to the
    /// next one, `log/pool.rs`). The default does nothing.
    fn renamed(&self, _to: &Path) {}
    /// Write `len` zero bytes at `offset`: the zeros of a prepared segment
    /// file (`log/pool.rs`), which nothing reads before they are durable.
    /// The real file system writes them with direct I/O where it can (an
    /// `offset` and `len` aligned to 4096, a file system that accepts
    /// `O_DIRECT`): no copy into the page cache, no write-back of its
    /// pages, and the cache keeps what readers use instead of 64 MiB of
    /// zeros. The default writes a buffer of zeros.
    fn write_zeros(&self, offset: u64, len: usize) -> io::Result<()> {
        self.write_all_at(&zeros(len)[..len], offset)
    }
    /// The alignment of offset, length and memory address that
    /// [`VfsFile::write_direct`] takes, or `None` when this file is not
    /// written around the page cache. The default: `None`.
    fn direct_write_align(&self) -> Option<usize> {
        None
    }
    /// Write all of `buf` at `offset` around the page cache (the real file
    /// system: `O_DIRECT`), where `offset`, `buf.len()` and `buf`'s address
    /// are multiples of [`VfsFile::direct_write_align`]. The bytes are
    /// written to the device by the call (their durability still needs
    /// [`VfsFile::sync_data`]), no page of the cache is dirtied, and cached
    /// pages of the range are dropped: reads after it come from the device.
    /// `None`: nothing was written (the range is not aligned, or the file
    /// system refused direct I/O; the caller writes through the page cache
    /// instead). The default: `None`.
    fn write_direct(&self, _buf: &[u8], _offset: u64) -> Option<io::Result<()>> {
        None
    }
}

/// At least `len` zero bytes, shared (the buffer only grows).
pub(crate) fn zeros(len: usize) -> Arc<Vec<u8>> {
    static ZEROS: parking_lot::Mutex<Option<Arc<Vec<u8>>>> = parking_lot::Mutex::new(None);
    let mut z = ZEROS.lock();
    match &*z {
        Some(b) if b.len() >= len => b.clone(),
        _ => {
            let b = Arc::new(vec![0u8; len]);
            *z = Some(b.clone());
            b
        }
    }
}

/// A directory-scoped file system.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Open an existing file; `write` asks for write access.
    fn open(&self, path: &Path, write: bool) -> io::Result<Arc<dyn VfsFile>>;
    /// Create a new file; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>>;
    /// Create the file or truncate it to zero length.
    fn create_truncate(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Rename `from` to `to`, replacing `to` if it exists; durable only
    /// after [`Vfs::sync_dir`].
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Remove the file at `path`; durable only after [`Vfs::sync_dir`].
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// fsync the directory, making creates, renames and removes in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Names of the entries of a directory (file names only).
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Create `dir` and any missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Take the exclusive store lock; the returned guard releases it on drop.
    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn LockGuard>>;
    /// Whether the path is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Whether writing zeros into preallocated space before it is needed
    /// makes later `fdatasync`s cheaper (the flusher's zero extension,
    /// `commit/flusher.rs`). On a real file system it does: preallocated
    /// extents are *unwritten*, and an `fdatasync` after the first write into
    /// one commits the extent conversion through the file-system journal. In
    /// memory it does not, and the default `false` keeps the simulators'
    /// write sequence (crash points, fault injection by write number and byte
    /// budget) exactly as it was.
    fn zero_ahead_helps(&self) -> bool {
        false
    }
    /// The page size of the page cache: a buffered write that ends inside
    /// a page the cache does not hold makes the kernel read that page from
    /// the device first, so the writer of a recycled segment ends each
    /// write on a page boundary (`commit/flusher.rs`, `end_marker_len`).
    /// The default, 4096, is the common page size; the simulators use it.
    fn page_bytes(&self) -> u64 {
        4096
    }
}

/// Read a whole (small) file: derived files such as checkpoints and
/// snapshots.
pub fn read_whole(vfs: &dyn Vfs, path: &Path) -> io::Result<Vec<u8>> {
    let file = vfs.open(path, false)?;
    let len = file.len()?;
    let mut buf = vec![0u8; len as usize];
    let n = file.read_at(&mut buf, 0)?;
    buf.truncate(n);
    Ok(buf)
}

/// Held while a store is open for writing.
pub trait LockGuard: Send + Sync + fmt::Debug {}

mod os;
#[cfg(test)]
pub(crate) use os::evict_cached;
pub use os::OsVfs;
