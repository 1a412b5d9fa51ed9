//! Waiting without a thread, and following a session as it becomes durable.
//!
//! Both hang off the commit queue's wake-up: after each fdatasync (and when
//! a write fails or the store stops) the flusher wakes the threads and tasks
//! waiting for that batch, and the subscribers of the sessions with frames
//! in it ([`crate::commit::CommitQueue::notify_batch_durable`]). A
//! subscriber only waits for that wake-up; it never raises the flush
//! target, so following a session costs the writer no fdatasync.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::Shared;
use crate::commit::Change;
use crate::commit::RetryState;
use crate::error::{Error, Result};
use crate::frame::{SessionDefine, KIND_SESSION_DEFINE};
use crate::inspect::{Follower, Item, Tail};
use crate::log::segment_path;
use crate::types::{Event, LogPos, SessionId};

/// How often a read-only store looks for batches another process appended,
/// while something follows it (one 32-byte read at the end of its log).
pub const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The future of [`super::Store::wait_durable_async`]: ready once the log is
/// durable up to its position, or with the error a blocking wait would
/// have returned. The waiting task holds no thread.
#[must_use = "a future does nothing unless awaited"]
pub struct DurableWait {
    /// `None` on a read-only store: nothing to wait for.
    pub(super) shared: Option<Arc<Shared>>,
    pub(super) pos: LogPos,
    pub(super) retry: RetryState,
}

impl std::fmt::Debug for DurableWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableWait")
            .field("pos", &self.pos)
            .finish()
    }
}

impl Future for DurableWait {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        match &this.shared {
            None => Poll::Ready(Ok(())),
            Some(sh) => sh.commit.poll_durable(this.pos, &mut this.retry, cx),
        }
    }
}

/// Events read per refill of a subscription's buffer.
const CHUNK: u64 = 1024;

/// A live follower of one session ([`super::Store::subscribe`]).
///
/// It yields the session's durable events from its start seq on, each once
/// and in seq order: as an [`Iterator`] that blocks until the next event is
/// durable, or one event at a time with [`Subscription::next_async`]. Events
/// that are appended but not yet durable are never shown; the subscription
/// waits for the writer's own durability waits (or the flusher's size
/// trigger) to make them so, and asks for no fdatasync itself.
///
/// It ends (`None`) when the store is closed or dropped; if the store is
/// poisoned it yields that error once, then ends. A subscription holds the
/// store's shared state, not the [`super::Store`], so it never keeps a store
/// from closing.
///
/// On a store opened read-only, a subscription follows what *another
/// process* appends: a thread of this store looks at the end of the log
/// every [`FOLLOW_POLL`] while anything follows it (one 32-byte read; no
/// inotify), takes in every whole batch that validates
/// ([`super::Store::refresh`]) and wakes the subscribers. Batches are shown
/// only once durable: the writer writes a batch only after the previous one
/// is synced, so only the newest batch found can be in flight, and the
/// follower fdatasyncs that segment (its own file handle; the writer's count
/// does not change) before showing it.
pub struct Subscription {
    shared: Arc<Shared>,
    session: String,
    /// The session's id in this store, once looked up: its followers are
    /// woken only by batches that hold its frames.
    sid: Option<SessionId>,
    /// An error found by [`Subscription::ready_async`], yielded by the next
    /// read.
    pending_error: Option<Error>,
    next: u64,
    buf: VecDeque<Event>,
    done: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("session", &self.session)
            .field("next_seq", &self.next_seq())
            .finish()
    }
}

/// What one look at the log found.
enum Step {
    /// An event is ready (in the buffer).
    Ready,
    /// Nothing new is durable: wait for the durable position to leave this.
    Wait(LogPos),
    /// The subscription is over (yield the error first, if any).
    End(Option<Error>),
}

