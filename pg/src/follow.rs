//! Live followers ([`PgLog::subscribe`], and [`PgLog::watch`] for a caller
//! that reads by itself): one listening connection and two threads per
//! log, however many sessions are followed.
//!
//! - The **listener** holds the log's one `LISTEN turnstone_events`
//!   connection. A commit notifies `"<session> <len>"`; the listener raises
//!   the known length of that session's followers and wakes the reader.
//! - The **reader** reads, on the log's pooled connections, what each
//!   follower has not read yet, at most [`CHUNK`] events at a time, into
//!   the follower's buffer (at most [`READ_AHEAD`] events), and wakes its
//!   waiter: a thread in [`Subscription::next_timeout`] or a task that
//!   polled [`Subscription::poll_next`]. No follower holds a connection or
//!   a thread of its own.
//!
//! A subscriber registers its follower, then reads the session's row (the
//! log listened before either): a commit before the read is in the row's
//! length, one after the registration is notified. If the listening connection fails (the database
//! restarted), every follower ends with [`PgError::FollowerLost`] (a
//! notification may have been missed); the next subscribe listens again.
//! Closing the log ends every follower with [`PgError::Closed`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};

use crate::error::{db, PgError, Result};
use crate::pool::Inner;
use crate::read::{read_chain, session_row};
use crate::{Event, PgLog};

/// Events a follower's buffer holds at most (the reader waits for the
/// follower to take some before reading more).
pub(crate) const READ_AHEAD: usize = 1024;

/// Events read for one follower in one query at most.
pub(crate) const CHUNK: u64 = 256;

/// How often the listener and the reader look at whether the log closed.
const STEP: Duration = Duration::from_millis(200);

impl PgLog {
    /// Follow a session from `from_seq`: committed events in order, woken
    /// by the commits' notifications (no polling). All of a log's
    /// followers share one listening connection and two threads
    /// (`follow.rs`).
    pub fn subscribe(&self, session: &str, from_seq: u64) -> Result<Subscription> {
        let hub = self.hub()?;
        // Registered first, then the row read: a commit notified after the
        // registration raises the follower's length, and one before the
        // read is in the row's length (the hub listened before either).
        let sub = hub.follow(session, from_seq);
        let row = self.with_client(|c| session_row(c, session, true))?;
        sub.raise_known(row.len);
        Ok(sub)
    }

    /// Watch a session's committed length grow past `from` without
    /// reading its events ([`Subscription::poll_grown`],
    /// [`Subscription::seen`]): a wake-up for a caller that reads by
    /// itself (`turnstone serve`'s long polls and SSE). Registered, then
    /// the session's row read, as for [`PgLog::subscribe`].
    pub fn watch(&self, session: &str, from: u64) -> Result<Subscription> {
        let hub = self.hub()?;
        let sub = hub.watch(session, from);
        let len = self.with_client(|c| session_row(c, session, false))?.len;
        sub.raise_known(len);
        Ok(sub)
    }

    fn hub(&self) -> Result<Arc<Hub>> {
        let mut h = self.inner.hub.lock();
        match &*h {
            Some(hub) if !hub.is_over() => Ok(hub.clone()),
            _ => {
                if *self.inner.stopped.lock() {
                    return Err(PgError::Closed);
                }
                let hub = Hub::start(self)?;
                *h = Some(hub.clone());
                Ok(hub)
            }
        }
    }
}

/// The log's followers and the threads that serve them.
pub(crate) struct Hub {
    state: Mutex<HubState>,
    /// Wakes the reader: a follower has something to read, or room again.
    work: Condvar,
}

#[derive(Default)]
struct HubState {
    /// Followers by session.
    followers: HashMap<String, Vec<Arc<Shared>>>,
    /// Set when any follower may have work.
    dirty: bool,
    /// The hub's threads stopped (the log closed or the listener failed):
    /// the log makes a new hub for the next subscribe.
    over: bool,
}

/// One follower, shared between its [`Subscription`] and the reader.
struct Shared {
    session: String,
    state: Mutex<FollowState>,
    /// Signalled when an event or the end comes.
    changed: Condvar,
}

struct FollowState {
    /// The next seq to read from the database.
    next_read: u64,
    /// The session's length as last read or notified.
    known: u64,
    events: VecDeque<Event>,
    /// Why the follower ended; taken once, then `Closed` is reported.
    end: Option<PgError>,
    ended: bool,
    waker: Option<Waker>,
    /// A watcher ([`PgLog::watch`]): only its known length matters; the
    /// reader reads nothing for it.
    watch: bool,
}

impl FollowState {
    fn has_work(&self) -> bool {
        !self.watch && !self.ended && self.known > self.next_read && self.events.len() < READ_AHEAD
    }
}

impl Shared {
    fn finish(&self, why: PgError) {
        let mut st = self.state.lock();
        if !st.ended {
            st.ended = true;
            st.end = Some(why);
        }
        self.wake(st);
    }

