//! `Store`: one directory, one writer. Opening takes the lock (invariant 9),
//! runs the recovery pass, applies its repairs to the bytes (zero a torn tail,
//! drop a half-created segment), then starts the flusher. Appends, durability
//! waits and reads go through here; see [`crate::commit`] for the group commit.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, RwLock};
use rand::RngCore;

use crate::checkpoint::{self, Checkpoint, CHECKPOINT_TMP_FILE};
use crate::commit::{PendingBatch, State, Stats, WriterFile};
use crate::error::{Error, Result};
use crate::frame::{
    self, decode_frame, encode_frame, frame_padded_len, FrameHeader, Salt, SegmentHeader,
    SessionDefine, BATCH_BODY_BYTES_MAX, BATCH_FLAG_CLEAN_CLOSE, BATCH_HEADER_BYTES,
    FORMAT_VERSION, FRAME_HEADER_BYTES, KIND_SESSION_DEFINE, PAYLOAD_BYTES_MAX,
    SEGMENT_HEADER_BYTES, SESSION_NAME_BYTES_MAX,
};
use crate::index::Index;
use crate::recovery::{self, RecoveryMode, RecoveryReport};
use crate::types::{Appended, Event, EventRef, LogPos, SegmentId, Seq, SessionId};
use crate::vfs::{LockGuard, MappedBytes, OsVfs, Vfs, VfsFile};

/// Name of the lock file inside a store directory.
pub const LOCK_FILE: &str = "LOCK";
/// First segment number of a new store.
pub const FIRST_SEGMENT: SegmentId = SegmentId(frame::FIRST_SEGMENT_ID);

/// How to open a store.
#[derive(Debug, Clone)]
pub struct Options {
    /// Segment size; a segment rolls when the next batch would not fit.
    pub segment_bytes: u32,
    /// What to do with damage found on open.
    pub recovery_mode: RecoveryMode,
    /// Open without the lock, without changing a byte; appends are refused.
    pub read_only: bool,
    /// Pending bytes that make the flusher write without anyone waiting.
    pub flush_bytes: usize,
    /// Preallocate (and so zero) each segment when it is created.
    pub preallocate: bool,
    /// Write index checkpoints (at every segment roll and at close).
    pub checkpoints: bool,
    /// The file layer.
    pub vfs: Arc<dyn Vfs>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_bytes: 64 << 20,
            recovery_mode: RecoveryMode::default(),
            read_only: false,
            flush_bytes: 1 << 20,
            preallocate: true,
            checkpoints: true,
            vfs: Arc::new(OsVfs),
        }
    }
}

/// Where a session stands in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMeta {
    pub id: SessionId,
    pub len: u64,
    /// Events `0..durable_len` are durable.
    pub durable_len: u64,
    /// Position of the `session-define` frame: identifies this incarnation
    /// of the session id in this store.
    pub define_pos: LogPos,
    pub parent: Option<(String, u64)>,
}

/// Facts about one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub name: String,
    pub id: SessionId,
    pub len: u64,
    /// Fork parent name and the number of events inherited from it.
    pub parent: Option<(String, u64)>,
}

pub(crate) struct Shared {
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    opts: Options,
    store_id: [u8; 16],
    state: Mutex<State>,
    /// Wakes the flusher.
    work_cv: Condvar,
    /// Wakes durability waiters.
    durable_cv: Condvar,
    /// Segment the flusher writes to; lower ones are sealed.
    active_segment: AtomicU32,
    writer: Mutex<Option<WriterFile>>,
    files: RwLock<HashMap<SegmentId, Arc<dyn VfsFile>>>,
    maps: RwLock<HashMap<SegmentId, MappedBytes>>,
    /// Serialises checkpoint writers (the flusher after a roll, and close).
    checkpoint_lock: Mutex<()>,
    _lock: Option<Box<dyn LockGuard>>,
}

/// An open store. Cheap to share across threads (`Arc<Store>` or `&Store`).
pub struct Store {
    shared: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    report: RecoveryReport,
    live: crate::live::LiveSet,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.shared.dir)
            .finish()
    }
}

fn seg_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(frame::segment_file_name(id))
}

