//! A client's connection to the host (docs/MULTIPROCESS.md): the socket,
//! the requests waiting for their answers, the follows the host pushes
//! events to, and the ticker that sends pipelined appends held back at most
//! [`HOLD`]. When the connection ends, every waiter learns it at once
//! ([`Conn::kill`]): no client hangs on a dead host.

use std::collections::{HashMap, VecDeque};
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::Waker;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::backend::LogEvent;
use crate::error::{Error, Result};
use crate::share::server::socket_addr;
use crate::share::wire::{self, Op, Reply, Request, Response, WireEvent, VERSION};

/// One connection to a host.
pub(super) struct Conn {
    pub(super) writer: Mutex<Out>,
    /// The ticker parked with nothing held back: the next held-back
    /// append wakes it.
    ticker_parked: AtomicBool,
    ticker_cv: Condvar,
    pub(super) next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Arc<Slot>>>,
    pub(super) follows: Mutex<HashMap<u64, Arc<Queue>>>,
    pub(super) dead: AtomicBool,
}

/// A connection's sending side: what is written goes out with the frames
/// held back before it (pipelined appends), in one write.
pub(super) struct Out {
    stream: UnixStream,
    held: Vec<u8>,
}

impl Out {
    /// Write `req` (after whatever is held back).
    pub(super) fn send(&mut self, req: &Request) -> std::io::Result<()> {
        wire::write_frame(&mut self.held, req)?;
        self.flush()
    }

    /// Hold `req` back until the next send, or the ticker.
    fn hold(&mut self, req: &Request) -> std::io::Result<()> {
        wire::write_frame(&mut self.held, req)
    }

    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let r = wire::send_all(&self.stream, &self.held);
        self.held.clear();
        r
    }
}

/// How long a pipelined append may be held back waiting for the flush
/// (or any other request) that would carry it in the same write.
pub(super) const HOLD: Duration = Duration::from_millis(1);

/// What an answer does when it comes instead of waiting in its slot.
pub(super) type OnAnswer = Box<dyn FnOnce(Result<Reply>) + Send>;

/// Where an answer lands.
#[derive(Default)]
pub(super) struct Slot {
    reply: Mutex<Option<Result<Reply>>>,
    cv: Condvar,
    waker: Mutex<Option<Waker>>,
    on_answer: Mutex<Option<OnAnswer>>,
}

impl Slot {
    fn fill(&self, r: Result<Reply>) {
        if let Some(f) = self.on_answer.lock().take() {
            f(r);
            return;
        }
        *self.reply.lock() = Some(r);
        self.cv.notify_all();
        if let Some(w) = self.waker.lock().take() {
            w.wake();
        }
    }

    pub(super) fn wait(&self) -> Result<Reply> {
        let mut g = self.reply.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.cv.wait(&mut g);
        }
    }
}

/// A follow's pushed events.
#[derive(Default)]
pub(super) struct Queue {
    pub(super) state: Mutex<(VecDeque<LogEvent>, Option<Error>)>,
    pub(super) cv: Condvar,
    pub(super) waker: Mutex<Option<Waker>>,
}

impl Queue {
    pub(super) fn push(&self, events: Vec<WireEvent>, end: Option<Error>) {
        let mut st = self.state.lock();
        st.0.extend(events.into_iter().map(|e| LogEvent {
            seq: e.seq,
            kind: e.kind,
            flags: e.flags,
            payload: e.payload,
        }));
        if end.is_some() && st.1.is_none() {
            st.1 = end;
        }
        drop(st);
        self.cv.notify_all();
        if let Some(w) = self.waker.lock().take() {
            w.wake();
        }
    }
}

pub(super) fn lost(what: &str) -> Error {
    Error::HostLost {
        detail: format!("{what}; it may or may not have taken effect"),
    }
}

