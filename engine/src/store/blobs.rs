//! Blob files (FORMAT.md §15): large payloads stored once, out of line,
//! content-addressed by sha256, in `DIR/blobs/`.
//!
//! A blob file `blobs/<64 hex digits>.tblob` is a 56-byte header (magic,
//! version, length, sha256) and the bytes. It is written once: to
//! `<name>.<pid>-<n>.tmp` (a name per writer), fsynced, renamed to its name, and the directory fsynced,
//! all before [`BlobDir::put`] returns, so before any event that
//! references it is appended (let alone acknowledged). A blob already
//! present is not written again; the first time a handle relies on a blob
//! it did not write itself it fsyncs the file and the directory once, so
//! a file renamed by a process that died before its directory fsync is
//! durable before an event refers to it.
//!
//! Reading checks the header and the sha256 of the bytes: a missing or
//! damaged blob is [`Error::Corrupt`] naming the blob's hash.
//!
//! Collection of unreferenced blobs is the session layer's
//! (`session::gc`); this module gives it what keeps a collection that runs
//! while writers append from removing a blob an event is about to
//! reference. A writer holds a [`BlobPin`] on each blob from before it
//! looks for the file until its event is appended. A collector opens a
//! [`BlobSweep`], which records every blob pinned at that moment or after
//! it, then reads which blobs the appended events reference, and removes a
//! blob only if neither holds it ([`BlobSweep::remove_unused`], under the
//! same lock as pinning, and forgetting that the blob was durable). An
//! event that references a blob was either appended before the collector
//! read the events (so its blob is referenced), or appended later by a
//! writer that held the pin while the sweep was open (so it is recorded).

use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::vfs::{OsVfs, Vfs};

/// Subdirectory of a store that holds its blob files.
pub const BLOB_DIR: &str = "blobs";
/// First 8 bytes of a blob file.
pub const BLOB_MAGIC: [u8; 8] = *b"TSTNBLB\0";
/// The blob file format version.
pub const BLOB_VERSION: u32 = 1;
/// Bytes of a blob file's header.
pub const BLOB_HEADER_BYTES: usize = 56;
/// File name extension of a blob file.
pub const BLOB_EXT: &str = "tblob";
/// Default size above which the session layer stores a content block out
/// of line (256 KiB).
pub const BLOB_THRESHOLD_DEFAULT: usize = 256 << 10;

/// The sha256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&Sha256::digest(bytes));
    out
}

/// Lowercase hex of a hash.
pub fn hex(h: &[u8; 32]) -> String {
    let mut s = String::with_capacity(64);
    for b in h {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A hash from 64 lowercase hex digits.
pub fn parse_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64
        || !s
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The blob directory of one store.
#[derive(Debug)]
pub struct BlobDir {
    dir: PathBuf,
    /// The store's file system (the simulated one in crash tests).
    vfs: Arc<dyn Vfs>,
    /// Blobs this handle knows to be durable under their name.
    durable: Mutex<HashSet<[u8; 32]>>,
    threshold: AtomicUsize,
    /// Pins and the open sweep (see the module's documentation).
    guard: Mutex<Guard>,
}

#[derive(Debug, Default)]
struct Guard {
    /// Pinned blobs, with their number of pins.
    pins: HashMap<[u8; 32], u32>,
    /// While a sweep is open: every blob pinned since it opened, or
    /// pinned when it did.
    sweep: Option<HashSet<[u8; 32]>>,
}

/// A writer's hold on one blob ([`BlobDir::pin`]): while it lives, an
/// online collection does not remove the blob.
#[derive(Debug)]
pub struct BlobPin<'a> {
    dir: &'a BlobDir,
    h: [u8; 32],
}

impl Drop for BlobPin<'_> {
    fn drop(&mut self) {
        let mut g = self.dir.guard.lock();
        if let Some(n) = g.pins.get_mut(&self.h) {
            *n -= 1;
            if *n == 0 {
                g.pins.remove(&self.h);
            }
        }
    }
}

