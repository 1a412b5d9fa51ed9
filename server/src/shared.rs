//! The streams on a database several server instances share (issue 18 §3;
//! docs/BACKENDS.md, "Stateless servers"). Every method here blocks (it
//! talks to PostgreSQL) and is called from a blocking task.
//!
//! An instance's registry is a cache: a stream is loaded on first use
//! (its path looked up in `turnstone_streams`, its session folded), and
//! before each read the instance reads the session's row and folds the
//! events another instance committed since ([`Streams::refresh`]). A write
//! is checked against the state this instance has, then queued at the
//! length that state has and committed under the stream's lease; if
//! another instance wrote in between, or took the lease, nothing is
//! written ([`Fail::Retry`]) and the request is folded and checked again.
//! So two instances never interleave within a stream, and a request's
//! answer rests on every event committed before it.

use std::sync::Arc;

use turnstone::LogPos;

use crate::log::{pg_fail, Commit, Shared};
use crate::record::{self, DeleteMode};
use crate::stream::{Fail, Stream};
use crate::streams::{same_config, AppendReq, Appended, CreateReq, Created, ForkReq, Streams};

/// Attempts of a request that keeps meeting another instance's writes.
const TRIES: usize = 16;

/// Events folded per database read when catching a stream up.
const FOLD_CHUNK: u64 = 1024;

/// An event read back: seq, kind, flags, payload.
type Event = (turnstone::Seq, u16, u16, Vec<u8>);

impl Streams {
    fn pg(&self) -> &Shared {
        self.log.shared().expect("a shared database")
    }

    /// Fold into `s` what the database committed past its state. If another
    /// instance took the stream's lease since this one's writer got it,
    /// that writer's queued groups are settled first (committed before the
    /// takeover, or fenced), and a stream whose accepted state included a
    /// group that did not commit is folded again from its start.
    pub fn refresh(&self, s: &Stream) -> Result<(), Fail> {
        self.fold_up(s).map(|_| ())
    }

    /// [`Streams::refresh`]; `true` when the state is now folded up to
    /// what the database held when it looked (not when another request
    /// changed the state meanwhile, or marked it stale).
    fn fold_up(&self, s: &Stream) -> Result<bool, Fail> {
        let Some(pg) = self.log.shared() else {
            return Ok(true);
        };
        let mut row = pg.log.lease_row(&s.session).map_err(pg_fail)?;
        if let Some(w) = pg.current(&s.session) {
            if w.is_broken() || w.epoch() != row.epoch {
                let settled = w.sync_to(w.len()).is_ok();
                // Forgotten with the state locked: an append that queued a
                // group on `w` after the wait (it was still current) is
                // then seen here, and its group, which may never commit,
                // is not left pending with no writer to say so (a stream
                // without a writer counts everything as durable).
                let mut st = s.state.lock();
                pg.forget_writer(&s.session, &w);
                if !settled || w.committed() < w.len() {
                    Self::stale_locked(&mut st);
                }
                drop(st);
                row = pg.log.lease_row(&s.session).map_err(pg_fail)?;
            }
        }
        if s.state.lock().stale {
            self.reload(s)?;
            return Ok(false);
        }
        let mut at = s.state.lock().tail.seq;
        if row.deleted && row.len > at {
            // Deleted (its hard tombstone committed, then the session
            // flagged): nothing more to read.
            let mut st = s.state.lock();
            st.deleted = Some(DeleteMode::Hard);
            st.vis_deleted = st.deleted;
            return Ok(true);
        }
        while at < row.len {
            let to = row.len.min(at + FOLD_CHUNK);
            let evs = self.events(&s.session, at..to)?;
            let mut st = s.state.lock();
            if st.tail.seq != at || st.stale {
                // Another request folded or wrote meanwhile, or a write
                // failed: not folded here.
                return Ok(false);
            }
            for (seq, kind, flags, payload) in &evs {
                let e = turnstone::EventRef {
                    seq: *seq,
                    kind: *kind,
                    flags: *flags,
                    payload,
                    pos: LogPos(0),
                };
                crate::rebuild::fold(&s.session, &mut st, &e).map_err(Fail::Internal)?;
            }
            st.pending.clear();
            st.vis = st.tail;
            st.vis_closed = st.closed;
            st.vis_deleted = st.deleted;
            if evs.is_empty() {
                break;
            }
            at = to;
        }
        Ok(!s.state.lock().stale)
    }

