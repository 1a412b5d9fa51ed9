//! `Store`, the façade of the lower layers: one directory, one writer.
//!
//! Opening takes the lock (invariant 9), runs the recovery pass
//! ([`crate::recovery`]: scan, classify, plan), applies the plan to the bytes
//! (zero a torn tail, drop a half-created segment), then starts the flusher
//! ([`crate::commit`]). An append takes the commit queue's lock, then the
//! index's, so that a session's seqs follow log order; reads take only the
//! index's lock and go to the segment reader ([`crate::log`]).
//!
//! Lock order: commit queue, then index. Nothing takes them the other way.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

use crate::commit::{CommitQueue, RetryState, State, Stats};
use crate::error::{Error, Result};
use crate::frame::{
    frame_padded_len, SessionDefine, BATCH_FLAG_CLEAN_CLOSE, KIND_SESSION_DEFINE,
    PAYLOAD_BYTES_MAX, SESSION_NAME_BYTES_MAX,
};
use crate::index::checkpoint::{self, Checkpoint, Delta};
use crate::index::Index;
use crate::log::{Run, SegmentReader};
use crate::recovery::RecoveryReport;
use crate::types::{Appended, Event, EventRef, LogPos, Seq, SessionId};
use crate::vfs::{LockGuard, Vfs};

pub mod archive;
pub mod blobs;
mod checkpointing;
pub(crate) use checkpointing::{write_checkpoint, CheckpointChain, CheckpointWhy};
mod follow;
pub mod gc;
mod open;
mod options;
mod read;
#[cfg(test)]
mod sparse_reads_tests;

pub use follow::{DurableWait, NextEvent, ReadyWait, Subscription, FOLLOW_POLL};

pub use options::{Options, SessionInfo, SessionMeta, FIRST_SEGMENT, LOCK_FILE};

pub(crate) struct Shared {
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    opts: Options,
    store_id: [u8; 16],
    commit: CommitQueue,
    /// The index, behind its own lock (readers never wait for appenders'
    /// commit lock).
    index: RwLock<Index>,
    reader: SegmentReader,
    /// Serialises checkpoint writers (the flusher after a roll, and close),
    /// and a read-only store's refreshes. Holds the chain of checkpoint and
    /// deltas this process wrote ([`write_checkpoint`]).
    checkpoint_lock: Mutex<Option<CheckpointChain>>,
    /// A read-only store's follow poller runs ([`Store::subscribe`]).
    poller_started: std::sync::atomic::AtomicBool,
    /// The directory lock, released at close ([`Store::shutdown`]).
    lock: Mutex<Option<Box<dyn LockGuard>>>,
    /// An online collection ([`Store::collect`]) replaces a range of sealed
    /// segment files and the index positions into them under this lock's
    /// write side; a read holds the read side from copying positions out of
    /// the index until it has walked them, so it never reads a position in
    /// a file that was replaced meanwhile.
    gc_gate: RwLock<()>,
    /// An online collection is rewriting segments: index checkpoints are
    /// not written meanwhile (§14.4 step 3: none may name positions in
    /// files about to change).
    gc_active: std::sync::atomic::AtomicBool,
    /// One online collection at a time.
    gc_running: Mutex<()>,
    /// Free files: collected segment files kept for new segments
    /// ([`Options::recycle_segments`], FORMAT.md §6.2 rule 7).
    pool: crate::log::SegmentPool,
    /// What online collections learned of each sealed segment (FORMAT.md
    /// §14.5): a run reads only the segments it rewrites and the ones
    /// sealed since the last run.
    gc_summaries: Mutex<gc::Summaries>,
    /// Online collections that moved frames in this handle's life: a view
    /// that remembers positions (the catalog) checks it.
    gc_generation: std::sync::atomic::AtomicU64,
    /// Set at close: a running collection stops at its next step.
    gc_stop: std::sync::atomic::AtomicBool,
}

/// An open store. Cheap to share across threads (`Arc<Store>` or `&Store`).
pub struct Store {
    shared: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// Writes free files of zeros ahead of need
    /// ([`Options::prepare_segments`]).
    preparer: Mutex<Option<JoinHandle<()>>>,
    report: RecoveryReport,
    live: crate::live::LiveSet,
    /// The store's blob files (FORMAT.md §15).
    blobs: blobs::BlobDir,
    /// Things that live as long as the store is open (a host's server,
    /// docs/MULTIPROCESS.md): dropped first at close.
    attached: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.shared.dir)
            .finish()
    }
}

