//! The host side: a store's lock holder serves its clients on `host.sock`
//! (docs/MULTIPROCESS.md). One thread accepts; one thread per connection
//! reads requests and answers the quick ones itself; a flush or a follow,
//! which waits, runs on a worker thread, so one client's threads never wait
//! behind each other.

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::backend::{EventLog, Hit};
use crate::error::{Error, Result};
use crate::share::wire::{
    self, Op, Reply, Request, Response, WireError, WireEvent, FRAME_MAX, VERSION,
};
use crate::store::Store;

/// The socket's name in the store directory.
pub const SOCKET_FILE: &str = "host.sock";

/// How long a write to a client may wait before the client is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most worker threads waiting at once (flushes and follows).
const WORKERS_MAX: usize = 1024;

/// The socket's path in the store directory at `dir`.
pub(crate) fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET_FILE)
}

/// The bytes a Unix socket address holds: sockaddr_un's sun_path is 108
/// bytes with the terminating NUL.
const SUN_PATH_MAX: usize = 107;

/// An address to bind or connect the socket of the store at `dir` by: its
/// path when that fits a socket address; when it does not (Linux), the same
/// file reached through this process's descriptor of the directory,
/// `/proc/self/fd/N/host.sock`, the directory held open while the address
/// is used.
pub(crate) struct SocketAddr {
    pub(crate) path: PathBuf,
    _dir: Option<std::fs::File>,
}

pub(crate) fn socket_addr(dir: &Path) -> std::io::Result<SocketAddr> {
    let path = socket_path(dir);
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return Ok(SocketAddr { path, _dir: None });
    }
    if cfg!(target_os = "linux") {
        use std::os::fd::AsRawFd;
        let d = std::fs::File::open(dir)?;
        let path = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET_FILE}", d.as_raw_fd()));
        return Ok(SocketAddr {
            path,
            _dir: Some(d),
        });
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is {} bytes, over the {SUN_PATH_MAX} a Unix socket path may have: open the store by a shorter path to share it between processes",
            path.display(),
            path.as_os_str().len()
        ),
    ))
}

/// `Err(why)` unless the process at the other end of `stream` runs as
/// this process's user (its credentials, as the kernel gives them).
fn same_user(stream: &UnixStream) -> std::result::Result<(), String> {
    let me = rustix::process::geteuid();
    match rustix::net::sockopt::socket_peercred(stream) {
        Ok(peer) if peer.uid == me => Ok(()),
        Ok(peer) => Err(format!(
            "this store is hosted for user {}; process {} runs as user {}",
            me.as_raw(),
            peer.pid.as_raw_nonzero(),
            peer.uid.as_raw()
        )),
        Err(e) => Err(format!("the client's credentials: {e}")),
    }
}

/// A running host: serves until dropped (or the store closes), then
/// removes its socket and ends every connection, so that clients notice
/// at once.
pub struct Server {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("socket", &self.inner.path)
            .finish()
    }
}

struct Inner {
    path: PathBuf,
    store: Weak<Store>,
    stop: AtomicBool,
    conns: Mutex<Vec<Weak<Conn>>>,
    pool: Pool,
    syncs: Arc<Syncs>,
}

/// Flushes waiting for the log to be durable at their position: one
/// thread answers every flush a batch's fdatasync covered, in one write
/// per connection.
#[derive(Default)]
struct Syncs {
    waiting: Mutex<Vec<SyncWait>>,
    cv: Condvar,
    stop: AtomicBool,
}

struct SyncWait {
    target: crate::types::LogPos,
    conn: Arc<Conn>,
    id: u64,
    session: String,
}

