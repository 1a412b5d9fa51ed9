//! A simulated, fault-injecting file system for crash tests.
//!
//! [`SimVfs`] keeps, per file, the *durable* image (what a completed fdatasync
//! made stable) apart from the *live* image (what reads see, i.e. the page
//! cache), plus the list of operations issued since the last sync. A simulated
//! power cut ([`SimVfs::crash`]) keeps any subset of those pending operations,
//! applied in any order, with every 512-byte sector of a kept write torn to its
//! old bytes, its new bytes or zeros (a byte it sets to the value it held
//! keeps it). A file's name survives only if its directory was fsynced after the create or rename (and a removed name comes
//! back unless the removal was synced). It can also fail writes and fsyncs, run
//! out of space, and "cut the power" after a number of operations, after which
//! every call fails until [`SimVfs::crash`] is called.
//!
//! After a failed fsync the pending writes of that file are dropped from the
//! durable future while the live image keeps showing them: exactly the Linux
//! behaviour ("fsyncgate") the engine must not trust.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::vfs::{LockGuard, MappedBytes, Vfs, VfsFile};

/// Sector size used to tear writes at a crash.
pub const SECTOR_BYTES: usize = 512;

#[derive(Debug, Clone)]
enum PendingOp {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<PendingOp>,
}

/// Faults to inject; counters are in file-system operations (every call to a
/// mutating method counts one).
#[derive(Debug, Default, Clone)]
pub struct FaultPlan {
    /// The n-th write (counting writes only, from 0) fails with EIO.
    pub fail_write_nth: Option<u64>,
    /// The n-th fdatasync (counting syncs only, from 0) fails with EIO.
    pub fail_sync_nth: Option<u64>,
    /// Total bytes that writes may still add; past it, writes fail with ENOSPC.
    pub enospc_after_bytes: Option<u64>,
    /// After this many mutating operations, the power is cut: that operation and
    /// every later one fail, and nothing more is recorded.
    pub power_cut_after_ops: Option<u64>,
    /// Every write fails (EIO) while set; lets a test check retry behaviour.
    pub fail_all_writes: bool,
}

#[derive(Debug, Default)]
struct State {
    inodes: HashMap<u64, Inode>,
    live_names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: HashSet<PathBuf>,
    next_inode: u64,
    locks: HashSet<PathBuf>,
    faults: FaultPlan,
    ops: u64,
    writes: u64,
    syncs: u64,
    written_bytes: u64,
    powered_off: bool,
}

/// The simulated file system. Cheap to clone (shared state).
#[derive(Debug, Clone, Default)]
pub struct SimVfs {
    state: Arc<Mutex<State>>,
}

fn power_err() -> io::Error {
    io::Error::other("simulated power cut")
}

impl State {
    /// Counts one mutating op; fails if the power is (or now goes) off.
    fn tick(&mut self) -> io::Result<()> {
        if self.powered_off {
            return Err(power_err());
        }
        if let Some(n) = self.faults.power_cut_after_ops {
            if self.ops >= n {
                self.powered_off = true;
                return Err(power_err());
            }
        }
        self.ops += 1;
        Ok(())
    }
}

impl SimVfs {
    /// An empty, powered-on file system with no faults planned.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace the fault plan (counters keep running).
    pub fn set_faults(&self, plan: FaultPlan) {
        self.state.lock().faults = plan;
    }

    /// Operations counted so far (for choosing a power-cut point).
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// fdatasync calls on files so far (what `FaultPlan::fail_sync_nth` counts).
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Writes so far (what `FaultPlan::fail_write_nth` counts).
    pub fn writes(&self) -> u64 {
        self.state.lock().writes
    }

    /// Whether the simulated power is off (a power cut has happened).
    pub fn powered_off(&self) -> bool {
        self.state.lock().powered_off
    }