impl Subscription {
    pub(super) fn new(shared: Arc<Shared>, session: &str, from_seq: u64) -> Self {
        Subscription {
            shared,
            session: session.to_string(),
            sid: None,
            pending_error: None,
            next: from_seq,
            buf: VecDeque::new(),
            done: false,
        }
    }

    /// The session followed.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The seq of the next event this subscription yields.
    pub fn next_seq(&self) -> u64 {
        self.next - self.buf.len() as u64
    }

    /// The next durable event without waiting: `Ok(None)` if none is durable
    /// yet (or the subscription is over).
    pub fn try_next(&mut self) -> Result<Option<Event>> {
        match self.step() {
            Step::Ready => Ok(self.buf.pop_front()),
            Step::Wait(_) => Ok(None),
            Step::End(Some(e)) => Err(e),
            Step::End(None) => Ok(None),
        }
    }

    /// The next durable event as a future: the task waits without a thread
    /// until the flusher makes one durable. `None` when the store closes.
    pub fn next_async(&mut self) -> NextEvent<'_> {
        NextEvent { sub: self }
    }

    /// Wait until the event at [`Subscription::next_seq`] is durable,
    /// without reading it: `true` then (the next `try_next` or `next_async`
    /// returns it at once), `false` when the subscription is over. For a
    /// caller that reads the session its own way and only needs the
    /// wake-up (what `turnstone serve`'s long polls and SSE do). Like
    /// [`Subscription::next_async`], the task holds no thread, and it is
    /// woken only when a batch holding a frame of this session is durable.
    pub fn ready_async(&mut self) -> ReadyWait<'_> {
        ReadyWait { sub: self }
    }

    /// [`Subscription::poll_wait`] for a blocked thread.
    fn wait(&self, seen: LogPos) -> Option<LogPos> {
        match self.sid {
            Some(sid) => self.shared.commit.wait_session_change(sid, seen),
            None => self.shared.commit.wait_durable_change(seen),
        }
    }

    /// Wait for the durable position to leave `seen`: for this session's
    /// batches once its id is known, for any batch before.
    fn poll_wait(&self, seen: LogPos, cx: &mut Context<'_>) -> Poll<Option<LogPos>> {
        match self.sid {
            Some(sid) => self.shared.commit.poll_session_change(sid, seen, cx),
            None => self.shared.commit.poll_durable_change(seen, cx),
        }
    }

    /// Look at the log once: fill the buffer with newly durable events, or
    /// say what to wait for.
    fn step(&mut self) -> Step {
        self.look(true)
    }

    /// [`Subscription::step`]; with `read` false, say `Ready` when an event
    /// is durable without reading it.
    fn look(&mut self, read: bool) -> Step {
        if !self.buf.is_empty() {
            return Step::Ready;
        }
        if self.done {
            return Step::End(self.pending_error.take());
        }
        let sh = &*self.shared;
        let read_only = sh.opts.read_only;
        // The durable position first: the count below never overstates it.
        let durable = sh.commit.durable();
        let avail = {
            let ix = sh.index.read();
            match ix.get(&self.session) {
                Some((id, e)) if read_only => {
                    self.sid = Some(id);
                    e.len()
                }
                Some((id, _)) => {
                    self.sid = Some(id);
                    ix.len_before(id, durable)
                }
                None => {
                    self.done = true;
                    return Step::End(Some(Error::UnknownSession(self.session.clone())));
                }
            }
        };
        if self.next < avail && !read {
            return Step::Ready;
        }
        if self.next < avail {
            let end = avail.min(self.next + CHUNK);
            let buf = &mut self.buf;
            let got = sh.visit_range(&self.session, self.next..end, |e| {
                buf.push_back(e.to_event());
                ControlFlow::Continue(())
            });
            return match got {
                Ok(n) => {
                    self.next += n;
                    if n == 0 {
                        // The index said durable events exist; a read that
                        // finds none is a broken promise, not "no news".
                        self.done = true;
                        Step::End(Some(Error::InvalidArgument(format!(
                            "subscription to {}: seqs {}..{end} are durable but were not read",
                            self.session, self.next
                        ))))
                    } else {
                        Step::Ready
                    }
                }
                Err(e) => {
                    self.done = true;
                    Step::End(Some(e))
                }
            };
        }
        if read_only {
            start_poller(&self.shared);
        }
        Step::Wait(durable)
    }

    /// The store stopped: end, yielding the poison first if there is one.
    fn stopped(&mut self) -> Step {
        self.done = true;
        match self.shared.commit.lock().check_usable() {
            Err(e @ Error::Poisoned { .. }) => Step::End(Some(e)),
            _ => Step::End(None),
        }
    }
}

