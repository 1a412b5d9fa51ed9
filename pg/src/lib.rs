//! turnstone's event log on PostgreSQL (issue 18, first part).
//!
//! The same log the embedded store keeps in segment files, in three tables
//! (see [`schema`]): every session has dense seqs from 0, events are
//! appended in groups that commit atomically, a session can be forked by
//! reference (the child reads its parent's events below the fork seq), and
//! deletion is a flag that also fences the session's writer. What this
//! backend adds is what one machine cannot give:
//!
//! - **Leases with fencing epochs.** A writer holds a session through a
//!   lease ([`PgLog::acquire`]); every acquisition increments the session's
//!   epoch, and every commit checks the writer's epoch in the same statement
//!   that writes its events. A writer whose lease was taken over (paused,
//!   partitioned, presumed dead) gets [`PgError::Fenced`] and writes
//!   nothing: two writers can never both append to one session.
//! - **Group commit.** Appends are buffered in this process; a committer
//!   thread writes every pending event of its sessions in one transaction
//!   (an `UPDATE` that checks and advances every session, a binary `COPY`
//!   of the events, the notifications, `COMMIT`: one WAL flush for all of
//!   them), like the embedded store's commit batch. Sessions are spread
//!   over a few such commit lanes ([`PgOptions::lanes`]), each with its own
//!   connection, so commits overlap; a session always uses the same lane,
//!   so its events commit in order. `synchronous_commit` is left on: a
//!   commit returns once PostgreSQL has flushed its WAL.
//! - **Live follow by LISTEN/NOTIFY**: each commit notifies channel
//!   `turnstone_events` with `"<session> <len>"`; a log's followers
//!   ([`Subscription`]) share one listening connection and one reader
//!   thread (`follow.rs`), and each reads its session's row after the log
//!   listens, so no commit is missed.
//!
//! The session layer runs on this log through [`PgEventLog`] (the engine's
//! `EventLog` trait; docs/BACKENDS.md), and so do the CLI's commands on a
//! URL (`tools/src/copy.rs`, `tools/src/pg_views.rs`, `tools/src/place.rs`)
//! the Python and Node packages, and `turnstone serve` on a connection URL
//! (several instances over one database; its path table is in `streams.rs`).

mod collect;
mod error;
mod event_log;
mod follow;
mod schema;
mod streams;
mod url;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use postgres::{Client, NoTls};

pub use collect::PgCollectReport;
pub use error::{PgError, Result};
pub use event_log::{engine_error, PgEventLog};
pub use follow::Subscription;
pub use schema::SCHEMA_VERSION;
pub use streams::{LeaseRow, SessionLock, StreamExpiry, StreamRow};
pub use url::{is_url, redact};

use error::db;

/// One event read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub seq: u64,
    pub kind: u16,
    pub flags: u16,
    pub payload: Vec<u8>,
}

/// One search hit: the session it is reported under, the event's seq, the
/// matching text with the match in brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub session: String,
    pub seq: u64,
    pub snippet: String,
}

/// One session, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: String,
    /// Committed events, inherited ones included (the next seq).
    pub len: u64,
    /// `(parent, fork seq)` of a fork.
    pub parent: Option<(String, u64)>,
    pub created_ms: i64,
}

/// Options of [`PgLog::connect`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// How long a lease lasts after it is acquired or after the writer's
    /// last commit (each commit renews it).
    pub lease_ttl: Duration,
    /// Idle read connections kept for reuse.
    pub read_pool: usize,
    /// Commit lanes: committer threads, each with its connection, writing
    /// side by side (a session always uses the same one).
    pub lanes: usize,
    /// Renew the leases of this process's writers every third of
    /// `lease_ttl` (a thread), so a session waiting longer than the TTL
    /// between appends (a slow model call) keeps its writer. A process
    /// that stops (crash, SIGSTOP, a long pause) stops renewing, and its
    /// sessions can be taken over once their leases run out.
    pub renew_leases: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            lease_ttl: Duration::from_secs(30),
            read_pool: 4,
            lanes: 2,
            renew_leases: true,
        }
    }
}

/// Counters of the committer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgStats {
    /// Statements that committed events (one transaction each).
    pub commits: u64,
    /// Events committed.
    pub events: u64,
}

/// What a writer's state says when it can no longer write.
#[derive(Debug, Clone)]
enum Broken {
    Fenced { held: i64, current: i64 },
    Deleted,
    Failed(String),
    Closed,
}

struct WriterState {
    session: String,
    epoch: i64,
    /// Events the database holds for this writer's session (durable).
    committed: u64,
    /// The next seq this writer hands out.
    next: u64,
    broken: Option<Broken>,
    /// The Writer was dropped with events still queued: they are committed
    /// (appended means written, as in the embedded store) and the state is
    /// removed once they are.
    dropped: bool,
}

impl WriterState {
    fn settled(&self) -> bool {
        self.broken.is_some() || self.committed >= self.next
    }
}

struct Pending {
    writer: u64,
    seq: u64,
    kind: u16,
    flags: u16,
    payload: Vec<u8>,
    /// Searchable text, indexed for [`PgLog::search`].
    text: Option<String>,
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    writers: HashMap<u64, WriterState>,
    next_writer: u64,
    closed: bool,
    stats: PgStats,
    /// Async waits ([`Writer::poll_sync`]) to wake after the next commit
    /// (or when the lane stops), as `done` wakes the blocking ones.
    wakers: Vec<std::task::Waker>,
}

