//! The simulated loop's file layer: [`TortureVfs`] wraps the simulator
//! ([`SimVfs`]) to remember which written ranges are not yet synced, so
//! that a crash can garble some of their sectors on top of the simulator's
//! torn writes, and (for the self-test) to acknowledge fdatasync without
//! doing it. Apart from the loop itself, which only needs `crash`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::Rng;
use turnstone::sim::SimVfs;
use turnstone::vfs::{LockGuard, MappedBytes, Vfs, VfsFile};

/// Unsynced written ranges per file, for garbling at a crash; optionally a
/// planted bug that acknowledges fdatasync without doing it.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    unsynced: HashMap<PathBuf, Vec<(u64, u64)>>,
}

#[derive(Debug, Clone)]
pub(super) struct TortureVfs {
    pub(super) sim: SimVfs,
    pub(super) tracker: Arc<Mutex<Tracker>>,
    /// Self-test: fdatasync returns Ok without syncing.
    pub(super) lie: bool,
}

#[derive(Debug)]
struct TortureFile {
    inner: Arc<dyn VfsFile>,
    path: PathBuf,
    tracker: Arc<Mutex<Tracker>>,
    lie: bool,
}

impl VfsFile for TortureFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_all_at(buf, offset)?;
        self.tracker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unsynced
            .entry(self.path.clone())
            .or_default()
            .push((offset, offset + buf.len() as u64));
        Ok(())
    }
    fn sync_data(&self) -> std::io::Result<()> {
        if self.lie {
            return Ok(());
        }
        self.inner.sync_data()?;
        self.tracker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unsynced
            .remove(&self.path);
        Ok(())
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn allocate(&self, len: u64) -> std::io::Result<()> {
        self.inner.allocate(len)
    }
    fn map(&self) -> std::io::Result<MappedBytes> {
        self.inner.map()
    }
}

impl TortureVfs {
    fn wrap(&self, f: Arc<dyn VfsFile>, path: &Path) -> Arc<dyn VfsFile> {
        Arc::new(TortureFile {
            inner: f,
            path: path.to_path_buf(),
            tracker: self.tracker.clone(),
            lie: self.lie,
        })
    }

    /// Reboot: the simulator keeps a random subset of unsynced writes with
    /// torn sectors; then some sectors of unsynced writes become garbage.
    pub(super) fn crash(&self, seed: u64, rng: &mut StdRng) -> u64 {
        self.sim.crash(seed);
        let ranges = std::mem::take(
            &mut self
                .tracker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unsynced,
        );
        let mut garbled = 0;
        for (path, rs) in ranges {
            let Some(len) = self.sim.read_file(&path).map(|b| b.len() as u64) else {
                continue;
            };
            for (from, to) in rs {
                let mut at = from;
                while at < to.min(len) {
                    let sector_end = ((at / 512) + 1) * 512;
                    let end = sector_end.min(to).min(len);
                    if rng.gen_ratio(1, 16) {
                        let junk: Vec<u8> = (at..end).map(|_| rng.gen()).collect();
                        let _ = self.sim.poke(&path, at, &junk);
                        garbled += 1;
                    }
                    at = end;
                }
            }
        }
        garbled
    }
}

impl Vfs for TortureVfs {
    fn open(&self, path: &Path, write: bool) -> std::io::Result<Arc<dyn VfsFile>> {
        Ok(self.wrap(self.sim.open(path, write)?, path))
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Arc<dyn VfsFile>> {
        let f = self.sim.create_new(path)?;
        self.tracker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unsynced
            .remove(path);
        Ok(self.wrap(f, path))
    }
    fn create_truncate(&self, path: &Path) -> std::io::Result<Arc<dyn VfsFile>> {
        let f = self.sim.create_truncate(path)?;
        Ok(self.wrap(f, path))
    }
    fn exists(&self, path: &Path) -> bool {
        self.sim.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.sim.rename(from, to)?;
        let mut t = self.tracker.lock().unwrap_or_else(|p| p.into_inner());
        let moved = t.unsynced.remove(from);
        t.unsynced.remove(to);
        if let Some(r) = moved {
            t.unsynced.insert(to.to_path_buf(), r);
        }
        Ok(())
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.sim.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.sim.sync_dir(dir)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.sim.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.sim.create_dir_all(dir)
    }
    fn lock_exclusive(&self, path: &Path) -> std::io::Result<Box<dyn LockGuard>> {
        self.sim.lock_exclusive(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.sim.is_dir(path)
    }
}