impl Store {
    /// Keep `thing` until the store closes (it is dropped first then).
    pub(crate) fn attach(&self, thing: Box<dyn std::any::Any + Send>) {
        self.attached.lock().push(thing);
    }

    /// The sessions that have a writable handle in this process.
    pub fn live_sessions(&self) -> &crate::live::LiveSet {
        &self.live
    }

    /// What the recovery pass found and did when this store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The store's blob directory (FORMAT.md §15): large payload parts the
    /// session layer stores out of line.
    pub fn blobs(&self) -> &blobs::BlobDir {
        &self.blobs
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.shared.opts.read_only
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
        let mut s = self.shared.commit.lock().stats;
        let p = self.shared.pool.prepare_counts();
        s.prepared_files = p.files;
        s.prepared_bytes = p.bytes;
        s.prepare_errors = p.errors;
        let reads = &self.shared.reader.counts;
        s.segments_read_whole = reads.scans.load(std::sync::atomic::Ordering::Relaxed);
        s.segment_bytes_read_whole = reads.scan_bytes.load(std::sync::atomic::Ordering::Relaxed);
        s
    }

    /// Why the thread that writes segment files ahead of need
    /// ([`Options::prepare_segments`]) last failed, if it failed since
    /// open: the step and the file, as in `"I/O error during fdatasync a
    /// prepared file on /data/store/0000000000.tseg.free.tmp: …"`. A
    /// failure costs no data (the writer then creates its next segment as
    /// without the option); [`Stats::prepare_errors`] counts them.
    pub fn last_prepare_error(&self) -> Option<String> {
        self.shared.pool.last_prepare_error()
    }

    /// End of the durable log: every frame before it survives any crash.
    pub fn durable_pos(&self) -> LogPos {
        self.shared.commit.durable()
    }

    /// [`Store::durable_pos`] without taking the commit lock: a position
    /// that is durable, at most a flush behind.
    pub(crate) fn durable_hint(&self) -> LogPos {
        self.shared.commit.durable_hint()
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
        each: impl FnMut(Appended),
    ) -> Result<()> {
        self.append_group_at(session, None, None, events, each)
            .map(|_| ())
    }

    /// [`Store::append_group`] when the session holds exactly `len` events
    /// (none for a session not yet defined) at the moment of the append,
    /// checked under the lock the append takes. `Ok(Err(actual))`: it
    /// holds `actual` events, and nothing was appended. `hint` is the id
    /// an earlier append gave the session (`Appended::session`): it spares
    /// the lookup by name, and is used only if it still names `session`.
    pub(crate) fn append_group_at_len(
        &self,
        session: &str,
        hint: Option<SessionId>,
        len: u64,
        events: &[(u16, u16, &[u8])],
        each: impl FnMut(Appended),
    ) -> Result<std::result::Result<(), u64>> {
        self.append_group_at(session, hint, Some(len), events, each)
    }