    /// Simulate a power cut and reboot: build the on-disk state a machine could
    /// come back with, chosen by `seed`, and make it the new live state. Locks
    /// are released and the fault plan is cleared. Open handles from before the
    /// crash keep working on their inode but must not be used by a correct
    /// engine (it is dropped first).
    pub fn crash(&self, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut st = self.state.lock();
        let names = st.durable_names.clone();
        let mut keep: HashSet<u64> = HashSet::new();
        for ino in names.values() {
            keep.insert(*ino);
        }
        let ids: Vec<u64> = st.inodes.keys().copied().collect();
        for id in ids {
            if !keep.contains(&id) {
                st.inodes.remove(&id);
                continue;
            }
            let inode = st.inodes.get_mut(&id).expect("inode listed");
            let mut image = inode.durable.clone();
            let mut ops = std::mem::take(&mut inode.pending);
            // Any subset, any order.
            for i in (1..ops.len()).rev() {
                let j = rng.gen_range(0..=i);
                ops.swap(i, j);
            }
            for op in ops {
                if !rng.gen_bool(0.5) {
                    continue;
                }
                match op {
                    PendingOp::SetLen(len) => image.resize(len as usize, 0),
                    PendingOp::Write { offset, data } => {
                        apply_torn_write(&mut image, offset as usize, &data, &mut rng)
                    }
                }
            }
            inode.live = image.clone();
            inode.durable = image;
        }
        st.live_names = names;
        st.locks.clear();
        st.faults = FaultPlan::default();
        st.powered_off = false;
    }

    /// Live bytes of a file (for tests and fixtures).
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.state.lock();
        st.live_names
            .get(path)
            .and_then(|ino| st.inodes.get(ino))
            .map(|i| i.live.clone())
    }

    /// Overwrite bytes of a file, durably (to plant corruption in tests).
    pub fn poke(&self, path: &Path, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        let ino = *st
            .live_names
            .get(path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let inode = st.inodes.get_mut(&ino).expect("inode");
        for img in [&mut inode.live, &mut inode.durable] {
            let end = offset as usize + bytes.len();
            if img.len() < end {
                img.resize(end, 0);
            }
            img[offset as usize..end].copy_from_slice(bytes);
        }
        Ok(())
    }
}

/// Apply a write sector by sector: each sector ends up new, old or zero,
/// except that a byte the write sets to the value it held keeps it
/// (FORMAT.md §6.1 M1: a direct write rewrites the bytes before its batch
/// in the same block, as the page cache does a page's).
fn apply_torn_write(image: &mut Vec<u8>, offset: usize, data: &[u8], rng: &mut StdRng) {
    let end = offset + data.len();
    let mut pos = offset;
    while pos < end {
        let sector_end = ((pos / SECTOR_BYTES) + 1) * SECTOR_BYTES;
        let chunk_end = sector_end.min(end);
        let choice: u8 = rng.gen_range(0..8);
        // Mostly whole new sectors, sometimes old or zeroed ones.
        match choice {
            0 => {} // old bytes stay
            1 => {
                if image.len() < chunk_end {
                    image.resize(chunk_end, 0);
                }
                let new = &data[pos - offset..chunk_end - offset];
                for (b, n) in image[pos..chunk_end].iter_mut().zip(new) {
                    if *b != *n {
                        *b = 0;
                    }
                }
            }
            _ => {
                if image.len() < chunk_end {
                    image.resize(chunk_end, 0);
                }
                image[pos..chunk_end].copy_from_slice(&data[pos - offset..chunk_end - offset]);
            }
        }
        pos = chunk_end;
    }
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    ino: u64,
}

