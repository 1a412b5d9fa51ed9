//! The file layer: every byte the engine reads or writes goes through [`Vfs`].
//!
//! Two implementations: [`OsVfs`] (std::fs + fs2 + memmap2) for real stores, and
//! [`crate::sim::SimVfs`] (in memory, with crash and fault injection) for tests,
//! fuzzing and the torture harness. Keeping the engine generic over this trait
//! lets the same engine code be crashed at any point and checked (invariants 1,
//! 3 and 8 of ARCHITECTURE.md).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
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
    /// written and are never written again (durable frames of the active
    /// segment, read by the process that writes it). Returns the number read
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
    /// Map the whole file read-only. The caller must only map files that
    /// nothing writes to while the map lives (sealed segments, or the active
    /// one during recovery under the store lock).
    fn map(&self) -> io::Result<MappedBytes>;
}

/// A directory-scoped file system.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Open an existing file; `write` asks for write access.
    fn open(&self, path: &Path, write: bool) -> io::Result<Arc<dyn VfsFile>>;
    /// Create a new file; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>>;
    /// Create the file or truncate it to zero length.
    fn create_truncate(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>>;
    fn exists(&self, path: &Path) -> bool;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// fsync the directory, making creates, renames and removes in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Names of the entries of a directory (file names only).
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
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

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsVfs;

struct OsFile {
    file: File,
    /// Read-only map for [`VfsFile::read_stable`], made on first use and
    /// remade when a read reaches past it (the file grew).
    live_map: parking_lot::RwLock<Option<memmap2::MmapRaw>>,
}

impl OsFile {
    fn new(file: File) -> OsFile {
        OsFile {
            file,
            live_map: parking_lot::RwLock::new(None),
        }
    }
}

impl fmt::Debug for OsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OsFile").field("file", &self.file).finish()
    }
}

impl OsFile {
    /// Make sure the live map covers `..end` (remapping if the file grew).
    /// `false`: the file ends before `end`.
    fn map_to(&self, end: u64) -> io::Result<bool> {
        if self
            .live_map
            .read()
            .as_ref()
            .is_some_and(|m| end <= m.len() as u64)
        {
            return Ok(true);
        }
        let len = self.file.metadata()?.len();
        if len == 0 || end > len {
            return Ok(false);
        }
        let map = memmap2::MmapOptions::new()
            .len(len as usize)
            .map_raw_read_only(&self.file)?;
        *self.live_map.write() = Some(map);
        Ok(true)
    }

    /// Run `f` on the `len` mapped bytes at `offset`, if the live map covers
    /// them (see [`OsFile::map_to`]).
    fn with_mapped<R>(&self, offset: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let guard = self.live_map.read();
        let map = guard.as_ref()?;
        let end = offset.checked_add(len as u64)?;
        if end > map.len() as u64 {
            return None;
        }
        // SAFETY: `offset..end` lies inside the live mapping (checked above),
        // which the read guard keeps mapped while the slice lives (it does not
        // outlive this call). The callers' contract (`read_stable`) is that
        // these bytes were written before the call and are never written
        // again, so nothing modifies the memory behind the shared slice; the
        // engine never shrinks a segment file, so the pages stay backed.
        // MAP_SHARED mappings are coherent with pwrite on Linux.
        let bytes = unsafe { std::slice::from_raw_parts(map.as_ptr().add(offset as usize), len) };
        Some(f(bytes))
    }
}

impl VfsFile for OsFile {
    fn read_stable(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let end = offset.saturating_add(buf.len() as u64);
        if !self.map_to(end)? {
            // Past the end of the file: the plain read reports the short read.
            return self.read_at(buf, offset);
        }
        match self.with_mapped(offset, buf.len(), |b| buf.copy_from_slice(b)) {
            Some(()) => Ok(buf.len()),
            None => self.read_at(buf, offset),
        }
    }

    fn lend_stable(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        let end = offset.saturating_add(len as u64);
        if !self.map_to(end)? {
            return Ok(false);
        }
        Ok(self.with_mapped(offset, len, f).is_some())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        fs2::FileExt::allocate(&self.file, len)
    }
    fn map(&self) -> io::Result<MappedBytes> {
        if self.file.metadata()?.len() == 0 {
            return Ok(Arc::new(Vec::<u8>::new()));
        }
        // SAFETY: the engine maps sealed segments, which it never writes again,
        // and the active segment only during the recovery pass of a writable
        // open, while it holds the store lock and before the map is dropped and
        // anything is written (the pass itself does not write). The engine never
        // shrinks a segment file. A foreign process truncating or writing the
        // file while mapped is outside the engine's contract (the store lock
        // forbids a second writer).
        let map = unsafe { memmap2::Mmap::map(&self.file)? };
        Ok(Arc::new(map))
    }
}

