//! The client side: a process whose open met another process's lock runs
//! its session layer on this [`EventLog`], whose methods are requests to
//! the host (docs/MULTIPROCESS.md). When the host goes away, the client
//! takes the store over or connects to whoever did.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::backend::{Claim, EventLog, Follow, Listing, LogEvent};
use crate::error::{Error, Result};
use crate::share::server::Server;
use crate::share::wire::{Op, Reply, WireEvent};
use crate::store::{Options, Store};

use super::conn::{lost, reply, unexpected, Conn};
use super::follow::ClientFollow;

/// How long a client waits for some process to host the store after its
/// host went away (the new host's recovery runs within it).
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// A store hosted by another process, or (after a takeover) by this one.
pub struct Client {
    me: Weak<Client>,
    dir: PathBuf,
    opts: Options,
    mode: RwLock<Mode>,
    /// One change of host at a time.
    switching: Mutex<()>,
    /// Sessions this process claimed: claim id (with the current host).
    claims: Mutex<HashMap<String, u64>>,
    /// The end of what this process appended to each session.
    appended: Mutex<HashMap<String, u64>>,
    /// Sessions whose unacknowledged events a dead host took with it.
    doubt: Mutex<HashSet<String>>,
    /// Flushes waited for by `poll_durable`, by (session, len).
    syncs: Mutex<HashMap<String, AsyncFlush>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("share::Client")
            .field("dir", &self.dir)
            .finish()
    }
}

/// What the async flushes of one session (`poll_durable`) know: every
/// future waiting on the session is woken by the answer of any flush.
#[derive(Default)]
struct AsyncFlush {
    /// Events of the session known durable.
    durable: u64,
    /// The most a flush in flight asks for.
    asked: Option<u64>,
    /// A flush failed: the next poll returns it.
    error: Option<Error>,
    wakers: Vec<Waker>,
}

#[derive(Clone)]
pub(super) enum Mode {
    /// Not connected yet, or the connection ended.
    Down,
    Remote(Arc<Conn>),
    /// This process took the store over.
    Local(Arc<Store>),
    Closed,
}

impl Client {
    /// A client of the store at `dir`, hosted by another process (or, if
    /// none hosts it any more, by this one: `opts` opens it then).
    pub fn connect(dir: &Path, opts: Options) -> Result<Arc<Client>> {
        let client = Arc::new_cyclic(|me| Client {
            me: me.clone(),
            dir: dir.to_path_buf(),
            opts,
            mode: RwLock::new(Mode::Down),
            switching: Mutex::new(()),
            claims: Mutex::new(HashMap::new()),
            appended: Mutex::new(HashMap::new()),
            doubt: Mutex::new(HashSet::new()),
            syncs: Mutex::new(HashMap::new()),
        });
        client.current()?;
        Ok(client)
    }

    /// Whether this process hosts the store now (it took it over).
    pub fn is_host(&self) -> bool {
        matches!(&*self.mode.read(), Mode::Local(_))
    }

