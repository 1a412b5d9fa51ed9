//! Followers' waits on the commit queue: for the durable position to move
//! (any batch, or one holding a frame of one session), blocking, with a
//! deadline, or as a task. A follower never raises the flush target: it
//! sees what others make durable and never causes an fdatasync.

use std::task::{Context, Poll};

use parking_lot::Condvar;

use super::queue::{register, CommitQueue};
use crate::types::{LogPos, SessionId};

/// How a follower's wait for the durable position to move ended
/// ([`CommitQueue::wait_change_until`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It moved; the durable position now.
    Moved(LogPos),
    /// The store is closed or poisoned.
    Stopped,
    /// The deadline passed first.
    TimedOut,
}

impl CommitQueue {
    /// Wait, without asking for any write, until the durable position is no
    /// longer `seen` (or the store stopped). Returns the durable position
    /// then, or `None` if the store is closed or poisoned. Followers use it:
    /// they see what others make durable and never cause an fdatasync.
    pub fn wait_durable_change(&self, seen: LogPos) -> Option<LogPos> {
        match self.wait_change(None, seen, None) {
            Change::Moved(p) => Some(p),
            Change::Stopped | Change::TimedOut => None,
        }
    }

    /// [`CommitQueue::wait_durable_change`] for a thread following one
    /// session: after the first change, only a batch holding a frame of
    /// `session` (or the store stopping) wakes it.
    pub fn wait_session_change(&self, session: SessionId, seen: LogPos) -> Option<LogPos> {
        match self.wait_change(Some(session), seen, None) {
            Change::Moved(p) => Some(p),
            Change::Stopped | Change::TimedOut => None,
        }
    }

    /// [`CommitQueue::wait_durable_change`] (`session: None`) or
    /// [`CommitQueue::wait_session_change`], giving up at `deadline`.
    pub fn wait_change_until(
        &self,
        session: Option<SessionId>,
        seen: LogPos,
        deadline: std::time::Instant,
    ) -> Change {
        self.wait_change(session, seen, Some(deadline))
    }

    fn wait_change(
        &self,
        session: Option<SessionId>,
        seen: LogPos,
        deadline: Option<std::time::Instant>,
    ) -> Change {
        let mut st = self.state.lock();
        loop {
            // A store that stopped still delivers what became durable
            // before it stopped (shutdown's last sync); poison does not.
            if st.poisoned.is_some() {
                return Change::Stopped;
            }
            if st.durable != seen {
                return Change::Moved(st.durable);
            }
            if st.flusher_done {
                return Change::Stopped;
            }
            let session_cv;
            let cv: &Condvar = match session {
                Some(sid) => {
                    session_cv = st.session_cvs.entry(sid).or_default().clone();
                    &session_cv
                }
                None => &self.change_cv,
            };
            match deadline {
                None => cv.wait(&mut st),
                Some(d) => {
                    if cv.wait_until(&mut st, d).timed_out() && st.durable == seen {
                        return Change::TimedOut;
                    }
                }
            }
        }
    }

    /// The asynchronous [`CommitQueue::wait_durable_change`].
    pub fn poll_durable_change(&self, seen: LogPos, cx: &mut Context<'_>) -> Poll<Option<LogPos>> {
        let mut st = self.state.lock();
        if st.poisoned.is_some() {
            return Poll::Ready(None);
        }
        if st.durable != seen {
            return Poll::Ready(Some(st.durable));
        }
        if st.flusher_done {
            return Poll::Ready(None);
        }
        register(&mut st.follower_wakers, cx.waker());
        Poll::Pending
    }

    /// The asynchronous wait of a follower of one session: ready when the
    /// durable position has left `seen` and a batch holding a frame of
    /// `session` became durable since the waker was left (or at once if the
    /// position moved before; the caller looks again either way), `None`
    /// when the store stopped.
    pub fn poll_session_change(
        &self,
        session: SessionId,
        seen: LogPos,
        cx: &mut Context<'_>,
    ) -> Poll<Option<LogPos>> {
        let mut st = self.state.lock();
        if st.poisoned.is_some() {
            return Poll::Ready(None);
        }
        if st.durable != seen {
            return Poll::Ready(Some(st.durable));
        }
        if st.flusher_done {
            return Poll::Ready(None);
        }
        register(st.session_wakers.entry(session).or_default(), cx.waker());
        Poll::Pending
    }
}
