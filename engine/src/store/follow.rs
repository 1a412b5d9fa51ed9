//! Waiting without a thread, and following a session as it becomes durable.
//!
//! Both hang off the commit queue's wake-up: after every fdatasync (and when
//! a write fails or the store stops) the flusher wakes the threads parked on
//! its condition variable and the tasks that left a waker
//! ([`crate::commit::CommitQueue::notify_durable`]). A subscriber only waits
//! for that wake-up; it never raises the flush target, so following a
//! session costs the writer no fdatasync.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::Shared;
use crate::commit::RetryState;
use crate::error::{Error, Result};
use crate::types::{Event, LogPos};

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
/// On a store opened read-only the log does not move in this process; such
/// a subscription yields what the store held when opened, then ends. (A
/// follower of a store that another process writes uses `turnstone dump
/// --follow`, which reads new whole batches from the active segment as they
/// appear.)
pub struct Subscription {
    shared: Arc<Shared>,
    session: String,
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

    /// Look at the log once: fill the buffer with newly durable events, or
    /// say what to wait for.
    fn step(&mut self) -> Step {
        if !self.buf.is_empty() {
            return Step::Ready;
        }
        if self.done {
            return Step::End(None);
        }
        let sh = &*self.shared;
        let read_only = sh.opts.read_only;
        // The durable position first: the count below never overstates it.
        let durable = sh.commit.durable();
        let avail = {
            let ix = sh.index.read();
            match ix.get(&self.session) {
                Some((_, e)) if read_only => e.len(),
                Some((id, _)) => ix.len_before(id, durable),
                None => {
                    self.done = true;
                    return Step::End(Some(Error::UnknownSession(self.session.clone())));
                }
            }
        };
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
            self.done = true;
            return Step::End(None);
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
                Step::Wait(seen) => match self.shared.commit.wait_durable_change(seen) {
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
                Step::Wait(seen) => match sub.shared.commit.poll_durable_change(seen, cx) {
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