struct Inner {
    url: String,
    opts: PgOptions,
    idle: Mutex<Vec<Client>>,
    lanes: Vec<Lane>,
    /// Set by close: the lease renewer stops.
    stopped: Mutex<bool>,
    /// The followers' hub, started by the first subscribe.
    hub: Mutex<Option<Arc<follow::Hub>>>,
    stop: Condvar,
}

/// One commit lane: a queue, its committer thread and connection. A
/// session always commits through the same lane (by a hash of its id), so
/// its batches commit in order while lanes commit side by side.
struct Lane {
    queue: Mutex<Queue>,
    /// The committer waits here for work.
    work: Condvar,
    /// Writers wait here for their commits.
    done: Condvar,
}

impl Lane {
    /// Tell every waiter, blocking or async, that writers' states changed.
    fn settle(&self, mut q: parking_lot::MutexGuard<'_, Queue>) {
        let wakers = std::mem::take(&mut q.wakers);
        drop(q);
        self.done.notify_all();
        for w in wakers {
            w.wake();
        }
    }
}

impl Inner {
    fn lane_of(&self, session: &str) -> usize {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        session.hash(&mut h);
        (h.finish() % self.lanes.len() as u64) as usize
    }
}

/// A connection to turnstone's tables in one PostgreSQL database. Cheap to
/// clone; [`PgLog::close`] stops the committer once its queue is written,
/// and so does dropping the last clone (a [`Writer`] holds one).
#[derive(Clone)]
pub struct PgLog {
    inner: Arc<Inner>,
    owner: Arc<Owner>,
}

/// What the handles share and the log's threads do not: when the last
/// handle goes, the log closes (its threads hold only [`Inner`]).
struct Owner {
    inner: Arc<Inner>,
    committers: Mutex<Vec<JoinHandle<()>>>,
}

impl Owner {
    fn close(&self) {
        *self.inner.stopped.lock() = true;
        self.inner.stop.notify_all();
        if let Some(hub) = self.inner.hub.lock().as_ref() {
            hub.poke();
        }
        for l in &self.inner.lanes {
            l.queue.lock().closed = true;
            l.work.notify_all();
        }
        for h in std::mem::take(&mut *self.committers.lock()) {
            let _ = h.join();
        }
        let idle = std::mem::take(&mut *self.inner.idle.lock());
        if !idle.is_empty() {
            // A client's drop runs its own small runtime, which panics on a
            // thread inside an async runtime (a server dropped in a task,
            // or with its runtime): drop them on a thread of their own.
            let _ = std::thread::spawn(move || drop(idle)).join();
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.close();
    }
}

impl PgLog {
    /// Connect, create or migrate the schema, start the committer.
    pub fn connect(url: &str, opts: PgOptions) -> Result<PgLog> {
        let mut client = Client::connect(url, NoTls).map_err(db("connect"))?;
        schema::migrate(&mut client)?;
        let opts_lanes = opts.lanes.max(1);
        let inner = Arc::new(Inner {
            url: url.to_string(),
            opts,
            idle: Mutex::new(vec![client]),
            lanes: (0..opts_lanes)
                .map(|_| Lane {
                    queue: Mutex::new(Queue::default()),
                    work: Condvar::new(),
                    done: Condvar::new(),
                })
                .collect(),
            stopped: Mutex::new(false),
            hub: Mutex::new(None),
            stop: Condvar::new(),
        });
        let mut handles: Vec<JoinHandle<()>> = (0..opts_lanes)
            .map(|lane| {
                let worker = inner.clone();
                std::thread::Builder::new()
                    .name(format!("turnstone-pg-commit-{lane}"))
                    .spawn(move || committer(worker, lane))
                    .expect("spawn a committer thread")
            })
            .collect();
        if inner.opts.renew_leases {
            let worker = inner.clone();
            handles.push(
                std::thread::Builder::new()
                    .name("turnstone-pg-leases".into())
                    .spawn(move || renewer(worker))
                    .expect("spawn the lease renewer"),
            );
        }
        Ok(PgLog {
            owner: Arc::new(Owner {
                inner: inner.clone(),
                committers: Mutex::new(handles),
            }),
            inner,
        })
    }

    /// Write what is queued, then stop the committer. Writers left get
    /// [`PgError::Closed`]; followers end; pooled connections close.
    pub fn close(&self) {
        self.owner.close();
    }

    /// The committer's counters.
    pub fn stats(&self) -> PgStats {
        let mut total = PgStats::default();
        for l in &self.inner.lanes {
            let st = l.queue.lock().stats;
            total.commits += st.commits;
            total.events += st.events;
        }
        total
    }

    fn with_client<T>(&self, f: impl FnMut(&mut Client) -> Result<T>) -> Result<T> {
        self.inner.with_client(f)
    }
}

impl Inner {
    /// A pooled connection (`true`), or a new one.
    fn take_client(&self) -> Result<(Client, bool)> {
        match self.idle.lock().pop() {
            Some(c) if !c.is_closed() => Ok((c, true)),
            _ => Ok((
                Client::connect(&self.url, NoTls).map_err(db("connect"))?,
                false,
            )),
        }
    }

    /// Give a connection back to the pool (unless it is closed or the pool
    /// is full).
    fn give_back(&self, client: Client) {
        if !client.is_closed() {
            let mut idle = self.idle.lock();
            if idle.len() < self.opts.read_pool {
                idle.push(client);
            }
        }
    }

