//! Deletion and expiry: tombstones, soft deletes while forks read through a
//! source, and the cascade that releases sources when their last fork goes.

use std::sync::Arc;

use turnstone::LogPos;

use crate::log::Written;
use crate::offset::Offset;
use crate::record::{DeleteMode, DeleteRecord, KIND_DELETE};
use crate::stream::{Fail, State, Stream};
use crate::streams::{Group, Registry, Streams};

impl Streams {
    /// DELETE: soft while forks read through the stream, hard otherwise.
    /// `Err((fail, wait))`: answer `fail` once `wait` is durable (a deletion
    /// already accepted but not yet durable).
    pub fn delete(&self, path: &str, now_ms: u64) -> Result<LogPos, (Fail, Option<LogPos>)> {
        if self.log.is_shared() {
            return self.delete_path_shared(path, now_ms).map_err(|f| (f, None));
        }
        let mut reg = self.reg.lock();
        let s = reg
            .by_path
            .get(path)
            .cloned()
            .ok_or((Fail::NotFound, None))?;
        {
            let st = s.state.lock();
            if let Err(f) = st.check_live() {
                return Err((f, Some(st.last_end)));
            }
        }
        let (_, end) = self
            .delete_locked(&mut reg, &s, "delete", now_ms)
            .map_err(|f| (f, None))?;
        end.ok_or_else(|| (Fail::Internal("delete wrote nothing".into()), None))
    }

    /// Tombstone a stream (and cascade to sources nobody reads through any
    /// more). Returns the mode and the end position to wait for. Readers
    /// keep seeing the stream until [`Streams::settle`] finds its tombstone
    /// durable. `Err`: the tombstone could not be written (nothing changed).
    pub(crate) fn delete_locked(
        &self,
        reg: &mut Registry,
        s: &Arc<Stream>,
        reason: &str,
        now_ms: u64,
    ) -> Result<(DeleteMode, Option<LogPos>), Fail> {
        let mut st = s.state.lock();
        if let Some(mode) = st.deleted {
            return Ok((mode, None));
        }
        let mode = if st.forks > 0 {
            DeleteMode::Soft
        } else {
            DeleteMode::Hard
        };
        let mut end = Some(self.tombstone(s, &mut st, mode, reason, now_ms)?.end);
        let parent = st.fork_source();
        drop(st);
        if mode == DeleteMode::Hard {
            let mut next = parent;
            while let Some(p) = next.take() {
                let Some(ps) = reg.by_session.get(&p).cloned() else {
                    break;
                };
                let mut pst = ps.state.lock();
                pst.forks = pst.forks.saturating_sub(1);
                if pst.forks == 0 && pst.deleted == Some(DeleteMode::Soft) {
                    // A failed cascade leaves the source soft-deleted; the
                    // next start releases it.
                    if let Ok(e) =
                        self.tombstone(&ps, &mut pst, DeleteMode::Hard, "released", now_ms)
                    {
                        end = end.max(Some(e.end));
                        next = pst.fork_source();
                    }
                }
            }
        }
        Ok((mode, end))
    }

    pub(crate) fn unlink(reg: &mut Registry, s: &Arc<Stream>) {
        if reg.by_path.get(&s.path).is_some_and(|x| Arc::ptr_eq(x, s)) {
            reg.by_path.remove(&s.path);
        }
        if reg
            .by_session
            .get(&s.session)
            .is_some_and(|x| Arc::ptr_eq(x, s))
        {
            reg.by_session.remove(&s.session);
        }
    }

    /// Write a tombstone. The deletion is accepted at once (no more writes)
    /// and becomes visible to readers when [`Streams::settle`] finds it
    /// durable.
    pub(crate) fn tombstone(
        &self,
        s: &Arc<Stream>,
        st: &mut State,
        mode: DeleteMode,
        reason: &str,
        now_ms: u64,
    ) -> Result<Written, Fail> {
        if st.stale {
            return Err(Fail::Retry);
        }
        let mut g = Group::new(st.tail.bytes);
        g.json(
            KIND_DELETE,
            &DeleteRecord {
                mode,
                reason: reason.to_string(),
                at_ms: now_ms,
            },
        );
        let written = g.write(&self.log, &s.session, st.tail.seq)?;
        st.deleted = Some(mode);
        st.tail = Offset::new(st.tail.seq + 1, st.tail.bytes);
        st.last_end = written.end;
        if written.commit.is_none() {
            self.pending_deletes.lock().push((s.clone(), written.end));
        }
        Ok(written)
    }

    /// Make durable deletions visible: hide the streams from readers (wake
    /// them) and forget hard-deleted ones. Called after every successful
    /// durability wait.
    pub fn settle(&self) {
        let durable = self.log.durable_pos();
        let ready: Vec<Arc<Stream>> = {
            let mut pending = self.pending_deletes.lock();
            if pending.is_empty() {
                return;
            }
            let mut ready = Vec::new();
            pending.retain(|(s, end)| {
                if *end <= durable {
                    ready.push(s.clone());
                    false
                } else {
                    true
                }
            });
            ready
        };
        if ready.is_empty() {
            return;
        }
        let mut reg = self.reg.lock();
        for s in ready {
            let hard = {
                let mut st = s.state.lock();
                st.vis_deleted = st.deleted;
                st.deleted == Some(DeleteMode::Hard)
            };
            if hard {
                Self::unlink(&mut reg, &s);
            }
            s.changed.send_modify(|v| *v += 1);
        }
    }

    /// The registered streams whose time has come, as their state says.
    pub(crate) fn expired_candidates(&self, now_ms: u64) -> Vec<Arc<Stream>> {
        self.reg
            .lock()
            .by_path
            .values()
            .filter(|s| s.state.lock().is_expired(now_ms))
            .cloned()
            .collect()
    }

    /// Expire every stream whose time has come; returns the last position
    /// written.
    pub fn sweep(&self, now_ms: u64) -> Option<LogPos> {
        if self.log.is_shared() {
            self.sweep_shared(now_ms);
            return None;
        }
        let candidates = self.expired_candidates(now_ms);
        let mut last = None;
        for s in candidates {
            let mut reg = self.reg.lock();
            if s.state.lock().is_expired(now_ms) {
                if let Ok((_, end)) = self.delete_locked(&mut reg, &s, "expired", now_ms) {
                    last = last.max(end);
                }
            }
        }
        last
    }
}