    /// Stop: a store this process took over is closed (and its clients
    /// move on); a connection is ended.
    fn shut(&self) -> Result<()> {
        let old = std::mem::replace(&mut *self.mode.write(), Mode::Closed);
        match old {
            Mode::Local(store) => store.shutdown(),
            Mode::Remote(conn) => {
                conn.kill();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The current host, connecting (or taking the store over) if the
    /// connection is down.
    pub(super) fn current(&self) -> Result<Mode> {
        match &*self.mode.read() {
            Mode::Remote(c) if !c.dead.load(Ordering::SeqCst) => {
                return Ok(Mode::Remote(c.clone()))
            }
            Mode::Local(s) => return Ok(Mode::Local(s.clone())),
            Mode::Closed => return Err(Error::Closed),
            _ => {}
        }
        let _one = self.switching.lock();
        match &*self.mode.read() {
            Mode::Remote(c) if !c.dead.load(Ordering::SeqCst) => {
                return Ok(Mode::Remote(c.clone()))
            }
            Mode::Local(s) => return Ok(Mode::Local(s.clone())),
            Mode::Closed => return Err(Error::Closed),
            _ => {}
        }
        let deadline = Instant::now() + TAKEOVER_TIMEOUT;
        loop {
            match Store::open_with(&self.dir, self.opts.clone()) {
                Ok(store) => {
                    let store = Arc::new(store);
                    let server = Server::start(&store)?;
                    store.attach(Box::new(server));
                    let mode = Mode::Local(store);
                    self.after_switch(&mode);
                    *self.mode.write() = mode.clone();
                    return Ok(mode);
                }
                Err(Error::Locked { .. }) => {}
                Err(e) => return Err(e),
            }
            match Conn::connect(&self.dir) {
                Ok((conn, _)) => {
                    let mode = Mode::Remote(conn);
                    self.after_switch(&mode);
                    *self.mode.write() = mode.clone();
                    return Ok(mode);
                }
                // The socket is another user's: waiting will not change it.
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    return Err(Error::io("connect", self.dir.join(super::SOCKET_FILE), e));
                }
                // No host yet (it is recovering, or died): try again.
                Err(_) => {}
            }
            if Instant::now() > deadline {
                return Err(Error::HostLost {
                    detail: format!(
                        "no process hosts {} after {} s, and its lock is held",
                        self.dir.display(),
                        TAKEOVER_TIMEOUT.as_secs()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A new host: claim again what this process held, and doubt the
    /// sessions whose appends did not all survive.
    fn after_switch(&self, mode: &Mode) {
        let held: Vec<String> = self.claims.lock().keys().cloned().collect();
        for session in held {
            match self.claim_on(mode, &session) {
                Ok(c) => {
                    self.claims.lock().insert(session, c.id);
                }
                Err(_) => {
                    self.claims.lock().remove(&session);
                    self.doubt.lock().insert(session);
                }
            }
        }
        let appended: Vec<(String, u64)> = self
            .appended
            .lock()
            .iter()
            .map(|(s, n)| (s.clone(), *n))
            .collect();
        for (session, end) in appended {
            let durable = match mode {
                Mode::Local(s) => EventLog::durable_len(&**s, &session).ok().flatten(),
                Mode::Remote(c) => match c.send(Op::DurableLen {
                    session: session.clone(),
                }) {
                    Ok((_, slot)) => match slot.wait().and_then(reply) {
                        Ok(Reply::Len(n)) => n,
                        _ => None,
                    },
                    Err(()) => None,
                },
                _ => None,
            };
            if durable.unwrap_or(0) < end {
                self.doubt.lock().insert(session);
            }
        }
    }

    fn release_on(&self, mode: &Mode, session: &str, id: u64) {
        match mode {
            Mode::Local(s) => EventLog::release(&**s, session, id),
            Mode::Remote(c) => {
                if let Ok((_, slot)) = c.send(Op::Release {
                    session: session.to_string(),
                    claim: id,
                }) {
                    let _ = slot.wait();
                }
            }
            _ => {}
        }
    }

    fn claim_on(&self, mode: &Mode, session: &str) -> Result<Claim> {
        match mode {
            Mode::Local(s) => EventLog::claim(&**s, session),
            Mode::Remote(c) => {
                let (_, slot) = c
                    .send(Op::Claim {
                        session: session.to_string(),
                    })
                    .map_err(|()| lost("the host went away"))?;
                match reply(slot.wait()?)? {
                    Reply::Claim { id, took_over } => Ok(Claim { id, took_over }),
                    r => Err(unexpected(r)),
                }
            }
            _ => Err(Error::Closed),
        }
    }

    /// Run one request: on this process's store after a takeover, or on
    /// the host. A request that was never sent (the connection was found
    /// down) goes to the next host; one that was sent and not answered
    /// fails with `host_lost`, unless it only reads (`retry`).
    fn run<T>(
        &self,
        retry: bool,
        op: impl Fn() -> Op,
        local: impl Fn(&Store) -> Result<T>,
        remote: impl Fn(Reply) -> Result<T>,
    ) -> Result<T> {
        for _ in 0..8 {
            match self.current()? {
                Mode::Local(s) => return local(&s),
                Mode::Remote(c) => {
                    let Ok((_, slot)) = c.send(op()) else {
                        continue;
                    };
                    match slot.wait() {
                        Ok(r) => return remote(reply(r)?),
                        Err(Error::HostLost { .. }) if retry => continue,
                        Err(e) => return Err(e),
                    }
                }
                Mode::Down => continue,
                Mode::Closed => return Err(Error::Closed),
            }
        }
        Err(lost("the host went away repeatedly"))
    }

    /// An append to a session this process holds, on a remote host: its
    /// seq is known here (nobody else appends to it), so it is sent
    /// without waiting for an answer; a failure answers the next flush.
    /// `None`: not pipelined (not held, or this process hosts now).
    fn append_pipelined(&self, session: &str, events: &[(u16, u16, &[u8])]) -> Result<Option<u64>> {
        if !self.claims.lock().contains_key(session) {
            return Ok(None);
        }
        // What the host would refuse at once is refused here at once.
        for &(_, _, p) in events {
            if p.len() > crate::frame::PAYLOAD_BYTES_MAX {
                return Err(Error::TooLarge {
                    what: "event payload",
                    len: p.len() as u64,
                    max: crate::frame::PAYLOAD_BYTES_MAX as u64,
                });
            }
        }
        let conn = match self.current()? {
            Mode::Remote(c) => c,
            _ => return Ok(None),
        };
        // The appended end moves under this lock, so two threads of this
        // process appending to one session send in the order of their seqs.
        let mut appended = self.appended.lock();
        let Some(&len) = appended.get(session) else {
            return Ok(None);
        };
        let op = Op::Append {
            session: session.to_string(),
            events: events.iter().map(|&(k, f, p)| (k, f, p.to_vec())).collect(),
            expect_len: Some(len),
        };
        if conn.send_unanswered(op).is_err() {
            return Err(lost("the host went away; the append was not sent"));
        }
        appended.insert(session.to_string(), len + events.len() as u64);
        Ok(Some(len))
    }

    fn check_doubt(&self, session: &str) -> Result<()> {
        if self.doubt.lock().contains(session) {
            return Err(Error::HostLost {
                detail: format!(
                    "session {session:?}: the host that held events this process appended went away before they were durable; load the session again"
                ),
            });
        }
        Ok(())
    }

    fn note_appended(&self, session: &str, end: u64) {
        let mut a = self.appended.lock();
        let e = a.entry(session.to_string()).or_insert(0);
        *e = (*e).max(end);
    }

    /// The end this process needs durable in `session`.
    fn needed(&self, session: &str) -> u64 {
        self.appended.lock().get(session).copied().unwrap_or(0)
    }

    /// A flush's answer: `need` is what this process had appended to the
    /// session when the flush was sent (appends sent after it are another
    /// flush's business).
    fn check_durable(&self, session: &str, durable: Option<u64>, need: u64) -> Result<()> {
        match durable {
            Some(n) if n >= need => Ok(()),
            Some(n) => {
                self.doubt.lock().insert(session.to_string());
                Err(Error::HostLost {
                    detail: format!(
                        "session {session:?} has {n} durable events, this process appended up to {need}: the host that took them went away before they were durable"
                    ),
                })
            }
            None => Err(Error::UnknownSession(session.to_string())),
        }
    }
}

fn to_log_events(events: Vec<WireEvent>) -> Vec<LogEvent> {
    events
        .into_iter()
        .map(|e| LogEvent {
            seq: e.seq,
            kind: e.kind,
            flags: e.flags,
            payload: e.payload,
        })
        .collect()
}

/// Events read from this process's own store after a takeover, blob
/// references resolved as the host resolves them.
fn local_read(s: &Store, session: &str, range: Range<u64>) -> Result<Vec<LogEvent>> {
    EventLog::read_range(s, session, range)?
        .into_iter()
        .map(|mut e| {
            if let std::borrow::Cow::Owned(p) =
                crate::session::codec::blob_refs::resolve(s.blobs(), &e.payload)?
            {
                e.payload = p;
            }
            Ok(e)
        })
        .collect()
}

impl EventLog for Client {
    fn backend(&self) -> &'static str {
        "shared"
    }

    fn create_session(&self, session: &str) -> Result<()> {
        let op = || Op::CreateSession {
            session: session.to_string(),
        };
        self.run(
            false,
            op,
            |s| EventLog::create_session(s, session),
            |_| Ok(()),
        )
    }

    fn fork(&self, parent: &str, upto: u64, child: &str) -> Result<()> {
        let op = || Op::Fork {
            parent: parent.to_string(),
            upto,
            child: child.to_string(),
        };
        self.run(
            false,
            op,
            |s| EventLog::fork(s, parent, upto, child),
            |_| Ok(()),
        )
    }

    fn append_group(&self, session: &str, events: &[(u16, u16, &[u8])]) -> Result<u64> {
        self.check_doubt(session)?;
        if events.is_empty() {
            return Err(Error::InvalidArgument("an empty group".into()));
        }
        if let Some(first) = self.append_pipelined(session, events)? {
            return Ok(first);
        }
        let op = || Op::Append {
            session: session.to_string(),
            events: events.iter().map(|&(k, f, p)| (k, f, p.to_vec())).collect(),
            expect_len: None,
        };
        let first = self.run(
            false,
            op,
            |s| EventLog::append_group(s, session, events),
            |r| match r {
                Reply::Seq(n) => Ok(n),
                r => Err(unexpected(r)),
            },
        )?;
        self.note_appended(session, first + events.len() as u64);
        Ok(first)
    }

    fn sync_session(&self, session: &str) -> Result<()> {
        self.check_doubt(session)?;
        // Before the request goes: the appends sent before it.
        let need = self.needed(session);
        let op = || Op::Sync {
            session: session.to_string(),
        };
        let durable = self.run(
            false,
            op,
            |s| {
                EventLog::sync_session(s, session)?;
                EventLog::durable_len(s, session)
            },
            |r| match r {
                Reply::Len(n) => Ok(n),
                r => Err(unexpected(r)),
            },
        )?;
        self.check_durable(session, durable, need)
    }

    fn poll_durable(&self, session: &str, len: u64, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.check_doubt(session) {
            return Poll::Ready(Err(e));
        }
        let conn = match self.current() {
            Ok(Mode::Remote(c)) => c,
            // Taken over (or closed): wait here.
            _ => return Poll::Ready(self.sync_session(session)),
        };
        // Before the flush is sent: the appends sent before it.
        let need = self.needed(session).max(len);
        let mut syncs = self.syncs.lock();
        let st = syncs.entry(session.to_string()).or_default();
        if let Some(e) = st.error.take() {
            return Poll::Ready(Err(e));
        }
        if st.durable >= len {
            return Poll::Ready(Ok(()));
        }
        if !st.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            st.wakers.push(cx.waker().clone());
        }
        if st.asked.is_some_and(|a| a >= len) {
            return Poll::Pending;
        }
        st.asked = Some(need);
        drop(syncs);
        let me = self.me.clone();
        let name = session.to_string();
        let answered = move |r: Result<Reply>| {
            let Some(me) = me.upgrade() else { return };
            let r = r.and_then(reply).and_then(|r| match r {
                Reply::Len(n) => Ok(n),
                r => Err(unexpected(r)),
            });
            let r = r.and_then(|n| me.check_durable(&name, n, need).map(|()| n.unwrap_or(0)));
            let mut syncs = me.syncs.lock();
            let st = syncs.entry(name).or_default();
            st.asked = None;
            match r {
                Ok(n) => st.durable = st.durable.max(n),
                Err(e) => st.error = Some(e),
            }
            for w in st.wakers.drain(..) {
                w.wake();
            }
        };
        if conn
            .send_then(
                Op::Sync {
                    session: session.to_string(),
                },
                Box::new(answered),
            )
            .is_err()
        {
            let mut syncs = self.syncs.lock();
            let st = syncs.entry(session.to_string()).or_default();
            st.asked = None;
            st.wakers.clear();
            drop(syncs);
            return Poll::Ready(self.sync_session(session));
        }
        Poll::Pending
    }

    fn durable_len(&self, session: &str) -> Result<Option<u64>> {
        let op = || Op::DurableLen {
            session: session.to_string(),
        };
        self.run(
            true,
            op,
            |s| EventLog::durable_len(s, session),
            |r| match r {
                Reply::Len(n) => Ok(n),
                r => Err(unexpected(r)),
            },
        )
    }

    fn appended_len(&self, session: &str) -> Result<Option<u64>> {
        let op = || Op::AppendedLen {
            session: session.to_string(),
        };
        self.run(
            true,
            op,
            |s| EventLog::appended_len(s, session),
            |r| match r {
                Reply::Len(n) => Ok(n),
                r => Err(unexpected(r)),
            },
        )
    }

    fn parent(&self, session: &str) -> Result<Option<(String, u64)>> {
        let op = || Op::Parent {
            session: session.to_string(),
        };
        self.run(
            true,
            op,
            |s| EventLog::parent(s, session),
            |r| match r {
                Reply::Parent(p) => Ok(p),
                r => Err(unexpected(r)),
            },
        )
    }

    fn sessions(&self) -> Result<Vec<String>> {
        self.run(
            true,
            || Op::Sessions,
            EventLog::sessions,
            |r| match r {
                Reply::Names(n) => Ok(n),
                r => Err(unexpected(r)),
            },
        )
    }

    fn listing(&self) -> Result<Vec<Listing>> {
        self.run(
            true,
            || Op::Listing,
            EventLog::listing,
            |r| match r {
                Reply::Listing(l) => Ok(l
                    .into_iter()
                    .map(|(name, durable_len, parent)| Listing {
                        name,
                        durable_len,
                        parent,
                    })
                    .collect()),
                r => Err(unexpected(r)),
            },
        )
    }

    fn read_range(&self, session: &str, range: Range<u64>) -> Result<Vec<LogEvent>> {
        let op = || Op::ReadRange {
            session: session.to_string(),
            start: range.start,
            end: range.end,
        };
        self.run(
            true,
            op,
            |s| local_read(s, session, range.clone()),
            |r| match r {
                Reply::Events(e) => Ok(to_log_events(e)),
                r => Err(unexpected(r)),
            },
        )
    }

    fn claim(&self, session: &str) -> Result<Claim> {
        let mode = self.current()?;
        let c = self.claim_on(&mode, session)?;
        // A fresh claim starts from what the log holds: no doubt carried
        // over; this process's appends are pipelined from here.
        self.doubt.lock().remove(session);
        match self.appended_len(session) {
            Ok(n) => {
                self.appended
                    .lock()
                    .insert(session.to_string(), n.unwrap_or(0));
            }
            Err(e) => {
                self.release_on(&mode, session, c.id);
                return Err(e);
            }
        }
        self.claims.lock().insert(session.to_string(), c.id);
        Ok(c)
    }

    fn release(&self, session: &str, claim: u64) {
        let _ = claim;
        let Some(id) = self.claims.lock().remove(session) else {
            return;
        };
        self.doubt.lock().remove(session);
        self.appended.lock().remove(session);
        if let Ok(mode) = self.current() {
            self.release_on(&mode, session, id);
        }
    }

    fn follow(&self, session: &str, from: u64) -> Result<Box<dyn Follow>> {
        let me = self.me.upgrade().ok_or(Error::Closed)?;
        Ok(Box::new(ClientFollow::start(me, session, from)?))
    }

    fn close(&self) -> Result<()> {
        self.shut()
    }

    fn search(
        &self,
        query: &str,
        limit: usize,
        session: Option<&str>,
    ) -> Result<Vec<crate::backend::Hit>> {
        let op = || Op::Search {
            query: query.to_string(),
            limit: limit as u64,
            session: session.map(str::to_string),
        };
        self.run(
            true,
            op,
            |s| crate::share::server::search(s, query, limit, session),
            |r| match r {
                Reply::Hits(h) => Ok(h
                    .into_iter()
                    .map(|(session, seq, snippet)| crate::backend::Hit {
                        session,
                        seq,
                        snippet,
                    })
                    .collect()),
                r => Err(unexpected(r)),
            },
        )
    }

    fn mark_deleted(&self, session: &str) -> Result<()> {
        let op = || Op::MarkDeleted {
            session: session.to_string(),
        };
        self.run(
            false,
            op,
            |s| EventLog::mark_deleted(s, session),
            |_| Ok(()),
        )
    }
}