impl Server {
    /// Serve `store` (held for writing by this process) on its socket.
    pub fn start(store: &Arc<Store>) -> Result<Server> {
        if store.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let path = socket_path(store.dir());
        // The lock is ours: a socket file here was left by a host that died.
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove stale socket", &path, e)),
        }
        let listener = socket_addr(store.dir())
            .and_then(|addr| UnixListener::bind(&addr.path))
            .map_err(|e| Error::io("bind", &path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io("chmod", &path, e))?;
        let inner = Arc::new(Inner {
            path,
            store: Arc::downgrade(store),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            pool: Pool::default(),
            syncs: Arc::new(Syncs::default()),
        });
        let (syncs, weak) = (inner.syncs.clone(), inner.store.clone());
        std::thread::Builder::new()
            .name("turnstone-host-sync".into())
            .spawn(move || answer_syncs(syncs, weak))
            .map_err(|e| Error::io("spawn host thread", &inner.path, e))?;
        let accept = inner.clone();
        std::thread::Builder::new()
            .name("turnstone-host".into())
            .spawn(move || accept_loop(accept, listener))
            .map_err(|e| Error::io("spawn host thread", &inner.path, e))?;
        Ok(Server { inner })
    }

    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.inner.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let inner = &self.inner;
        inner.stop.store(true, Ordering::SeqCst);
        inner.syncs.stop.store(true, Ordering::SeqCst);
        inner.syncs.cv.notify_all();
        // Wake the accept loop, then leave no socket for a client to find.
        let _ = UnixStream::connect(&inner.path);
        let _ = std::fs::remove_file(&inner.path);
        for c in inner.conns.lock().drain(..) {
            if let Some(c) = c.upgrade() {
                c.dead.store(true, Ordering::Relaxed);
                let _ = c.writer.lock().stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

fn accept_loop(inner: Arc<Inner>, listener: UnixListener) {
    for conn in listener.incoming() {
        if inner.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else { continue };
        // The socket's mode keeps other users out; its peer's credentials
        // do too, whatever the mode became (a chmod, a umask, root's).
        if let Err(why) = same_user(&stream) {
            // One small frame: it fits the socket's buffer, so this never
            // waits on a peer that does not read.
            let mut stream = stream;
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let refused = Error::Refused(why);
            let _ = wire::write_frame(
                &mut stream,
                &Response {
                    id: 0,
                    reply: Reply::Err(WireError::from(&refused)),
                },
            );
            continue;
        }
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let Ok(writer) = stream.try_clone() else {
            continue;
        };
        let conn = Arc::new(Conn {
            writer: Mutex::new(Writer {
                stream: writer,
                backlog: Vec::new(),
                draining: false,
            }),
            failed: Mutex::new(HashMap::new()),
            claims: Mutex::new(Vec::new()),
            follows: Mutex::new(HashMap::new()),
            dead: AtomicBool::new(false),
        });
        {
            let mut conns = inner.conns.lock();
            // Forget connections that ended.
            conns.retain(|c| c.strong_count() > 0);
            conns.push(Arc::downgrade(&conn));
        }
        let inner = inner.clone();
        let _ = std::thread::Builder::new()
            .name("turnstone-host-conn".into())
            .spawn(move || serve_conn(inner, conn, stream));
    }
}

/// The most bytes kept for a client that is slow to read; past it the
/// client is dropped.
const BACKLOG_MAX: usize = 2 * FRAME_MAX;

/// One client: its writer, its claims, its follows.
struct Conn {
    writer: Mutex<Writer>,
    /// Pipelined appends that failed, by session: the session's next flush
    /// answers with the error.
    failed: Mutex<HashMap<String, WireError>>,
    claims: Mutex<Vec<(String, u64)>>,
    follows: Mutex<HashMap<u64, Arc<AtomicBool>>>,
    dead: AtomicBool,
}

/// A client's sending side. Answers go out at once when the client's
/// socket takes them; what it does not take waits in `backlog` for a
/// drainer thread, so that no thread of the host (the one answering every
/// client's flushes above all) ever waits for a slow client.
struct Writer {
    stream: UnixStream,
    backlog: Vec<u8>,
    draining: bool,
}

impl Conn {
    fn send(self: &Arc<Self>, id: u64, reply: Reply) {
        self.send_all(vec![Response { id, reply }]);
    }

    fn kill(&self, w: &Writer) {
        self.dead.store(true, Ordering::Relaxed);
        let _ = w.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Several answers in one write, never waiting for the client.
    fn send_all(self: &Arc<Self>, answers: Vec<Response>) {
        if self.dead.load(Ordering::Relaxed) {
            return;
        }
        let mut buf = Vec::new();
        for a in &answers {
            if wire::write_frame(&mut buf, a).is_err() {
                self.dead.store(true, Ordering::Relaxed);
                return;
            }
        }
        let mut w = self.writer.lock();
        if w.draining {
            if w.backlog.len() + buf.len() > BACKLOG_MAX {
                self.kill(&w);
            } else {
                w.backlog.extend_from_slice(&buf);
            }
            return;
        }
        match wire::send_now(&w.stream, &buf) {
            Ok(n) if n == buf.len() => {}
            Ok(n) => {
                w.backlog.extend_from_slice(&buf[n..]);
                w.draining = true;
                let conn = self.clone();
                let spawned = std::thread::Builder::new()
                    .name("turnstone-host-drain".into())
                    .spawn(move || drain(conn));
                if spawned.is_err() {
                    self.kill(&w);
                }
            }
            // The client is gone.
            Err(_) => self.kill(&w),
        }
    }
}

/// Send a slow client its backlog, waiting (up to the write timeout) as
/// long as it takes; a client that does not read within it is dropped.
fn drain(conn: Arc<Conn>) {
    let Ok(stream) = conn.writer.lock().stream.try_clone() else {
        let w = conn.writer.lock();
        conn.kill(&w);
        return;
    };
    loop {
        let buf = {
            let mut w = conn.writer.lock();
            if w.backlog.is_empty() || conn.dead.load(Ordering::Relaxed) {
                w.draining = false;
                return;
            }
            std::mem::take(&mut w.backlog)
        };
        if wire::send_all(&stream, &buf).is_err() {
            let w = conn.writer.lock();
            conn.kill(&w);
            return;
        }
    }
}

/// The sync thread: wait until the log is durable at the lowest position
/// a flush waits for, then answer every flush it covers.
fn answer_syncs(syncs: Arc<Syncs>, store: Weak<Store>) {
    loop {
        let target = {
            let mut w = syncs.waiting.lock();
            while w.is_empty() && !syncs.stop.load(Ordering::SeqCst) {
                syncs.cv.wait(&mut w);
            }
            if syncs.stop.load(Ordering::SeqCst) {
                return;
            }
            w.iter().map(|s| s.target).min().expect("not empty")
        };
        let Some(st) = store.upgrade() else { return };
        let waited = st.wait_durable(target);
        let durable = st.durable_pos();
        let done: Vec<SyncWait> = {
            let mut w = syncs.waiting.lock();
            let all = std::mem::take(&mut *w);
            let (done, rest) = all
                .into_iter()
                .partition(|s| waited.is_err() || s.target <= durable);
            *w = rest;
            done
        };
        let log: &dyn EventLog = &*st;
        let mut by_conn: HashMap<*const Conn, (Arc<Conn>, Vec<Response>)> = HashMap::new();
        for s in done {
            let reply = match &waited {
                Err(e) => Reply::Err(WireError::from(e)),
                Ok(()) => result_reply(log.durable_len(&s.session), Reply::Len),
            };
            by_conn
                .entry(Arc::as_ptr(&s.conn))
                .or_insert_with(|| (s.conn.clone(), Vec::new()))
                .1
                .push(Response { id: s.id, reply });
        }
        drop(st);
        for (_, (conn, answers)) in by_conn {
            conn.send_all(answers);
        }
    }
}

fn serve_conn(inner: Arc<Inner>, conn: Arc<Conn>, stream: UnixStream) {
    let mut reader = std::io::BufReader::with_capacity(64 << 10, stream);
    // The hello first; anything else ends the connection.
    match wire::read_frame::<_, Request>(&mut reader) {
        Ok(Some(Request {
            id,
            op: Op::Hello { version, .. },
        })) if version == VERSION => {
            let Some(store) = inner.store.upgrade() else {
                return;
            };
            conn.send(
                id,
                Reply::Hello {
                    version: VERSION,
                    store_id: store.store_id(),
                },
            );
        }
        _ => return,
    }
    while let Ok(Some(req)) = wire::read_frame::<_, Request>(&mut reader) {
        if inner.stop.load(Ordering::SeqCst) || conn.dead.load(Ordering::Relaxed) {
            break;
        }
        let Some(store) = inner.store.upgrade() else {
            conn.send(req.id, Reply::Err(WireError::from(&Error::Closed)));
            break;
        };
        handle(&inner, &conn, store, req);
        if reader.buffer().is_empty() {
            std::thread::yield_now();
        }
    }
    // The client is gone: its claims and follows end with it.
    conn.dead.store(true, Ordering::Relaxed);
    if let Some(store) = inner.store.upgrade() {
        for (session, claim) in conn.claims.lock().drain(..) {
            EventLog::release(&*store, &session, claim);
        }
    }
    for (_, cancel) in conn.follows.lock().drain() {
        cancel.store(true, Ordering::Relaxed);
    }
    let _ = conn.writer.lock().stream.shutdown(std::net::Shutdown::Both);
}

type Job = Box<dyn FnOnce() + Send>;

/// Worker threads for the requests that wait: a job goes to an idle
/// worker, or to a new one (up to [`WORKERS_MAX`]; past it, jobs queue).
#[derive(Default)]
struct Pool {
    state: Arc<(Mutex<PoolState>, Condvar)>,
}

#[derive(Default)]
struct PoolState {
    jobs: VecDeque<Job>,
    idle: usize,
    threads: usize,
}

impl Pool {
    fn run(&self, job: Job) {
        let (m, cv) = &*self.state;
        let mut st = m.lock();
        st.jobs.push_back(job);
        if st.idle > 0 {
            cv.notify_one();
            return;
        }
        if st.threads >= WORKERS_MAX {
            return;
        }
        st.threads += 1;
        drop(st);
        let state = self.state.clone();
        let spawned = std::thread::Builder::new()
            .name("turnstone-host-worker".into())
            .spawn(move || worker(state));
        if spawned.is_err() {
            m.lock().threads -= 1;
        }
    }
}

fn worker(state: Arc<(Mutex<PoolState>, Condvar)>) {
    let (m, cv) = &*state;
    let mut st = m.lock();
    loop {
        if let Some(job) = st.jobs.pop_front() {
            drop(st);
            job();
            st = m.lock();
            continue;
        }
        st.idle += 1;
        let timed_out = cv.wait_for(&mut st, Duration::from_secs(30)).timed_out();
        st.idle -= 1;
        if timed_out && st.jobs.is_empty() {
            st.threads -= 1;
            return;
        }
    }
}

mod requests;
pub(crate) use requests::search;
use requests::{handle, result_reply};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Options;
    use std::time::Instant;

    /// A client that follows a busy session and asks for flushes but never
    /// reads: the host keeps its answers in a backlog and the thread that
    /// answers every client's flushes never waits for it.
    #[test]
    fn a_client_that_never_reads_holds_up_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_with(dir.path(), Options::default()).unwrap());
        crate::share::host(&store).unwrap();
        let log: &dyn EventLog = &*store;
        log.append_group("busy", &[(300, 0, b"first")]).unwrap();
        log.sync_session("busy").unwrap();

        let mut slow = UnixStream::connect(dir.path().join(SOCKET_FILE)).unwrap();
        let req = |id, op| Request { id, op };
        wire::write_frame(
            &mut slow,
            &req(
                0,
                Op::Hello {
                    version: VERSION,
                    pid: 0,
                },
            ),
        )
        .unwrap();
        wire::write_frame(
            &mut slow,
            &req(
                1,
                Op::Follow {
                    session: "busy".into(),
                    from: 0,
                },
            ),
        )
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let asker = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut id = 2;
                while !stop.load(Ordering::Relaxed) {
                    let op = Op::Sync {
                        session: "busy".into(),
                    };
                    if wire::write_frame(&mut slow, &req(id, op)).is_err() {
                        break;
                    }
                    id += 1;
                    std::thread::sleep(Duration::from_millis(2));
                }
                slow
            })
        };
        // Another client writes big events to the session the slow one
        // follows: its socket fills within a few of them.
        let client = crate::share::Client::connect(dir.path(), Options::default()).unwrap();
        let claim = client.claim("busy").unwrap();
        let big = vec![b'x'; 256 << 10];
        let mut worst = Duration::ZERO;
        for _ in 0..60 {
            let t = Instant::now();
            client.append_group("busy", &[(300, 0, &big)]).unwrap();
            client.sync_session("busy").unwrap();
            worst = worst.max(t.elapsed());
        }
        stop.store(true, Ordering::Relaxed);
        let _slow = asker.join().unwrap();
        assert!(
            worst < Duration::from_secs(3),
            "a flush waited {worst:?} behind a client that does not read"
        );
        client.release("busy", claim.id);
    }
}