    /// Run `f` on a pooled connection (or a new one).
    fn with_client<T>(&self, mut f: impl FnMut(&mut Client) -> Result<T>) -> Result<T> {
        let (mut client, pooled) = self.take_client()?;
        let mut out = f(&mut client);
        // A pooled connection that turns out dead (the server restarted
        // since it was last used) failed at its first write, before any
        // server saw the request: drop the whole pool and try once more on
        // a new connection.
        let dead = |r: &Result<T>| matches!(r, Err(PgError::Database { source, .. }) if source.is_closed());
        if pooled && (dead(&out) || client.is_closed()) && out.is_err() {
            self.idle.lock().clear();
            client = Client::connect(&self.url, NoTls).map_err(db("connect"))?;
            out = f(&mut client);
        }
        // A connection whose statement failed at the protocol level is
        // closed; anything else goes back for reuse.
        self.give_back(client);
        out
    }
}

impl PgLog {
    /// Create an empty session; [`PgError::SessionExists`] if it exists
    /// (deleted or not: a deleted session keeps its name, as in the
    /// embedded store).
    pub fn create_session(&self, session: &str) -> Result<()> {
        self.with_client(|c| {
            let n = c
                .execute(
                    "INSERT INTO turnstone_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
                    &[&session],
                )
                .map_err(db("create session"))?;
            if n == 0 {
                return Err(PgError::SessionExists(session.to_string()));
            }
            Ok(())
        })
    }

    /// Take the lease of `session` for `owner` (creating the session when
    /// `create`), and a writer that appends at its end. Succeeds when the
    /// session has no lease, its lease expired, or `owner` holds it; every
    /// success increments the epoch, so a writer from an earlier
    /// acquisition (by anyone, `owner` included) is fenced from now on.
    pub fn acquire(&self, session: &str, owner: &str, create: bool) -> Result<Acquired> {
        let ttl_ms = self.inner.opts.lease_ttl.as_millis() as i64;
        let (epoch, len, previous) = self.with_client(|c| {
            let mut tx = c.transaction().map_err(db("begin acquire"))?;
            if create {
                tx.execute(
                    "INSERT INTO turnstone_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
                    &[&session],
                )
                .map_err(db("create session"))?;
            }
            let before = tx
                .query_opt(
                    "SELECT lease_owner, deleted,
                            (extract(epoch FROM (lease_expires - now())) * 1000)::bigint
                       FROM turnstone_sessions WHERE id = $1 FOR UPDATE",
                    &[&session],
                )
                .map_err(db("read lease"))?;
            let Some(before) = before else {
                return Err(PgError::UnknownSession(session.to_string()));
            };
            let (prev_owner, deleted, remaining): (Option<String>, bool, Option<i64>) =
                (before.get(0), before.get(1), before.get(2));
            if deleted {
                return Err(PgError::SessionDeleted(session.to_string()));
            }
            if let (Some(o), Some(r)) = (&prev_owner, remaining) {
                if o != owner && r > 0 {
                    return Err(PgError::LeaseHeld {
                        session: session.to_string(),
                        owner: o.clone(),
                        remaining_ms: r,
                    });
                }
            }
            let row = tx
                .query_one(
                    "UPDATE turnstone_sessions
                        SET lease_owner = $2, lease_epoch = lease_epoch + 1,
                            lease_expires = now() + $3::bigint * interval '1 millisecond'
                      WHERE id = $1 RETURNING lease_epoch, len",
                    &[&session, &owner, &ttl_ms],
                )
                .map_err(db("take lease"))?;
            tx.commit().map_err(db("commit acquire"))?;
            let (epoch, len): (i64, i64) = (row.get(0), row.get(1));
            Ok((epoch, len as u64, prev_owner))
        })?;
        let lane = self.inner.lane_of(session);
        let mut q = self.inner.lanes[lane].queue.lock();
        let id = q.next_writer;
        q.next_writer += 1;
        q.writers.insert(
            id,
            WriterState {
                session: session.to_string(),
                epoch,
                committed: len,
                next: len,
                broken: None,
                dropped: false,
            },
        );
        drop(q);
        Ok(Acquired {
            writer: Writer {
                log: self.clone(),
                lane,
                id,
                session: session.to_string(),
                epoch,
            },
            previous_owner: previous,
        })
    }

    /// Create `child` as a fork of `parent` holding its events `0..upto`
    /// by reference (nothing is copied).
    pub fn fork(&self, parent: &str, upto: u64, child: &str) -> Result<()> {
        self.with_client(|c| {
            let mut tx = c.transaction().map_err(db("begin fork"))?;
            let p = tx
                .query_opt(
                    "SELECT len, deleted FROM turnstone_sessions WHERE id = $1 FOR SHARE",
                    &[&parent],
                )
                .map_err(db("read fork parent"))?
                .ok_or_else(|| PgError::UnknownSession(parent.to_string()))?;
            let (len, deleted): (i64, bool) = (p.get(0), p.get(1));
            if deleted {
                return Err(PgError::SessionDeleted(parent.to_string()));
            }
            if upto > len as u64 {
                return Err(PgError::SeqOutOfRange {
                    session: parent.to_string(),
                    seq: upto,
                    len: len as u64,
                });
            }
            let n = tx
                .execute(
                    "INSERT INTO turnstone_sessions (id, parent, fork_seq, len)
                     VALUES ($1, $2, $3, $3) ON CONFLICT (id) DO NOTHING",
                    &[&child, &parent, &(upto as i64)],
                )
                .map_err(db("create fork"))?;
            if n == 0 {
                return Err(PgError::SessionExists(child.to_string()));
            }
            tx.commit().map_err(db("commit fork"))
        })
    }