    fn append_group_at(
        &self,
        session: &str,
        hint: Option<SessionId>,
        expect_len: Option<u64>,
        events: &[(u16, u16, &[u8])],
        mut each: impl FnMut(Appended),
    ) -> Result<std::result::Result<(), u64>> {
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
        // The name is hashed here, under the index's shared lock, not under
        // the commit lock every appender serialises on: a name, once
        // defined, keeps its id for the life of the store.
        let known = match hint {
            Some(id) => Some(id),
            None => sh.index.read().by_name.get(session).copied(),
        };
        let mut st = sh.commit.lock();
        st.check_usable()?;
        let mut ix = sh.index.write();
        // A hint is trusted only while it names this session (ids are
        // never reused within a store, so this holds for its life).
        let known = known.filter(|id| {
            ix.sessions
                .get(id.0 as usize)
                .is_some_and(|e| &*e.name == session)
        });
        let existing = known.or_else(|| ix.by_name.get(session).copied());
        if let Some(&keep) = existing.and_then(|id| ix.reclaimed.get(&id)) {
            // FORMAT.md §14.2: collected as deleted; frames appended under
            // its name would be skipped by the next open.
            return Err(Error::SessionDeleted {
                session: session.to_string(),
                seq: keep,
            });
        }
        if let Some(want) = expect_len {
            let actual = existing.map_or(0, |id| ix.sessions[id.0 as usize].len());
            if actual != want {
                return Ok(Err(actual));
            }
        }
        let define = match existing {
            Some(_) => None,
            None => Some(SessionDefine {
                name: session.to_string(),
                parent: None,
            }),
        };
        let define_bytes = define.as_ref().map(|d| d.encode());
        if let Some(d) = &define_bytes {
            need += frame_padded_len(d.len());
        }
        sh.commit.reserve(&mut st, need)?;
        // The group goes into this one batch, whole (all or nothing after a
        // crash): `reserve` made room for every frame of it.
        let batch = st.open.as_ref().map(|b| b.batch_seq);
        debug_assert!(batch.is_some(), "reserve leaves a batch open");
        let sid = match (existing, &define, &define_bytes) {
            (Some(id), _, _) => id,
            (None, Some(def), Some(bytes)) => {
                let id = SessionId(ix.sessions.len() as u32);
                self.push_define(&mut st, &mut ix, id, def, bytes)?;
                id
            }
            _ => unreachable!("a define is encoded for a new session"),
        };
        let mut last_end = st.append_end;
        for (kind, flags, payload) in events {
            let seq = ix.sessions[sid.0 as usize].len();
            let (pos, end) = st.push_frame(sh.store_id, sid, *kind, *flags, seq, payload);
            // Positions are assigned in log order, under the commit lock.
            debug_assert!(pos >= last_end && end > pos, "frame positions move forward");
            last_end = end;
            ix.apply_frame(sid, seq, pos)
                .map_err(Error::InvalidArgument)?;
            debug_assert_eq!(ix.sessions[sid.0 as usize].len(), seq + 1, "seqs are dense");
            st.stats.appends += 1;
            st.stats.payload_bytes += payload.len() as u64;
            each(Appended {
                session: sid,
                seq: Seq(seq),
                pos,
                end,
            });
        }
        debug_assert_eq!(
            st.open.as_ref().map(|b| b.batch_seq),
            batch,
            "an event group is never split across batches"
        );
        sh.commit.nudge(&st);
        Ok(Ok(()))
    }

