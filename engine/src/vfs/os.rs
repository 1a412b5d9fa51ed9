//! [`OsVfs`]: the file layer on the real file system (std::fs, fs2 for the
//! directory lock, memmap2 for sealed segments, `O_DIRECT` where asked).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsVfs;

struct OsFile {
    file: File,
    /// Where the file is, to open it again for direct I/O or reads without
    /// read-ahead: where it was opened, or where [`VfsFile::renamed`] says
    /// it went.
    path: parking_lot::Mutex<PathBuf>,
    /// The same file opened with `O_DIRECT` for [`VfsFile::read_sparse`],
    /// once it is needed; `Err` when the file system refuses direct I/O
    /// (then sparse reads go through the page cache, without read-ahead).
    direct: std::sync::OnceLock<Result<Direct, ()>>,
    /// The same file opened again with `POSIX_FADV_RANDOM` (no read-ahead)
    /// for sparse reads through the page cache, once it is needed; `None`
    /// if it could not be opened (then `file` is used).
    random: std::sync::OnceLock<Option<File>>,
    /// Read-only map for [`VfsFile::read_stable`], made on first use and
    /// remade when a read reaches past it (the file grew).
    live_map: parking_lot::RwLock<Option<memmap2::MmapRaw>>,
    /// The same file opened for writing with `O_DIRECT`, for
    /// [`VfsFile::write_zeros`], once it is needed; `None` when the file
    /// system refuses it (then the zeros go through the page cache).
    direct_write: std::sync::OnceLock<Option<File>>,
    /// A direct write of zeros was refused (EINVAL: an alignment the device
    /// does not take): the zeros go through the page cache from then on.
    direct_write_refused: std::sync::atomic::AtomicBool,
    /// The alignment [`VfsFile::write_direct`] uses: the first of
    /// [`DIRECT_ALIGNS`], the next one after the device refused it (EINVAL),
    /// 0 once every one was refused.
    direct_write_align: std::sync::atomic::AtomicUsize,
}

/// A file descriptor opened with `O_DIRECT`, and the alignment its reads
/// need (offset, length and memory address).
#[derive(Debug)]
struct Direct {
    file: File,
    align: std::sync::atomic::AtomicUsize,
}

/// A sparse read goes through the page cache when the pages that hold the
/// bytes asked for are at most this many times as long; beyond, it reads
/// only the device blocks that hold them, with direct I/O.
const SPARSE_PAGE_WASTE_MAX: u64 = 2;

/// The size of a memory page.
fn page_bytes() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as u64
    } else {
        4096
    }
}

/// Alignments tried for direct reads, smallest first: the common logical
/// block size, then the common page and file-system block size.
const DIRECT_ALIGNS: [usize; 2] = [512, 4096];

/// The alignment to try after the device refused `align` (EINVAL); 0:
/// none is left, direct I/O is given up for the file.
fn next_direct_align(align: usize) -> usize {
    DIRECT_ALIGNS
        .iter()
        .copied()
        .find(|a| *a > align)
        .unwrap_or(0)
}

/// Offset, length and address alignment of [`VfsFile::write_zeros`]'s
/// direct writes: the common page and file-system block size, a multiple
/// of every logical block size in use.
const DIRECT_WRITE_ALIGN: usize = 4096;

impl OsFile {
    fn new(file: File, path: &Path) -> OsFile {
        OsFile {
            file,
            path: parking_lot::Mutex::new(path.to_path_buf()),
            direct: std::sync::OnceLock::new(),
            random: std::sync::OnceLock::new(),
            live_map: parking_lot::RwLock::new(None),
            direct_write: std::sync::OnceLock::new(),
            direct_write_refused: std::sync::atomic::AtomicBool::new(false),
            direct_write_align: std::sync::atomic::AtomicUsize::new(DIRECT_ALIGNS[0]),
        }
    }
}

impl fmt::Debug for OsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OsFile").field("file", &self.file).finish()
    }
}

