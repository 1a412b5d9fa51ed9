//! Deletion and expiry: tombstones, soft deletes while forks read through a
//! source, and the cascade that releases sources when their last fork goes.

use std::sync::Arc;

use turnstone::LogPos;

use crate::offset::Offset;
use crate::record::{DeleteMode, DeleteRecord, KIND_DELETE};
use crate::stream::{Fail, State, Stream};
use crate::streams::{Group, Registry, Streams};

impl Streams {
    /// DELETE: soft while forks read through the stream, hard otherwise.
    pub fn delete(&self, path: &str, now_ms: u64) -> Result<LogPos, Fail> {
        let mut reg = self.reg.lock();
        let s = reg.by_path.get(path).cloned().ok_or(Fail::NotFound)?;
        s.state.lock().check_live()?;
        let (_, end) = self.delete_locked(&mut reg, &s, "delete", now_ms);
        end.ok_or_else(|| Fail::Internal("delete wrote nothing".into()))
    }

    /// Tombstone a stream (and cascade to sources nobody reads through any
    /// more). Returns the mode and the end position to wait for.
    pub(crate) fn delete_locked(
        &self,
        reg: &mut Registry,
        s: &Arc<Stream>,
        reason: &str,
        now_ms: u64,
    ) -> (DeleteMode, Option<LogPos>) {
        let mut st = s.state.lock();
        if let Some(mode) = st.deleted {
            return (mode, None);
        }
        let mode = if st.forks > 0 {
            DeleteMode::Soft
        } else {
            DeleteMode::Hard
        };
        let mut end = self.tombstone(s, &mut st, mode, reason, now_ms);
        let parent = st.config.fork.as_ref().map(|f| f.source_session.clone());
        drop(st);
        s.changed.send_modify(|v| *v += 1);
        if mode == DeleteMode::Hard {
            Self::unlink(reg, s);
            let mut next = parent;
            while let Some(p) = next.take() {
                let Some(ps) = reg.by_session.get(&p).cloned() else {
                    break;
                };
                let mut pst = ps.state.lock();
                pst.forks = pst.forks.saturating_sub(1);
                if pst.forks == 0 && pst.deleted == Some(DeleteMode::Soft) {
                    end = end.max(self.tombstone(
                        &ps,
                        &mut pst,
                        DeleteMode::Hard,
                        "released",
                        now_ms,
                    ));
                    next = pst.config.fork.as_ref().map(|f| f.source_session.clone());
                    drop(pst);
                    ps.changed.send_modify(|v| *v += 1);
                    Self::unlink(reg, &ps);
                }
            }
        }
        (mode, end)
    }

    fn unlink(reg: &mut Registry, s: &Arc<Stream>) {
        if reg.by_path.get(&s.path).is_some_and(|x| Arc::ptr_eq(x, s)) {
            reg.by_path.remove(&s.path);
        }
        reg.by_session.remove(&s.session);
    }

    /// Write a tombstone; the in-memory state changes at once whether or not
    /// the write succeeds (a failed write poisons the store anyway).
    fn tombstone(
        &self,
        s: &Stream,
        st: &mut State,
        mode: DeleteMode,
        reason: &str,
        now_ms: u64,
    ) -> Option<LogPos> {
        let mut g = Group::new(st.tail.bytes);
        g.json(
            KIND_DELETE,
            &DeleteRecord {
                mode,
                reason: reason.to_string(),
                at_ms: now_ms,
            },
        );
        st.deleted = Some(mode);
        match g.write(&self.store, &s.session) {
            Ok(end) => {
                st.tail = Offset::new(st.tail.seq + 1, st.tail.bytes);
                st.last_end = end;
                Some(end)
            }
            Err(_) => None,
        }
    }

    /// Expire every stream whose time has come; returns the last position
    /// written.
    pub fn sweep(&self, now_ms: u64) -> Option<LogPos> {
        let candidates: Vec<Arc<Stream>> = self
            .reg
            .lock()
            .by_path
            .values()
            .filter(|s| s.state.lock().is_expired(now_ms))
            .cloned()
            .collect();
        let mut last = None;
        for s in candidates {
            let mut reg = self.reg.lock();
            if s.state.lock().is_expired(now_ms) {
                let (_, end) = self.delete_locked(&mut reg, &s, "expired", now_ms);
                last = last.max(end);
            }
        }
        last
    }
}