/// An online collection's view of the blobs ([`BlobDir::sweep`]): the
/// blobs pinned while it is open are kept. One at a time per store.
#[derive(Debug)]
pub struct BlobSweep<'a> {
    dir: &'a BlobDir,
}

impl BlobSweep<'_> {
    /// Remove blob `h` unless it was pinned while this sweep was open (or
    /// when it opened). The caller has found that no appended event
    /// references it, after opening the sweep. Returns the bytes freed
    /// (0: kept, or already gone). Call [`BlobDir::sync`] after a run.
    pub fn remove_unused(&self, h: &[u8; 32]) -> Result<u64> {
        let g = self.dir.guard.lock();
        let held = g.pins.contains_key(h) || g.sweep.as_ref().is_some_and(|s| s.contains(h));
        if held {
            return Ok(0);
        }
        // Under the guard: a writer that pins `h` after this finds it gone
        // (and not remembered as durable) and writes it again.
        self.dir.durable.lock().remove(h);
        self.dir.remove(h)
    }
}

impl Drop for BlobSweep<'_> {
    fn drop(&mut self) {
        self.dir.guard.lock().sweep = None;
    }
}

impl BlobDir {
    /// The blob directory of the store at `store_dir` (created on the
    /// first put), on the real file system.
    pub fn new(store_dir: &Path) -> Self {
        Self::with_vfs(store_dir, Arc::new(OsVfs))
    }

    /// [`BlobDir::new`] on `vfs` (the store's).
    pub fn with_vfs(store_dir: &Path, vfs: Arc<dyn Vfs>) -> Self {
        BlobDir {
            dir: store_dir.join(BLOB_DIR),
            vfs,
            durable: Mutex::new(HashSet::new()),
            threshold: AtomicUsize::new(BLOB_THRESHOLD_DEFAULT),
            guard: Mutex::new(Guard::default()),
        }
    }

    /// Another handle on the same directory, for reads (a follower that
    /// outlives the borrow of its log): it shares no pins.
    pub fn reader(&self) -> BlobDir {
        BlobDir {
            dir: self.dir.clone(),
            vfs: self.vfs.clone(),
            durable: Mutex::new(HashSet::new()),
            threshold: AtomicUsize::new(self.threshold()),
            guard: Mutex::new(Guard::default()),
        }
    }

    /// Size in bytes above which the session layer stores a content block
    /// as a blob (default [`BLOB_THRESHOLD_DEFAULT`]).
    pub fn threshold(&self) -> usize {
        self.threshold.load(Ordering::Relaxed)
    }

    /// Change the threshold (for this handle; it is not stored).
    /// `usize::MAX` turns blobs off for new events.
    pub fn set_threshold(&self, bytes: usize) {
        self.threshold.store(bytes, Ordering::Relaxed);
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of blob `h`.
    pub fn path(&self, h: &[u8; 32]) -> PathBuf {
        self.dir.join(format!("{}.{BLOB_EXT}", hex(h)))
    }

    /// Remove blob `h` (the collector's call, under the store's lock,
    /// once no live event references it). Returns the file's size; a blob
    /// already gone is 0. Call [`BlobDir::sync`] after a run of removals.
    pub fn remove(&self, h: &[u8; 32]) -> Result<u64> {
        let path = self.path(h);
        let bytes = match self.vfs.open(&path, false).and_then(|f| f.len()) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(Error::io("stat blob", &path, e)),
        };
        match self.vfs.remove(&path) {
            Ok(()) => Ok(bytes),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(0),
            Err(e) => Err(Error::io("remove blob", &path, e)),
        }
    }

    /// Size of blob `h`'s file (0 if absent).
    pub fn file_bytes(&self, h: &[u8; 32]) -> u64 {
        self.vfs
            .open(&self.path(h), false)
            .and_then(|f| f.len())
            .unwrap_or(0)
    }

