//! The commit queue: the open batch appenders fill, the sealed batches
//! waiting for the flusher, the durable position, and the condition
//! variables that wake the flusher and the durability waiters.
//!
//! Invariants kept here (ARCHITECTURE.md 1, 7, 8): positions are assigned in
//! log order under one mutex; the durable position moves only when the
//! flusher reports a completed fdatasync; a poisoned queue acknowledges
//! nothing more (every waiter gets [`Error::Poisoned`]); a failed write keeps
//! its batch, in order, for an explicit retry.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::commit::batch::PendingBatch;
use crate::commit::flusher::{self, FlusherEnv, WriterFile};
use crate::commit::stats::Stats;
use crate::error::{Error, Result};
use crate::frame::{
    encode_frame, Salt, BATCH_BODY_BYTES_MAX, BATCH_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::types::{LogPos, SegmentId, SessionId};

/// Everything behind the commit mutex.
#[derive(Debug)]
pub(crate) struct State {
    /// Sealed batches waiting for the flusher, in log order.
    pub queued: VecDeque<PendingBatch>,
    /// The batch appenders are filling.
    pub open: Option<PendingBatch>,
    /// Where the next frame (or batch header) goes.
    pub append_end: LogPos,
    pub next_batch_seq: u64,
    /// End of the last batch made durable by a completed fdatasync.
    pub durable: LogPos,
    pub durable_next_batch_seq: u64,
    pub durable_last_batch: Option<(LogPos, u32)>,
    /// The highest position a waiter asked to be durable.
    pub flush_target: LogPos,
    /// A write failed: its batch is back at the front of `queued`.
    pub write_failed: Option<String>,
    /// Bumped at every failed write attempt.
    pub fail_epoch: u64,
    pub retry_requested: bool,
    pub poisoned: Option<(&'static str, String)>,
    pub closing: bool,
    pub flusher_done: bool,
    /// A checkpoint should be written (a segment was rolled).
    pub checkpoint_due: bool,
    /// Buffers of written batches, kept for the next batches (no regrowth).
    pub spare_bufs: Vec<Vec<u8>>,
    pub stats: Stats,
    /// The batch the flusher is writing: its sequence number and end.
    pub inflight: Option<(u64, LogPos)>,
    /// Threads parked in [`CommitQueue::wait_durable`], by the parity of
    /// the batch they wait for (so the fdatasync of one batch does not wake
    /// the waiters of the next one: they would only park again). A woken
    /// thread reads the durable position from [`CommitQueue`]'s atomic copy
    /// and, when its position is durable, returns without this mutex.
    pub parked: [Vec<Thread>; 2],
    /// Threads [`CommitQueue::notify_batch_durable`] took from `parked`,
    /// for the flusher to unpark once it has released the mutex (so the
    /// wake-up system calls do not hold up appenders); empty otherwise.
    pub unparking: Vec<Thread>,
    /// Tasks [`CommitQueue::notify_batch_durable`] took from `wakers`, to
    /// be woken with `unparking`, outside the mutex; empty otherwise.
    pub waking: Vec<Waker>,
    /// Tasks waiting (without a thread) for a position to be durable, by
    /// the parity of its batch, like the threads in `parked`.
    pub wakers: [Vec<Waker>; 2],
    /// Tasks following the durable position (any change): woken after
    /// every batch, with the threads on `change_cv`.
    pub follower_wakers: Vec<Waker>,
    /// Tasks following one session: woken when a batch holding a frame of
    /// that session is durable (and when the store stops or a write fails).
    pub session_wakers: HashMap<SessionId, Vec<Waker>>,
    /// Threads following one session wait on its condition variable,
    /// notified like `session_wakers` (and dropped from here when it is).
    pub session_cvs: HashMap<SessionId, std::sync::Arc<Condvar>>,
}

impl State {
    pub fn has_work(&self) -> bool {
        !self.queued.is_empty()
            || self
                .open
                .as_ref()
                .is_some_and(|b| b.frames > 0 || b.flags != 0)
    }

    pub fn pending_bytes(&self) -> usize {
        self.queued.iter().map(|b| b.buf.len()).sum::<usize>()
            + self.open.as_ref().map_or(0, |b| b.buf.len())
    }

    /// Appends are allowed: not poisoned, not closed.
    pub fn check_usable(&self) -> Result<()> {
        if let Some((op, detail)) = &self.poisoned {
            return Err(Error::Poisoned {
                op,
                detail: detail.clone(),
            });
        }
        if self.closing || self.flusher_done {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Encode one frame into the open batch (room was reserved with
    /// [`CommitQueue::reserve`]); returns where it starts and ends.
    #[allow(clippy::too_many_arguments)]
    pub fn push_frame(
        &mut self,
        store_id: [u8; 16],
        sid: SessionId,
        kind: u16,
        flags: u16,
        seq: u64,
        payload: &[u8],
    ) -> (LogPos, LogPos) {
        let open = self.open.as_mut().expect("reserved");
        debug_assert!(
            payload.len() <= crate::frame::PAYLOAD_BYTES_MAX,
            "the payload limit was checked before the commit lock"
        );
        let salt = Salt {
            store_id,
            segment: open.segment,
        };
        let from = open.buf.len();
        let pos = LogPos::new(open.segment, open.offset + from as u32);
        encode_frame(&mut open.buf, &salt, sid, kind, flags, seq, payload);
        open.note_appended(&salt, from);
        if open.sessions.last() != Some(&sid) {
            open.sessions.push(sid);
        }
        open.frames += 1;
        // `reserve` made room: a batch never outgrows its limit.
        debug_assert!(open.body_len() <= BATCH_BODY_BYTES_MAX, "the batch fits");
        let end = LogPos::new(open.segment, open.offset + open.buf.len() as u32);
        debug_assert!(end > pos && end > self.append_end, "positions move forward");
        self.append_end = end;
        (pos, end)
    }
}

/// The queue between appenders and the flusher.
#[derive(Debug)]
pub(crate) struct CommitQueue {
    pub(super) state: Mutex<State>,
    /// A copy of `State::durable` (its `LogPos` value), published under the
    /// mutex by [`CommitQueue::notify_durable`] and
    /// [`CommitQueue::notify_batch_durable`] after the followers are woken
    /// and before the durability waiters are: a waiter whose position is
    /// durable returns without taking the mutex (on its first check and
    /// after every wake-up), and when it does, the followers of what it
    /// waited for have been woken.
    durable_pos: AtomicU64,
    /// Threads inside [`CommitQueue::wait_durable`] whose position was not
    /// durable when they looked (whether a lone waiter leads a write).
    waiting_threads: AtomicUsize,
    /// Wakes the flusher.
    pub(super) work_cv: Condvar,
    /// Wakes followers, which wait for any durable change.
    pub(super) change_cv: Condvar,
    /// Segment size: a segment rolls when the next batch would not fit.
    segment_bytes: usize,
    /// Pending bytes that make the flusher write without anyone waiting.
    pub(super) flush_bytes: usize,
    /// The segment file batches are written to; locked by whichever thread
    /// has the batch in flight (so never contended). Set at open.
    pub(super) writer: Mutex<Option<WriterFile>>,
    /// A thread waiting for durability writes the next batch itself when
    /// none is in flight ([`CommitQueue::wait_durable`]); otherwise it
    /// wakes the flusher.
    leaders: bool,
}

impl CommitQueue {
    /// A queue whose log ends (durably) at `end`, with `next_batch_seq` next.
    pub fn new(
        end: LogPos,
        next_batch_seq: u64,
        last_batch: Option<(LogPos, u32)>,
        segment_bytes: u32,
        flush_bytes: usize,
    ) -> Self {
        CommitQueue {
            state: Mutex::new(State {
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
                spare_bufs: Vec::new(),
                stats: Stats::default(),
                wakers: [Vec::new(), Vec::new()],
                follower_wakers: Vec::new(),
                session_wakers: HashMap::new(),
                session_cvs: HashMap::new(),
                inflight: None,
                parked: [Vec::new(), Vec::new()],
                unparking: Vec::new(),
                waking: Vec::new(),
            }),
            durable_pos: AtomicU64::new(end.0),
            waiting_threads: AtomicUsize::new(0),
            work_cv: Condvar::new(),
            change_cv: Condvar::new(),
            segment_bytes: segment_bytes as usize,
            flush_bytes,
            writer: Mutex::new(None),
            leaders: true,
        }
    }

    /// Set the segment file batches go to (at open), and whether waiting
    /// threads lead writes ([`crate::Options::flush_in_caller`]).
    pub fn set_writer(&mut self, writer: WriterFile, leaders: bool) {
        *self.writer.get_mut() = Some(writer);
        self.leaders = leaders;
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// End of the durable log.
    pub fn durable(&self) -> LogPos {
        self.state.lock().durable
    }

    /// End of the durable log as last published, without the lock: never
    /// past [`CommitQueue::durable`], and soon equal to it.
    pub fn durable_hint(&self) -> LogPos {
        LogPos(self.durable_pos.load(Ordering::Acquire))
    }

    /// Largest event group (padded frames) one batch can hold.
    pub fn group_bytes_max(&self) -> usize {
        BATCH_BODY_BYTES_MAX.min(self.segment_bytes - SEGMENT_HEADER_BYTES - BATCH_HEADER_BYTES)
    }

    /// Make room for `need` bytes of frames in the open batch, closing it or
    /// rolling to a new segment as needed.
    pub fn reserve(&self, st: &mut State, need: usize) -> Result<()> {
        let seg_bytes = self.segment_bytes;
        let max = self.group_bytes_max();
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
                self.work_cv.notify_one();
            }
        }
        if st.open.is_none() {
            let mut at = st.append_end;
            if at.offset() as usize + BATCH_HEADER_BYTES + need > seg_bytes {
                at = LogPos::new(SegmentId(at.segment().0 + 1), SEGMENT_HEADER_BYTES as u32);
            }
            let buf = st.spare_bufs.pop();
            let b = PendingBatch::new(at.segment(), at.offset(), st.next_batch_seq, buf);
            st.next_batch_seq += 1;
            st.append_end = LogPos::new(at.segment(), at.offset() + BATCH_HEADER_BYTES as u32);
            st.open = Some(b);
        }
        // Postcondition: the open batch takes `need` more bytes, in its
        // segment (one batch never spans two segments).
        debug_assert!(st.open.as_ref().is_some_and(|b| {
            b.body_len() + need <= BATCH_BODY_BYTES_MAX
                && b.end().segment() == st.append_end.segment()
        }));
        Ok(())
    }

    /// Wake the flusher if enough bytes are pending to write without a waiter.
    pub fn nudge(&self, st: &State) {
        if st.pending_bytes() >= self.flush_bytes {
            self.work_cv.notify_one();
        }
    }

    /// Wait until the log is durable at least up to `pos`. A kept failed
    /// write is retried once on behalf of this waiter; if that retry fails
    /// too, [`Error::WriteFailed`] is returned.
    ///
    /// With `env` (and leaders on), a lone waiter (no other thread waits)
    /// that finds no batch in flight writes the next one itself, like the
    /// leader of a leader/follower group commit: no hand-off to the flusher
    /// thread and back. Otherwise it wakes the flusher and sleeps; when a
    /// batch is durable and more is wanted, the flusher takes over
    /// ([`CommitQueue::hand_off`]) and chains batches while there is work.
    pub fn wait_durable(&self, pos: LogPos, env: Option<&FlusherEnv<'_>>) -> Result<()> {
        if self.durable_pos.load(Ordering::Acquire) >= pos.0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        let mut retry = RetryState::default();
        let env = env.filter(|_| self.leaders);
        let mut counted = false;
        let done = loop {
            if let Some(done) = self.durable_step(&mut st, pos, &mut retry) {
                break done;
            }
            if !counted {
                counted = true;
                self.waiting_threads.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(env) = env {
                let stalled = st.write_failed.is_some() && !st.retry_requested;
                // Only a lone waiter leads: with others waiting the flusher
                // writes, chaining batches without a wake-up each.
                let alone = self.waiting_threads.load(Ordering::Relaxed) == 1;
                if alone && st.inflight.is_none() && st.has_work() && !stalled {
                    let batch = flusher::take(&mut st);
                    drop(st);
                    st = flusher::flush(self, env, batch);
                    st.stats.caller_batches += 1;
                    continue;
                }
            }
            if env.is_none() || st.inflight.is_none() {
                self.work_cv.notify_one();
            }
            let parity = (batch_of(&st, pos) % 2) as usize;
            let me = std::thread::current();
            if !st.parked[parity].iter().any(|t| t.id() == me.id()) {
                st.parked[parity].push(me);
            }
            drop(st);
            // A wake-up that comes between the unlock and the park leaves
            // the park token set: `park` then returns at once. `park` may
            // also return for no reason: the loop looks again.
            std::thread::park();
            if self.durable_pos.load(Ordering::Acquire) >= pos.0 {
                break Ok(());
            }
            st = self.state.lock();
        };
        if counted {
            self.waiting_threads.fetch_sub(1, Ordering::Relaxed);
        }
        done
    }

    /// Whether waiting threads lead writes.
    pub fn leaders(&self) -> bool {
        self.leaders
    }

    /// After a batch became durable: if more is wanted, wake the flusher.
    /// Under a steady load it then writes batch after batch without being
    /// woken again (it loops while there is work). Waking a waiting thread
    /// to lead the next batch instead was measured slower at 64 threads
    /// (0.89x of the flusher-only path; 0.71x with gathering on top,
    /// docs/DESIGN.md): each batch paid a wake-up, and the
    /// woken thread competed for a CPU with the waiters of the batch just
    /// published.
    pub(super) fn hand_off(&self, st: &State) {
        let wanted =
            st.flush_target > st.durable || st.closing || st.pending_bytes() >= self.flush_bytes;
        if !st.has_work() || !wanted {
            return;
        }
        self.work_cv.notify_one();
    }

    /// The asynchronous [`CommitQueue::wait_durable`]: the same steps, but a
    /// pending wait leaves its task's waker instead of a parked thread.
    pub fn poll_durable(
        &self,
        pos: LogPos,
        retry: &mut RetryState,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if self.durable_pos.load(Ordering::Acquire) >= pos.0 {
            return Poll::Ready(Ok(()));
        }
        let mut st = self.state.lock();
        match self.durable_step(&mut st, pos, retry) {
            Some(done) => Poll::Ready(done),
            None => {
                self.work_cv.notify_one();
                let parity = (batch_of(&st, pos) % 2) as usize;
                register(&mut st.wakers[parity], cx.waker());
                Poll::Pending
            }
        }
    }

    /// One check of a durability wait: `Some` when it is over (durable, or
    /// an error), `None` when `pos` is still to be written (the flush target
    /// now covers it; the caller writes or wakes a writer, then sleeps until
    /// [`CommitQueue::notify_durable`]).
    fn durable_step(
        &self,
        st: &mut State,
        pos: LogPos,
        retry: &mut RetryState,
    ) -> Option<Result<()>> {
        if st.durable >= pos {
            return Some(Ok(()));
        }
        if let Some((op, detail)) = &st.poisoned {
            return Some(Err(Error::Poisoned {
                op,
                detail: detail.clone(),
            }));
        }
        if st.flusher_done {
            return Some(Err(Error::Closed));
        }
        if let Some(detail) = &st.write_failed {
            match retry.asked_at {
                Some(epoch) if st.fail_epoch > epoch => {
                    return Some(Err(Error::WriteFailed {
                        detail: detail.clone(),
                    }))
                }
                Some(_) => {}
                None => {
                    retry.asked_at = Some(st.fail_epoch);
                    st.retry_requested = true;
                }
            }
        }
        if st.flush_target < pos {
            st.flush_target = pos;
        }
        None
    }

    /// Wake every durability waiter, threads and tasks (the durable position
    /// moved, a write failed, or the store stopped). Called with the state
    /// locked, so that no waiter checks and then sleeps past a wake-up (a
    /// thread registers in `parked` under the lock, and an unpark that comes
    /// before its park is kept for it).
    pub fn notify_durable(&self, st: &mut State) {
        self.notify_followers(st);
        for (_, wakers) in st.session_wakers.drain() {
            wakers.into_iter().for_each(Waker::wake);
        }
        for (_, cv) in st.session_cvs.drain() {
            cv.notify_all();
        }
        self.publish_durable(st);
        for parity in 0..2 {
            self.wake_parity(st, parity);
        }
        // Any a flusher took out to wake after the mutex and did not get to.
        st.unparking.drain(..).for_each(|t| t.unpark());
        st.waking.drain(..).for_each(Waker::wake);
    }

    fn publish_durable(&self, st: &State) {
        self.durable_pos.store(st.durable.0, Ordering::Release);
    }

    /// Batch `batch_seq`, holding frames of `sessions`, is durable: wake
    /// every follower of the whole log, the followers of those sessions and
    /// the tasks waiting for positions in the batch (and, harmlessly, any
    /// two batches later). The threads waiting for them are moved to
    /// `unparking`: the caller must pass the guard to
    /// [`CommitQueue::unpark_outside`]. Called with the state locked.
    pub fn notify_batch_durable(&self, st: &mut State, batch_seq: u64, sessions: &[SessionId]) {
        self.notify_followers(st);
        if !st.session_wakers.is_empty() || !st.session_cvs.is_empty() {
            for sid in sessions {
                if let Some(wakers) = st.session_wakers.remove(sid) {
                    wakers.into_iter().for_each(Waker::wake);
                }
                if let Some(cv) = st.session_cvs.remove(sid) {
                    cv.notify_all();
                }
            }
        }
        self.publish_durable(st);
        let parity = (batch_seq % 2) as usize;
        // The threads and tasks are left in `unparking` and `waking` for
        // the caller (the spare vectors, empty, take their place).
        debug_assert!(st.unparking.is_empty() && st.waking.is_empty());
        let State {
            parked,
            unparking,
            wakers,
            waking,
            ..
        } = st;
        std::mem::swap(&mut parked[parity], unparking);
        std::mem::swap(&mut wakers[parity], waking);
    }

    /// Unpark the threads and wake the tasks
    /// [`CommitQueue::notify_batch_durable`] left in `unparking` and
    /// `waking`, with the mutex released; returns it locked again.
    pub fn unpark_outside<'q>(&'q self, mut st: MutexGuard<'q, State>) -> MutexGuard<'q, State> {
        if st.unparking.is_empty() && st.waking.is_empty() {
            return st;
        }
        let mut threads = std::mem::take(&mut st.unparking);
        let mut tasks = std::mem::take(&mut st.waking);
        drop(st);
        threads.drain(..).for_each(|t| t.unpark());
        tasks.drain(..).for_each(Waker::wake);
        let mut st = self.state.lock();
        if st.unparking.is_empty() {
            st.unparking = threads;
        }
        if st.waking.is_empty() {
            st.waking = tasks;
        }
        st
    }

    fn wake_parity(&self, st: &mut State, parity: usize) {
        for t in st.parked[parity].drain(..) {
            t.unpark();
        }
        wake_tasks(st, parity);
    }

    fn notify_followers(&self, st: &mut State) {
        self.change_cv.notify_all();
        for w in st.follower_wakers.drain(..) {
            w.wake();
        }
    }

    /// Ask the flusher to finish: it drains what it can and exits.
    pub fn close(&self) {
        let mut st = self.state.lock();
        st.closing = true;
        self.work_cv.notify_all();
    }
}

/// What a durability wait remembers between checks: the failed-write epoch
/// at which it asked the flusher for a retry.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RetryState {
    asked_at: Option<u64>,
}

/// Wake the tasks waiting for a position in a batch of this parity.
fn wake_tasks(st: &mut State, parity: usize) {
    for w in st.wakers[parity].drain(..) {
        w.wake();
    }
}

/// Keep one waker per task: a task polled again before a wake-up replaces
/// its own entry instead of adding one.
pub(super) fn register(wakers: &mut Vec<Waker>, waker: &Waker) {
    if !wakers.iter().any(|w| w.will_wake(waker)) {
        wakers.push(waker.clone());
    }
}

/// The sequence number of the batch that holds (or will hold) `pos`: the
/// batch in flight, a queued one, or the open one.
fn batch_of(st: &State, pos: LogPos) -> u64 {
    if let Some((seq, end)) = st.inflight {
        if pos <= end {
            return seq;
        }
    }
    for b in &st.queued {
        if pos <= b.end() {
            return b.batch_seq;
        }
    }
    match &st.open {
        Some(b) => b.batch_seq,
        None => st.next_batch_seq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A follower that looked at the durable position just before the
    /// store's last sync and waits just after the flusher stopped must be
    /// told about that sync, not "stopped": otherwise a subscription ends
    /// without the events shutdown made durable.
    #[test]
    fn a_stopped_queue_still_reports_the_last_durable_move() {
        let q = CommitQueue::new(LogPos(0), 0, None, 1 << 20, 1 << 20);
        let seen = LogPos(0);
        {
            let mut st = q.lock();
            st.durable = LogPos(64);
            st.flusher_done = true;
        }
        assert_eq!(q.wait_durable_change(seen), Some(LogPos(64)));
        assert_eq!(q.wait_session_change(SessionId(1), seen), Some(LogPos(64)));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert_eq!(
            q.poll_durable_change(seen, &mut cx),
            Poll::Ready(Some(LogPos(64)))
        );
        assert_eq!(
            q.poll_session_change(SessionId(1), seen, &mut cx),
            Poll::Ready(Some(LogPos(64)))
        );
        // Once caught up, a stopped queue ends the wait.
        assert_eq!(q.wait_durable_change(LogPos(64)), None);
        assert_eq!(
            q.poll_durable_change(LogPos(64), &mut cx),
            Poll::Ready(None)
        );
        // Poison wins over news: nothing after it is trusted.
        q.lock().poisoned = Some(("flush", "test".into()));
        assert_eq!(q.wait_durable_change(seen), None);
    }

    /// Parked waiters: one woken for a batch that does not cover its
    /// position parks again; the one it covers returns; a poisoned queue
    /// wakes the rest with the poison.
    #[test]
    fn parked_waiters_return_only_when_their_position_is_durable() {
        let q = std::sync::Arc::new(CommitQueue::new(LogPos(0), 0, None, 1 << 20, 1 << 20));
        let spawn = |pos: u64| {
            let q = q.clone();
            std::thread::spawn(move || q.wait_durable(LogPos(pos), None))
        };
        let parked = |n: usize| {
            while q.lock().parked.iter().map(Vec::len).sum::<usize>() < n {
                std::thread::yield_now();
            }
        };
        let near = spawn(100);
        let far = spawn(200);
        parked(2);
        let publish = |at: u64, batch: u64| {
            let mut st = q.lock();
            st.durable = LogPos(at);
            q.notify_batch_durable(&mut st, batch, &[]);
            drop(q.unpark_outside(st));
        };
        // Both wait for batch 0 (nothing is open): a move to 50 wakes them,
        // and both park again.
        publish(50, 0);
        parked(2);
        assert!(!near.is_finished() && !far.is_finished());
        publish(150, 0);
        assert!(near.join().unwrap().is_ok());
        parked(1);
        assert!(!far.is_finished());
        {
            let mut st = q.lock();
            st.poisoned = Some(("flush", "test".into()));
            q.notify_durable(&mut st);
        }
        assert!(matches!(far.join().unwrap(), Err(Error::Poisoned { .. })));
        assert_eq!(q.waiting_threads.load(Ordering::Relaxed), 0);
        // A position already durable is answered without waiting.
        assert!(q.wait_durable(LogPos(150), None).is_ok());
    }
}