impl VfsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let st = self.state.lock();
        if st.powered_off {
            return Err(power_err());
        }
        let live = &st.inodes.get(&self.ino).ok_or_else(power_err)?.live;
        let off = offset as usize;
        if off >= live.len() {
            return Ok(0);
        }
        let n = buf.len().min(live.len() - off);
        buf[..n].copy_from_slice(&live[off..off + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.tick()?;
        let nth = st.writes;
        st.writes += 1;
        if st.faults.fail_all_writes || st.faults.fail_write_nth == Some(nth) {
            return Err(io::Error::other("simulated EIO on write"));
        }
        if let Some(budget) = st.faults.enospc_after_bytes {
            if st.written_bytes + buf.len() as u64 > budget {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        st.written_bytes += buf.len() as u64;
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(power_err)?;
        let end = offset as usize + buf.len();
        if inode.live.len() < end {
            inode.live.resize(end, 0);
        }
        inode.live[offset as usize..end].copy_from_slice(buf);
        inode.pending.push(PendingOp::Write {
            offset,
            data: buf.to_vec(),
        });
        Ok(())
    }

    fn direct_write_align(&self) -> Option<usize> {
        Some(SECTOR_BYTES)
    }

    /// A direct write is a write (the simulator has no page cache); the
    /// alignment is checked as the real one's is.
    fn write_direct(&self, buf: &[u8], offset: u64) -> Option<io::Result<()>> {
        let aligned = !buf.is_empty()
            && offset.is_multiple_of(SECTOR_BYTES as u64)
            && buf.len().is_multiple_of(SECTOR_BYTES);
        aligned.then(|| self.write_all_at(buf, offset))
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.state.lock();
        st.tick()?;
        let nth = st.syncs;
        st.syncs += 1;
        let fail = st.faults.fail_sync_nth == Some(nth);
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(power_err)?;
        if fail {
            // fsyncgate: the kernel drops the dirty pages' durable future but the
            // page cache still shows them.
            inode.pending.clear();
            return Err(io::Error::other("simulated EIO on fsync"));
        }
        inode.pending.clear();
        inode.durable = inode.live.clone();
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let st = self.state.lock();
        if st.powered_off {
            return Err(power_err());
        }
        Ok(st.inodes.get(&self.ino).ok_or_else(power_err)?.live.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.tick()?;
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(power_err)?;
        inode.live.resize(len as usize, 0);
        inode.pending.push(PendingOp::SetLen(len));
        Ok(())
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.tick()?;
        if let Some(budget) = st.faults.enospc_after_bytes {
            if st.written_bytes + len > budget {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(power_err)?;
        if (inode.live.len() as u64) < len {
            inode.live.resize(len as usize, 0);
            inode.pending.push(PendingOp::SetLen(len));
        }
        Ok(())
    }

    fn map(&self) -> io::Result<MappedBytes> {
        let st = self.state.lock();
        if st.powered_off {
            return Err(power_err());
        }
        let live = st.inodes.get(&self.ino).ok_or_else(power_err)?.live.clone();
        Ok(Arc::new(live))
    }
}

#[derive(Debug)]
struct SimLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
}
impl LockGuard for SimLock {}
impl Drop for SimLock {
    fn drop(&mut self) {
        self.state.lock().locks.remove(&self.path);
    }
}

impl SimVfs {
    fn new_inode(st: &mut State, path: &Path) -> u64 {
        let ino = st.next_inode;
        st.next_inode += 1;
        st.inodes.insert(ino, Inode::default());
        st.live_names.insert(path.to_path_buf(), ino);
        ino
    }
    fn handle(&self, ino: u64) -> Arc<dyn VfsFile> {
        Arc::new(SimFile {
            state: self.state.clone(),
            ino,
        })
    }
}

impl Vfs for SimVfs {
    fn open(&self, path: &Path, _write: bool) -> io::Result<Arc<dyn VfsFile>> {
        let st = self.state.lock();
        if st.powered_off {
            return Err(power_err());
        }
        let ino = *st
            .live_names
            .get(path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        drop(st);
        Ok(self.handle(ino))
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let mut st = self.state.lock();
        st.tick()?;
        if st.live_names.contains_key(path) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let ino = Self::new_inode(&mut st, path);
        drop(st);
        Ok(self.handle(ino))
    }

    fn create_truncate(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let mut st = self.state.lock();
        st.tick()?;
        let ino = match st.live_names.get(path) {
            Some(ino) => {
                let ino = *ino;
                let inode = st.inodes.get_mut(&ino).expect("inode");
                inode.live.clear();
                inode.pending.push(PendingOp::SetLen(0));
                ino
            }
            None => Self::new_inode(&mut st, path),
        };
        drop(st);
        Ok(self.handle(ino))
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock();
        st.live_names.contains_key(path) || st.dirs.contains(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.tick()?;
        let ino = st
            .live_names
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.live_names.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.tick()?;
        st.live_names
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.tick()?;
        let in_dir = |p: &Path| p.parent() == Some(dir);
        let live: Vec<(PathBuf, u64)> = st
            .live_names
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        st.durable_names.retain(|p, _| !in_dir(p));
        for (p, i) in live {
            st.durable_names.insert(p, i);
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.state.lock();
        if st.powered_off {
            return Err(power_err());
        }
        if !st.dirs.contains(dir) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        Ok(st
            .live_names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(String::from))
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        if st.powered_off {
            return Err(power_err());
        }
        // Directories are modelled as always durable (created once, by tests).
        let mut d = Some(dir);
        while let Some(p) = d {
            st.dirs.insert(p.to_path_buf());
            d = p.parent();
        }
        Ok(())
    }

    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn LockGuard>> {
        let mut st = self.state.lock();
        if !st.locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "store is locked by another opener",
            ));
        }
        Ok(Box::new(SimLock {
            state: self.state.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.state.lock().dirs.contains(path)
    }
}

/// Copy every sealed segment of the store in `dir` (each but the last, where
/// appends go) to its free name, durably, unless that free file exists: what
/// an online collection with recycling leaves (FORMAT.md §6.2 rule 7), so
/// that the next segments the writer makes are recycled ones whose bytes
/// after the end of data are stale batches of this store. For crash tests
/// and fuzzing on any file layer. Returns the free files written; stops at
/// the first failure.
pub fn plant_free_files(vfs: &dyn Vfs, dir: &Path) -> io::Result<usize> {
    let mut ids: Vec<u32> = vfs
        .list(dir)?
        .iter()
        .filter_map(|n| crate::frame::parse_segment_file_name(n).map(|s| s.0))
        .collect();
    ids.sort_unstable();
    ids.pop();
    let mut planted = 0;
    for id in ids {
        let free = dir.join(format!("{id:010}.tseg.free"));
        if vfs.exists(&free) {
            continue;
        }
        let bytes = crate::vfs::read_whole(vfs, &dir.join(format!("{id:010}.tseg")))?;
        let f = vfs.create_new(&free)?;
        f.write_all_at(&bytes, 0)?;
        f.sync_data()?;
        planted += 1;
    }
    vfs.sync_dir(dir)?;
    Ok(planted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_data_survives_and_unsynced_name_does_not() {
        let vfs = SimVfs::new();
        let dir = Path::new("/s");
        vfs.create_dir_all(dir).unwrap();
        let a = vfs.create_new(&dir.join("a")).unwrap();
        a.write_all_at(b"hello", 0).unwrap();
        a.sync_data().unwrap();
        vfs.sync_dir(dir).unwrap();
        let b = vfs.create_new(&dir.join("b")).unwrap();
        b.write_all_at(b"x", 0).unwrap();
        b.sync_data().unwrap();
        vfs.crash(1);
        assert_eq!(vfs.read_file(&dir.join("a")).unwrap(), b"hello");
        assert!(vfs.read_file(&dir.join("b")).is_none());
    }

    #[test]
    fn failed_fsync_loses_pending_data_at_crash() {
        let vfs = SimVfs::new();
        let dir = Path::new("/s");
        vfs.create_dir_all(dir).unwrap();
        let a = vfs.create_new(&dir.join("a")).unwrap();
        vfs.sync_dir(dir).unwrap();
        a.sync_data().unwrap(); // sync #0
        vfs.set_faults(FaultPlan {
            fail_sync_nth: Some(1),
            ..Default::default()
        });
        a.write_all_at(&[7u8; 1024], 0).unwrap();
        assert!(a.sync_data().is_err());
        // The page cache still shows the data...
        let mut buf = [0u8; 4];
        assert_eq!(a.read_at(&mut buf, 0).unwrap(), 4);
        assert_eq!(buf, [7; 4]);
        // ...but no crash can bring it back.
        for seed in 0..20 {
            vfs.crash(seed);
            assert!(vfs
                .read_file(&dir.join("a"))
                .unwrap()
                .iter()
                .all(|b| *b == 0));
        }
    }

    #[test]
    fn power_cut_stops_all_mutation() {
        let vfs = SimVfs::new();
        let dir = Path::new("/s");
        vfs.create_dir_all(dir).unwrap();
        let a = vfs.create_new(&dir.join("a")).unwrap();
        vfs.set_faults(FaultPlan {
            power_cut_after_ops: Some(vfs.ops() + 1),
            ..Default::default()
        });
        a.write_all_at(b"1", 0).unwrap();
        assert!(a.write_all_at(b"2", 1).is_err());
        assert!(vfs.powered_off());
        vfs.crash(3);
        assert!(!vfs.powered_off());
    }
}