    /// Make removals durable: fsync the blob directory (if it exists).
    pub fn sync(&self) -> Result<()> {
        if self.vfs.is_dir(&self.dir) {
            self.sync_dir()
        } else {
            Ok(())
        }
    }

    fn sync_dir(&self) -> Result<()> {
        self.vfs
            .sync_dir(&self.dir)
            .map_err(|e| Error::io("fsync blob directory", &self.dir, e))
    }

    /// Store `bytes` durably (or find them stored) and return their hash.
    /// Returns only once the blob file and its directory entry are durable.
    /// While an online collection may run, use [`BlobDir::put_pinned`] and
    /// hold the pin until the event that references the blob is appended.
    pub fn put(&self, bytes: &[u8]) -> Result<[u8; 32]> {
        Ok(self.put_pinned(bytes)?.0)
    }

    /// [`BlobDir::put`], pinned: the blob is not collected while the pin
    /// lives.
    pub fn put_pinned(&self, bytes: &[u8]) -> Result<([u8; 32], BlobPin<'_>)> {
        let h = sha256(bytes);
        let pin = self.pin(&h);
        self.put_hashed(&h, bytes)?;
        Ok((h, pin))
    }

    /// Pin blob `h` (present or not): an online collection does not remove
    /// it while the pin lives.
    pub fn pin(&self, h: &[u8; 32]) -> BlobPin<'_> {
        let mut g = self.guard.lock();
        *g.pins.entry(*h).or_insert(0) += 1;
        if let Some(s) = g.sweep.as_mut() {
            s.insert(*h);
        }
        BlobPin { dir: self, h: *h }
    }

    /// Open a sweep for an online collection: from now until it is
    /// dropped, every blob pinned (and every blob pinned now) is kept.
    pub fn sweep(&self) -> BlobSweep<'_> {
        let mut g = self.guard.lock();
        let held: HashSet<[u8; 32]> = g.pins.keys().copied().collect();
        g.sweep = Some(held);
        BlobSweep { dir: self }
    }

    /// [`BlobDir::put`] with the hash already computed (it must be the
    /// sha256 of `bytes`).
    pub fn put_hashed(&self, h: &[u8; 32], bytes: &[u8]) -> Result<()> {
        if self.durable.lock().contains(h) {
            return Ok(());
        }
        let path = self.path(h);
        let vfs = self.vfs.as_ref();
        if vfs.exists(&path) {
            // Written by another handle or an earlier process, perhaps one
            // that died before its directory fsync: make sure, once.
            vfs.open(&path, false)
                .and_then(|f| f.sync_data())
                .map_err(|e| Error::io("fsync blob", &path, e))?;
            self.sync_dir()?;
            self.durable.lock().insert(*h);
            return Ok(());
        }
        let created = !vfs.is_dir(&self.dir);
        vfs.create_dir_all(&self.dir)
            .map_err(|e| Error::io("create blob directory", &self.dir, e))?;
        if created {
            if let Some(parent) = self.dir.parent() {
                vfs.sync_dir(parent)
                    .map_err(|e| Error::io("fsync store directory", parent, e))?;
            }
        }
        // A name of its own per writer: two writers of the same blob never
        // write one file (the later rename replaces equal bytes).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!(
            "{}.{BLOB_EXT}.{}-{n}.tmp",
            hex(h),
            std::process::id()
        ));
        let f = vfs
            .create_truncate(&tmp)
            .map_err(|e| Error::io("create blob", &tmp, e))?;
        f.write_all_at(&encode_header(h, bytes.len() as u64), 0)
            .and_then(|()| f.write_all_at(bytes, BLOB_HEADER_BYTES as u64))
            .map_err(|e| Error::io("write blob", &tmp, e))?;
        // fdatasync: the bytes and the new file's length.
        f.sync_data()
            .map_err(|e| Error::io("fsync blob", &tmp, e))?;
        drop(f);
        vfs.rename(&tmp, &path)
            .map_err(|e| Error::io("rename blob", &path, e))?;
        self.sync_dir()?;
        self.durable.lock().insert(*h);
        Ok(())
    }

    /// The bytes of blob `h`, checked: a missing file, a bad header or
    /// bytes whose sha256 is not `h` is [`Error::Corrupt`] naming the hash.
    pub fn get(&self, h: &[u8; 32]) -> Result<Vec<u8>> {
        let path = self.path(h);
        let data = match crate::vfs::read_whole(self.vfs.as_ref(), &path) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::corrupt(
                    &path,
                    0,
                    format!("blob {} is referenced but missing", hex(h)),
                ))
            }
            Err(e) => return Err(Error::io("read blob", &path, e)),
        };
        check(&path, h, &data)?;
        Ok(data[BLOB_HEADER_BYTES..].to_vec())
    }

    /// Whether blob `h` exists and checks (reads it whole).
    pub fn verify(&self, h: &[u8; 32]) -> Result<()> {
        self.get(h).map(|_| ())
    }

    /// Every blob file present (by name; a name that is not 64 hex digits
    /// and `.tblob` is not listed), sorted. Left-over `.tmp` files of an
    /// interrupted put are not blobs.
    pub fn list(&self) -> Result<Vec<[u8; 32]>> {
        if !self.vfs.is_dir(&self.dir) {
            return Ok(Vec::new());
        }
        let names = match self.vfs.list(&self.dir) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list blobs", &self.dir, e)),
        };
        let mut out = Vec::new();
        for name in &names {
            if let Some(h) = name
                .strip_suffix(&format!(".{BLOB_EXT}"))
                .and_then(parse_hex)
            {
                out.push(h);
            }
        }
        out.sort();
        Ok(out)
    }
}