impl Iterator for Subscription {
    type Item = Result<Event>;

    /// The next durable event, blocking until there is one; `None` when the
    /// store closes.
    fn next(&mut self) -> Option<Result<Event>> {
        loop {
            let step = match self.step() {
                Step::Wait(seen) => match self.wait(seen) {
                    Some(_) => continue,
                    None => self.stopped(),
                },
                other => other,
            };
            return match step {
                Step::Ready => self.buf.pop_front().map(Ok),
                Step::End(e) => e.map(Err),
                Step::Wait(_) => unreachable!("handled above"),
            };
        }
    }
}

impl Subscription {
    /// The next durable event, waiting up to `timeout` for one: `Ok(None)`
    /// if none came, [`Error::Closed`] once the store is closed (the
    /// store's [`crate::backend::Follow::next_timeout`]).
    pub fn next_within(&mut self, timeout: std::time::Duration) -> Result<Option<Event>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let step = match self.step() {
                Step::Wait(seen) => {
                    match self
                        .shared
                        .commit
                        .wait_change_until(self.sid, seen, deadline)
                    {
                        Change::Moved(_) => continue,
                        Change::TimedOut => return Ok(None),
                        Change::Stopped => self.stopped(),
                    }
                }
                other => other,
            };
            return match step {
                Step::Ready => Ok(self.buf.pop_front()),
                Step::End(Some(e)) => Err(e),
                Step::End(None) => Err(Error::Closed),
                Step::Wait(_) => unreachable!("handled above"),
            };
        }
    }
}

/// The future of [`Subscription::next_async`].
#[must_use = "a future does nothing unless awaited"]
pub struct NextEvent<'a> {
    sub: &'a mut Subscription,
}

impl Future for NextEvent<'_> {
    type Output = Option<Result<Event>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let sub = &mut *self.get_mut().sub;
        loop {
            let step = match sub.step() {
                Step::Wait(seen) => match sub.poll_wait(seen, cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(_)) => continue,
                    Poll::Ready(None) => sub.stopped(),
                },
                other => other,
            };
            return Poll::Ready(match step {
                Step::Ready => sub.buf.pop_front().map(Ok),
                Step::End(e) => e.map(Err),
                Step::Wait(_) => unreachable!("handled above"),
            });
        }
    }
}

/// The future of [`Subscription::ready_async`].
#[must_use = "a future does nothing unless awaited"]
pub struct ReadyWait<'a> {
    sub: &'a mut Subscription,
}

impl Future for ReadyWait<'_> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let sub = &mut *self.get_mut().sub;
        loop {
            return match sub.look(false) {
                Step::Ready => Poll::Ready(true),
                Step::End(e) => {
                    // Kept for the next read, which yields it.
                    if let Some(e) = e {
                        sub.pending_error = Some(e);
                    }
                    Poll::Ready(false)
                }
                Step::Wait(seen) => match sub.poll_wait(seen, cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Some(_)) => continue,
                    Poll::Ready(None) => {
                        if let Step::End(Some(e)) = sub.stopped() {
                            sub.pending_error = Some(e);
                        }
                        Poll::Ready(false)
                    }
                },
            };
        }
    }
}