impl OsFile {
    /// Whether the page cache holds every page of `offset..offset + len`
    /// (`mincore` over the live map, which maps without reading). `false`
    /// when the file ends before, or the kernel does not say.
    fn cached(&self, offset: u64, len: usize) -> bool {
        let Some(end) = offset.checked_add(len as u64) else {
            return false;
        };
        if len == 0 || !self.map_to(end).unwrap_or(false) {
            return false;
        }
        let guard = self.live_map.read();
        let Some(map) = guard.as_ref() else {
            return false;
        };
        let page = page_bytes();
        let first = offset / page * page;
        let span = (end - first) as usize;
        let pages = span.div_ceil(page as usize);
        // Most asks are about a frame or a few (a sparse read's pages).
        let mut small = [0u8; 16];
        let mut large = Vec::new();
        let vec: &mut [u8] = if pages <= small.len() {
            &mut small[..pages]
        } else {
            large.resize(pages, 0);
            &mut large
        };
        // SAFETY: `first..end` lies inside the live mapping (`map_to` made
        // it cover `..end`, and the read guard keeps it mapped for the
        // call); `first` is page aligned because the mapping starts at a
        // page; `vec` has one byte per page of the span, which is what
        // mincore writes. mincore only reads the mapping's page tables (the
        // mutable pointer is its signature's, nothing is written through it).
        let rc = unsafe {
            libc::mincore(
                map.as_mut_ptr().add(first as usize).cast(),
                span,
                vec.as_mut_ptr(),
            )
        };
        rc == 0 && vec.iter().all(|v| v & 1 == 1)
    }

    /// Read through the page cache without read-ahead: only the pages that
    /// hold `offset..offset + buf.len()` are fetched, and they stay cached.
    fn read_random(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let random = self.random.get_or_init(|| {
            use std::os::fd::AsRawFd;
            let f = File::open(&*self.path.lock()).ok()?;
            // SAFETY: the descriptor is open for the call; the advice only
            // changes how the kernel reads ahead for this descriptor.
            let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
            (rc == 0).then_some(f)
        });
        let Some(f) = random else {
            return self.read_at(buf, offset);
        };
        let mut done = 0;
        while done < buf.len() {
            match f.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// The file opened again with `O_DIRECT`, for reading or for writing.
    fn open_direct(&self, write: bool) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_DIRECT)
            .open(&*self.path.lock())
    }

    /// The `O_DIRECT` descriptor, opened on first use.
    fn direct(&self) -> Option<&Direct> {
        self.direct
            .get_or_init(|| {
                self.open_direct(false)
                    .map(|file| Direct {
                        file,
                        align: std::sync::atomic::AtomicUsize::new(DIRECT_ALIGNS[0]),
                    })
                    .map_err(|_| ())
            })
            .as_ref()
            .ok()
    }