fn encode_header(h: &[u8; 32], len: u64) -> [u8; BLOB_HEADER_BYTES] {
    let mut b = [0u8; BLOB_HEADER_BYTES];
    b[0..8].copy_from_slice(&BLOB_MAGIC);
    b[8..12].copy_from_slice(&BLOB_VERSION.to_le_bytes());
    b[16..24].copy_from_slice(&len.to_le_bytes());
    b[24..56].copy_from_slice(h);
    b
}

fn check(path: &Path, h: &[u8; 32], data: &[u8]) -> Result<()> {
    let name = hex(h);
    let bad =
        |offset: u64, why: String| Error::corrupt(path, offset, format!("blob {name}: {why}"));
    if data.len() < BLOB_HEADER_BYTES {
        return Err(bad(
            0,
            format!("file of {} bytes is cut inside its header", data.len()),
        ));
    }
    if data[0..8] != BLOB_MAGIC {
        return Err(bad(0, "no blob magic".into()));
    }
    let version = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
    if version != BLOB_VERSION {
        return Err(bad(
            8,
            format!("format version {version}, this build reads {BLOB_VERSION}"),
        ));
    }
    if data[12..16] != [0; 4] {
        return Err(bad(12, "reserved bytes are not zero".into()));
    }
    let len = u64::from_le_bytes(data[16..24].try_into().expect("8 bytes"));
    let have = (data.len() - BLOB_HEADER_BYTES) as u64;
    if len != have {
        return Err(bad(
            16,
            format!("header says {len} bytes, the file holds {have}"),
        ));
    }
    if data[24..56] != h[..] {
        return Err(bad(24, "header holds another hash".into()));
    }
    let got = sha256(&data[BLOB_HEADER_BYTES..]);
    if &got != h {
        return Err(bad(
            BLOB_HEADER_BYTES as u64,
            format!("bytes have sha256 {}", hex(&got)),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_once_get_checked_missing_and_damaged_named_by_hash() {
        let dir = tempfile::tempdir().unwrap();
        let b = BlobDir::new(dir.path());
        assert!(b.list().unwrap().is_empty());
        let bytes = vec![7u8; 100_000];
        let h = b.put(&bytes).unwrap();
        assert_eq!(h, sha256(&bytes));
        assert_eq!(b.get(&h).unwrap(), bytes);
        let mtime = std::fs::metadata(b.path(&h)).unwrap().modified().unwrap();
        // Stored once: a second put (also through another handle) writes nothing.
        assert_eq!(b.put(&bytes).unwrap(), h);
        let other = BlobDir::new(dir.path());
        assert_eq!(other.put(&bytes).unwrap(), h);
        assert_eq!(
            std::fs::metadata(b.path(&h)).unwrap().modified().unwrap(),
            mtime
        );
        assert_eq!(b.list().unwrap(), vec![h]);
        assert_eq!(
            std::fs::metadata(b.path(&h)).unwrap().len(),
            (BLOB_HEADER_BYTES + bytes.len()) as u64
        );
        // Damaged: the error names the hash.
        let mut data = std::fs::read(b.path(&h)).unwrap();
        data[BLOB_HEADER_BYTES + 5] ^= 1;
        std::fs::write(b.path(&h), &data).unwrap();
        let e = b.get(&h).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains(&hex(&h)), "{e}");
        // Missing: the same.
        std::fs::remove_file(b.path(&h)).unwrap();
        let e = b.get(&h).unwrap_err();
        assert!(
            matches!(e, Error::Corrupt { .. }) && e.to_string().contains(&hex(&h)),
            "{e}"
        );
        assert_eq!(parse_hex(&hex(&h)), Some(h));
        assert_eq!(parse_hex("zz"), None);
    }

    #[test]
    fn a_sweep_keeps_what_writers_pin_and_forgets_what_it_removes() {
        let tmp = tempfile::tempdir().unwrap();
        let b = BlobDir::new(tmp.path());
        let [a, held, touched, d] = [b"aaa", b"bbb", b"ccc", b"ddd"].map(|x| b.put(x).unwrap());
        // Pinned when the sweep opens, released during it.
        let pin = b.pin(&held);
        let sweep = b.sweep();
        drop(pin);
        // Pinned and released while the sweep is open.
        drop(b.pin(&touched));
        // Pinned now (a writer about to append).
        let pin_d = b.pin(&d);
        assert_eq!(sweep.remove_unused(&held).unwrap(), 0);
        assert_eq!(sweep.remove_unused(&touched).unwrap(), 0);
        assert_eq!(sweep.remove_unused(&d).unwrap(), 0);
        assert!(sweep.remove_unused(&a).unwrap() > 0);
        for h in [held, touched, d] {
            assert!(b.path(&h).exists());
        }
        assert!(!b.path(&a).exists());
        drop(sweep);
        // The removed blob is not remembered as durable: putting its bytes
        // again writes the file again.
        assert_eq!(b.put(b"aaa").unwrap(), a);
        assert_eq!(b.get(&a).unwrap(), b"aaa");
        // A later sweep keeps only what is pinned then.
        let sweep = b.sweep();
        assert!(sweep.remove_unused(&held).unwrap() > 0);
        assert!(sweep.remove_unused(&touched).unwrap() > 0);
        assert_eq!(sweep.remove_unused(&d).unwrap(), 0);
        drop((sweep, pin_d));
        assert!(b.sweep().remove_unused(&d).unwrap() > 0);
    }

    #[test]
    fn writers_of_one_blob_at_once_leave_one_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    let b = BlobDir::new(dir.path());
                    let h = b.put(&bytes).unwrap();
                    assert_eq!(b.get(&h).unwrap(), bytes);
                });
            }
        });
        let b = BlobDir::new(dir.path());
        assert_eq!(b.list().unwrap().len(), 1);
        let names: Vec<_> = std::fs::read_dir(b.dir()).unwrap().collect();
        assert_eq!(names.len(), 1, "no .tmp file is left");
        assert_eq!(b.get(&sha256(&bytes)).unwrap(), bytes);
    }
}