    /// Owned copies of events `range` of `session`.
    fn events(&self, session: &str, range: std::ops::Range<u64>) -> Result<Vec<Event>, Fail> {
        let mut evs = Vec::new();
        self.log.visit_range(session, range, |e| {
            evs.push((e.seq, e.kind, e.flags, e.payload.to_vec()));
            std::ops::ControlFlow::Continue(())
        })?;
        Ok(evs)
    }

    /// A queued group of `s` did not commit (or its outcome is unknown):
    /// hide what is not committed, and fold the stream again before it is
    /// used.
    pub(crate) fn mark_stale(&self, s: &Stream) {
        Self::stale_locked(&mut s.state.lock());
    }

    /// [`Streams::mark_stale`] with the state locked.
    fn stale_locked(st: &mut crate::stream::State) {
        st.stale = true;
        st.stale_marks += 1;
        st.pending.clear();
    }

    /// Fold `s` again from the start of its own events.
    fn reload(&self, s: &Stream) -> Result<(), Fail> {
        let pg = self.pg();
        let _one = s.reload.lock();
        let marks = {
            let st = s.state.lock();
            if !st.stale {
                // Another request folded it meanwhile.
                return Ok(());
            }
            st.stale_marks
        };
        if let Some(w) = pg.current(&s.session) {
            // Whatever this instance still has queued settles first.
            let _ = w.sync_to(w.len());
            pg.forget_writer(&s.session, &w);
        }
        let row = pg.log.lease_row(&s.session).map_err(pg_fail)?;
        let own_start = pg
            .log
            .parent(&s.session)
            .map_err(pg_fail)?
            .map_or(0, |(_, upto)| upto);
        let fresh = if row.deleted {
            None
        } else {
            match crate::rebuild::replay(&self.log, &s.session, own_start, row.len, 0) {
                Ok(f) => f,
                // Deleted (through any instance) while it was read.
                Err(Fail::NotFound) => None,
                Err(e) => return Err(e),
            }
        };
        let mut st = s.state.lock();
        match fresh {
            Some(mut f) => {
                f.last_access_ms = st.last_access_ms;
                f.touched_db_ms = st.touched_db_ms;
                f.forks = st.forks;
                f.stale_marks = st.stale_marks;
                // Marked again while this ran: fold again before use.
                f.stale = st.stale_marks != marks;
                *st = f;
            }
            None => {
                st.stale = false;
                st.deleted = Some(DeleteMode::Hard);
                st.vis_deleted = st.deleted;
            }
        }
        Ok(())
    }

    /// Wait for a queued group's commit; if it did not commit, the stream's
    /// state is folded again before its next use.
    fn wait_commit(&self, s: &Stream, commit: Option<&Commit>) -> Result<(), Fail> {
        let Some(c) = commit else {
            return Ok(());
        };
        self.pg().waits.time(|| c.wait()).inspect_err(|_| {
            self.mark_stale(s);
            c.forget(self.pg());
        })
    }

    /// Wait until everything this instance queued for `s` is committed
    /// (what an answer that writes nothing rests on).
    fn settle_writes(&self, s: &Stream) -> Result<(), Fail> {
        let pg = self.pg();
        let Some(w) = pg.current(&s.session) else {
            return Ok(());
        };
        if w.sync_to(w.len()).is_err() {
            self.mark_stale(s);
            pg.forget_writer(&s.session, &w);
            return Err(Fail::Retry);
        }
        Ok(())
    }