#[derive(Debug)]
struct OsLock {
    _file: File,
    path: PathBuf,
}
impl LockGuard for OsLock {}
impl Drop for OsLock {
    fn drop(&mut self) {
        let _ = fs2::FileExt::unlock(&self._file);
        LOCKED_PATHS.lock().retain(|p| p != &self.path);
    }
}

/// Paths this process holds locks on: flock(2) already conflicts between two
/// opens in one process, but this makes the rule independent of the platform.
static LOCKED_PATHS: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

impl Vfs for OsVfs {
    fn open(&self, path: &Path, write: bool) -> io::Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new().read(true).write(write).open(path)?;
        Ok(Arc::new(OsFile::new(file)))
    }
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(OsFile::new(file)))
    }
    fn create_truncate(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Arc::new(OsFile::new(file)))
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if let Ok(name) = entry.file_name().into_string() {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn LockGuard>> {
        let canon = path
            .parent()
            .and_then(|p| p.canonicalize().ok())
            .map(|p| p.join(path.file_name().unwrap_or_default()))
            .unwrap_or_else(|| path.to_path_buf());
        {
            let mut held = LOCKED_PATHS.lock();
            if held.contains(&canon) {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "store is already open in this process",
                ));
            }
            held.push(canon.clone());
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path);
        let file = match file {
            Ok(f) => f,
            Err(e) => {
                LOCKED_PATHS.lock().retain(|p| p != &canon);
                return Err(e);
            }
        };
        if let Err(e) = fs2::FileExt::try_lock_exclusive(&file) {
            LOCKED_PATHS.lock().retain(|p| p != &canon);
            return Err(e);
        }
        Ok(Box::new(OsLock {
            _file: file,
            path: canon,
        }))
    }
    fn zero_ahead_helps(&self) -> bool {
        true
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_stable_follows_a_growing_file_and_reports_eof() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = OsVfs.create_new(&path).unwrap();
        let a: Vec<u8> = (0..100u8).collect();
        f.write_all_at(&a, 0).unwrap();
        let mut buf = [0u8; 10];
        assert_eq!(f.read_stable(&mut buf, 90).unwrap(), 10);
        assert_eq!(&buf, &a[90..]);
        // The file grows past the map: the map is remade.
        let b = vec![7u8; 9000];
        f.write_all_at(&b, 100).unwrap();
        let mut big = vec![0u8; 9000];
        assert_eq!(f.read_stable(&mut big, 100).unwrap(), 9000);
        assert_eq!(big, b);
        // Served from the map, and the old bytes are still right.
        assert_eq!(f.read_stable(&mut buf, 0).unwrap(), 10);
        assert_eq!(&buf, &a[..10]);
        // Past the end: a short read, as read_at.
        let mut tail = [1u8; 16];
        assert_eq!(f.read_stable(&mut tail, 9092).unwrap(), 8);
        assert_eq!(&tail[..8], &[7u8; 8]);
        assert!(f.read_stable(&mut tail, u64::MAX - 4).is_err(), "as pread");
        // An empty file.
        let e = OsVfs.create_new(&dir.path().join("e")).unwrap();
        assert_eq!(e.read_stable(&mut buf, 0).unwrap(), 0);
        // Lending: the same bytes, growth followed, nothing past the end.
        let mut seen = Vec::new();
        assert!(f.lend_stable(95, 10, &mut |b| seen = b.to_vec()).unwrap());
        assert_eq!(&seen[..5], &a[95..]);
        assert_eq!(&seen[5..], &[7u8; 5]);
        f.write_all_at(&[9u8; 100], 9100).unwrap();
        assert!(f.lend_stable(9150, 50, &mut |b| seen = b.to_vec()).unwrap());
        assert_eq!(seen, vec![9u8; 50]);
        let mut called = false;
        assert!(!f.lend_stable(9190, 11, &mut |_| called = true).unwrap());
        assert!(!e.lend_stable(0, 1, &mut |_| called = true).unwrap());
        assert!(!called);
    }
}
