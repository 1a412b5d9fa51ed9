//! A fault-injecting file layer for the server's tests: the real file system
//! ([`OsVfs`]) with a gate that holds every fdatasync of a segment (a slow
//! disk, no error) and a switch that fails every segment write (a full
//! disk: the engine keeps the batch for a retry).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use turnstone::vfs::{LockGuard, MappedBytes, OsVfs, Vfs, VfsFile};

#[derive(Debug, Default)]
pub struct Faults {
    /// fdatasync waits while this is true.
    held: Mutex<bool>,
    cv: Condvar,
    /// fdatasyncs that found the gate closed (and waited).
    pub held_syncs: AtomicU64,
    /// Every `write_all_at` fails with "no space left on device".
    pub fail_writes: AtomicBool,
    pub failed_writes: AtomicU64,
    /// Every segment fdatasync fails with EIO (the engine poisons the store).
    pub fail_syncs: AtomicBool,
}

/// Releases held fdatasyncs when dropped, so that a failing test cannot
/// leave the server's flusher blocked forever.
pub struct Hold(Arc<Faults>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.release_syncs();
    }
}

impl Faults {
    /// Hold every fdatasync until [`Faults::release_syncs`] or until the
    /// returned guard is dropped.
    pub fn hold_syncs(self: &Arc<Self>) -> Hold {
        *self.held.lock() = true;
        Hold(self.clone())
    }
    pub fn release_syncs(&self) {
        *self.held.lock() = false;
        self.cv.notify_all();
    }
    /// Wait (up to a generous bound) until `n` fdatasyncs have been held.
    pub fn wait_held(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.held_syncs.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "no fdatasync reached the gate");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    /// Wait (up to a generous bound) until `n` writes have failed.
    pub fn wait_failed(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.failed_writes.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "no write failed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    fn gate(&self) {
        let mut held = self.held.lock();
        if *held {
            self.held_syncs.fetch_add(1, Ordering::SeqCst);
        }
        while *held {
            self.cv.wait(&mut held);
        }
    }
}

#[derive(Debug)]
pub struct FaultVfs {
    inner: OsVfs,
    pub faults: Arc<Faults>,
}

impl FaultVfs {
    pub fn new() -> (Arc<FaultVfs>, Arc<Faults>) {
        let faults = Arc::new(Faults::default());
        (
            Arc::new(FaultVfs {
                inner: OsVfs,
                faults: faults.clone(),
            }),
            faults,
        )
    }
    fn wrap(&self, path: &Path, f: Arc<dyn VfsFile>) -> Arc<dyn VfsFile> {
        let segment = path.extension().is_some_and(|e| e == "tseg");
        if segment {
            Arc::new(FaultFile {
                inner: f,
                faults: self.faults.clone(),
            })
        } else {
            f
        }
    }
}

#[derive(Debug)]
struct FaultFile {
    inner: Arc<dyn VfsFile>,
    faults: Arc<Faults>,
}

impl VfsFile for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.faults.fail_writes.load(Ordering::SeqCst) {
            self.faults.failed_writes.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.faults.gate();
        if self.faults.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(5)); // EIO
        }
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
    fn read_stable(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_stable(buf, offset)
    }
    fn lend_stable(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        self.inner.lend_stable(offset, len, f)
    }
    fn map(&self) -> io::Result<MappedBytes> {
        self.inner.map()
    }
}

impl Vfs for FaultVfs {
    fn open(&self, path: &Path, write: bool) -> io::Result<Arc<dyn VfsFile>> {
        Ok(self.wrap(path, self.inner.open(path, write)?))
    }
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        Ok(self.wrap(path, self.inner.create_new(path)?))
    }
    fn create_truncate(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        Ok(self.wrap(path, self.inner.create_truncate(path)?))
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn LockGuard>> {
        self.inner.lock_exclusive(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.inner.is_dir(path)
    }
}