    /// Read `offset..offset + buf.len()` with direct I/O: the aligned
    /// blocks around it go into an aligned scratch buffer, and the bytes
    /// asked for are copied out. `None` if the file system refuses direct
    /// reads at every alignment tried.
    fn read_direct(&self, buf: &mut [u8], offset: u64) -> Option<io::Result<usize>> {
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::Ordering;
        // (An offset pread would refuse with EINVAL must not be taken for
        // an alignment the device refuses.)
        offset
            .checked_add(buf.len() as u64)
            .filter(|end| *end <= i64::MAX as u64 / 2)?;
        let d = self.direct()?;
        loop {
            let align = d.align.load(Ordering::Relaxed);
            if align == 0 {
                return None;
            }
            let start = offset & !(align as u64 - 1);
            let end = (offset + buf.len() as u64).next_multiple_of(align as u64);
            let len = (end - start) as usize;
            let mut scratch = vec![0u8; len + align];
            let skew = scratch.as_ptr().align_offset(align);
            let aligned = &mut scratch[skew..skew + len];
            let mut got = 0;
            let res = loop {
                if got == len {
                    break Ok(());
                }
                match d.file.read_at(&mut aligned[got..], start + got as u64) {
                    Ok(0) => break Ok(()),
                    // A short read ends at EOF (an unaligned length): the
                    // next read returns 0.
                    Ok(n) if n % align != 0 => {
                        got += n;
                        break Ok(());
                    }
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            match res {
                Ok(()) => {
                    let skip = (offset - start) as usize;
                    let n = got.saturating_sub(skip).min(buf.len());
                    buf[..n].copy_from_slice(&aligned[skip..skip + n]);
                    return Some(Ok(n));
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    // The device wants a larger alignment: try the next one,
                    // or give direct I/O up for this file.
                    d.align.store(next_direct_align(align), Ordering::Relaxed);
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Write `len` zeros at `offset` with direct I/O; `None` (nothing
    /// written) if they are not aligned to [`DIRECT_WRITE_ALIGN`] or the
    /// file system refuses direct writes.
    fn write_zeros_direct(&self, offset: u64, len: usize) -> Option<io::Result<()>> {
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::Ordering;
        let align = DIRECT_WRITE_ALIGN;
        if !offset.is_multiple_of(align as u64)
            || !len.is_multiple_of(align)
            || len == 0
            || self.direct_write_refused.load(Ordering::Relaxed)
        {
            return None;
        }
        let f = self.direct_writer()?;
        // An aligned window of a shared zero buffer: a direct write reads
        // its memory from an aligned address.
        let buf = zeros(len + align);
        let skew = buf.as_ptr().align_offset(align);
        if skew > align {
            return None;
        }
        match f.write_all_at(&buf[skew..skew + len], offset) {
            // Refused (the device wants another alignment, say): through
            // the page cache instead, this time and from now on.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.direct_write_refused.store(true, Ordering::Relaxed);
                None
            }
            r => Some(r),
        }
    }

    /// The file opened for writing with `O_DIRECT`, on first use; `None`
    /// when the file system refuses it.
    fn direct_writer(&self) -> Option<&File> {
        self.direct_write
            .get_or_init(|| self.open_direct(true).ok())
            .as_ref()
    }

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
    fn is_cached(&self, offset: u64, len: usize) -> bool {
        self.cached(offset, len)
    }
    fn read_sparse(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // Cached (a hot session, or one read a moment ago): a copy out of
        // the page cache.
        if self.cached(offset, buf.len()) {
            return self.read_at(buf, offset);
        }
        // Bytes that fill most of the pages holding them: those pages, and
        // no more, through the page cache (so they are cached next time).
        let page = page_bytes();
        let len = buf.len() as u64;
        let pages = offset
            .checked_add(len)
            .map(|end| end.next_multiple_of(page) - offset / page * page);
        if pages.is_some_and(|p| p <= SPARSE_PAGE_WASTE_MAX * len) {
            return self.read_random(buf, offset);
        }
        // A few bytes in a page of other sessions' frames: only the device
        // blocks that hold them, with direct I/O (not cached afterwards).
        match self.read_direct(buf, offset) {
            Some(r) => r,
            None => self.read_random(buf, offset),
        }
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn renamed(&self, to: &Path) {
        *self.path.lock() = to.to_path_buf();
    }
    fn write_zeros(&self, offset: u64, len: usize) -> io::Result<()> {
        match self.write_zeros_direct(offset, len) {
            Some(r) => r,
            None => self.write_all_at(&zeros(len)[..len], offset),
        }
    }
    fn direct_write_align(&self) -> Option<usize> {
        use std::sync::atomic::Ordering;
        let align = self.direct_write_align.load(Ordering::Relaxed);
        (align != 0 && self.direct_writer().is_some()).then_some(align)
    }
    fn write_direct(&self, buf: &[u8], offset: u64) -> Option<io::Result<()>> {
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::Ordering;
        let align = self.direct_write_align.load(Ordering::Relaxed);
        if align == 0
            || buf.is_empty()
            || !offset.is_multiple_of(align as u64)
            || !buf.len().is_multiple_of(align)
            || !(buf.as_ptr() as usize).is_multiple_of(align)
        {
            return None;
        }
        match self.direct_writer()?.write_all_at(buf, offset) {
            // The device wants a larger alignment (the kernel checks it
            // before writing anything): the next one from now on, or none.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.direct_write_align
                    .store(next_direct_align(align), Ordering::Relaxed);
                None
            }
            r => Some(r),
        }
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
        Ok(Arc::new(OsFile::new(file, path)))
    }
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(OsFile::new(file, path)))
    }
    fn create_truncate(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Arc::new(OsFile::new(file, path)))
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
    fn page_bytes(&self) -> u64 {
        page_bytes()
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
}

/// Drop the clean cached pages of a file (`posix_fadvise(DONTNEED)`), so
/// that tests can read it cold.
#[cfg(test)]
pub(crate) fn evict_cached(path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = File::open(path)?;
    f.sync_all()?;
    // SAFETY: the descriptor is open for the call; fadvise only drops clean
    // cached pages of the file, which later reads fetch again.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_sparse_reads_the_same_bytes_cold_and_hot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        // Not a multiple of any block size: direct reads end short at EOF.
        let data: Vec<u8> = (0..100_003u32).map(|i| (i * 7 + i / 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let cases = [
            (0u64, 1usize),
            (1, 511),
            (511, 2),
            (4095, 4097),
            (12_345, 600),
            (65_536, 512),
            (99_000, 5000),
            (100_003, 10),
            (200_000, 10),
        ];
        let check = |f: &OsFile, cold: bool, (off, len): (u64, usize)| {
            let mut buf = vec![0xEEu8; len];
            let n = f.read_sparse(&mut buf, off).unwrap();
            let from = (off as usize).min(data.len());
            let want = &data[from..(from + len).min(data.len())];
            assert_eq!(&buf[..n], want, "cold {cold} at {off} len {len}");
        };
        for cold in [true, false] {
            let f = OsFile::new(File::open(&path).unwrap(), &path);
            if cold {
                evict_cached(&path).unwrap();
            } else {
                std::fs::read(&path).unwrap();
            }
            for case in &cases[..6] {
                check(&f, cold, *case);
            }
            match f.direct.get() {
                // The file system took direct reads at some alignment.
                Some(Ok(d)) => {
                    assert!(cold && d.align.load(std::sync::atomic::Ordering::Relaxed) > 0)
                }
                Some(Err(())) => assert!(cold),
                None => assert!(!cold, "cold bytes are read with direct I/O"),
            }
            // (4095, 4097) fills the two pages that hold it: read through
            // the page cache; hot bytes are copied from the cache.
            assert_eq!(f.random.get().is_some(), cold);
            // Reads that reach the end of the file end short.
            for case in &cases[6..] {
                check(&f, cold, *case);
            }
        }
        // Offsets pread refuses are refused, and direct reads stay usable.
        let f = OsFile::new(File::open(&path).unwrap(), &path);
        let mut buf = [0u8; 4];
        assert!(f.read_sparse(&mut buf, u64::MAX - 2).is_err());
        evict_cached(&path).unwrap();
        assert_eq!(f.read_sparse(&mut buf, 8).unwrap(), 4);
        assert_eq!(&buf, &data[8..12]);
    }

    /// `write_zeros` zeros exactly the bytes asked for; aligned zeros go
    /// around the page cache when the file system takes direct writes (the
    /// pages are not cached afterwards, as they are after a buffered
    /// write), unaligned ones through it.
    #[test]
    fn write_zeros_zeros_the_range_and_aligned_zeros_skip_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let len = 64 * 1024;
        std::fs::write(&path, vec![0xAAu8; len]).unwrap();
        File::open(&path).unwrap().sync_all().unwrap();
        evict_cached(&path).unwrap();
        let f = OsFile::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap(),
            &path,
        );
        f.write_zeros(8192, 16384).unwrap();
        f.write_zeros(100, 50).unwrap();
        f.sync_data().unwrap();
        let direct = f.direct_write.get().is_some_and(|d| d.is_some());
        let bytes = std::fs::read(&path).unwrap();
        for (i, b) in bytes.iter().enumerate() {
            let zero = (8192..8192 + 16384).contains(&i) || (100..150).contains(&i);
            assert_eq!(*b == 0, zero, "byte {i}");
        }
        // Whether the file system takes direct writes at all: then the
        // aligned zeros must have used them.
        let takes_direct = {
            use std::os::unix::fs::OpenOptionsExt;
            OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .is_ok()
        };
        assert_eq!(direct, takes_direct);
        if direct {
            evict_cached(&path).unwrap();
            f.write_zeros(32768, 8192).unwrap();
            assert!(!f.is_cached(32768, 8192), "direct zeros are not cached");
            f.write_all_at(&[0u8; 8192], 32768).unwrap();
            assert!(f.is_cached(32768, 8192), "buffered bytes are cached");
        }
    }

    /// A handle told of its file's rename reads that file, not whatever
    /// takes the old name: reads that open the file again by name (sparse
    /// reads of uncached bytes) once read the next prepared segment file,
    /// which takes the name a segment was made from.
    #[test]
    fn a_renamed_file_is_read_under_its_new_name() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        let data: Vec<u8> = (0..65_536u32).map(|i| (i % 251) as u8 + 1).collect();
        std::fs::write(&old, &data).unwrap();
        let f = OsVfs.open(&old, false).unwrap();
        OsVfs.rename(&old, &new).unwrap();
        f.renamed(&new);
        // Another file under the old name, as the next prepared file.
        std::fs::write(&old, vec![0u8; data.len()]).unwrap();
        evict_cached(&new).unwrap();
        // A few bytes in a page (direct I/O), then bytes that fill most of
        // their pages (the descriptor without read-ahead): both open the
        // file again by name.
        for (off, len) in [(4096 + 10, 16usize), (20_000, 8000)] {
            let mut buf = vec![0u8; len];
            assert_eq!(f.read_sparse(&mut buf, off as u64).unwrap(), len);
            assert_eq!(&buf[..], &data[off..off + len], "at {off}");
        }
    }

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