/// Start the read-only store's poller thread if it is not running. It holds
/// only a weak reference, and stops when the store is dropped or closed.
fn start_poller(shared: &Arc<Shared>) {
    if shared
        .poller_started
        .swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        return;
    }
    let weak = Arc::downgrade(shared);
    let spawned = std::thread::Builder::new()
        .name("turnstone-follow".into())
        .spawn(move || loop {
            std::thread::sleep(FOLLOW_POLL);
            let Some(sh) = weak.upgrade() else { return };
            if sh.commit.lock().flusher_done {
                return;
            }
            if let Err(e) = sh.refresh() {
                let mut st = sh.commit.lock();
                st.poisoned = Some(("follow", e.to_string()));
                sh.commit.notify_durable(&mut st);
                return;
            }
        });
    if spawned.is_err() {
        // No thread: subscribers wait for a refresh someone else calls.
        shared
            .poller_started
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// One frame another process appended, as a read-only refresh takes it in.
struct NewFrame {
    session: SessionId,
    seq: u64,
    pos: LogPos,
    define: Option<SessionDefine>,
}

impl Shared {
    /// Read-only stores: take in the whole batches appended (by the process
    /// that writes this store) since the end this store knows, make them
    /// durable (see [`Subscription`]), index them and wake subscribers.
    /// Returns the number of frames taken in.
    pub(crate) fn refresh(&self) -> Result<u64> {
        if !self.opts.read_only {
            return Ok(0);
        }
        let _one = self.checkpoint_lock.lock();
        let (end, next_batch_seq) = {
            let st = self.commit.lock();
            (st.durable, st.next_batch_seq)
        };
        let tail = Tail {
            segment: segment_path(&self.dir, end.segment()),
            segment_id: end.segment(),
            offset: end.offset() as u64,
            next_batch_seq,
            store_id: self.store_id,
        };
        let mut follower = Follower::new(
            self.vfs.as_ref(),
            &self.dir,
            tail.clone(),
            Default::default(),
        );
        let mut frames = Vec::new();
        follower.poll(&mut |item| {
            if let Item::Frame(f) = item {
                frames.push(NewFrame {
                    session: f.session,
                    seq: f.seq,
                    pos: LogPos::new(f.segment_id, f.offset as u32),
                    define: (f.kind == KIND_SESSION_DEFINE)
                        .then(|| f.define.cloned())
                        .flatten(),
                });
            }
            ControlFlow::Continue(())
        })?;
        let new_tail = follower.tail().clone();
        if new_tail == tail {
            return Ok(0);
        }
        if !frames.is_empty() {
            // Only the newest batch can still be in flight: sync it.
            let file = self
                .vfs
                .open(&new_tail.segment, false)
                .map_err(|e| Error::io("open segment", &new_tail.segment, e))?;
            file.sync_data()
                .map_err(|e| Error::io("fdatasync (follow)", &new_tail.segment, e))?;
        }
        {
            let mut ix = self.index.write();
            for f in &frames {
                let applied = match &f.define {
                    Some(def) => ix.apply_define(f.session, def, f.pos),
                    None => ix.apply_frame(f.session, f.seq, f.pos),
                };
                applied.map_err(|detail| Error::Corrupt {
                    file: segment_path(&self.dir, f.pos.segment()),
                    offset: f.pos.offset() as u64,
                    detail: format!("a followed frame does not fit the index: {detail}"),
                })?;
            }
        }
        if new_tail.segment_id != end.segment() {
            self.reader.set_active(new_tail.segment_id, None);
        }
        let mut st = self.commit.lock();
        let at = LogPos::new(new_tail.segment_id, new_tail.offset as u32);
        st.durable = at;
        st.append_end = at;
        st.flush_target = at;
        st.next_batch_seq = new_tail.next_batch_seq;
        st.durable_next_batch_seq = new_tail.next_batch_seq;
        self.commit.notify_durable(&mut st);
        Ok(frames.len() as u64)
    }
}