impl Store {
    /// Open (or create) the store in `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Self::open_with(dir, Options::default())
    }

    /// Open (or create, unless read-only) the store in `dir`.
    pub fn open_with(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        let vfs = opts.vfs.clone();
        let min_segment = (SEGMENT_HEADER_BYTES + BATCH_HEADER_BYTES + 4096) as u32;
        if opts.segment_bytes < min_segment {
            return Err(Error::InvalidArgument(format!(
                "segment_bytes {} is below the minimum {min_segment}",
                opts.segment_bytes
            )));
        }
        if opts.read_only {
            if !vfs.is_dir(&dir) {
                return Err(Error::NoStore {
                    dir,
                    detail: "no such directory".into(),
                });
            }
        } else {
            vfs.create_dir_all(&dir)
                .map_err(|e| Error::io("create store directory", &dir, e))?;
        }
        let lock = if opts.read_only {
            None
        } else {
            Some(
                vfs.lock_exclusive(&dir.join(LOCK_FILE))
                    .map_err(|e| Error::Locked {
                        dir: dir.clone(),
                        detail: e.to_string(),
                    })?,
            )
        };
        let (ck, ck_problem) = match checkpoint::load(vfs.as_ref(), &dir)? {
            None => (None, None),
            Some(Ok(ck)) if opts.checkpoints => (Some(ck), None),
            Some(Ok(_)) => (None, None),
            Some(Err(why)) => (None, Some(why)),
        };
        let had_bad_checkpoint = ck_problem.is_some();
        let rec = recovery::recover(
            vfs.as_ref(),
            &dir,
            opts.recovery_mode,
            ck,
            ck_problem,
            lock.is_some(),
        )?;
        if opts.read_only && rec.segments.is_empty() && rec.store_id.is_none() {
            return Err(Error::NoStore {
                dir,
                detail: "no segment files".into(),
            });
        }
        let report = rec.report.clone();
        if opts.read_only {
            let store_id = rec.store_id.unwrap_or_default();
            let (seg, off, seq) =
                rec.tail
                    .unwrap_or((FIRST_SEGMENT, SEGMENT_HEADER_BYTES as u32, 0));
            let end = LogPos::new(seg, off);
            let shared = Self::make_shared(dir, opts, store_id, rec.index, end, seq, None, None);
            shared.active_segment.store(seg.0, Ordering::SeqCst);
            return Ok(Store {
                shared: Arc::new(shared),
                flusher: Mutex::new(None),
                report,
                live: Default::default(),
            });
        }

        // Apply what recovery decided, before anything new is written. A
        // checkpoint that no longer matches goes first: once the log is cut it
        // would claim durability for bytes that are gone (FORMAT.md §6.4).
        if rec.remove_checkpoint || had_bad_checkpoint {
            checkpoint::remove(vfs.as_ref(), &dir)?;
        }
        for (seg, from, to) in &rec.zero_ranges {
            zero_range(vfs.as_ref(), &seg_path(&dir, *seg), *from, *to)?;
        }
        let mut dir_dirty = false;
        for seg in &rec.remove_segments {
            let p = seg_path(&dir, *seg);
            if vfs.exists(&p) {
                vfs.remove(&p)
                    .map_err(|e| Error::io("remove segment", &p, e))?;
                dir_dirty = true;
            }
        }
        let tmp = dir.join(CHECKPOINT_TMP_FILE);
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)
                .map_err(|e| Error::io("remove stale checkpoint", &tmp, e))?;
            dir_dirty = true;
        }
        if dir_dirty {
            vfs.sync_dir(&dir)
                .map_err(|e| Error::io("fsync directory", &dir, e))?;
        }

        let (store_id, seg, off, seq) = match (rec.store_id, rec.tail) {
            (Some(id), Some((seg, off, seq))) => (id, seg, off, seq),
            (store_id, _) => {
                // A new store (or one whose only segment was a torn creation).
                let mut id = [0u8; 16];
                rand::thread_rng().fill_bytes(&mut id);
                let id = store_id.unwrap_or(id);
                create_segment(vfs.as_ref(), &dir, &opts, id, FIRST_SEGMENT, 0, 0)
                    .map_err(|(e, _)| e)?;
                (id, FIRST_SEGMENT, SEGMENT_HEADER_BYTES as u32, 0)
            }
        };
        let path = seg_path(&dir, seg);
        let file = vfs
            .open(&path, true)
            .map_err(|e| Error::io("open active segment", &path, e))?;
        let end = LogPos::new(seg, off);
        let writer = WriterFile {
            segment: seg,
            path,
            file: file.clone(),
            end: off,
        };
        let last = (seq > 0).then_some((end, 0));
        let shared = Self::make_shared(dir, opts, store_id, rec.index, end, seq, lock, last);
        shared.active_segment.store(seg.0, Ordering::SeqCst);
        *shared.writer.lock() = Some(writer);
        shared.files.write().insert(seg, file);
        let shared = Arc::new(shared);
        let s2 = shared.clone();
        let handle = std::thread::Builder::new()
            .name("turnstone-flusher".into())
            .spawn(move || flusher_loop(&s2))
            .map_err(|e| Error::io("spawn flusher thread", &shared.dir, e))?;
        Ok(Store {
            shared,
            flusher: Mutex::new(Some(handle)),
            report,
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
            dir,
            opts,
            store_id,
            state: Mutex::new(State {
                index,
                queued: Default::default(),
                open: None,
                append_end: end,
                next_batch_seq,
                durable: end,
                durable_next_batch_seq: next_batch_seq,
                durable_last_batch: last_batch,
                flush_target: end,
                write_failed: None,
                fail_epoch: 0,
                retry_requested: false,
                poisoned: None,
                closing: false,
                flusher_done: false,
                checkpoint_due: false,
                stats: Stats::default(),
            }),
            work_cv: Condvar::new(),
            durable_cv: Condvar::new(),
            active_segment: AtomicU32::new(0),
            writer: Mutex::new(None),
            files: RwLock::new(HashMap::new()),
            maps: RwLock::new(HashMap::new()),
            checkpoint_lock: Mutex::new(()),
            _lock: lock,
        }
    }

    /// What the recovery pass found and did when this store was opened.
    /// The sessions that have a writable handle in this process.
    pub fn live_sessions(&self) -> &crate::live::LiveSet {
        &self.live
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The file layer this store uses (derived files such as snapshots go
    /// through it too).
    pub fn vfs(&self) -> &Arc<dyn Vfs> {
        &self.shared.vfs
    }

    /// The random identity of this store (in every segment header).
    pub fn store_id(&self) -> [u8; 16] {
        self.shared.store_id
    }

    /// Counters since open.
    pub fn stats(&self) -> Stats {
        self.shared.state.lock().stats
    }

    /// End of the durable log: every frame before it survives any crash.
    pub fn durable_pos(&self) -> LogPos {
        self.shared.state.lock().durable
    }

    /// Append one event to `session` (created on first use). Returns at once
    /// with its seq and position; it is durable after a later
    /// [`Store::sync`] or [`Store::wait_durable`] returns.
    ///
    /// `kind` 0 is reserved for the engine; `flags` bit 0 is `ignorable`.
    pub fn append(&self, session: &str, kind: u16, flags: u16, payload: &[u8]) -> Result<Appended> {
        let mut out = None;
        self.append_group(session, &[(kind, flags, payload)], |a| out = Some(a))?;
        Ok(out.expect("one event appended"))
    }

    /// Append several events to one session atomically: they go into one
    /// commit batch, so after a crash either all or none of them exist.
    /// `each` is called with every event's [`Appended`] in order.
    pub fn append_group(
        &self,
        session: &str,
        events: &[(u16, u16, &[u8])],
        mut each: impl FnMut(Appended),
    ) -> Result<()> {
        self.check_writable()?;
        validate_session_name(session)?;
        let mut need = 0usize;
        for (kind, _, payload) in events {
            if *kind == KIND_SESSION_DEFINE {
                return Err(Error::InvalidArgument(
                    "event kind 0 is reserved for the engine".into(),
                ));
            }
            if payload.len() > PAYLOAD_BYTES_MAX {
                return Err(Error::TooLarge {
                    what: "event payload",
                    len: payload.len() as u64,
                    max: PAYLOAD_BYTES_MAX as u64,
                });
            }
            need += frame_padded_len(payload.len());
        }
        let sh = &*self.shared;
        let mut st = sh.state.lock();
        check_usable(&st)?;
        let existing = st.index.by_name.get(session).copied();
        let define = match existing {
            Some(_) => None,
            None => Some(
                SessionDefine {
                    name: session.to_string(),
                    parent: None,
                }
                .encode(),
            ),
        };
        if let Some(d) = &define {
            need += frame_padded_len(d.len());
        }
        self.reserve(&mut st, need)?;
        let sid = match existing {
            Some(id) => id,
            None => {
                let id = SessionId(st.index.sessions.len() as u32);
                let def = define.as_ref().expect("define encoded");
                self.push_frame(&mut st, id, KIND_SESSION_DEFINE, 0, 0, def, true)?;
                id
            }
        };
        for (kind, flags, payload) in events {
            let seq = st.index.sessions[sid.0 as usize].len();
            let (pos, end) = self.push_frame(&mut st, sid, *kind, *flags, seq, payload, false)?;
            st.stats.appends += 1;
            st.stats.payload_bytes += payload.len() as u64;
            each(Appended {
                session: sid,
                seq: Seq(seq),
                pos,
                end,
            });
        }
        if st.pending_bytes() >= sh.opts.flush_bytes {
            sh.work_cv.notify_one();
        }
        Ok(())
    }

    /// Create an empty session (a no-op error if it exists).
    pub fn create_session(&self, session: &str) -> Result<SessionId> {
        self.define(session, None)
    }

    /// Create `child` as a fork of `parent` holding its events `0..upto` by
    /// reference (no event body is copied; FORMAT.md §5). The child's own
    /// appends start at seq `upto`.
    pub fn fork(&self, parent: &str, upto: u64, child: &str) -> Result<SessionId> {
        let (pid, len) = {
            let st = self.shared.state.lock();
            let (pid, e) = st
                .index
                .get(parent)
                .ok_or_else(|| Error::UnknownSession(parent.to_string()))?;
            (pid, e.len())
        };
        if upto > len {
            return Err(Error::SeqOutOfRange {
                session: parent.to_string(),
                seq: upto,
                len,
            });
        }
        self.define(child, Some((pid, upto)))
    }

    fn define(&self, name: &str, parent: Option<(SessionId, u64)>) -> Result<SessionId> {
        self.check_writable()?;
        validate_session_name(name)?;
        let def = SessionDefine {
            name: name.to_string(),
            parent,
        }
        .encode();
        let mut st = self.shared.state.lock();
        check_usable(&st)?;
        if st.index.by_name.contains_key(name) {
            return Err(Error::SessionExists(name.to_string()));
        }
        if let Some((p, upto)) = parent {
            // Re-check under the lock: the parent cannot shrink, but be exact.
            if st.index.entry(p).map_or(0, |e| e.len()) < upto {
                return Err(Error::InvalidArgument(
                    "fork point beyond the parent's end".into(),
                ));
            }
        }
        self.reserve(&mut st, frame_padded_len(def.len()))?;
        let id = SessionId(st.index.sessions.len() as u32);
        self.push_frame(&mut st, id, KIND_SESSION_DEFINE, 0, 0, &def, true)?;
        Ok(id)
    }

    /// Make room for `need` bytes of frames in the open batch, closing it or
    /// rolling to a new segment as needed.
    fn reserve(&self, st: &mut State, need: usize) -> Result<()> {
        let seg_bytes = self.shared.opts.segment_bytes as usize;
        let max = BATCH_BODY_BYTES_MAX.min(seg_bytes - SEGMENT_HEADER_BYTES - BATCH_HEADER_BYTES);
        if need > max {
            return Err(Error::TooLarge {
                what: "event group",
                len: need as u64,
                max: max as u64,
            });
        }
        if let Some(open) = &st.open {
            let fits_batch = open.body_len() + need <= BATCH_BODY_BYTES_MAX;
            let fits_seg = st.append_end.offset() as usize + need <= seg_bytes;
            if !(fits_batch && fits_seg) {
                let b = st.open.take().expect("open batch");
                st.queued.push_back(b);
                self.shared.work_cv.notify_one();
            }
        }
        if st.open.is_none() {
            let mut at = st.append_end;
            if at.offset() as usize + BATCH_HEADER_BYTES + need > seg_bytes {
                at = LogPos::new(SegmentId(at.segment().0 + 1), SEGMENT_HEADER_BYTES as u32);
            }
            let b = PendingBatch::new(at.segment(), at.offset(), st.next_batch_seq);
            st.next_batch_seq += 1;
            st.append_end = LogPos::new(at.segment(), at.offset() + BATCH_HEADER_BYTES as u32);
            st.open = Some(b);
        }
        Ok(())
    }

    /// Encode one frame into the open batch (room was reserved) and index it.
    #[allow(clippy::too_many_arguments)]
    fn push_frame(
        &self,
        st: &mut State,
        sid: SessionId,
        kind: u16,
        flags: u16,
        seq: u64,
        payload: &[u8],
        is_define: bool,
    ) -> Result<(LogPos, LogPos)> {
        let open = st.open.as_mut().expect("reserved");
        let salt = Salt {
            store_id: self.shared.store_id,
            segment: open.segment,
        };
        let pos = LogPos::new(open.segment, open.offset + open.buf.len() as u32);
        encode_frame(&mut open.buf, &salt, sid, kind, flags, seq, payload);
        open.frames += 1;
        let end = LogPos::new(open.segment, open.offset + open.buf.len() as u32);
        st.append_end = end;
        if is_define {
            let def =
                SessionDefine::decode(payload).map_err(|e| Error::InvalidArgument(e.into()))?;
            st.index
                .apply_define(sid, &def, pos)
                .map_err(Error::InvalidArgument)?;
        } else {
            st.index
                .apply_frame(sid, seq, pos)
                .map_err(Error::InvalidArgument)?;
        }
        Ok((pos, end))
    }

    fn check_writable(&self) -> Result<()> {
        if self.shared.opts.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    /// Wait until everything appended before this call is durable.
    pub fn sync(&self) -> Result<LogPos> {
        if self.shared.opts.read_only {
            return Ok(self.durable_pos());
        }
        let target = self.shared.state.lock().append_end;
        self.wait_durable(target)?;
        Ok(target)
    }

    /// Wait until the log is durable at least up to `pos` (for example an
    /// [`Appended::end`]). Only this caller's own prefix is waited for, but one
    /// fdatasync serves every waiter at once.
    pub fn wait_durable(&self, pos: LogPos) -> Result<()> {
        let sh = &*self.shared;
        let mut st = sh.state.lock();
        let mut asked_retry_at: Option<u64> = None;
        loop {
            if st.durable >= pos {
                return Ok(());
            }
            if let Some((op, detail)) = &st.poisoned {
                return Err(Error::Poisoned {
                    op,
                    detail: detail.clone(),
                });
            }
            if st.flusher_done {
                return Err(Error::Closed);
            }
            if let Some(detail) = &st.write_failed {
                match asked_retry_at {
                    Some(epoch) if st.fail_epoch > epoch => {
                        return Err(Error::WriteFailed {
                            detail: detail.clone(),
                        })
                    }
                    Some(_) => {}
                    None => {
                        asked_retry_at = Some(st.fail_epoch);
                        st.retry_requested = true;
                    }
                }
            }
            if st.flush_target < pos {
                st.flush_target = pos;
            }
            sh.work_cv.notify_one();
            sh.durable_cv.wait(&mut st);
        }
    }

    /// Wait until every event of `session` appended so far is durable.
    pub fn sync_session(&self, session: &str) -> Result<()> {
        let last = {
            let st = self.shared.state.lock();
            let (_, e) = st
                .index
                .get(session)
                .ok_or_else(|| Error::UnknownSession(session.to_string()))?;
            // The last own frame, or else the define (which follows every
            // inherited frame).
            match e.positions.last() {
                Some(p) => LogPos(*p + 1),
                None => LogPos(e.define_pos.0 + 1),
            }
        };
        if self.shared.opts.read_only {
            return Ok(());
        }
        self.wait_durable(last)
    }

    /// Facts about one session, including how much of it is durable.
    pub fn session_meta(&self, session: &str) -> Option<SessionMeta> {
        let st = self.shared.state.lock();
        let (id, e) = st.index.get(session)?;
        let durable_len = st.index.len_before(id, st.durable);
        Some(SessionMeta {
            id,
            len: e.len(),
            durable_len: if self.shared.opts.read_only {
                e.len()
            } else {
                durable_len
            },
            define_pos: e.define_pos,
            parent: e
                .parent
                .map(|(p, n)| (st.index.sessions[p.0 as usize].name.to_string(), n)),
        })
    }

    /// Number of events in `session`, if it exists.
    pub fn session_len(&self, session: &str) -> Option<u64> {
        self.shared
            .state
            .lock()
            .index
            .get(session)
            .map(|(_, e)| e.len())
    }

    /// All sessions, in creation order.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        let st = self.shared.state.lock();
        st.index
            .sessions
            .iter()
            .enumerate()
            .map(|(i, s)| SessionInfo {
                name: s.name.to_string(),
                id: SessionId(i as u32),
                len: s.len(),
                parent: s
                    .parent
                    .map(|(p, n)| (st.index.sessions[p.0 as usize].name.to_string(), n)),
            })
            .collect()
    }

    /// Read one event.
    pub fn read(&self, session: &str, seq: u64) -> Result<Event> {
        let mut v = self.read_range(session, seq..seq + 1)?;
        v.pop().ok_or_else(|| Error::SeqOutOfRange {
            session: session.to_string(),
            seq,
            len: self.session_len(session).unwrap_or(0),
        })
    }

    /// Read the events of `session` with seq in `range` (clamped to the
    /// session's length), in seq order. Events not yet written are made
    /// durable first.
    pub fn read_range(&self, session: &str, range: std::ops::Range<u64>) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        self.visit_range(session, range, |e| {
            out.push(e.to_event());
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Visit the events of `session` with seq in `range` (clamped to the
    /// session's length), in seq order, lending each payload instead of
    /// copying it: out of the segment's map (sealed segments), or out of the
    /// active segment's live map (lent once per walk, for the span of the
    /// walk's frames, which are durable and never written again). Checks are those of
    /// [`Store::read_range`] (checksum, seq, owner); events not yet written
    /// are made durable first. The visitor stops the walk with
    /// `ControlFlow::Break`. Returns the number of events visited.
    pub fn visit_range(
        &self,
        session: &str,
        range: std::ops::Range<u64>,
        mut visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64> {
        let (positions, start, owners, durable) = {
            let st = self.shared.state.lock();
            let (sid, e) = st
                .index
                .get(session)
                .ok_or_else(|| Error::UnknownSession(session.to_string()))?;
            let end = range.end.min(e.len());
            let start = range.start.min(end);
            // The sessions whose frames these are: itself and the fork
            // ancestors the range reads through (inherited events keep
            // their parent's session id), sorted for `check_frame`.
            let (positions, owners) = st.index.positions_and_owners_in(sid, start..end);
            (positions, start, owners, st.durable)
        };
        if let Some(last) = positions.last() {
            if *last >= durable.0 && !self.shared.opts.read_only {
                self.wait_durable(LogPos(*last + 1))?;
            }
        }
        // Positions grow with seq (inherited frames precede the define, own
        // frames follow it), so each segment's frames form one run.
        let mut visited = 0;
        let mut i = 0;
        while i < positions.len() {
            let seg = LogPos(positions[i]).segment();
            let n = positions[i..]
                .iter()
                .take_while(|p| LogPos(**p).segment() == seg)
                .count();
            let run = Run {
                seg,
                positions: &positions[i..i + n],
                first_seq: start + i as u64,
                owners: &owners,
            };
            if self.visit_run(&run, &mut visit, &mut visited)?.is_break() {
                break;
            }
            i += n;
        }
        Ok(visited)
    }

    /// Visit one segment's run of frames.
    fn visit_run(
        &self,
        run: &Run<'_>,
        visit: &mut dyn FnMut(EventRef<'_>) -> ControlFlow<()>,
        visited: &mut u64,
    ) -> Result<ControlFlow<()>> {
        let sh = &*self.shared;
        let salt = Salt {
            store_id: sh.store_id,
            segment: run.seg,
        };
        let path = seg_path(&sh.dir, run.seg);
        // Walk the run over the segment's bytes from offset `base`.
        let mut walk = |bytes: &[u8], base: usize, visited: &mut u64| -> Result<ControlFlow<()>> {
            for (k, p) in run.positions.iter().enumerate() {
                let seq = run.first_seq + k as u64;
                let off = LogPos(*p).offset() as usize;
                // (A position below `base` can only come from a damaged
                // index: it is reported, never read.)
                let frame = off
                    .checked_sub(base)
                    .and_then(|o| bytes.get(o..))
                    .ok_or_else(|| {
                        Error::corrupt(
                            &path,
                            off as u64,
                            "indexed frame lies past the end of the segment",
                        )
                    })?;
                let (h, payload) = check_frame(frame, &salt, seq, run.owners)
                    .map_err(|d| Error::corrupt(&path, off as u64, d))?;
                *visited += 1;
                let flow = visit(event_ref(&h, payload, seq, *p));
                if flow.is_break() {
                    return Ok(flow);
                }
            }
            Ok(ControlFlow::Continue(()))
        };
        if let Some(map) = self.segment_bytes_for_read(run.seg)? {
            return walk(&map, 0, visited);
        }
        let file = self.active_file(run.seg)?;
        let io = |e| Error::io("read frame", &path, e);
        if !sh.opts.read_only {
            // The run's frames are durable (waited for above) and durable
            // bytes are never written again: lend the span from its first
            // frame to the end of its last one out of the live map, once.
            let first = LogPos(run.positions[0]).offset() as u64;
            let last = LogPos(*run.positions.last().expect("a run is not empty")).offset() as u64;
            let mut head = [0u8; FRAME_HEADER_BYTES];
            if file.read_stable(&mut head, last).map_err(io)? < FRAME_HEADER_BYTES {
                return Err(Error::corrupt(
                    &path,
                    last,
                    "indexed frame lies past the end of the segment",
                ));
            }
            let len = frame_len(&head).map_err(|d| Error::corrupt(&path, last, d))?;
            let Some(span) = last.checked_sub(first).map(|d| d as usize + len) else {
                return Err(Error::corrupt(
                    &path,
                    last,
                    "index positions out of log order",
                ));
            };
            let mut out = None;
            let lent = file
                .lend_stable(first, span, &mut |bytes| {
                    out = Some(walk(bytes, first as usize, visited));
                })
                .map_err(io)?;
            return match out {
                Some(r) if lent => r,
                _ => Err(Error::corrupt(
                    &path,
                    last,
                    "frame cut short by the end of the segment",
                )),
            };
        }
        // A read-only store (its writer may be another process): copy each
        // frame with plain system calls.
        let mut buf = Vec::new();
        for (k, p) in run.positions.iter().enumerate() {
            let seq = run.first_seq + k as u64;
            let off = LogPos(*p).offset() as u64;
            let corrupt = |d: String| Error::corrupt(&path, off, d);
            let mut head = [0u8; FRAME_HEADER_BYTES];
            if file.read_at(&mut head, off).map_err(io)? < FRAME_HEADER_BYTES {
                return Err(corrupt(
                    "indexed frame lies past the end of the segment".into(),
                ));
            }
            let len = frame_len(&head).map_err(corrupt)?;
            buf.resize(len, 0);
            if file.read_at(&mut buf, off).map_err(io)? < len {
                return Err(corrupt("frame cut short by the end of the segment".into()));
            }
            let (h, payload) = check_frame(&buf, &salt, seq, run.owners).map_err(corrupt)?;
            *visited += 1;
            let flow = visit(event_ref(&h, payload, seq, *p));
            if flow.is_break() {
                return Ok(flow);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    fn segment_bytes_for_read(&self, seg: SegmentId) -> Result<Option<MappedBytes>> {
        let sh = &*self.shared;
        let active = SegmentId(sh.active_segment.load(Ordering::SeqCst));
        if seg >= active {
            return Ok(None);
        }
        if let Some(m) = sh.maps.read().get(&seg) {
            return Ok(Some(m.clone()));
        }
        let path = seg_path(&sh.dir, seg);
        let file = sh
            .vfs
            .open(&path, false)
            .map_err(|e| Error::io("open segment", &path, e))?;
        let map = file.map().map_err(|e| Error::io("map segment", &path, e))?;
        sh.maps.write().insert(seg, map.clone());
        Ok(Some(map))
    }

    fn active_file(&self, seg: SegmentId) -> Result<Arc<dyn VfsFile>> {
        let sh = &*self.shared;
        if let Some(f) = sh.files.read().get(&seg) {
            return Ok(f.clone());
        }
        let path = seg_path(&sh.dir, seg);
        let f = sh
            .vfs
            .open(&path, false)
            .map_err(|e| Error::io("open segment", &path, e))?;
        sh.files.write().insert(seg, f.clone());
        Ok(f)
    }

    /// Flush everything, write a clean-close marker and an index checkpoint,
    /// and stop the flusher. Returns the first error met (the store is closed
    /// either way; reopening recovers from the durable log).
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<()> {
        let sh = &*self.shared;
        let handle = self.flusher.lock().take();
        let Some(handle) = handle else {
            return Ok(());
        };
        let mut result = Ok(());
        // Drain, then mark a clean close.
        match self.sync() {
            Ok(_) => {
                let mut st = sh.state.lock();
                if st.write_failed.is_none() && st.poisoned.is_none() {
                    let _ = self.reserve(&mut st, 0);
                    if let Some(open) = st.open.as_mut() {
                        open.flags |= BATCH_FLAG_CLEAN_CLOSE;
                    }
                    let target = st.append_end;
                    drop(st);
                    result = self.wait_durable(target);
                }
            }
            Err(e) => result = Err(e),
        }
        if result.is_ok() && sh.opts.checkpoints {
            if let Err(e) = write_checkpoint(sh) {
                // A checkpoint is an optimisation; the log is the truth.
                sh.state.lock().stats.checkpoint_errors += 1;
                let _ = e;
            }
        }
        {
            let mut st = sh.state.lock();
            st.closing = true;
            sh.work_cv.notify_all();
        }
        let _ = handle.join();
        result
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn check_usable(st: &State) -> Result<()> {
    if let Some((op, detail)) = &st.poisoned {
        return Err(Error::Poisoned {
            op,
            detail: detail.clone(),
        });
    }
    if st.closing || st.flusher_done {
        return Err(Error::Closed);
    }
    Ok(())
}

fn validate_session_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > SESSION_NAME_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "session id must be 1 to {SESSION_NAME_BYTES_MAX} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

/// One segment's frames of a [`Store::visit_range`] walk.
struct Run<'a> {
    seg: SegmentId,
    positions: &'a [u64],
    first_seq: u64,
    /// The session and its fork ancestors whose frames the run may hold,
    /// sorted by id.
    owners: &'a [SessionId],
}

/// The frame length a frame header states, if it is possible.
fn frame_len(head: &[u8; FRAME_HEADER_BYTES]) -> std::result::Result<usize, String> {
    let len = u32::from_le_bytes(head[0..4].try_into().expect("4")) as usize;
    if !(FRAME_HEADER_BYTES..=FRAME_HEADER_BYTES + PAYLOAD_BYTES_MAX).contains(&len) {
        return Err(format!("impossible frame length {len}"));
    }
    Ok(len)
}

fn event_ref<'a>(h: &FrameHeader, payload: &'a [u8], seq: u64, pos: u64) -> EventRef<'a> {
    EventRef {
        seq: Seq(seq),
        kind: h.kind,
        flags: h.flags,
        payload,
        pos: LogPos(pos),
    }
}

/// Decode the frame at the start of `frame` and check that it is event
/// `seq` of one of `owners` (sorted by id); returns its header and payload.
fn check_frame<'a>(
    frame: &'a [u8],
    salt: &Salt,
    seq: u64,
    owners: &[SessionId],
) -> std::result::Result<(FrameHeader, &'a [u8]), String> {
    let h = decode_frame(frame, salt).map_err(|e| e.to_string())?;
    if h.seq != seq || owners.binary_search(&h.session).is_err() || h.kind == KIND_SESSION_DEFINE {
        return Err(format!(
            "index points at a frame of session {} seq {} (kind {}), expected seq {seq}",
            h.session.0, h.seq, h.kind
        ));
    }
    Ok((h, &frame[FRAME_HEADER_BYTES..h.frame_len as usize]))
}

/// Zero the non-zero bytes of `[from, to)` (to = u32::MAX: to the end of the
/// file) and make that durable.
fn zero_range(vfs: &dyn Vfs, path: &Path, from: u32, to: u32) -> Result<()> {
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

/// Create a segment file: preallocate, write its header, fsync it, fsync the
/// directory. Only then may a batch be written into it. A failure says
/// whether it came before any fsync (`false`: nothing was claimed durable,
/// the creation can be retried and reuses the leftover file) or from a
/// failed fsync (`true`: the store must be poisoned).
fn create_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    opts: &Options,
    store_id: [u8; 16],
    id: SegmentId,
    first_batch_seq: u64,
    prev_segment_end: u32,
) -> std::result::Result<Arc<dyn VfsFile>, (Error, bool)> {
    let path = seg_path(dir, id);
    let retryable = |e| (e, false);
    let file = match vfs.create_new(&path) {
        Ok(f) => f,
        // A leftover from an earlier failed attempt in this process: reuse it.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => vfs
            .open(&path, true)
            .map_err(|e| retryable(Error::io("open segment", &path, e)))?,
        Err(e) => return Err(retryable(Error::io("create segment", &path, e))),
    };
    if opts.preallocate {
        file.allocate(opts.segment_bytes as u64)
            .map_err(|e| retryable(Error::io("preallocate segment", &path, e)))?;
    }
    let header = SegmentHeader {
        version: FORMAT_VERSION,
        store_id,
        segment: id,
        first_batch_seq,
        prev_segment_end,
    };
    file.write_all_at(&header.encode(), 0)
        .map_err(|e| retryable(Error::io("write segment header", &path, e)))?;
    file.sync_data()
        .map_err(|e| (Error::io("fsync new segment", &path, e), true))?;
    vfs.sync_dir(dir)
        .map_err(|e| (Error::io("fsync directory", dir, e), true))?;
    Ok(file)
}

fn write_checkpoint(sh: &Shared) -> Result<()> {
    let _guard = sh.checkpoint_lock.lock();
    let ck = {
        let st = sh.state.lock();
        let Some((last_batch, last_flags)) = st.durable_last_batch else {
            return Ok(());
        };
        Checkpoint {
            store_id: sh.store_id,
            covered: st.durable,
            next_batch_seq: st.durable_next_batch_seq,
            last_batch,
            last_batch_flags: last_flags,
            index: st.index.prefix_before(st.durable),
        }
    };
    checkpoint::write(sh.vfs.as_ref(), &sh.dir, &ck)?;
    let mut st = sh.state.lock();
    st.stats.checkpoints_written += 1;
    st.stats.metadata_syncs += 2;
    Ok(())
}

enum FlushError {
    /// The write failed: the batch is kept for an explicit retry.
    Write(String),
    /// fdatasync (or a new segment's fsync) failed: poison.
    Fatal(&'static str, String),
}

/// The flusher: take one batch at a time, write it, fdatasync it, publish.
fn flusher_loop(sh: &Shared) {
    loop {
        let mut batch = {
            let mut st = sh.state.lock();
            loop {
                if st.poisoned.is_some() {
                    st.flusher_done = true;
                    sh.durable_cv.notify_all();
                    return;
                }
                let has_work = st.has_work();
                if st.closing && (!has_work || st.write_failed.is_some()) {
                    st.flusher_done = true;
                    sh.durable_cv.notify_all();
                    return;
                }
                let stalled = st.write_failed.is_some() && !st.retry_requested;
                let wanted = st.flush_target > st.durable
                    || st.pending_bytes() >= sh.opts.flush_bytes
                    || st.closing;
                if has_work && wanted && !stalled {
                    break;
                }
                sh.work_cv.wait(&mut st);
            }
            st.retry_requested = false;
            match st.queued.pop_front() {
                Some(b) => b,
                None => st.open.take().expect("has work"),
            }
        };
        let result = write_batch(sh, &mut batch);
        let mut st = sh.state.lock();
        match result {
            Ok(rolled) => {
                st.durable = batch.end();
                st.durable_next_batch_seq = batch.batch_seq + 1;
                st.durable_last_batch = Some((batch.start(), batch.flags));
                st.write_failed = None;
                st.stats.batches += 1;
                st.stats.syncs += 1;
                st.stats.bytes_written += batch.buf.len() as u64;
                if rolled {
                    st.stats.segments_created += 1;
                    // The new segment's fdatasync and the directory fsync.
                    st.stats.metadata_syncs += 2;
                    st.checkpoint_due = sh.opts.checkpoints;
                }
                sh.durable_cv.notify_all();
            }
            Err(FlushError::Write(detail)) => {
                st.stats.write_failures += 1;
                st.queued.push_front(batch);
                st.write_failed = Some(detail);
                st.fail_epoch += 1;
                sh.durable_cv.notify_all();
            }
            Err(FlushError::Fatal(op, detail)) => {
                st.poisoned = Some((op, detail));
                st.flusher_done = true;
                sh.durable_cv.notify_all();
                return;
            }
        }
        if st.checkpoint_due && !st.has_work() {
            st.checkpoint_due = false;
            drop(st);
            if write_checkpoint(sh).is_err() {
                sh.state.lock().stats.checkpoint_errors += 1;
            }
        }
    }
}

/// Write and sync one batch; create its segment first if it starts one.
/// Returns whether a new segment was created.
fn write_batch(sh: &Shared, batch: &mut PendingBatch) -> std::result::Result<bool, FlushError> {
    let mut w = sh.writer.lock();
    let w = w.as_mut().expect("writer present while the flusher runs");
    let mut rolled = false;
    if batch.segment != w.segment {
        debug_assert_eq!(batch.segment.0, w.segment.0 + 1);
        // A full disk (or any failure) before the new segment's fsync is a
        // failed write: the batch is kept and the creation retried; a failed
        // fsync poisons like any other.
        let file = create_segment(
            sh.vfs.as_ref(),
            &sh.dir,
            &sh.opts,
            sh.store_id,
            batch.segment,
            batch.batch_seq,
            w.end,
        )
        .map_err(|(e, fsync_failed)| {
            if fsync_failed {
                FlushError::Fatal("segment creation", e.to_string())
            } else {
                FlushError::Write(e.to_string())
            }
        })?;
        sh.files.write().insert(batch.segment, file.clone());
        // The old segment is sealed from now on: reads may map it.
        sh.files.write().remove(&w.segment);
        *w = WriterFile {
            segment: batch.segment,
            path: seg_path(&sh.dir, batch.segment),
            file,
            end: SEGMENT_HEADER_BYTES as u32,
        };
        sh.active_segment.store(batch.segment.0, Ordering::SeqCst);
        rolled = true;
    }
    debug_assert_eq!(batch.offset, w.end, "batches are written back to back");
    let salt = Salt {
        store_id: sh.store_id,
        segment: batch.segment,
    };
    batch.seal(&salt);
    w.file
        .write_all_at(&batch.buf, batch.offset as u64)
        .map_err(|e| FlushError::Write(format!("{}: {e}", w.path.display())))?;
    w.file
        .sync_data()
        .map_err(|e| FlushError::Fatal("fdatasync", format!("{}: {e}", w.path.display())))?;
    w.end = batch.offset + batch.buf.len() as u32;
    Ok(rolled)
}