    /// The largest event group (padded frames, a define frame included)
    /// one [`Store::append_group`] can take: one commit batch, at most
    /// [`crate::frame::BATCH_BODY_BYTES_MAX`] and less with small segments.
    pub fn group_bytes_max(&self) -> usize {
        self.shared.commit.group_bytes_max()
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
            let ix = self.shared.index.read();
            let (pid, e) = ix
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
        };
        let bytes = def.encode();
        let sh = &*self.shared;
        let mut st = sh.commit.lock();
        st.check_usable()?;
        let mut ix = sh.index.write();
        if ix.by_name.contains_key(name) {
            return Err(Error::SessionExists(name.to_string()));
        }
        if let Some((p, upto)) = parent {
            if let Some(keep) = ix.reclaimed.get(&p) {
                // Collected (online) since the parent was looked up.
                return Err(Error::SessionDeleted {
                    session: ix.sessions[p.0 as usize].name.to_string(),
                    seq: *keep,
                });
            }
            // Re-check under the lock: the parent cannot shrink, but be exact.
            if ix.entry(p).map_or(0, |e| e.len()) < upto {
                return Err(Error::InvalidArgument(
                    "fork point beyond the parent's end".into(),
                ));
            }
        }
        sh.commit.reserve(&mut st, frame_padded_len(bytes.len()))?;
        let id = SessionId(ix.sessions.len() as u32);
        self.push_define(&mut st, &mut ix, id, &def, &bytes)?;
        Ok(id)
    }

    /// Encode a `session-define` frame into the open batch (room was
    /// reserved) and index it.
    fn push_define(
        &self,
        st: &mut State,
        ix: &mut Index,
        id: SessionId,
        def: &SessionDefine,
        bytes: &[u8],
    ) -> Result<()> {
        let (pos, _) = st.push_frame(self.shared.store_id, id, KIND_SESSION_DEFINE, 0, 0, bytes);
        ix.apply_define(id, def, pos)
            .map_err(Error::InvalidArgument)
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
        let target = self.shared.commit.lock().append_end;
        self.wait_durable(target)?;
        Ok(target)
    }

    /// Wait until the log is durable at least up to `pos` (for example an
    /// [`Appended::end`]). Only this caller's own prefix is waited for, but one
    /// fdatasync serves every waiter at once.
    pub fn wait_durable(&self, pos: LogPos) -> Result<()> {
        self.shared.wait_durable(pos)
    }

    /// Wait until every event of `session` appended so far is durable.
    pub fn sync_session(&self, session: &str) -> Result<()> {
        let last = self.session_end_pos(session)?;
        if self.shared.opts.read_only {
            return Ok(());
        }
        self.wait_durable(last)
    }

    /// Wait until the log is durable at least up to `pos`, as a future: the
    /// waiting task holds no thread (the flusher wakes it, with every other
    /// waiter, after the fdatasync that covers `pos`). Runtime-agnostic.
    pub fn wait_durable_async(&self, pos: LogPos) -> DurableWait {
        DurableWait {
            shared: (!self.shared.opts.read_only).then(|| self.shared.clone()),
            pos,
            retry: RetryState::default(),
        }
    }

    /// [`Store::sync`] as a future ([`Store::wait_durable_async`]).
    pub fn sync_async(&self) -> DurableWait {
        let target = self.shared.commit.lock().append_end;
        self.wait_durable_async(target)
    }

    /// Follow `session` from `from_seq` on: every event of it as it becomes
    /// durable, in seq order, exactly once, blocking ([`Iterator`]) or as a
    /// future per event ([`Subscription::next_async`]). Woken by the flusher
    /// after the fdatasync of a batch holding a frame of this session (tasks
    /// and blocked threads alike): a subscriber never polls and
    /// never causes an fdatasync of its own. It resumes from any seq, including the prefix
    /// a fork inherits; it ends (`None`) when the store closes. On a
    /// read-only store it follows what another process writes
    /// ([`Subscription`] says how).
    pub fn subscribe(&self, session: &str, from_seq: u64) -> Result<Subscription> {
        if self.session_len(session).is_none() {
            return Err(Error::UnknownSession(session.to_string()));
        }
        Ok(Subscription::new(self.shared.clone(), session, from_seq))
    }

    /// A store opened read-only: take in what the process that writes this
    /// store appended since (whole batches that validate, made durable
    /// first), so that reads and [`Store::sessions`] see it. Returns the
    /// number of frames taken in; 0 on a writable store, whose index is
    /// always current. Subscriptions of a read-only store call it for you.
    pub fn refresh(&self) -> Result<u64> {
        self.shared.refresh()
    }

    /// Flush everything, write a clean-close marker and an index checkpoint,
    /// and stop the flusher. Returns the first error met (the store is closed
    /// either way; reopening recovers from the durable log).
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// [`Store::close`] through a shared reference, for a store that other
    /// handles (sessions, subscriptions, bindings) still hold: everything
    /// appended is made durable, the clean-close marker and a checkpoint are
    /// written, the flusher stops and the directory lock is released. Later
    /// writes fail with [`Error::Closed`]; what is durable can still be read.
    /// Calling it again does nothing.
    pub fn shutdown(&self) -> Result<()> {
        // What serves this store to other processes stops first: they
        // must not be answered by a store that is closing.
        drop(std::mem::take(&mut *self.attached.lock()));
        let sh = &*self.shared;
        // Stop an online collection and wait for it: it must not rename or
        // remove files once the directory lock is released.
        sh.gc_stop.store(true, std::sync::atomic::Ordering::SeqCst);
        drop(sh.gc_running.lock());
        // The same for the preparer (it removes a file it had not finished).
        sh.pool.stop_preparer();
        if let Some(p) = self.preparer.lock().take() {
            let _ = p.join();
        }
        let handle = self.flusher.lock().take();
        let Some(handle) = handle else {
            // Read-only (or already closed): end what follows this store.
            let mut st = sh.commit.lock();
            st.flusher_done = true;
            sh.commit.notify_durable(&mut st);
            return Ok(());
        };
        let mut result = Ok(());
        // Drain, then mark a clean close.
        match self.sync() {
            Ok(_) => {
                let mut st = sh.commit.lock();
                if st.write_failed.is_none() && st.poisoned.is_none() {
                    let _ = sh.commit.reserve(&mut st, 0);
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
            if let Err(e) = write_checkpoint(sh, CheckpointWhy::Close) {
                // A checkpoint is an optimisation; the log is the truth.
                sh.commit.lock().stats.checkpoint_errors += 1;
                let _ = e;
            }
        }
        sh.commit.close();
        let _ = handle.join();
        sh.lock.lock().take();
        result
    }
}

impl Shared {
    /// What writing a batch needs: the flusher's, and a waiting thread's
    /// when it leads a write ([`Shared::wait_durable`]).
    pub(crate) fn flush_env<'a>(
        &'a self,
        checkpoint: &'a dyn Fn() -> Result<()>,
    ) -> crate::commit::FlusherEnv<'a> {
        crate::commit::FlusherEnv {
            vfs: self.vfs.as_ref(),
            dir: &self.dir,
            store_id: self.store_id,
            preallocate_bytes: self
                .opts
                .preallocate
                .then_some(self.opts.segment_bytes as u64),
            checkpoints: self.opts.checkpoints,
            zero_step_bytes: if self.opts.preallocate && self.vfs.zero_ahead_helps() {
                self.opts.zero_ahead_bytes as u64
            } else {
                0
            },
            pool: Some(&self.pool),
            reader: &self.reader,
            page_bytes: self.vfs.page_bytes(),
            direct_writes: self.opts.direct_writes,
            checkpoint,
        }
    }

    /// Wait until the log is durable up to `pos`; with
    /// [`Options::flush_in_caller`], writing the next batch in this thread
    /// when it waits alone and none is in flight (a leader never writes a
    /// checkpoint: the flusher does, after a roll).
    pub(crate) fn wait_durable(&self, pos: LogPos) -> Result<()> {
        if self.opts.read_only || !self.opts.flush_in_caller {
            return self.commit.wait_durable(pos, None);
        }
        let checkpoint = || write_checkpoint(self, CheckpointWhy::Roll);
        let env = self.flush_env(&checkpoint);
        self.commit.wait_durable(pos, Some(&env))
    }

    pub(crate) fn visit_range(
        &self,
        session: &str,
        range: std::ops::Range<u64>,
        mut visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64> {
        // Recursive: a visit may read again while a collection waits.
        let _gate = self.gc_gate.read_recursive();
        let (positions, start, owners) = {
            let ix = self.index.read();
            let (sid, e) = ix
                .get(session)
                .ok_or_else(|| Error::UnknownSession(session.to_string()))?;
            let end = range.end.min(e.len());
            let start = range.start.min(end);
            // The sessions whose frames these are: itself and the fork
            // ancestors the range reads through (inherited events keep
            // their parent's session id), sorted for the frame check.
            let (positions, owners) = ix.positions_and_owners_in(sid, start..end);
            (positions, start, owners)
        };
        if let Some(last) = positions.last() {
            if !self.opts.read_only && *last >= self.commit.durable().0 {
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
            if self
                .reader
                .visit_run(&run, &mut visit, &mut visited)?
                .is_break()
            {
                break;
            }
            i += n;
        }
        Ok(visited)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
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

#[cfg(test)]
mod append_hint_tests {
    use super::*;

    /// A hint that names another session is not used: the events go to
    /// the session named, and the length check counts that session's.
    #[test]
    fn a_hint_naming_another_session_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = store.append("a", 6, 0, b"{}").unwrap().session;
        store.append("b", 6, 0, b"{}").unwrap();
        store.append("b", 6, 0, b"{}").unwrap();
        let mut got = Vec::new();
        let r = store
            .append_group_at_len("b", Some(a), 2, &[(6, 0, b"{}")], |x| {
                got.push((x.session, x.seq))
            })
            .unwrap();
        assert_eq!(r, Ok(()));
        assert_eq!(store.session_len("a"), Some(1));
        assert_eq!(store.session_len("b"), Some(3));
        assert_ne!(got[0].0, a);
        assert_eq!(got[0].1, Seq(2));
        // The length is b's: a hint of a (one event) does not make 1 right.
        let r = store
            .append_group_at_len("b", Some(a), 1, &[(6, 0, b"{}")], |_| {})
            .unwrap();
        assert_eq!(r, Err(3));
        assert_eq!(store.session_len("b"), Some(3));
        // A hint past every session is ignored too; a new name is defined.
        let r = store
            .append_group_at_len("c", Some(SessionId(999)), 0, &[(6, 0, b"{}")], |_| {})
            .unwrap();
        assert_eq!(r, Ok(()));
        assert_eq!(store.session_len("c"), Some(1));
    }
}
