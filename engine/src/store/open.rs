//! Opening a store: take the lock (invariant 9), load the checkpoint, run the
//! recovery pass and apply its plan before anything is written (FORMAT.md
//! §6.4), create the first segment of a new store, start the flusher.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};
use rand::RngCore;

use crate::commit::{self, CommitQueue, WriterFile};
use crate::error::{Error, Result};
use crate::frame::{self, BATCH_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::index::checkpoint::{self, Checkpoint};
use crate::index::Index;
use crate::log::{create_segment, segment_path, SegmentPool, SegmentReader, SegmentSpec};
use crate::recovery::{self, RecoveryMode, RecoveryReport};
use crate::types::{LogPos, SegmentId};
use crate::vfs::{LockGuard, Vfs, VfsFile};

use super::{write_checkpoint, CheckpointWhy, Options, Shared, Store, FIRST_SEGMENT, LOCK_FILE};

impl Store {
    /// Open (or create) the store in `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Self::open_with(dir, Options::default())
    }

    /// Open (or create, unless read-only) the store in `dir`.
    ///
    /// A read-only open takes no lock, so the writer's online collection
    /// may rewrite and remove segment files while it reads them; an open
    /// that fails while the directory changed under it (its files or
    /// `gc.manifest`) is tried again, up to 20 times (`READ_ONLY_OPEN_TRIES`).
    pub fn open_with(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        if !opts.read_only {
            return Self::open_once(dir.as_ref(), opts);
        }
        let dir = dir.as_ref();
        let mut tries = 1;
        loop {
            let before = dir_state(opts.vfs.as_ref(), dir);
            match Self::open_once(dir, opts.clone()) {
                Ok(s) => return Ok(s),
                Err(e) => {
                    if tries >= READ_ONLY_OPEN_TRIES || dir_state(opts.vfs.as_ref(), dir) == before
                    {
                        return Err(e);
                    }
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(tries as u64));
                }
            }
        }
    }

    /// One try at an open: refuse bad options, take the directory (and the
    /// lock), run the recovery pass, then apply its plan before anything new
    /// is written (FORMAT.md §6.4) and start the store.
    fn open_once(dir: &Path, opts: Options) -> Result<Store> {
        let dir = dir.to_path_buf();
        let vfs = opts.vfs.clone();
        check_options(&opts)?;
        let lock = lock_dir(vfs.as_ref(), &dir, opts.read_only)?;
        let (ck, ck_problem) = load_checkpoint(vfs.as_ref(), &dir, opts.checkpoints)?;
        let had_bad_checkpoint = ck_problem.is_some();
        let rec = recovery::recover(
            vfs.as_ref(),
            &dir,
            opts.recovery_mode,
            ck,
            ck_problem,
            lock.is_some(),
        )?;
        if opts.read_only {
            if rec.segments.is_empty() && rec.store_id.is_none() {
                return Err(Error::NoStore {
                    dir,
                    detail: "no segment files".into(),
                });
            }
        } else {
            // Apply what recovery decided, before anything new is written.
            recovery::apply(vfs.as_ref(), &dir, &rec, had_bad_checkpoint)?;
        }
        let found = Found {
            store_id: rec.store_id,
            index: rec.index,
            tail: rec.tail,
            report: rec.report,
        };
        if opts.read_only {
            Ok(Self::open_read_only(dir, opts, found))
        } else {
            Self::open_writable(dir, opts, found, lock)
        }
    }

    /// A read-only store: it reads up to the tail recovery found and starts
    /// no thread (it never writes, so it has no flusher and no preparer).
    fn open_read_only(dir: PathBuf, opts: Options, found: Found) -> Store {
        let vfs = opts.vfs.clone();
        let store_id = found.store_id.unwrap_or_default();
        let (seg, off, seq) = found
            .tail
            .unwrap_or((FIRST_SEGMENT, SEGMENT_HEADER_BYTES as u32, 0));
        let end = LogPos::new(seg, off);
        let shared = Self::make_shared(dir, opts, store_id, found.index, end, seq, None, None);
        shared.reader.set_active(seg, None);
        Store {
            blobs: super::blobs::BlobDir::with_vfs(&shared.dir, vfs.clone()),
            attached: Mutex::new(Vec::new()),
            shared: Arc::new(shared),
            flusher: Mutex::new(None),
            preparer: Mutex::new(None),
            report: found.report,
            live: Default::default(),
        }
    }

    /// A writable store, once recovery's plan is applied: the active segment
    /// (created for a new store), the segment pool, the writer at the tail,
    /// then the flusher and the preparer threads.
    fn open_writable(
        dir: PathBuf,
        opts: Options,
        found: Found,
        lock: Option<Box<dyn LockGuard>>,
    ) -> Result<Store> {
        let vfs = opts.vfs.clone();
        let (store_id, seg, off, seq) =
            tail_or_first_segment(vfs.as_ref(), &dir, &opts, found.store_id, found.tail)?;
        let path = segment_path(&dir, seg);
        let end = LogPos::new(seg, off);
        let (file, len, recycled) = open_active(vfs.as_ref(), &path)?;
        let pool = open_pool(vfs.as_ref(), &dir, &opts, seg)?;
        let writer = WriterFile::at(seg, path, file.clone(), off, len, recycled);
        let last = (seq > 0).then_some((end, 0));
        let leaders = opts.flush_in_caller;
        let mut shared = Self::make_shared(dir, opts, store_id, found.index, end, seq, lock, last);
        shared.pool = pool;
        shared.commit.set_writer(writer, leaders);
        shared.reader.set_active(seg, Some(file));
        let shared = Arc::new(shared);
        let handle = spawn_flusher(&shared)?;
        let preparer = spawn_preparer(&shared);
        Ok(Store {
            preparer: Mutex::new(preparer),
            blobs: super::blobs::BlobDir::with_vfs(&shared.dir, vfs.clone()),
            attached: Mutex::new(Vec::new()),
            shared,
            flusher: Mutex::new(Some(handle)),
            report: found.report,
            live: Default::default(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn make_shared(
        dir: PathBuf,
        opts: Options,
        store_id: [u8; 16],
        index: Index,
        end: LogPos,
        next_batch_seq: u64,
        lock: Option<Box<dyn LockGuard>>,
        last_batch: Option<(LogPos, u32)>,
    ) -> Shared {
        Shared {
            vfs: opts.vfs.clone(),
            reader: SegmentReader::new(dir.clone(), opts.vfs.clone(), store_id, opts.read_only),
            commit: CommitQueue::new(
                end,
                next_batch_seq,
                last_batch,
                opts.segment_bytes,
                opts.flush_bytes,
            ),
            dir,
            opts,
            store_id,
            index: RwLock::new(index),
            checkpoint_lock: Mutex::new(None),
            poller_started: Default::default(),
            lock: Mutex::new(lock),
            gc_gate: RwLock::new(()),
            gc_active: Default::default(),
            gc_running: Mutex::new(()),
            gc_stop: Default::default(),
            gc_summaries: Default::default(),
            gc_generation: Default::default(),
            pool: SegmentPool::none(),
        }
    }
}

/// How many times a read-only open is tried while a collection changes the
/// directory under it.
pub const READ_ONLY_OPEN_TRIES: u32 = 20;

/// What an online collection changes in a store directory: its files (names
/// and lengths: a compacted segment is renamed over the first file of its
/// range), the collection manifest, and the index checkpoint it rewrites at
/// its end (its length, 64-byte header and closing CRC of the whole file,
/// FORMAT.md §7: what identifies its content without reading it all).
type DirState = (
    Vec<(String, Option<u64>)>,
    Option<Vec<u8>>,
    Option<(u64, Vec<u8>)>,
);

fn dir_state(vfs: &dyn crate::vfs::Vfs, dir: &Path) -> DirState {
    let mut names = vfs.list(dir).unwrap_or_default();
    names.sort();
    let files = names
        .into_iter()
        .map(|n| {
            let len = vfs.open(&dir.join(&n), false).and_then(|f| f.len()).ok();
            (n, len)
        })
        .collect();
    let manifest =
        crate::vfs::read_whole(vfs, &dir.join(crate::index::reclaimed::MANIFEST_FILE)).ok();
    let ckpt = vfs
        .open(&dir.join(crate::index::checkpoint::CHECKPOINT_FILE), false)
        .ok()
        .and_then(|f| {
            let len = f.len().ok()?;
            let head = len.min(64) as usize;
            let mut bytes = vec![0u8; head + 4];
            let n = f.read_at(&mut bytes[..head], 0).ok()?;
            let m = f.read_at(&mut bytes[head..], len.saturating_sub(4)).ok()?;
            bytes.truncate(head.min(n) + m.min(4));
            Some((len, bytes))
        });
    (files, manifest, ckpt)
}

/// What an open keeps of the recovery pass's plan: the plan's own type is
/// private to `recovery`, so the steps after it take these fields.
struct Found {
    store_id: Option<[u8; 16]>,
    index: Index,
    /// Where the next batch goes: segment, offset, batch sequence.
    tail: Option<(SegmentId, u32, u64)>,
    report: RecoveryReport,
}

/// Options an open refuses before it touches the directory: segments too
/// small for a header, a batch header and a page of data, and a salvage
/// open that could write (it leaves the damaged bytes in the log, where no
/// later append may follow them).
fn check_options(opts: &Options) -> Result<()> {
    let min_segment = (SEGMENT_HEADER_BYTES + BATCH_HEADER_BYTES + 4096) as u32;
    if opts.segment_bytes < min_segment {
        return Err(Error::InvalidArgument(format!(
            "segment_bytes {} is below the minimum {min_segment}",
            opts.segment_bytes
        )));
    }
    if opts.recovery_mode == RecoveryMode::Salvage && !opts.read_only {
        return Err(Error::InvalidArgument(
            "recovery mode salvage opens read-only (the damaged bytes stay in the log); \
             export the sessions and import them into a new store"
                .into(),
        ));
    }
    Ok(())
}

/// The store directory, and for a writable open its lock (invariant 9: one
/// writer). A read-only open needs the directory to exist and takes no lock;
/// a writable one creates the directory and fails if another writer holds it.
fn lock_dir(vfs: &dyn Vfs, dir: &Path, read_only: bool) -> Result<Option<Box<dyn LockGuard>>> {
    if read_only {
        if !vfs.is_dir(dir) {
            return Err(Error::NoStore {
                dir: dir.to_path_buf(),
                detail: "no such directory".into(),
            });
        }
        return Ok(None);
    }
    vfs.create_dir_all(dir)
        .map_err(|e| Error::io("create store directory", dir, e))?;
    let lock = vfs
        .lock_exclusive(&dir.join(LOCK_FILE))
        .map_err(|e| Error::Locked {
            dir: dir.to_path_buf(),
            detail: e.to_string(),
        })?;
    Ok(Some(lock))
}

/// The index checkpoint recovery starts from (none if `use_checkpoints` is
/// off), and why a damaged one was refused: recovery reports it and the
/// plan's application removes the file.
fn load_checkpoint(
    vfs: &dyn Vfs,
    dir: &Path,
    use_checkpoints: bool,
) -> Result<(Option<Checkpoint>, Option<String>)> {
    Ok(match checkpoint::load(vfs, dir)? {
        None => (None, None),
        Some(Ok(ck)) if use_checkpoints => (Some(ck), None),
        Some(Ok(_)) => (None, None),
        Some(Err(why)) => (None, Some(why)),
    })
}

/// Where appends go: the tail recovery found, or, for a new store (or one
/// whose only segment was a torn creation), a fresh first segment. Returns
/// the store id, the segment, the offset and the next batch sequence.
fn tail_or_first_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    opts: &Options,
    store_id: Option<[u8; 16]>,
    tail: Option<(SegmentId, u32, u64)>,
) -> Result<([u8; 16], SegmentId, u32, u64)> {
    Ok(match (store_id, tail) {
        (Some(id), Some((seg, off, seq))) => (id, seg, off, seq),
        (store_id, _) => {
            // A new store (or one whose only segment was a torn creation).
            let mut id = [0u8; 16];
            rand::thread_rng().fill_bytes(&mut id);
            let id = store_id.unwrap_or(id);
            let spec = SegmentSpec {
                store_id: id,
                id: FIRST_SEGMENT,
                first_batch_seq: 0,
                prev_segment_end: 0,
                preallocate_bytes: opts.preallocate.then_some(opts.segment_bytes as u64),
            };
            create_segment(vfs, dir, &spec, None).map_err(|e| e.into_error())?;
            (id, FIRST_SEGMENT, SEGMENT_HEADER_BYTES as u32, 0)
        }
    })
}

/// The active segment opened for writing: the file, its length, and whether
/// its header carries the recycled flag (bytes after the end of data are
/// then stale, FORMAT.md §6.3, and the writer overwrites rather than fills).
fn open_active(vfs: &dyn Vfs, path: &Path) -> Result<(Arc<dyn VfsFile>, u64, bool)> {
    let file = vfs
        .open(path, true)
        .map_err(|e| Error::io("open active segment", path, e))?;
    let len = file
        .len()
        .map_err(|e| Error::io("stat active segment", path, e))?;
    let mut head = [0u8; SEGMENT_HEADER_BYTES];
    let n = file
        .read_at(&mut head, 0)
        .map_err(|e| Error::io("read active segment header", path, e))?;
    let recycled = frame::header_is_recycled(&head[..n]);
    Ok((file, len, recycled))
}

/// The pool of free segment files for the segments after `seg`. Both
/// recycling and preparing files ahead of need apply only with
/// `preallocate` ([`Options::recycle_segments`],
/// [`Options::prepare_segments`]), and preparing only where zeroing ahead
/// helps the file layer ([`crate::vfs::Vfs::zero_ahead_helps`]).
fn open_pool(vfs: &dyn Vfs, dir: &Path, opts: &Options, seg: SegmentId) -> Result<SegmentPool> {
    SegmentPool::open(
        vfs,
        dir,
        if opts.preallocate {
            opts.recycle_segments
        } else {
            0
        },
        opts.segment_bytes as u64,
        seg,
        opts.preallocate && opts.prepare_segments && vfs.zero_ahead_helps(),
    )
}

/// Start the flusher: the thread that writes and syncs committed batches,
/// and writes an index checkpoint when a segment rolls. Unlike the
/// preparer it is not optional: failing to start it fails the open.
fn spawn_flusher(shared: &Arc<Shared>) -> Result<JoinHandle<()>> {
    let s2 = shared.clone();
    std::thread::Builder::new()
        .name("turnstone-flusher".into())
        .spawn(move || {
            let sh = &*s2;
            let checkpoint = || write_checkpoint(sh, CheckpointWhy::Roll);
            let env = sh.flush_env(&checkpoint);
            commit::run_flusher(&sh.commit, &env);
        })
        .map_err(|e| Error::io("spawn flusher thread", &shared.dir, e))
}

/// Start the preparer if the pool prepares segments. Without it (off, or
/// its thread could not start) the writer creates fresh segments: nothing
/// else changes.
fn spawn_preparer(shared: &Arc<Shared>) -> Option<JoinHandle<()>> {
    if shared.pool.prepares() {
        let s3 = shared.clone();
        std::thread::Builder::new()
            .name("turnstone-prepare".into())
            .spawn(move || s3.pool.run_preparer(s3.vfs.as_ref(), &s3.dir))
            .ok()
    } else {
        None
    }
}