impl Conn {
    pub(super) fn connect(dir: &Path) -> std::io::Result<(Arc<Conn>, [u8; 16])> {
        let addr = socket_addr(dir)?;
        let mut stream = UnixStream::connect(&addr.path)?;
        drop(addr);
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        wire::write_frame(
            &mut stream,
            &Request {
                id: 0,
                op: Op::Hello {
                    version: VERSION,
                    pid: std::process::id(),
                },
            },
        )?;
        let hello: Option<Response> = wire::read_frame(&mut stream)?;
        let store_id = match hello {
            Some(Response {
                reply: Reply::Hello { version, store_id },
                ..
            }) if version == VERSION => store_id,
            // Refused (another user's process): trying again will not help.
            Some(Response {
                reply: Reply::Err(w),
                ..
            }) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    w.into_error().to_string(),
                ))
            }
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the host did not answer the hello",
                ))
            }
        };
        stream.set_read_timeout(None)?;
        let reader = stream.try_clone()?;
        let conn = Arc::new(Conn {
            writer: Mutex::new(Out {
                stream,
                held: Vec::new(),
            }),
            ticker_parked: AtomicBool::new(false),
            ticker_cv: Condvar::new(),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            follows: Mutex::new(HashMap::new()),
            dead: AtomicBool::new(false),
        });
        let c = conn.clone();
        std::thread::Builder::new()
            .name("turnstone-client".into())
            .spawn(move || c.read_loop(reader))?;
        let weak = Arc::downgrade(&conn);
        std::thread::Builder::new()
            .name("turnstone-client-tick".into())
            .spawn(move || tick(weak))?;
        Ok((conn, store_id))
    }

    fn read_loop(self: Arc<Conn>, stream: UnixStream) {
        let mut r = BufReader::with_capacity(64 << 10, stream);
        while let Ok(Some(Response { id, reply })) = wire::read_frame::<_, Response>(&mut r) {
            let follow = self.follows.lock().get(&id).cloned();
            if let Some(q) = follow {
                match reply {
                    Reply::Events(evs) => q.push(evs, None),
                    Reply::FollowEnd(e) => {
                        self.follows.lock().remove(&id);
                        q.push(Vec::new(), Some(e.into_error()));
                    }
                    _ => {}
                }
                continue;
            }
            if let Some(slot) = self.pending.lock().remove(&id) {
                slot.fill(Ok(reply));
            }
        }
        self.kill();
    }

    /// The connection ended: every waiting request and follow learns it.
    pub(super) fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
        let _ = self.writer.lock().stream.shutdown(std::net::Shutdown::Both);
        self.ticker_cv.notify_all();
        for (_, slot) in self.pending.lock().drain() {
            slot.fill(Err(lost("the host went away before answering")));
        }
        for (_, q) in self.follows.lock().drain() {
            q.push(Vec::new(), Some(lost("the host went away")));
        }
    }

    /// Send `op`, to which no answer comes.
    pub(super) fn send_unanswered(&self, op: Op) -> std::result::Result<(), ()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let held = {
            let mut w = self.writer.lock();
            // Under the lock the ticker checks this flag under.
            if self.ticker_parked.swap(false, Ordering::SeqCst) {
                self.ticker_cv.notify_one();
            }
            w.hold(&Request { id, op })
        };
        if held.is_err() {
            self.kill();
            return Err(());
        }
        Ok(())
    }

    /// Send `op`; `then` runs with its answer (on the connection's reader
    /// thread, or on the thread that finds the connection ended).
    pub(super) fn send_then(&self, op: Op, then: OnAnswer) -> std::result::Result<(), ()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::default());
        *slot.on_answer.lock() = Some(then);
        self.pending.lock().insert(id, slot);
        if self.writer.lock().send(&Request { id, op }).is_err() {
            self.kill();
        }
        Ok(())
    }

    /// Send `op`; the slot its answer lands in. `Err` if the request was
    /// not sent (the connection was already down).
    pub(super) fn send(&self, op: Op) -> std::result::Result<(u64, Arc<Slot>), ()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::default());
        self.pending.lock().insert(id, slot.clone());
        let sent = self.writer.lock().send(&Request { id, op });
        if sent.is_err() {
            self.kill();
        } else if self.dead.load(Ordering::SeqCst) {
            // Killed while sending: the slot was failed (or answered).
        }
        Ok((id, slot))
    }
}

/// Send what pipelined appends held back at most [`HOLD`] after they were
/// held (a flush usually carries them sooner); parked while nothing is held.
fn tick(conn: Weak<Conn>) {
    let mut idle = 0u32;
    loop {
        std::thread::sleep(HOLD);
        let Some(c) = conn.upgrade() else { return };
        if c.dead.load(Ordering::SeqCst) {
            return;
        }
        let mut w = c.writer.lock();
        if w.held.is_empty() {
            idle += 1;
            if idle >= 100 {
                // Nothing held for a while: sleep until an append is.
                c.ticker_parked.store(true, Ordering::SeqCst);
                drop(w);
                let mut w = c.writer.lock();
                while c.ticker_parked.load(Ordering::SeqCst) && !c.dead.load(Ordering::SeqCst) {
                    c.ticker_cv.wait(&mut w);
                }
                idle = 0;
            }
            continue;
        }
        idle = 0;
        if w.flush().is_err() {
            drop(w);
            c.kill();
            return;
        }
    }
}

/// What an answer is, as a result.
pub(super) fn reply(r: Reply) -> Result<Reply> {
    match r {
        Reply::Err(e) => Err(e.into_error()),
        other => Ok(other),
    }
}

pub(super) fn unexpected(r: Reply) -> Error {
    Error::Backend {
        backend: "host",
        op: "answer".into(),
        detail: format!("an answer of the wrong kind: {r:?}"),
    }
}