    /// The stream a session holds, folded from the database (`None`: not
    /// a stream, or hard-deleted).
    fn load(&self, session: &str, now_ms: u64) -> Result<Option<Arc<Stream>>, Fail> {
        let pg = self.pg();
        let row = match pg.log.lease_row(session) {
            Ok(r) => r,
            Err(turnstone_pg::PgError::UnknownSession(_)) => return Ok(None),
            Err(e) => return Err(pg_fail(e)),
        };
        if row.deleted {
            return Ok(None);
        }
        let own_start = pg
            .log
            .parent(session)
            .map_err(pg_fail)?
            .map_or(0, |(_, upto)| upto);
        let replayed = match crate::rebuild::replay(&self.log, session, own_start, row.len, now_ms)
        {
            Ok(r) => r,
            // Deleted (through any instance) while it was read.
            Err(Fail::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(mut state) = replayed else {
            return Ok(None);
        };
        if state.deleted == Some(DeleteMode::Hard) {
            return Ok(None);
        }
        state.last_access_ms = state.config.created_ms;
        let path = state.config.path.clone();
        Ok(Some(crate::streams::new_stream(
            &path,
            session,
            LogPos(0),
            state,
        )))
    }

    /// The stream at `path` (soft-deleted ones included), brought up to
    /// what the database holds.
    pub(crate) fn resolve(&self, path: &str, now_ms: u64) -> Result<Option<Arc<Stream>>, Fail> {
        self.resolve_with(path, now_ms, true)
    }

    /// [`Streams::resolve`]; `fresh: false` takes a loaded stream as it is.
    fn resolve_with(
        &self,
        path: &str,
        now_ms: u64,
        fresh: bool,
    ) -> Result<Option<Arc<Stream>>, Fail> {
        let cached = self.reg.lock().by_path.get(path).cloned();
        if let Some(s) = cached {
            if !fresh {
                return Ok(Some(s));
            }
            self.refresh(&s)?;
            // Hard-deleted by a request of this instance whose tombstone
            // may still be in flight: the path is not free (and the
            // session must not be loaded into a second object) until it
            // commits. If it did not commit, the stream is folded again.
            if s.state.lock().deleted == Some(DeleteMode::Hard) && self.settle_writes(&s).is_err() {
                self.refresh(&s)?;
            }
            if s.state.lock().deleted != Some(DeleteMode::Hard) {
                return Ok(Some(s));
            }
            Self::unlink(&mut self.reg.lock(), &s);
        }
        let pg = self.pg();
        let Some(row) = pg.log.stream_row(path).map_err(pg_fail)? else {
            return Ok(None);
        };
        match self.load(&row.session, now_ms)? {
            Some(s) => {
                {
                    let mut st = s.state.lock();
                    st.last_access_ms = st.last_access_ms.max(row.touched_ms.max(0) as u64);
                    st.touched_db_ms = st.last_access_ms;
                }
                // One stream object per session: a request that loaded the
                // same session at the same time and registered it first
                // wins (two objects would each accept appends against
                // their own state).
                let mut reg = self.reg.lock();
                if let Some(other) = reg.by_session.get(&s.session).cloned() {
                    reg.by_path.insert(path.to_string(), other.clone());
                    return Ok(Some(other));
                }
                reg.by_path.insert(path.to_string(), s.clone());
                reg.by_session.insert(s.session.clone(), s.clone());
                Ok(Some(s))
            }
            None => {
                // Mapped to a hard-deleted session (its instance stopped
                // between the tombstone and the unmapping): finish that.
                pg.log.unmap_stream(path, &row.session).map_err(pg_fail)?;
                Ok(None)
            }
        }
    }

    /// Whether `s` has expired, by the last access any instance recorded.
    fn expired(&self, s: &Stream, now_ms: u64) -> Result<bool, Fail> {
        if !s.state.lock().is_expired(now_ms) {
            return Ok(false);
        }
        if let Some(row) = self.pg().log.stream_row(&s.path).map_err(pg_fail)? {
            if row.session == s.session {
                let mut st = s.state.lock();
                st.last_access_ms = st.last_access_ms.max(row.touched_ms.max(0) as u64);
            }
        }
        Ok(s.state.lock().is_expired(now_ms))
    }

    /// The stream at `path` for a request (`fresh`: folded up to what the
    /// database holds first).
    pub(crate) fn lookup_shared(
        &self,
        path: &str,
        now_ms: u64,
        fresh: bool,
    ) -> Result<Arc<Stream>, Fail> {
        let s = self
            .resolve_with(path, now_ms, fresh)?
            .ok_or(Fail::NotFound)?;
        if self.expired(&s, now_ms)? {
            return Err(match self.delete_shared(&s, "expired", now_ms)? {
                DeleteMode::Soft => Fail::Gone,
                DeleteMode::Hard => Fail::NotFound,
            });
        }
        s.state.lock().check_visible()?;
        Ok(s)
    }

    pub(crate) fn create_shared(&self, req: &CreateReq, now_ms: u64) -> Result<Created, Fail> {
        let pg = self.pg();
        for _ in 0..TRIES {
            if let Some(existing) = self.resolve(&req.path, now_ms)? {
                if self.expired(&existing, now_ms)? {
                    if self.delete_shared(&existing, "expired", now_ms)? == DeleteMode::Soft {
                        return Err(Fail::Conflict(
                            "the stream was deleted but forks still read through it".into(),
                        ));
                    }
                    continue;
                }
                let st = existing.state.lock();
                if st.deleted == Some(DeleteMode::Soft) {
                    return Err(Fail::Conflict(
                        "the stream was deleted but forks still read through it".into(),
                    ));
                }
                if !same_config(req, &st.config) {
                    return Err(Fail::Conflict(
                        "the stream exists with a different configuration".into(),
                    ));
                }
                drop(st);
                return Ok(Created {
                    created: false,
                    stream: existing,
                    end: LogPos(0),
                    commit: None,
                });
            }
            let n = pg.log.next_stream_incarnation().map_err(pg_fail)?;
            let session = record::session_name(n);
            // A fork holds its source's lock until it is mapped: a deletion
            // of the source through any instance then either counts it (and
            // deletes softly) or went first (and the fork is refused).
            let mut source_lock = None;
            let made = match &req.fork {
                None => self.create_plain(req, &session, now_ms),
                Some(f) => self.fork_source_shared(f, now_ms).and_then(|src| {
                    source_lock = Some(pg.log.lock_stream_session(&src.session).map_err(pg_fail)?);
                    self.refresh(&src)?;
                    self.create_fork(&src, req, f, &session, now_ms)
                }),
            };
            let made = made.and_then(|c| {
                self.wait_commit(&c.stream, c.commit.as_ref())?;
                Ok(c)
            });
            let created = match made {
                Ok(c) => c,
                Err(Fail::Retry) => {
                    self.abandon(&session);
                    continue;
                }
                Err(e) => {
                    self.abandon(&session);
                    return Err(e);
                }
            };
            let expiry = {
                let st = created.stream.state.lock();
                turnstone_pg::StreamExpiry {
                    ttl_ms: st
                        .config
                        .ttl_secs
                        .map(|t| t.saturating_mul(1000).min(i64::MAX as u64) as i64),
                    expires_ms: st.config.expires_at_ms,
                }
            };
            if pg
                .log
                .map_stream(&req.path, &session, None, now_ms as i64, expiry)
                .map_err(pg_fail)?
            {
                drop(source_lock);
                created.stream.state.lock().touched_db_ms = now_ms;
                let mut reg = self.reg.lock();
                reg.by_path.insert(req.path.clone(), created.stream.clone());
                reg.by_session.insert(session, created.stream.clone());
                return Ok(created);
            }
            // Another instance created the path first: answer as for an
            // existing stream.
            self.abandon(&session);
        }
        Err(Fail::Retry)
    }

    /// A session made for a create that did not happen: flagged deleted
    /// (never mapped, so never a stream).
    fn abandon(&self, session: &str) {
        let pg = self.pg();
        pg.forget(session);
        let _ = pg.log.delete(session);
    }

    fn fork_source_shared(&self, f: &ForkReq, now_ms: u64) -> Result<Arc<Stream>, Fail> {
        let source = self
            .resolve(&f.source_path, now_ms)?
            .ok_or(Fail::NotFound)?;
        if self.expired(&source, now_ms)? {
            return Err(match self.delete_shared(&source, "expired", now_ms)? {
                DeleteMode::Soft => Fail::Conflict("the fork source was deleted".into()),
                DeleteMode::Hard => Fail::NotFound,
            });
        }
        Ok(source)
    }

    pub(crate) fn append_shared(
        &self,
        s: &Stream,
        req: &AppendReq,
        now_ms: u64,
    ) -> Result<Appended, Fail> {
        // The first attempt is checked against the state as loaded: if
        // another instance wrote since, the commit finds it (the writer's
        // length, or the fence) and writes nothing. Appends of one stream
        // queue behind each other without waiting (their groups commit
        // together). An answer that writes nothing (a duplicate, a
        // conflict, a gap, a closed stream) stands only when it came from
        // a state folded up to the database just before, and once the
        // groups it rests on are committed.
        let mut checked = false;
        for _ in 0..TRIES {
            match self.append_once(s, req, now_ms) {
                Ok(done) if !done.duplicate => match self.wait_commit(s, done.commit.as_ref()) {
                    Ok(()) => {
                        self.touch_shared(s, now_ms);
                        return Ok(done);
                    }
                    Err(Fail::Retry) => checked = self.fold_up(s)?,
                    Err(e) => return Err(e),
                },
                Err(Fail::Retry) => checked = self.fold_up(s)?,
                other => {
                    if self.settle_writes(s).is_err() {
                        checked = self.fold_up(s)?;
                        continue;
                    }
                    if checked {
                        if other.is_ok() {
                            self.touch_shared(s, now_ms);
                        }
                        return other;
                    }
                    checked = self.fold_up(s)?;
                }
            }
        }
        Err(Fail::Retry)
    }

    /// [`Streams::append_shared`] to the stream `s` this instance had at
    /// `path`: if it turns out deleted through another instance (it was
    /// taken without a fold), the path is resolved again, since it may
    /// hold a new stream by now. Returns the stream appended to.
    pub(crate) fn append_path_shared(
        &self,
        s: Arc<Stream>,
        path: &str,
        req: &AppendReq,
        now_ms: u64,
    ) -> (Arc<Stream>, Result<Appended, Fail>) {
        let r = self.append_shared(&s, req, now_ms);
        if !matches!(r, Err(Fail::NotFound | Fail::Gone)) {
            return (s, r);
        }
        match self.lookup_shared(path, now_ms, true) {
            Ok(now) if !Arc::ptr_eq(&now, &s) => {
                let r = self.append_shared(&now, req, now_ms);
                (now, r)
            }
            Ok(_) => (s, r),
            Err(e) => (s, Err(e)),
        }
    }

    /// Record an access in the database when the stream has a sliding TTL
    /// and the last recorded one is older than a twentieth of it.
    pub(crate) fn touch_shared(&self, s: &Stream, now_ms: u64) {
        let Some(pg) = self.log.shared() else {
            return;
        };
        let due = {
            let mut st = s.state.lock();
            let Some(ttl) = st.config.ttl_secs else {
                return;
            };
            let every = (ttl.saturating_mul(1000) / 20).clamp(1, 1000);
            let due = st.deleted.is_none() && now_ms >= st.touched_db_ms.saturating_add(every);
            if due {
                st.touched_db_ms = now_ms;
            }
            due
        };
        if due {
            // A renewal that fails is not an error of the request: the
            // stream may expire a little early, as after a restart.
            let _ = pg.log.touch_stream(&s.path, &s.session, now_ms as i64);
        }
    }

    pub(crate) fn delete_path_shared(&self, path: &str, now_ms: u64) -> Result<LogPos, Fail> {
        let s = self.resolve(path, now_ms)?.ok_or(Fail::NotFound)?;
        s.state.lock().check_live()?;
        self.delete_shared(&s, "delete", now_ms)?;
        Ok(LogPos(0))
    }

    /// Tombstone `s`: soft while forks (mapped streams) read through it,
    /// hard otherwise, then release soft-deleted sources nobody reads
    /// through any more. Returns the mode (the earlier one if it was
    /// deleted already).
    pub(crate) fn delete_shared(
        &self,
        s: &Arc<Stream>,
        reason: &str,
        now_ms: u64,
    ) -> Result<DeleteMode, Fail> {
        let pg = self.pg();
        let mut mode = None;
        // Held until the tombstone is committed and, if hard, the path
        // unmapped: a fork of `s` being made through any instance is mapped
        // before the count below, or refused after (create_shared).
        let lock = pg.log.lock_stream_session(&s.session).map_err(pg_fail)?;
        for _ in 0..TRIES {
            self.refresh(s)?;
            let forks = pg.log.mapped_forks(&s.session).map_err(pg_fail)?;
            let mut st = s.state.lock();
            if let Some(m) = st.deleted {
                drop(st);
                // Deleted by another request, maybe not committed yet:
                // answered once it is (folded again if it did not commit).
                match self.settle_writes(s) {
                    Ok(()) => return Ok(m),
                    Err(Fail::Retry) => continue,
                    Err(e) => return Err(e),
                }
            }
            let m = if forks > 0 {
                DeleteMode::Soft
            } else {
                DeleteMode::Hard
            };
            st.forks = forks as u32;
            let written = self.tombstone(s, &mut st, m, reason, now_ms);
            drop(st);
            match written.and_then(|w| self.wait_commit(s, w.commit.as_ref())) {
                Ok(()) => {
                    let mut st = s.state.lock();
                    st.vis_deleted = st.deleted;
                    mode = Some(m);
                    break;
                }
                Err(Fail::Retry) => continue,
                Err(e) => return Err(e),
            }
        }
        let mode = mode.ok_or(Fail::Retry)?;
        s.changed.send_modify(|v| *v += 1);
        if mode == DeleteMode::Soft {
            // Mapped for its forks, but past expiring: not a candidate of
            // the sweep any more (a failure only costs the sweep a lookup).
            let _ = pg.log.clear_stream_expiry(&s.path, &s.session);
        }
        if mode == DeleteMode::Hard {
            self.bury(s);
            drop(lock);
            let mut next = s.state.lock().fork_source();
            while let Some(p) = next.take() {
                let _lock = pg.log.lock_stream_session(&p).map_err(pg_fail)?;
                let cached = self.reg.lock().by_session.get(&p).cloned();
                let ps = match cached {
                    Some(ps) => ps,
                    None => match self.load(&p, now_ms)? {
                        Some(ps) => ps,
                        None => break,
                    },
                };
                self.refresh(&ps)?;
                if ps.state.lock().deleted != Some(DeleteMode::Soft)
                    || pg.log.mapped_forks(&p).map_err(pg_fail)? > 0
                {
                    break;
                }
                let written = {
                    let mut pst = ps.state.lock();
                    self.tombstone(&ps, &mut pst, DeleteMode::Hard, "released", now_ms)
                };
                let released = written
                    .and_then(|w| self.wait_commit(&ps, w.commit.as_ref()))
                    .is_ok();
                if !released {
                    // Another instance is at it, or the database failed:
                    // the next deletion through it retries.
                    break;
                }
                ps.state.lock().vis_deleted = Some(DeleteMode::Hard);
                ps.changed.send_modify(|v| *v += 1);
                self.bury(&ps);
                next = ps.state.lock().fork_source();
            }
        }
        Ok(mode)
    }

    /// After a hard tombstone is committed: unmap the path (a new stream
    /// may take it), flag the session deleted (fencing any writer), and
    /// forget it here. A step that fails is finished by the next instance
    /// that resolves the path.
    fn bury(&self, s: &Arc<Stream>) {
        let pg = self.pg();
        let _ = pg.log.unmap_stream(&s.path, &s.session);
        let _ = pg.log.delete(&s.session);
        pg.forget(&s.session);
        Self::unlink(&mut self.reg.lock(), s);
    }

    /// Expire the streams whose mappings say their time has come, loaded
    /// here or not (a stream no running instance has loaded, or whose
    /// instance stopped, would otherwise wait for its next use): each is
    /// looked up as a request would, which expires it if this instance's
    /// view and the last access any instance recorded agree.
    pub(crate) fn sweep_unloaded_shared(&self, now_ms: u64) {
        const BATCH: i64 = 256;
        let Ok(due) = self.pg().log.expired_streams(now_ms as i64, BATCH) else {
            return;
        };
        for (path, _session) in due {
            // 404 or 410 once expired; a renewed stream answers itself.
            let _ = self.lookup_shared(&path, now_ms, true);
        }
    }

    /// Expire the cached streams whose time has come (others are expired
    /// when they are next used, by whichever instance uses them, or by
    /// [`Streams::sweep_unloaded_shared`]).
    pub(crate) fn sweep_shared(&self, now_ms: u64) {
        for s in self.expired_candidates(now_ms) {
            if matches!(self.expired(&s, now_ms), Ok(true)) {
                let _ = self.delete_shared(&s, "expired", now_ms);
            }
        }
    }
}
