//! A panic while a batch is being written, in the flusher thread or in a
//! waiting thread that leads the write, poisons the store instead of leaving
//! every durability waiter waiting forever (issue 16; invariants 7 and 8 of
//! ARCHITECTURE.md: nothing after the last completed fdatasync is
//! acknowledged, and the caller is told so, the leading thread included).
//!
//! The file layer here wraps the real one and panics inside `sync_data` of a
//! segment file once armed, so the panic happens exactly where the flusher
//! makes a batch durable.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use turnstone::vfs::{LockGuard, MappedBytes, OsVfs, Vfs, VfsFile};
use turnstone::{Error, Options, Store};

#[derive(Debug)]
struct PanickyVfs {
    inner: OsVfs,
    armed: Arc<AtomicBool>,
}

#[derive(Debug)]
struct PanickyFile {
    inner: Arc<dyn VfsFile>,
    armed: Arc<AtomicBool>,
    segment: bool,
}

impl VfsFile for PanickyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.segment && self.armed.load(Ordering::SeqCst) {
            panic!("injected panic in the flusher's fdatasync");
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
    fn map(&self) -> io::Result<MappedBytes> {
        self.inner.map()
    }
}

impl PanickyVfs {
    fn wrap(&self, path: &Path, f: Arc<dyn VfsFile>) -> Arc<dyn VfsFile> {
        let segment = path.extension().is_some_and(|e| e == "tseg");
        Arc::new(PanickyFile {
            inner: f,
            armed: self.armed.clone(),
            segment,
        })
    }
}

impl Vfs for PanickyVfs {
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

/// The panic in a thread that led the write (the default: a waiter finding
/// nothing in flight writes the batch itself).
#[test]
fn a_panic_while_a_waiter_leads_the_write_poisons_the_store_and_wakes_every_waiter() {
    panicking_write_poisons(true);
}

/// The same panic in the flusher thread (only it writes).
#[test]
fn a_panicking_flusher_thread_poisons_the_store_and_wakes_every_waiter() {
    panicking_write_poisons(false);
}

fn panicking_write_poisons(flush_in_caller: bool) {
    let dir = tempfile::tempdir().unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let vfs = Arc::new(PanickyVfs {
        inner: OsVfs,
        armed: armed.clone(),
    });
    let opts = Options {
        vfs,
        preallocate: false,
        flush_in_caller,
        ..Options::default()
    };
    let store = Arc::new(Store::open_with(dir.path(), opts).unwrap());
    let first = store.append("s", 1, 0, b"durable").unwrap();
    store.wait_durable(first.end).unwrap();

    armed.store(true, Ordering::SeqCst);
    let lost = store.append("s", 1, 0, b"never acknowledged").unwrap();
    // Several waiters: every one must return, with the poison.
    let (tx, rx) = mpsc::channel();
    let mut waiters = Vec::new();
    for _ in 0..4 {
        let (store, tx) = (store.clone(), tx.clone());
        waiters.push(std::thread::spawn(move || {
            let _ = tx.send(store.wait_durable(lost.end));
        }));
    }
    for _ in 0..4 {
        let r = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a waiter was left waiting after the flusher panicked");
        assert!(matches!(r, Err(Error::Poisoned { .. })), "{r:?}");
    }
    assert!(store.durable_pos() < lost.end);
    assert!(matches!(
        store.append("s", 1, 0, b"after"),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(store.sync(), Err(Error::Poisoned { .. })));
    for w in waiters {
        w.join().unwrap();
    }
    drop(store);

    // The durable prefix survives; the unacknowledged event may or may not.
    armed.store(false, Ordering::SeqCst);
    let store = Store::open(dir.path()).unwrap();
    let events = store.read_range("s", 0..10).unwrap();
    assert!(!events.is_empty());
    assert_eq!(events[0].payload, b"durable");
    store.close().unwrap();
}