    /// Delete a session: it is no longer listed or read, and its writer is
    /// fenced. Its events stay for the forks that reference them.
    pub fn delete(&self, session: &str) -> Result<()> {
        self.with_client(|c| {
            let n = c
                .execute(
                    "UPDATE turnstone_sessions
                        SET deleted = true, lease_epoch = lease_epoch + 1,
                            lease_owner = NULL, lease_expires = NULL
                      WHERE id = $1 AND NOT deleted",
                    &[&session],
                )
                .map_err(db("delete session"))?;
            if n == 0 {
                return Err(self.missing(c, session));
            }
            Ok(())
        })
    }

    fn missing(&self, c: &mut Client, session: &str) -> PgError {
        match c.query_opt(
            "SELECT deleted FROM turnstone_sessions WHERE id = $1",
            &[&session],
        ) {
            Ok(Some(_)) => PgError::SessionDeleted(session.to_string()),
            Ok(None) => PgError::UnknownSession(session.to_string()),
            Err(e) => PgError::Database {
                op: "read session",
                source: e,
            },
        }
    }

    /// Live sessions, oldest first.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>> {
        self.with_client(|c| {
            let rows = c
                .query(
                    "SELECT id, len, parent, fork_seq,
                            (extract(epoch FROM created_at) * 1000)::bigint
                       FROM turnstone_sessions WHERE NOT deleted ORDER BY created_at, id",
                    &[],
                )
                .map_err(db("list sessions"))?;
            Ok(rows
                .iter()
                .map(|r| SessionInfo {
                    id: r.get(0),
                    len: r.get::<_, i64>(1) as u64,
                    parent: r
                        .get::<_, Option<String>>(2)
                        .map(|p| (p, r.get::<_, i64>(3) as u64)),
                    created_ms: r.get(4),
                })
                .collect())
        })
    }

    /// `(parent, fork seq)` of a fork (deleted sessions included: a fork
    /// keeps its parent).
    pub fn parent(&self, session: &str) -> Result<Option<(String, u64)>> {
        self.with_client(|c| {
            let row = session_row(c, session, false)?;
            Ok(row.parent.map(|p| (p, row.fork_seq)))
        })
    }

    /// Committed length of a session (inherited events included).
    pub fn session_len(&self, session: &str) -> Result<u64> {
        self.with_client(|c| Ok(session_row(c, session, true)?.len))
    }

    /// Committed events `range` of a session, inherited ones included.
    pub fn read_range(&self, session: &str, range: std::ops::Range<u64>) -> Result<Vec<Event>> {
        self.with_client(|c| {
            let row = session_row(c, session, true)?;
            if range.end > row.len {
                return Err(PgError::SeqOutOfRange {
                    session: session.to_string(),
                    seq: range.end,
                    len: row.len,
                });
            }
            let mut out = Vec::new();
            read_chain(c, session, row, range.clone(), &mut out)?;
            Ok(out)
        })
    }

    /// Store a snapshot (a projection cache) of a session at `upto`.
    pub fn put_snapshot(&self, session: &str, name: &str, upto: u64, data: &[u8]) -> Result<()> {
        self.with_client(|c| {
            c.execute(
                "INSERT INTO turnstone_snapshots (session, name, upto, data) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (session, name) DO UPDATE SET upto = excluded.upto, data = excluded.data",
                &[&session, &name, &(upto as i64), &data],
            )
            .map_err(db("write snapshot"))?;
            Ok(())
        })
    }

    /// A snapshot: `(upto, data)`.
    pub fn snapshot(&self, session: &str, name: &str) -> Result<Option<(u64, Vec<u8>)>> {
        self.with_client(|c| {
            let row = c
                .query_opt(
                    "SELECT upto, data FROM turnstone_snapshots WHERE session = $1 AND name = $2",
                    &[&session, &name],
                )
                .map_err(db("read snapshot"))?;
            Ok(row.map(|r| (r.get::<_, i64>(0) as u64, r.get(1))))
        })
    }