    /// Wake whoever waits on this follower (a thread or a task), after
    /// letting its state go.
    fn wake(&self, mut st: parking_lot::MutexGuard<'_, FollowState>) {
        let w = st.waker.take();
        drop(st);
        self.changed.notify_all();
        if let Some(w) = w {
            w.wake();
        }
    }
}

impl Hub {
    /// Start a hub for `log`: listen, then start the listener and the
    /// reader.
    pub(crate) fn start(log: &PgLog) -> Result<Arc<Hub>> {
        let inner = &log.inner;
        let mut listener = Client::connect(&inner.url, NoTls).map_err(db("connect"))?;
        listener
            .batch_execute("LISTEN turnstone_events")
            .map_err(db("listen"))?;
        let hub = Arc::new(Hub {
            state: Mutex::new(HubState::default()),
            work: Condvar::new(),
        });
        let (h, i) = (hub.clone(), inner.clone());
        std::thread::Builder::new()
            .name("turnstone-pg-listen".into())
            .spawn(move || listen(h, i, listener))
            .map_err(|e| PgError::FollowerLost(format!("start the listener: {e}")))?;
        let (h, i) = (hub.clone(), inner.clone());
        std::thread::Builder::new()
            .name("turnstone-pg-follow".into())
            .spawn(move || read(h, i))
            .map_err(|e| PgError::FollowerLost(format!("start the reader: {e}")))?;
        Ok(hub)
    }

    pub(crate) fn is_over(&self) -> bool {
        self.state.lock().over
    }

    /// Wake the reader (the log is closing).
    pub(crate) fn poke(&self) {
        self.state.lock().dirty = true;
        self.work.notify_all();
    }

    /// Follow `session` from `from`; the caller then reads the session's
    /// length and passes it to [`Subscription::raise_known`].
    pub(crate) fn follow(self: &Arc<Hub>, session: &str, from: u64) -> Subscription {
        self.register(session, from, false)
    }

    /// A watcher of `session`'s length from `from` (nothing is read).
    pub(crate) fn watch(self: &Arc<Hub>, session: &str, from: u64) -> Subscription {
        self.register(session, from, true)
    }

    fn register(self: &Arc<Hub>, session: &str, from: u64, watch: bool) -> Subscription {
        let shared = Arc::new(Shared {
            session: session.to_string(),
            state: Mutex::new(FollowState {
                next_read: from,
                known: from,
                events: VecDeque::new(),
                end: None,
                ended: false,
                waker: None,
                watch,
            }),
            changed: Condvar::new(),
        });
        let mut hs = self.state.lock();
        if hs.over {
            drop(hs);
            shared.finish(PgError::Closed);
        } else {
            hs.followers
                .entry(session.to_string())
                .or_default()
                .push(shared.clone());
            hs.dirty = true;
            drop(hs);
            self.work.notify_all();
        }
        Subscription {
            shared,
            hub: self.clone(),
            next: from,
        }
    }

    /// End every follower with `why` and stop.
    fn end_all(&self, why: impl Fn() -> PgError) {
        let mut hs = self.state.lock();
        hs.over = true;
        let all: Vec<Arc<Shared>> = hs.followers.drain().flat_map(|(_, v)| v).collect();
        drop(hs);
        self.work.notify_all();
        for f in all {
            f.finish(why());
        }
    }
}