    /// Full-text search over the searchable text of every live session's
    /// committed events (PostgreSQL text search, `simple` configuration;
    /// the query in web-search syntax: words, `"a phrase"`, `or`, `-word`).
    /// Best matches first, the match in brackets in the snippet, as the
    /// embedded store's search reports it.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Hit>> {
        self.with_client(|c| {
            let rows = c
                .query(
                    "SELECT e.session, e.seq, ts_headline('simple', e.text, q, 'StartSel=[, StopSel=], MaxFragments=1, MaxWords=24, MinWords=8')
                       FROM turnstone_events e
                       JOIN turnstone_sessions s ON s.id = e.session AND NOT s.deleted,
                            websearch_to_tsquery('simple', $1) AS q
                      WHERE e.text IS NOT NULL AND to_tsvector('simple', e.text) @@ q
                      ORDER BY ts_rank(to_tsvector('simple', e.text), q) DESC, e.session, e.seq
                      LIMIT $2",
                    &[&query, &(limit.min(i64::MAX as usize) as i64)],
                )
                .map_err(db("search"))?;
            Ok(rows
                .iter()
                .map(|r| Hit {
                    session: r.get(0),
                    seq: r.get::<_, i64>(1) as u64,
                    snippet: r.get(2),
                })
                .collect())
        })
    }

    /// Search one session, the events it inherits from its fork ancestors
    /// included; every hit is reported under `session`.
    pub fn search_session(&self, session: &str, query: &str, limit: usize) -> Result<Vec<Hit>> {
        self.with_client(|c| {
            // (session, seq bound) of each link of the chain.
            let mut chain = vec![(session.to_string(), i64::MAX)];
            let mut row = session_row(c, session, true)?;
            let mut bound = i64::MAX;
            while let Some(p) = row.parent.take() {
                bound = bound.min(row.fork_seq as i64);
                row = session_row(c, &p, false)?;
                chain.push((p, bound));
            }
            let (names, bounds): (Vec<String>, Vec<i64>) = chain.into_iter().unzip();
            let rows = c
                .query(
                    "SELECT e.seq, ts_headline('simple', e.text, q, 'StartSel=[, StopSel=], MaxFragments=1, MaxWords=24, MinWords=8')
                       FROM unnest($3::text[], $4::bigint[]) AS l(session, bound)
                       JOIN turnstone_events e ON e.session = l.session AND e.seq < l.bound,
                            websearch_to_tsquery('simple', $1) AS q
                      WHERE e.text IS NOT NULL AND to_tsvector('simple', e.text) @@ q
                      ORDER BY ts_rank(to_tsvector('simple', e.text), q) DESC, e.seq
                      LIMIT $2",
                    &[&query, &(limit.min(i64::MAX as usize) as i64), &names, &bounds],
                )
                .map_err(db("search"))?;
            Ok(rows
                .iter()
                .map(|r| Hit {
                    session: session.to_string(),
                    seq: r.get::<_, i64>(0) as u64,
                    snippet: r.get(1),
                })
                .collect())
        })
    }

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

    fn hub(&self) -> Result<Arc<follow::Hub>> {
        let mut h = self.inner.hub.lock();
        match &*h {
            Some(hub) if !hub.is_over() => Ok(hub.clone()),
            _ => {
                if *self.inner.stopped.lock() {
                    return Err(PgError::Closed);
                }
                let hub = follow::Hub::start(self)?;
                *h = Some(hub.clone());
                Ok(hub)
            }
        }
    }
}

/// The writer of a session and who held it before.
pub struct Acquired {
    pub writer: Writer,
    /// The owner of the lease taken over (`None`: the session was free).
    /// A takeover from another owner is where a session layer repairs.
    pub previous_owner: Option<String>,
}

/// Appends to one session under one lease epoch.
pub struct Writer {
    log: PgLog,
    lane: usize,
    id: u64,
    session: String,
    epoch: i64,
}

impl Writer {
    pub fn session(&self) -> &str {
        &self.session
    }

    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The length the database holds for this writer's session, as far as
    /// this writer knows (its own commits included, others' fenced).
    pub fn committed(&self) -> u64 {
        self.log.inner.lanes[self.lane].queue.lock().writers[&self.id].committed
    }

    /// Wait until events `0..len` of the session are committed (blocking
    /// [`Writer::poll_sync`]); an error if the writer broke first.
    pub fn sync_to(&self, len: u64) -> Result<()> {
        let inner = &self.log.inner.lanes[self.lane];
        let mut q = inner.queue.lock();
        loop {
            let st = &q.writers[&self.id];
            // Committed first: a later group's failure (a fence) breaks the
            // writer, but what it committed before stays committed.
            if st.committed >= len {
                return Ok(());
            }
            if let Some(b) = &st.broken {
                return Err(broken_error(&self.session, b));
            }
            inner.done.wait(&mut q);
        }
    }

    /// Whether the writer can write no more (fenced, deleted, failed or
    /// closed): its queued events that are not committed never will be.
    pub fn is_broken(&self) -> bool {
        self.log.inner.lanes[self.lane].queue.lock().writers[&self.id]
            .broken
            .is_some()
    }