/// The listener: raise followers' known lengths from notifications.
fn listen(hub: Arc<Hub>, inner: Arc<Inner>, mut client: Client) {
    loop {
        if *inner.stopped.lock() || hub.is_over() {
            hub.end_all(|| PgError::Closed);
            return;
        }
        if client.is_closed() {
            hub.end_all(|| PgError::FollowerLost("the listening connection closed".into()));
            return;
        }
        let mut notes = client.notifications();
        let mut it = notes.timeout_iter(STEP);
        loop {
            match it.next() {
                Ok(Some(n)) => {
                    let Some((session, len)) = n.payload().rsplit_once(' ') else {
                        continue;
                    };
                    let Ok(len) = len.parse::<u64>() else {
                        continue;
                    };
                    let mut hs = hub.state.lock();
                    if let Some(fs) = hs.followers.get(session) {
                        let mut any = false;
                        for f in fs {
                            let mut st = f.state.lock();
                            st.known = st.known.max(len);
                            any |= st.has_work();
                            if st.watch && st.known > st.next_read {
                                f.wake(st);
                            }
                        }
                        if any {
                            hs.dirty = true;
                            drop(hs);
                            hub.work.notify_all();
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let detail = format!("the listening connection failed: {e}");
                    hub.end_all(|| PgError::FollowerLost(detail.clone()));
                    return;
                }
            }
        }
    }
}

/// The reader: read what followers have not read, a chunk at a time.
fn read(hub: Arc<Hub>, inner: Arc<Inner>) {
    loop {
        let work: Vec<Arc<Shared>> = {
            let mut hs = hub.state.lock();
            loop {
                if hs.over {
                    return;
                }
                if *inner.stopped.lock() {
                    drop(hs);
                    hub.end_all(|| PgError::Closed);
                    return;
                }
                if hs.dirty {
                    break;
                }
                hub.work.wait_for(&mut hs, STEP);
            }
            hs.dirty = false;
            // Followers whose subscription was dropped are left out.
            hs.followers.retain(|_, v| {
                v.retain(|f| Arc::strong_count(f) > 1);
                !v.is_empty()
            });
            hs.followers
                .values()
                .flatten()
                .filter(|f| f.state.lock().has_work())
                .cloned()
                .collect()
        };
        for f in work {
            let (from, known) = {
                let st = f.state.lock();
                (st.next_read, st.known)
            };
            let to = known.min(from + CHUNK);
            let mut out = Vec::new();
            let got = inner.with_client(|c| {
                out.clear();
                let row = session_row(c, &f.session, false)?;
                let len = row.len;
                let to = to.min(len);
                if to > from {
                    read_chain(c, &f.session, row, from..to, &mut out)?;
                }
                Ok(len)
            });
            match got {
                Ok(len) => {
                    let mut st = f.state.lock();
                    st.known = st.known.max(len);
                    if let Some(last) = out.last() {
                        st.next_read = last.seq + 1;
                    }
                    st.events.extend(out);
                    let more = st.has_work();
                    let w = st.waker.take();
                    drop(st);
                    f.changed.notify_all();
                    if let Some(w) = w {
                        w.wake();
                    }
                    if more {
                        hub.state.lock().dirty = true;
                    }
                }
                Err(e) => f.finish(e),
            }
        }
    }
}

/// A live follower of one session ([`PgLog::subscribe`]): committed events
/// in seq order, each once.
pub struct Subscription {
    shared: Arc<Shared>,
    hub: Arc<Hub>,
    next: u64,
}

impl Subscription {
    /// The seq of the next event it yields.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Take the next event or the end, if there is one now; and whether
    /// the buffer was full before (the reader is to be woken, once this
    /// follower's lock is released: the hub's lock comes first).
    fn take(&mut self, st: &mut FollowState) -> (Option<Result<Event>>, bool) {
        if let Some(e) = st.events.pop_front() {
            let was_full = st.events.len() + 1 == READ_AHEAD && st.has_work();
            self.next = e.seq + 1;
            return (Some(Ok(e)), was_full);
        }
        if st.ended {
            return (Some(Err(st.end.take().unwrap_or(PgError::Closed))), false);
        }
        (None, false)
    }

    /// For a watcher ([`PgLog::watch`]): `Ready` with the session's
    /// committed length once it is past where the watch started (or the
    /// end: the log closed, the listening connection failed); otherwise
    /// `Pending`, with `cx`'s waker woken by the notification. No thread
    /// waits and nothing is read.
    pub fn poll_grown(&mut self, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        let mut st = self.shared.state.lock();
        if st.known > st.next_read {
            return Poll::Ready(Ok(st.known));
        }
        if st.ended {
            return Poll::Ready(Err(st.end.take().unwrap_or(PgError::Closed)));
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// For a watcher: the caller has handled the session up to `len`;
    /// [`Subscription::poll_grown`] waits for more than that.
    pub fn seen(&mut self, len: u64) {
        let mut st = self.shared.state.lock();
        st.next_read = st.next_read.max(len);
    }

    /// The session holds at least `len` events (read by the subscriber).
    pub(crate) fn raise_known(&self, len: u64) {
        let mut st = self.shared.state.lock();
        st.known = st.known.max(len);
        let work = st.has_work();
        drop(st);
        if work {
            self.wake_reader();
        }
    }

    fn wake_reader(&self) {
        self.hub.state.lock().dirty = true;
        self.hub.work.notify_all();
    }

    /// The next committed event, waiting up to `timeout` for one
    /// (`None`: none came). [`PgError::Closed`] once the log is closed.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Event>> {
        let deadline = Instant::now() + timeout;
        let shared = self.shared.clone();
        let mut st = shared.state.lock();
        let (got, wake) = loop {
            let (got, wake) = self.take(&mut st);
            if got.is_some() {
                break (got, wake);
            }
            if shared.changed.wait_until(&mut st, deadline).timed_out() {
                break self.take(&mut st);
            }
        };
        drop(st);
        if wake {
            self.wake_reader();
        }
        got.transpose()
    }

    /// The next committed event for async callers: `Pending` (with `cx`'s
    /// waker woken when an event or the end comes) holds no thread. An
    /// event is never lost to a dropped future.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<Event>> {
        let shared = self.shared.clone();
        let mut st = shared.state.lock();
        let (got, wake) = self.take(&mut st);
        if got.is_none() {
            st.waker = Some(cx.waker().clone());
        }
        drop(st);
        if wake {
            self.wake_reader();
        }
        match got {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}