    /// The next seq (committed or queued events of this writer).
    pub fn len(&self) -> u64 {
        self.log.inner.lanes[self.lane].queue.lock().writers[&self.id].next
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue one event; it is durable once [`Writer::sync`] returns.
    pub fn append(&self, kind: u16, flags: u16, payload: &[u8]) -> Result<u64> {
        self.append_group(&[(kind, flags, payload)])
    }

    /// Queue several events that commit together or not at all. Returns
    /// the first one's seq.
    pub fn append_group(&self, events: &[(u16, u16, &[u8])]) -> Result<u64> {
        let with_text: Vec<(u16, u16, &[u8], Option<&str>)> =
            events.iter().map(|&(k, f, p)| (k, f, p, None)).collect();
        self.append_group_with_text(&with_text)
    }

    /// [`Writer::append_group`] with each event's searchable text (the
    /// session layer's `searchable_text`), indexed for [`PgLog::search`].
    pub fn append_group_with_text(
        &self,
        events: &[(u16, u16, &[u8], Option<&str>)],
    ) -> Result<u64> {
        let inner = &self.log.inner.lanes[self.lane];
        let mut q = inner.queue.lock();
        if q.closed {
            return Err(PgError::Closed);
        }
        let st = q.writers.get_mut(&self.id).expect("writer state");
        if let Some(b) = &st.broken {
            return Err(broken_error(&self.session, b));
        }
        let first = st.next;
        st.next += events.len() as u64;
        for (i, (kind, flags, payload, text)) in events.iter().enumerate() {
            q.pending.push(Pending {
                writer: self.id,
                seq: first + i as u64,
                kind: *kind,
                flags: *flags,
                payload: payload.to_vec(),
                text: text.map(str::to_string),
            });
        }
        drop(q);
        inner.work.notify_one();
        Ok(first)
    }

    /// Wait until everything this writer queued before the call is
    /// committed: [`Writer::sync_to`] its length now. Events queued by
    /// another thread meanwhile are not waited for, and their failure (a
    /// fence, say) does not turn this wait's committed events into an error.
    pub fn sync(&self) -> Result<()> {
        let target = self.len();
        self.sync_to(target)
    }

    /// [`Writer::sync`] for async callers, up to a point: `Ready` once the
    /// database holds events `0..len` of this session (or the writer is
    /// broken: fenced, deleted, failed or closed, with its error);
    /// otherwise `Pending`, and `cx`'s waker is woken by the lane's next
    /// commit or stop. No thread waits.
    pub fn poll_sync(
        &self,
        len: u64,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        let lane = &self.log.inner.lanes[self.lane];
        let mut q = lane.queue.lock();
        let st = &q.writers[&self.id];
        // Committed first, as in `sync_to`.
        if st.committed >= len {
            return std::task::Poll::Ready(Ok(()));
        }
        if let Some(b) = &st.broken {
            return std::task::Poll::Ready(Err(broken_error(&self.session, b)));
        }
        q.wakers.push(cx.waker().clone());
        std::task::Poll::Pending
    }

    /// Commit what is queued and give the lease up (only if this writer
    /// still holds it).
    pub fn release(self) -> Result<()> {
        self.sync()?;
        // A closed log writes nothing more, a release included (its
        // leases run out instead), even when all it queued was committed.
        if self.log.inner.lanes[self.lane].queue.lock().closed {
            return Err(PgError::Closed);
        }
        let (session, epoch) = (self.session.clone(), self.epoch);
        self.log.with_client(|c| {
            c.execute(
                "UPDATE turnstone_sessions SET lease_owner = NULL, lease_expires = NULL
                  WHERE id = $1 AND lease_epoch = $2",
                &[&session, &epoch],
            )
            .map_err(db("release lease"))?;
            Ok(())
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let mut q = self.log.inner.lanes[self.lane].queue.lock();
        let settled = q.writers.get(&self.id).is_none_or(|st| st.settled());
        if settled {
            q.writers.remove(&self.id);
        } else if let Some(st) = q.writers.get_mut(&self.id) {
            st.dropped = true;
        }
    }
}

fn broken_error(session: &str, b: &Broken) -> PgError {
    match b {
        Broken::Fenced { held, current } => PgError::Fenced {
            session: session.to_string(),
            held: *held,
            current: *current,
        },
        Broken::Deleted => PgError::SessionDeleted(session.to_string()),
        Broken::Failed(detail) => PgError::WriterBroken {
            session: session.to_string(),
            detail: detail.clone(),
        },
        Broken::Closed => PgError::Closed,
    }
}

struct Row {
    len: u64,
    parent: Option<String>,
    fork_seq: u64,
}

fn session_row(c: &mut Client, session: &str, live: bool) -> Result<Row> {
    let r = c
        .query_opt(
            "SELECT len, parent, fork_seq, deleted FROM turnstone_sessions WHERE id = $1",
            &[&session],
        )
        .map_err(db("read session"))?
        .ok_or_else(|| PgError::UnknownSession(session.to_string()))?;
    if live && r.get::<_, bool>(3) {
        return Err(PgError::SessionDeleted(session.to_string()));
    }
    Ok(Row {
        len: r.get::<_, i64>(0) as u64,
        parent: r.get(1),
        fork_seq: r.get::<_, i64>(2) as u64,
    })
}

/// Events `range` of `session`: those below its fork seq from its parent
/// chain (deleted ancestors included: a fork keeps what it references).
fn read_chain(
    c: &mut Client,
    session: &str,
    row: Row,
    range: std::ops::Range<u64>,
    out: &mut Vec<Event>,
) -> Result<()> {
    let own_from = if row.parent.is_some() {
        row.fork_seq
    } else {
        0
    };
    if let Some(parent) = &row.parent {
        if range.start < own_from {
            let prow = session_row(c, parent, false)?;
            read_chain(c, parent, prow, range.start..range.end.min(own_from), out)?;
        }
    }
    let lo = range.start.max(own_from);
    if lo < range.end {
        let rows = c
            .query(
                "SELECT seq, kind, flags, payload FROM turnstone_events
                  WHERE session = $1 AND seq >= $2 AND seq < $3 ORDER BY seq",
                &[&session, &(lo as i64), &(range.end as i64)],
            )
            .map_err(db("read events"))?;
        out.extend(rows.iter().map(|r| Event {
            seq: r.get::<_, i64>(0) as u64,
            kind: r.get::<_, i32>(1) as u16,
            flags: r.get::<_, i32>(2) as u16,
            payload: r.get(3),
        }));
    }
    Ok(())
}

/// Renews the leases of this process's live writers every third of the
/// lease TTL, in one statement (only where the epoch is still the
/// writer's). Errors are ignored: a lease that lapses is fenced at the next
/// commit, which is what keeps writers apart, not this thread.
fn renewer(inner: Arc<Inner>) {
    let period = (inner.opts.lease_ttl / 3).max(Duration::from_millis(10));
    let ttl_ms = inner.opts.lease_ttl.as_millis() as i64;
    let mut client: Option<Client> = None;
    loop {
        {
            let mut stopped = inner.stopped.lock();
            if !*stopped {
                inner.stop.wait_for(&mut stopped, period);
            }
            if *stopped {
                return;
            }
        }
        let (mut ids, mut epochs) = (Vec::<String>::new(), Vec::<i64>::new());
        for l in &inner.lanes {
            for st in l.queue.lock().writers.values() {
                if st.broken.is_none() && !st.dropped {
                    ids.push(st.session.clone());
                    epochs.push(st.epoch);
                }
            }
        }
        if ids.is_empty() {
            continue;
        }
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = Client::connect(&inner.url, NoTls).ok();
        }
        if let Some(c) = client.as_mut() {
            let r = c.execute(
                "UPDATE turnstone_sessions s
                    SET lease_expires = now() + $3::bigint * interval '1 millisecond'
                   FROM unnest($1::text[], $2::bigint[]) AS v(id, epoch)
                  WHERE s.id = v.id AND s.lease_epoch = v.epoch AND NOT s.deleted",
                &[&ids, &epochs, &ttl_ms],
            );
            if r.is_err() {
                client = None;
            }
        }
    }
}

/// The committer: takes everything queued, writes it in one transaction,
/// wakes the writers; repeats. While a commit runs, new appends queue
/// up for the next one (group commit).
fn committer(inner: Arc<Inner>, lane: usize) {
    // A panic here must not leave writers waiting forever: the guard
    // breaks every writer and closes the log.
    struct Poison(Arc<Inner>, usize);
    impl Drop for Poison {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let l = &self.0.lanes[self.1];
                let mut q = l.queue.lock();
                q.closed = true;
                for st in q.writers.values_mut() {
                    st.broken
                        .get_or_insert(Broken::Failed("the committer thread panicked".into()));
                }
                l.settle(q);
            }
        }
    }
    let _poison = Poison(inner.clone(), lane);
    let l = &inner.lanes[lane];
    let mut client: Option<Client> = None;
    loop {
        let (batch, heads) = {
            let mut q = l.queue.lock();
            while q.pending.is_empty() && !q.closed {
                l.work.wait(&mut q);
            }
            if q.pending.is_empty() {
                for st in q.writers.values_mut() {
                    st.broken.get_or_insert(Broken::Closed);
                }
                l.settle(q);
                return;
            }
            let mut batch = std::mem::take(&mut q.pending);
            // Events of writers broken since they were queued are not
            // written (their writers have been told).
            batch.retain(|p| {
                q.writers
                    .get(&p.writer)
                    .is_some_and(|st| st.broken.is_none())
            });
            // Per writer in the batch: session, epoch, first seq, count.
            let mut heads: Vec<(u64, String, i64, u64, u64)> = Vec::new();
            let mut at: HashMap<u64, usize> = HashMap::new();
            for p in &batch {
                match at.get(&p.writer) {
                    Some(&i) => heads[i].4 += 1,
                    None => {
                        let st = &q.writers[&p.writer];
                        at.insert(p.writer, heads.len());
                        heads.push((p.writer, st.session.clone(), st.epoch, p.seq, 1));
                    }
                }
            }
            // Rows are updated in session order, so that two processes'
            // statements lock them in the same order.
            heads.sort_by(|a, b| a.1.cmp(&b.1).then(a.2.cmp(&b.2)));
            (batch, heads)
        };
        if batch.is_empty() {
            continue;
        }
        // A deadlock (two processes' transactions, one of them a fenced
        // writer's) rolls the whole transaction back: nothing was written,
        // so it is tried again.
        let mut tries = 0;
        let outcome = loop {
            match commit_batch(&inner, &mut client, &batch, &heads) {
                Err(CommitError::Retry(_)) if tries < 5 => tries += 1,
                Err(CommitError::Retry(d) | CommitError::Failed(d)) => break Err(d),
                Ok(o) => break Ok(o),
            }
        };
        let mut q = l.queue.lock();
        match outcome {
            Ok(results) => {
                for (w, r) in results {
                    if let Some(st) = q.writers.get_mut(&w) {
                        match r {
                            Ok(n) => st.committed += n,
                            Err(b) => {
                                st.broken.get_or_insert(b);
                            }
                        }
                    }
                }
                q.stats.commits += 1;
                q.stats.events += batch.len() as u64;
            }
            Err(detail) => {
                client = None;
                for (w, ..) in &heads {
                    if let Some(st) = q.writers.get_mut(w) {
                        st.broken.get_or_insert(Broken::Failed(detail.clone()));
                    }
                }
            }
        }
        q.writers.retain(|_, st| !(st.dropped && st.settled()));
        l.settle(q);
    }
}

type Outcome = Vec<(u64, std::result::Result<u64, Broken>)>;

enum CommitError {
    /// Rolled back as a whole (deadlock): try again.
    Retry(String),
    /// Failed, or its outcome is unknown (the connection broke).
    Failed(String),
}

fn commit_error(e: postgres::Error) -> CommitError {
    if e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED) {
        CommitError::Retry(e.to_string())
    } else {
        CommitError::Failed(e.to_string())
    }
}

/// One transaction: check every writer's epoch and expected length, renew
/// their leases, insert the events of those that passed, notify. Writers
/// that did not pass are told why.
fn commit_batch(
    inner: &Inner,
    client: &mut Option<Client>,
    batch: &[Pending],
    heads: &[(u64, String, i64, u64, u64)],
) -> std::result::Result<Outcome, CommitError> {
    if client.is_none() {
        *client = Some(Client::connect(&inner.url, NoTls).map_err(commit_error)?);
    }
    let c = client.as_mut().expect("connected");
    // Two writers of one session in one batch: only the newest epoch can
    // pass; the others are fenced here, before the statement.
    let mut newest: HashMap<&str, i64> = HashMap::new();
    for h in heads {
        let e = newest.entry(h.1.as_str()).or_insert(h.2);
        *e = (*e).max(h.2);
    }
    let mut out: Outcome = Vec::new();
    let (mut ids, mut epochs, mut bases, mut counts) = (vec![], vec![], vec![], vec![]);
    for h in heads {
        let top = newest[h.1.as_str()];
        if h.2 < top {
            out.push((
                h.0,
                Err(Broken::Fenced {
                    held: h.2,
                    current: top,
                }),
            ));
            continue;
        }
        ids.push(h.1.clone());
        epochs.push(h.2);
        bases.push(h.3 as i64);
        counts.push(h.4 as i64);
    }
    let skip: HashSet<u64> = out.iter().map(|o| o.0).collect();
    let head_of: HashMap<u64, &(u64, String, i64, u64, u64)> =
        heads.iter().map(|h| (h.0, h)).collect();
    let (mut es, mut eq, mut ek, mut ef, mut ep, mut ee, mut et) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for p in batch.iter().filter(|p| !skip.contains(&p.writer)) {
        let h = head_of[&p.writer];
        es.push(h.1.as_str());
        eq.push(p.seq as i64);
        ek.push(p.kind as i32);
        ef.push(p.flags as i32);
        ep.push(p.payload.as_slice());
        ee.push(h.2);
        et.push(p.text.as_deref());
    }
    let ttl_ms = inner.opts.lease_ttl.as_millis() as i64;
    // One transaction: check and advance every session (the fence), copy
    // in the events of those that passed, notify, commit (one WAL flush).
    let mut tx = c.transaction().map_err(commit_error)?;
    let rows = tx
        .query(
            "WITH v AS (
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])
                          AS v(id, epoch, base, n))
             UPDATE turnstone_sessions s
                SET len = s.len + v.n,
                    lease_expires = now() + $5::bigint * interval '1 millisecond'
               FROM v
              WHERE s.id = v.id AND s.lease_epoch = v.epoch AND s.len = v.base
                AND NOT s.deleted
             RETURNING s.id, s.len",
            &[&ids, &epochs, &bases, &counts, &ttl_ms],
        )
        .map_err(commit_error)?;
    if !rows.is_empty() {
        let ok: HashSet<&str> = rows.iter().map(|r| r.get::<_, &str>(0)).collect();
        let sink = tx
            .copy_in(
                "COPY turnstone_events (session, seq, kind, flags, payload, epoch, text)
                 FROM STDIN BINARY",
            )
            .map_err(commit_error)?;
        let mut w = BinaryCopyInWriter::new(
            sink,
            &[
                Type::TEXT,
                Type::INT8,
                Type::INT4,
                Type::INT4,
                Type::BYTEA,
                Type::INT8,
                Type::TEXT,
            ],
        );
        for (i, session) in es.iter().enumerate() {
            if ok.contains(session) {
                w.write(&[session, &eq[i], &ek[i], &ef[i], &ep[i], &ee[i], &et[i]])
                    .map_err(commit_error)?;
            }
        }
        w.finish().map_err(commit_error)?;
        let notes: Vec<String> = rows
            .iter()
            .map(|r| format!("{} {}", r.get::<_, &str>(0), r.get::<_, i64>(1)))
            .collect();
        tx.execute(
            "SELECT pg_notify('turnstone_events', x) FROM unnest($1::text[]) AS x",
            &[&notes],
        )
        .map_err(commit_error)?;
    }
    tx.commit().map_err(commit_error)?;
    let passed: HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
    let failed: Vec<&String> = ids.iter().filter(|id| !passed.contains(*id)).collect();
    let mut why: HashMap<String, (i64, bool, i64)> = HashMap::new();
    if !failed.is_empty() {
        for r in c
            .query(
                "SELECT id, lease_epoch, deleted, len FROM turnstone_sessions WHERE id = ANY($1)",
                &[&failed],
            )
            .map_err(commit_error)?
        {
            why.insert(r.get(0), (r.get(1), r.get(2), r.get(3)));
        }
    }
    for h in heads.iter().filter(|h| !skip.contains(&h.0)) {
        if passed.contains(&h.1) {
            out.push((h.0, Ok(h.4)));
            continue;
        }
        let b = match why.get(&h.1) {
            Some((_, true, _)) => Broken::Deleted,
            Some((epoch, false, _)) if *epoch != h.2 => Broken::Fenced {
                held: h.2,
                current: *epoch,
            },
            Some((_, false, len)) => Broken::Failed(format!(
                "the database holds {len} events where this writer expected {}",
                h.3
            )),
            None => Broken::Failed("the session row is gone".into()),
        };
        out.push((h.0, Err(b)));
    }
    Ok(out)
}
