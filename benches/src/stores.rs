//! The stores of the fleet comparison, behind one small interface.
//!
//! Every store gets the same calls: `append(session, seq, kind, payload)`
//! (write-behind where the store allows it), `wait(session)` (return once
//! everything this writer appended for that session is durable), `finish()`
//! (everything this writer appended is durable). After the run the store is
//! closed, reopened (timed), and every event is read back and compared with
//! the workload: a store that loses, invents or changes an event fails.
//!
//! | store | append | wait |
//! |---|---|---|
//! | turnstone | `Store::append` (into the open commit batch) | `wait_durable(end)`: group commit |
//! | sqlite-wal | buffered in the writer | one `BEGIN IMMEDIATE … COMMIT` of the writer's pending rows (WAL, `synchronous=FULL`) |
//! | jsonl-per-session | `BufWriter` of the session's file | flush + fsync of that file |
//! | okaywal | buffered in the writer | one entry (one chunk per event) + `commit` (okaywal's group commit) |
//! | raw-prealloc / raw-append | frame into a shared buffer | leader/follower: one `pwrite` + one `fdatasync` per group |

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::workload::{Kind, Workload};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, BoxError>;

/// One store under test, shared by the writer threads.
pub trait FleetStore: Send + Sync {
    /// A writer for one thread (a connection, buffers, open files).
    fn writer(&self) -> Result<Box<dyn Writer + '_>>;
    /// fdatasync calls made, where the store counts them.
    fn syncs(&self) -> Option<u64> {
        None
    }
    /// Bytes of index checkpoints written, where the store writes them.
    fn checkpoint_bytes(&self) -> Option<u64> {
        None
    }
    fn close(self: Box<Self>) -> Result<()>;
}

/// One writer thread's handle on a store.
pub trait Writer {
    fn append(&mut self, s: u32, seq: u64, kind: Kind, payload: &[u8]) -> Result<()>;
    /// Whether `append` reads `payload`: a writer that builds its own
    /// event from `(s, seq)` is given an empty one, so the run does not
    /// spend its CPU generating bytes nobody writes.
    fn takes_payload(&self) -> bool {
        true
    }
    /// Return once everything appended for session `s` is durable.
    fn wait(&mut self, s: u32) -> Result<()>;
    /// Make everything this writer appended durable.
    fn finish(&mut self) -> Result<()>;
}

/// The stores of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreKind {
    Turnstone,
    SqliteWal,
    JsonlPerSession,
    Okaywal,
    RawPrealloc,
    RawAppend,
    /// turnstone with a lone waiting thread writing its own batches
    /// (`Options::flush_in_caller` on), to measure that mode against the
    /// default (not in `ALL`).
    TurnstoneLeader,
    /// The same workload through the session layer: each event as its typed
    /// session event (`crate::typed`), `Session::append` and, at each wait,
    /// `Session::flush` (not in `ALL`: issue 16's "session layer ÷ raw
    /// store" in one invocation).
    TurnstoneSession,
    /// turnstone in steady state: before the run, an online collection left
    /// [`RECYCLED_FREE_FILES`] free files, so the run's new segments are
    /// recycled ones (`Options::recycle_segments`, FORMAT.md §6.2 rule 7)
    /// rather than new preallocated files (not in `ALL`).
    TurnstoneRecycled,
    /// `turnstone-recycled` with its free files evicted from the page cache
    /// before the run (`posix_fadvise(POSIX_FADV_DONTNEED)`), as a store's
    /// collected files usually are: they were written long before an
    /// online collection freed them (not in `ALL`).
    TurnstoneRecycledCold,
    /// `turnstone-recycled` with `Options::direct_writes`: the batches of
    /// recycled segments are written around the page cache (not in `ALL`).
    TurnstoneDirect,
    /// turnstone-pg on the server of `TURNSTONE_BENCH_PG_URL` (not in `ALL`).
    Postgres,
    /// One INSERT per event, autocommit, on that server (not in `ALL`).
    PgNaive,
}

impl StoreKind {
    pub const ALL: [StoreKind; 6] = [
        StoreKind::Turnstone,
        StoreKind::SqliteWal,
        StoreKind::JsonlPerSession,
        StoreKind::Okaywal,
        StoreKind::RawPrealloc,
        StoreKind::RawAppend,
    ];
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Turnstone => "turnstone",
            StoreKind::TurnstoneLeader => "turnstone-leader",
            StoreKind::TurnstoneSession => "turnstone-session",
            StoreKind::TurnstoneRecycled => "turnstone-recycled",
            StoreKind::TurnstoneRecycledCold => "turnstone-recycled-cold",
            StoreKind::TurnstoneDirect => "turnstone-direct",
            StoreKind::SqliteWal => "sqlite-wal",
            StoreKind::JsonlPerSession => "jsonl-per-session",
            StoreKind::Okaywal => "okaywal",
            StoreKind::RawPrealloc => "raw-prealloc",
            StoreKind::RawAppend => "raw-append",
            StoreKind::Postgres => "postgres",
            StoreKind::PgNaive => "pg-naive",
        }
    }
    /// Stores that need a PostgreSQL server, run only when named.
    pub const POSTGRES: [StoreKind; 2] = [StoreKind::Postgres, StoreKind::PgNaive];
    pub fn from_name(n: &str) -> Option<StoreKind> {
        Self::ALL
            .into_iter()
            .chain(Self::POSTGRES)
            .chain([
                StoreKind::TurnstoneLeader,
                StoreKind::TurnstoneSession,
                StoreKind::TurnstoneRecycled,
                StoreKind::TurnstoneRecycledCold,
                StoreKind::TurnstoneDirect,
            ])
            .find(|k| k.name() == n)
    }
}

/// What a store is created in.
#[derive(Clone)]
pub struct Ctx {
    pub wl: Arc<Workload>,
    /// The run's own directory (removed afterwards).
    pub dir: PathBuf,
    /// The zero-filled file the raw-prealloc log overwrites.
    pub prealloc: Option<Arc<PreallocFile>>,
    /// Distinguishes this run's raw frames from an earlier run's.
    pub nonce: u64,
}

pub fn create(kind: StoreKind, ctx: &Ctx) -> Result<Box<dyn FleetStore>> {
    Ok(match kind {
        StoreKind::Turnstone => Box::new(TsStore::create(ctx, false)?),
        StoreKind::TurnstoneLeader => Box::new(TsStore::create(ctx, true)?),
        StoreKind::TurnstoneSession => Box::new(SessionStore::create(ctx)?),
        StoreKind::TurnstoneRecycled => Box::new(TsStore::create_recycled(
            ctx,
            RECYCLED_FREE_FILES,
            turnstone::Options::default().segment_bytes,
            false,
        )?),
        StoreKind::TurnstoneDirect => Box::new(TsStore::create_recycled(
            ctx,
            RECYCLED_FREE_FILES,
            turnstone::Options::default().segment_bytes,
            true,
        )?),
        StoreKind::TurnstoneRecycledCold => {
            let store = TsStore::create_recycled(
                ctx,
                RECYCLED_FREE_FILES,
                turnstone::Options::default().segment_bytes,
                false,
            )?;
            crate::sys::evict_files(&ctx.dir.join("turnstone"), ".tseg.free")?;
            Box::new(store)
        }
        StoreKind::SqliteWal => Box::new(SqlStore::create(ctx)?),
        StoreKind::JsonlPerSession => Box::new(JsonlStore::create(ctx)?),
        StoreKind::Okaywal => Box::new(WalStore::create(ctx)?),
        StoreKind::RawPrealloc => {
            let p = ctx
                .prealloc
                .as_ref()
                .ok_or("raw-prealloc needs the preallocated file")?;
            Box::new(RawStore::open(&p.path, ctx, false)?)
        }
        StoreKind::RawAppend => Box::new(RawStore::open(&ctx.dir.join("raw.log"), ctx, true)?),
        StoreKind::Postgres => Box::new(crate::pg_stores::PgStore::create(ctx)?),
        StoreKind::PgNaive => Box::new(crate::pg_stores::PgNaive::create(ctx)?),
    })
}

/// The outcome of reopening a store and reading every event back.
#[derive(Debug, Clone, Default)]
pub struct ReadBack {
    /// Time to reopen the store until it can serve reads and appends.
    pub reopen: Duration,
    /// Time to read every event back (after the reopen).
    pub read: Duration,
    pub events: u64,
    pub problems: Vec<String>,
    pub problem_count: u64,
}

impl ReadBack {
    pub fn ok(&self) -> bool {
        self.problem_count == 0
    }
}

/// Reopen the store in `ctx` and check every event against the workload and
/// the per-session counts the writers appended.
pub fn reopen_and_check(kind: StoreKind, ctx: &Ctx, expected: &[u64]) -> Result<ReadBack> {
    let mut ck = Checker::new(&ctx.wl, expected);
    let (reopen, read) = match kind {
        StoreKind::Turnstone | StoreKind::TurnstoneLeader => {
            TsStore::check(ctx, &mut ck, Default::default())?
        }
        StoreKind::TurnstoneRecycled
        | StoreKind::TurnstoneRecycledCold
        | StoreKind::TurnstoneDirect => TsStore::check(
            ctx,
            &mut ck,
            turnstone::Options {
                recycle_segments: RECYCLED_FREE_FILES,
                direct_writes: kind == StoreKind::TurnstoneDirect,
                ..Default::default()
            },
        )?,
        StoreKind::TurnstoneSession => SessionStore::check(ctx, &mut ck)?,
        StoreKind::SqliteWal => SqlStore::check(ctx, &mut ck)?,
        StoreKind::JsonlPerSession => JsonlStore::check(ctx, &mut ck)?,
        StoreKind::Okaywal => WalStore::check(ctx, &mut ck)?,
        StoreKind::RawPrealloc => {
            let p = ctx.prealloc.as_ref().ok_or("no preallocated file")?;
            RawStore::check(&p.path, ctx, &mut ck)?
        }
        StoreKind::RawAppend => RawStore::check(&ctx.dir.join("raw.log"), ctx, &mut ck)?,
        StoreKind::Postgres => crate::pg_stores::PgStore::check(ctx, &mut ck)?,
        StoreKind::PgNaive => crate::pg_stores::PgNaive::check(ctx, &mut ck)?,
    };
    Ok(ck.finish(reopen, read))
}

/// Compares what a store returns with what the workload appended.
pub struct Checker<'a> {
    wl: &'a Workload,
    expected: &'a [u64],
    seen: Vec<u64>,
    buf: Vec<u8>,
    events: u64,
    problems: Vec<String>,
    problem_count: u64,
}

impl<'a> Checker<'a> {
    pub fn new(wl: &'a Workload, expected: &'a [u64]) -> Self {
        Checker {
            wl,
            expected,
            seen: vec![0; expected.len()],
            buf: Vec::new(),
            events: 0,
            problems: Vec::new(),
            problem_count: 0,
        }
    }
    fn problem(&mut self, msg: String) {
        self.problem_count += 1;
        if self.problems.len() < 10 {
            self.problems.push(msg);
        }
    }
    /// Check that event `seq` of session `s` comes next and was appended;
    /// `false`: there is nothing of the workload to compare it with.
    fn in_order(&mut self, s: u32, seq: u64) -> bool {
        let Some(&want) = self.seen.get(s as usize) else {
            self.problem(format!("event of unknown session {s}"));
            return false;
        };
        if seq != want {
            self.problem(format!("session {s}: got seq {seq}, expected {want}"));
        }
        if seq >= self.expected[s as usize] {
            self.problem(format!(
                "session {s}: seq {seq} was never appended ({} were)",
                self.expected[s as usize]
            ));
            self.seen[s as usize] = seq + 1;
            return false;
        }
        true
    }
    /// One event as the store returned it; events of a session must come in
    /// seq order.
    pub fn event(&mut self, s: u32, seq: u64, kind: Option<Kind>, payload: &[u8]) {
        if !self.in_order(s, seq) {
            return;
        }
        if kind != Some(self.wl.kind(s, seq)) {
            self.problem(format!("session {s} seq {seq}: wrong kind {kind:?}"));
        }
        self.wl.payload_into(s, seq, &mut self.buf);
        if payload != self.buf.as_slice() {
            self.problem(format!("session {s} seq {seq}: payload differs"));
        }
        self.seen[s as usize] = seq + 1;
        self.events += 1;
    }
    /// One event a session-layer store returned: its kind and payload must
    /// be those of the workload's typed event (`crate::typed`).
    pub fn typed_event(&mut self, s: u32, seq: u64, kind: u16, payload: &[u8]) {
        if !self.in_order(s, seq) {
            return;
        }
        let (want_kind, want_payload) = crate::typed::typed_event(self.wl, s, seq).encode();
        if kind != want_kind {
            self.problem(format!("session {s} seq {seq}: wrong kind {kind}"));
        }
        // The envelope carries the append's wall-clock time (`ts`): the
        // rest must be the same JSON.
        let without_ts = |b: &[u8]| {
            serde_json::from_slice::<serde_json::Value>(b)
                .ok()
                .map(|mut v| {
                    if let Some(m) = v.as_object_mut() {
                        m.remove("ts");
                    }
                    v
                })
        };
        let got = without_ts(payload);
        if got.is_none() || got != without_ts(&want_payload) {
            self.problem(format!("session {s} seq {seq}: payload differs"));
        }
        self.seen[s as usize] = seq + 1;
        self.events += 1;
    }
    pub fn finish(mut self, reopen: Duration, read: Duration) -> ReadBack {
        for s in 0..self.expected.len() {
            if self.seen[s] != self.expected[s] {
                let msg = format!(
                    "session {s}: read {} events, {} were appended and acknowledged",
                    self.seen[s], self.expected[s]
                );
                self.problem(msg);
            }
        }
        ReadBack {
            reopen,
            read,
            events: self.events,
            problems: self.problems,
            problem_count: self.problem_count,
        }
    }
}

// ---------------------------------------------------------------- turnstone

struct TsStore {
    store: turnstone::Store,
    wl: Arc<Workload>,
}

impl TsStore {
    fn create(ctx: &Ctx, flush_in_caller: bool) -> Result<Self> {
        let store = turnstone::Store::open_with(
            ctx.dir.join("turnstone"),
            turnstone::Options {
                flush_in_caller,
                ..Default::default()
            },
        )?;
        Ok(TsStore {
            store,
            wl: ctx.wl.clone(),
        })
    }
    /// A store whose pool holds `free` free files of `segment_bytes` each:
    /// a session outside the workload fills `free + 1` segments and nearly
    /// all of the one after, and an online collection declares it dead (the
    /// range's first file becomes its compacted header; the others become
    /// free files). Its writes happen before the run's measurements start.
    fn create_recycled(
        ctx: &Ctx,
        free: usize,
        segment_bytes: u32,
        direct_writes: bool,
    ) -> Result<Self> {
        const FILLER: &str = "recycle-filler";
        let store = turnstone::Store::open_with(
            ctx.dir.join("turnstone"),
            turnstone::Options {
                segment_bytes,
                recycle_segments: free,
                direct_writes,
                ..Default::default()
            },
        )?;
        let chunk = vec![b'f'; (segment_bytes as usize / 64).min(1 << 20)];
        let last = turnstone::SegmentId(turnstone::SegmentId(1).0 + free as u32 + 1);
        loop {
            let pos = store.durable_pos();
            if pos.segment() >= last
                && pos.offset() as usize + 2 * chunk.len() > segment_bytes as usize
            {
                break;
            }
            let a = store.append(FILLER, 1, 0, &chunk)?;
            store.wait_durable(a.end)?;
        }
        let r = store.collect(&turnstone::gc::CollectOptions::default(), &|c| {
            c.name == FILLER
        })?;
        if r.ranges_rewritten == 0 {
            return Err(format!("the filler was not collected: {r:?}").into());
        }
        Ok(TsStore {
            store,
            wl: ctx.wl.clone(),
        })
    }

    /// Reopen with `opts` (those it ran with: a smaller `recycle_segments`
    /// would make the reopen remove free files) and check every event.
    fn check(
        ctx: &Ctx,
        ck: &mut Checker<'_>,
        opts: turnstone::Options,
    ) -> Result<(Duration, Duration)> {
        reopen_and_read(ctx, opts, |s, e| {
            ck.event(s, e.seq.0, Kind::from_code(e.kind), &e.payload)
        })
    }
}

/// Reopen the turnstone store of `ctx` (timed) and hand every event of
/// every workload session to `each`, in seq order (timed).
fn reopen_and_read(
    ctx: &Ctx,
    opts: turnstone::Options,
    mut each: impl FnMut(u32, &turnstone::Event),
) -> Result<(Duration, Duration)> {
    let t0 = Instant::now();
    let store = turnstone::Store::open_with(ctx.dir.join("turnstone"), opts)?;
    let reopen = t0.elapsed();
    let t1 = Instant::now();
    for s in 0..ctx.wl.sessions() as u32 {
        let name = ctx.wl.name(s);
        let len = store.session_len(name).unwrap_or(0);
        let mut at = 0;
        while at < len {
            let end = (at + 4096).min(len);
            for e in store.read_range(name, at..end)? {
                each(s, &e);
            }
            at = end;
        }
    }
    let read = t1.elapsed();
    store.close()?;
    Ok((reopen, read))
}

struct TsWriter<'a> {
    store: &'a turnstone::Store,
    wl: &'a Workload,
    ends: HashMap<u32, turnstone::LogPos>,
}

impl FleetStore for TsStore {
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(TsWriter {
            store: &self.store,
            wl: &self.wl,
            ends: HashMap::new(),
        }))
    }
    fn syncs(&self) -> Option<u64> {
        Some(self.store.stats().syncs)
    }
    fn checkpoint_bytes(&self) -> Option<u64> {
        Some(self.store.stats().checkpoint_bytes)
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.store.close()?)
    }
}

impl Writer for TsWriter<'_> {
    fn append(&mut self, s: u32, _seq: u64, kind: Kind, payload: &[u8]) -> Result<()> {
        let a = self
            .store
            .append(self.wl.name(s), kind.code(), 0, payload)?;
        self.ends.insert(s, a.end);
        Ok(())
    }
    fn wait(&mut self, s: u32) -> Result<()> {
        if let Some(end) = self.ends.get(&s) {
            self.store.wait_durable(*end)?;
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        self.store.sync()?;
        Ok(())
    }
}

// ---------------------------------------------------------- turnstone-session

/// The fleet workload through the session layer. Each thread's writer holds
/// its sessions' handles (a `Session` is never shared across threads), so
/// every append pays what a harness pays: the typed event's serialisation,
/// the live checks, the fold into the surface and the store's append.
struct SessionStore {
    store: Arc<turnstone::Store>,
    wl: Arc<Workload>,
    registry: Arc<turnstone::session::Registry>,
}

impl SessionStore {
    fn create(ctx: &Ctx) -> Result<Self> {
        let store = turnstone::Store::open(ctx.dir.join("turnstone"))?;
        Ok(SessionStore {
            store: Arc::new(store),
            wl: ctx.wl.clone(),
            registry: Arc::new(turnstone::session::Registry::new()),
        })
    }
    fn check(ctx: &Ctx, ck: &mut Checker<'_>) -> Result<(Duration, Duration)> {
        reopen_and_read(ctx, Default::default(), |s, e| {
            ck.typed_event(s, e.seq.0, e.kind, &e.payload)
        })
    }
}

struct SessionWriter<'a> {
    owner: &'a SessionStore,
    /// Indexed by session number (a harness holds its handles directly).
    sessions: Vec<Option<turnstone::session::Session>>,
}

impl FleetStore for SessionStore {
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(SessionWriter {
            owner: self,
            sessions: (0..self.wl.sessions()).map(|_| None).collect(),
        }))
    }
    fn syncs(&self) -> Option<u64> {
        Some(self.store.stats().syncs)
    }
    fn checkpoint_bytes(&self) -> Option<u64> {
        Some(self.store.stats().checkpoint_bytes)
    }
    fn close(self: Box<Self>) -> Result<()> {
        let store = Arc::try_unwrap(self.store).map_err(|_| "a session still holds the store")?;
        Ok(store.close()?)
    }
}

impl Writer for SessionWriter<'_> {
    fn takes_payload(&self) -> bool {
        false
    }
    fn append(&mut self, s: u32, seq: u64, _kind: Kind, _payload: &[u8]) -> Result<()> {
        let o = self.owner;
        let slot = self
            .sessions
            .get_mut(s as usize)
            .ok_or("session out of range")?;
        let session = match slot {
            Some(session) => session,
            None => slot.insert(turnstone::session::Session::create(
                o.store.clone(),
                o.wl.name(s),
                o.registry.clone(),
            )?),
        };
        let at = crate::typed::typed_event(&o.wl, s, seq).append_to(session)?;
        if at != seq {
            return Err(format!("session {s}: appended at seq {at}, expected {seq}").into());
        }
        Ok(())
    }
    fn wait(&mut self, s: u32) -> Result<()> {
        if let Some(Some(session)) = self.sessions.get(s as usize) {
            session.flush()?;
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        self.owner.store.sync()?;
        // The handles go now, before the store is closed.
        self.sessions.clear();
        Ok(())
    }
}

// ---------------------------------------------------------------- sqlite-wal

struct SqlStore {
    path: PathBuf,
    wl: Arc<Workload>,
}

/// Open a connection the way the comparison prescribes.
pub fn sqlite_connect(path: &Path) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// The events table of the comparison.
/// Free files a `turnstone-recycled` store starts with: enough 64 MiB
/// segments for a few seconds of the fleet at this machine's rates.
pub const RECYCLED_FREE_FILES: usize = 32;

pub const SQLITE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS events(
    session TEXT NOT NULL, seq INTEGER NOT NULL, kind INTEGER NOT NULL, payload BLOB NOT NULL,
    PRIMARY KEY(session, seq))";

impl SqlStore {
    fn create(ctx: &Ctx) -> Result<Self> {
        let path = ctx.dir.join("events.sqlite");
        let conn = sqlite_connect(&path)?;
        conn.execute_batch(SQLITE_SCHEMA)?;
        Ok(SqlStore {
            path,
            wl: ctx.wl.clone(),
        })
    }
    fn check(ctx: &Ctx, ck: &mut Checker<'_>) -> Result<(Duration, Duration)> {
        let path = ctx.dir.join("events.sqlite");
        let t0 = Instant::now();
        let conn = sqlite_connect(&path)?;
        let _: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        let reopen = t0.elapsed();
        let t1 = Instant::now();
        let mut stmt =
            conn.prepare("SELECT seq, kind, payload FROM events WHERE session = ?1 ORDER BY seq")?;
        for s in 0..ctx.wl.sessions() as u32 {
            let mut rows = stmt.query([ctx.wl.name(s)])?;
            while let Some(r) = rows.next()? {
                let seq: i64 = r.get(0)?;
                let kind: i64 = r.get(1)?;
                let payload = r.get_ref(2)?.as_blob()?;
                ck.event(s, seq as u64, Kind::from_code(kind as u16), payload);
            }
        }
        Ok((reopen, t1.elapsed()))
    }
}

struct SqlWriter<'a> {
    conn: rusqlite::Connection,
    wl: &'a Workload,
    rows: Vec<(u32, u64, Kind, usize, usize)>,
    bytes: Vec<u8>,
}

impl FleetStore for SqlStore {
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(SqlWriter {
            conn: sqlite_connect(&self.path)?,
            wl: &self.wl,
            rows: Vec::new(),
            bytes: Vec::new(),
        }))
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

impl SqlWriter<'_> {
    fn commit(&mut self) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO events(session, seq, kind, payload) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for &(s, seq, kind, a, b) in &self.rows {
                stmt.execute(rusqlite::params![
                    self.wl.name(s),
                    seq as i64,
                    kind.code() as i64,
                    &self.bytes[a..b]
                ])?;
            }
        }
        tx.commit()?;
        self.rows.clear();
        self.bytes.clear();
        Ok(())
    }
}

impl Writer for SqlWriter<'_> {
    fn append(&mut self, s: u32, seq: u64, kind: Kind, payload: &[u8]) -> Result<()> {
        let a = self.bytes.len();
        self.bytes.extend_from_slice(payload);
        self.rows.push((s, seq, kind, a, self.bytes.len()));
        Ok(())
    }
    fn wait(&mut self, _s: u32) -> Result<()> {
        self.commit()
    }
    fn finish(&mut self) -> Result<()> {
        self.commit()
    }
}

// ---------------------------------------------------------------- jsonl-per-session

struct JsonlStore {
    dir: PathBuf,
    wl: Arc<Workload>,
}

impl JsonlStore {
    fn path(dir: &Path, wl: &Workload, s: u32) -> PathBuf {
        dir.join(format!("{}.jsonl", wl.name(s)))
    }
    fn create(ctx: &Ctx) -> Result<Self> {
        // Session files exist (and their names are durable) before the run:
        // creating sessions is not the workload.
        let dir = ctx.dir.join("jsonl");
        std::fs::create_dir_all(&dir)?;
        for s in 0..ctx.wl.sessions() as u32 {
            File::create(Self::path(&dir, &ctx.wl, s))?.sync_all()?;
        }
        File::open(&dir)?.sync_all()?;
        Ok(JsonlStore {
            dir,
            wl: ctx.wl.clone(),
        })
    }
    fn check(ctx: &Ctx, ck: &mut Checker<'_>) -> Result<(Duration, Duration)> {
        let dir = ctx.dir.join("jsonl");
        // "Reopen": list the sessions (a harness reads a file when it resumes
        // that session).
        let t0 = Instant::now();
        let n = std::fs::read_dir(&dir)?.count();
        let reopen = t0.elapsed();
        if n != ctx.wl.sessions() {
            return Err(format!("{n} session files, expected {}", ctx.wl.sessions()).into());
        }
        let t1 = Instant::now();
        let mut buf = Vec::new();
        for s in 0..ctx.wl.sessions() as u32 {
            buf.clear();
            File::open(Self::path(&dir, &ctx.wl, s))?.read_to_end(&mut buf)?;
            for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                let v: serde_json::Value = match serde_json::from_slice(line) {
                    Ok(v) => v,
                    Err(e) => {
                        ck.problem(format!("session {s}: bad line: {e}"));
                        continue;
                    }
                };
                let seq = v["seq"].as_u64().unwrap_or(u64::MAX);
                let kind = v["kind"].as_str().and_then(Kind::from_name);
                let payload = v["payload"].as_str().unwrap_or("").as_bytes();
                ck.event(s, seq, kind, payload);
            }
        }
        Ok((reopen, t1.elapsed()))
    }
}

struct JsonlWriter<'a> {
    store: &'a JsonlStore,
    files: HashMap<u32, BufWriter<File>>,
    dirty: HashSet<u32>,
}

impl FleetStore for JsonlStore {
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(JsonlWriter {
            store: self,
            files: HashMap::new(),
            dirty: HashSet::new(),
        }))
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

impl JsonlWriter<'_> {
    fn sync(&mut self, s: u32) -> Result<()> {
        if let Some(f) = self.files.get_mut(&s) {
            f.flush()?;
            f.get_ref().sync_all()?;
        }
        self.dirty.remove(&s);
        Ok(())
    }
}

impl Writer for JsonlWriter<'_> {
    fn append(&mut self, s: u32, seq: u64, kind: Kind, payload: &[u8]) -> Result<()> {
        let f = match self.files.entry(s) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let path = JsonlStore::path(&self.store.dir, &self.store.wl, s);
                e.insert(BufWriter::new(OpenOptions::new().append(true).open(path)?))
            }
        };
        write!(
            f,
            "{{\"seq\":{seq},\"kind\":\"{}\",\"payload\":",
            kind.name()
        )?;
        let text = std::str::from_utf8(payload)?;
        serde_json::to_writer(&mut *f, text)?;
        f.write_all(b"}\n")?;
        self.dirty.insert(s);
        Ok(())
    }
    fn wait(&mut self, s: u32) -> Result<()> {
        self.sync(s)
    }
    fn finish(&mut self) -> Result<()> {
        let dirty: Vec<u32> = self.dirty.iter().copied().collect();
        for s in dirty {
            self.sync(s)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- okaywal

/// Collects every recovered entry's chunks.
#[derive(Debug, Clone, Default)]
struct Collect(Arc<Mutex<Vec<Vec<u8>>>>);

impl okaywal::LogManager for Collect {
    fn recover(&mut self, entry: &mut okaywal::Entry<'_>) -> std::io::Result<()> {
        if let Some(chunks) = entry.read_all_chunks()? {
            self.0.lock().expect("collector").extend(chunks);
        }
        Ok(())
    }
    fn checkpoint_to(
        &mut self,
        _last: okaywal::EntryId,
        _entries: &mut okaywal::SegmentReader,
        _wal: &okaywal::WriteAheadLog,
    ) -> std::io::Result<()> {
        Ok(())
    }
}

fn okaywal_config(dir: &Path) -> okaywal::Configuration {
    // The WAL is the whole store here, so it never checkpoints (a checkpoint
    // hands entries to a storage layer and recycles the file); segments are
    // preallocated like turnstone's.
    okaywal::Configuration::default_for(dir)
        .preallocate_bytes(64 << 20)
        .checkpoint_after_bytes(u64::MAX)
}

struct WalStore {
    wal: okaywal::WriteAheadLog,
    nonce: u64,
}

impl WalStore {
    fn create(ctx: &Ctx) -> Result<Self> {
        let wal = okaywal_config(&ctx.dir.join("okaywal")).open(Collect::default())?;
        Ok(WalStore {
            wal,
            nonce: ctx.nonce,
        })
    }
    fn check(ctx: &Ctx, ck: &mut Checker<'_>) -> Result<(Duration, Duration)> {
        let got = Collect::default();
        let t0 = Instant::now();
        let wal = okaywal_config(&ctx.dir.join("okaywal")).open(got.clone())?;
        let reopen = t0.elapsed();
        wal.shutdown()?;
        let t1 = Instant::now();
        let chunks = std::mem::take(&mut *got.0.lock().expect("collector"));
        for c in &chunks {
            match decode_raw(c, ctx.nonce) {
                Some(f) => ck.event(f.session, f.seq, Kind::from_code(f.kind), f.payload),
                None => ck.problem("okaywal chunk does not decode".into()),
            }
        }
        Ok((reopen, t1.elapsed()))
    }
}

struct WalWriter<'a> {
    wal: &'a okaywal::WriteAheadLog,
    nonce: u64,
    frames: Vec<u8>,
    ends: Vec<usize>,
}

impl FleetStore for WalStore {
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(WalWriter {
            wal: &self.wal,
            nonce: self.nonce,
            frames: Vec::new(),
            ends: Vec::new(),
        }))
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.wal.shutdown()?)
    }
}

impl WalWriter<'_> {
    fn commit(&mut self) -> Result<()> {
        if self.ends.is_empty() {
            return Ok(());
        }
        let mut e = self.wal.begin_entry()?;
        let mut a = 0;
        for &b in &self.ends {
            e.write_chunk(&self.frames[a..b])?;
            a = b;
        }
        e.commit()?;
        self.frames.clear();
        self.ends.clear();
        Ok(())
    }
}

impl Writer for WalWriter<'_> {
    fn append(&mut self, s: u32, seq: u64, kind: Kind, payload: &[u8]) -> Result<()> {
        encode_raw(
            &mut self.frames,
            self.nonce,
            s,
            seq,
            kind.code(),
            payload,
            false,
        );
        self.ends.push(self.frames.len());
        Ok(())
    }
    fn wait(&mut self, _s: u32) -> Result<()> {
        self.commit()
    }
    fn finish(&mut self) -> Result<()> {
        self.commit()
    }
}

// ---------------------------------------------------------------- raw logs

/// Frame header of the raw logs: len u32, crc u32, session u32, kind u16,
/// pad u16, seq u64; then the payload; padded to 8 bytes in the log.
pub const RAW_HEADER: usize = 24;

/// Encode one raw frame into `out`; the checksum covers a run nonce, so
/// frames of an earlier run in a reused file never validate.
pub fn encode_raw(
    out: &mut Vec<u8>,
    nonce: u64,
    s: u32,
    seq: u64,
    kind: u16,
    payload: &[u8],
    pad: bool,
) {
    let start = out.len();
    let len = RAW_HEADER + payload.len();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&s.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&[0; 2]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(payload);
    let mut h = crc32fast::Hasher::new();
    h.update(&nonce.to_le_bytes());
    h.update(&out[start + 8..]);
    let crc = h.finalize();
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    if pad {
        out.resize(start + len.div_ceil(8) * 8, 0);
    }
}

/// A decoded raw frame.
pub struct RawFrame<'a> {
    pub session: u32,
    pub seq: u64,
    pub kind: u16,
    pub payload: &'a [u8],
    /// Bytes the frame occupies, padding included.
    pub padded: usize,
}

pub fn decode_raw(b: &[u8], nonce: u64) -> Option<RawFrame<'_>> {
    if b.len() < RAW_HEADER {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
    let len = u32_at(0) as usize;
    if len < RAW_HEADER || len > b.len() {
        return None;
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&nonce.to_le_bytes());
    h.update(&b[8..len]);
    if h.finalize() != u32_at(4) {
        return None;
    }
    Some(RawFrame {
        session: u32_at(8),
        kind: u16::from_le_bytes([b[12], b[13]]),
        seq: u64::from_le_bytes(b[16..24].try_into().expect("8")),
        payload: &b[RAW_HEADER..len],
        padded: len.div_ceil(8) * 8,
    })
}

/// Scan raw frames from the start of `path` until `max` frames or the first
/// frame that does not validate. Returns frames and bytes scanned.
pub fn scan_raw(
    path: &Path,
    nonce: u64,
    max: u64,
    mut each: impl FnMut(&RawFrame<'_>),
) -> std::io::Result<(u64, u64)> {
    const CHUNK: usize = 8 << 20;
    let mut file = File::open(path)?;
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK * 2);
    let mut pos = 0usize;
    let mut eof = false;
    let mut frames = 0u64;
    let mut consumed = 0u64;
    while frames < max {
        if !eof && buf.len() - pos < 128 * 1024 {
            buf.drain(..pos);
            pos = 0;
            let have = buf.len();
            buf.resize(have + CHUNK, 0);
            let n = file.read(&mut buf[have..])?;
            buf.truncate(have + n);
            eof = n == 0;
            continue;
        }
        match decode_raw(&buf[pos..], nonce) {
            Some(f) => {
                each(&f);
                pos += f.padded;
                consumed += f.padded as u64;
                frames += 1;
            }
            None => break,
        }
    }
    Ok((frames, consumed))
}

/// A zero-filled file, written once per process, that the raw-prealloc log
/// overwrites from offset 0 in every run (overwriting initialised blocks costs
/// what overwriting zeros costs: no allocation, no size change).
pub struct PreallocFile {
    pub path: PathBuf,
    pub len: u64,
}

impl PreallocFile {
    pub fn create(path: PathBuf, len: u64) -> std::io::Result<PreallocFile> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        let zeros = vec![0u8; 8 << 20];
        let mut at = 0;
        while at < len {
            let n = zeros.len().min((len - at) as usize);
            f.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        f.sync_all()?;
        if let Some(d) = path.parent() {
            File::open(d)?.sync_all()?;
        }
        Ok(PreallocFile { path, len })
    }
}

impl Drop for PreallocFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The naive limit: one file, frames into a shared buffer, and a
/// leader/follower group commit (the first waiter that finds no write in
/// flight writes everything buffered with one `pwrite` and one `fdatasync`;
/// the others wait for it and the next leader takes what arrived meanwhile).
pub struct RawLog {
    file: File,
    nonce: u64,
    st: Mutex<RawState>,
    cv: Condvar,
}

struct RawState {
    buf: Vec<u8>,
    spare: Vec<u8>,
    /// File offset of `buf[0]`.
    buf_start: u64,
    durable: u64,
    leader: bool,
    syncs: u64,
    error: Option<String>,
}

impl RawLog {
    pub fn open(path: &Path, nonce: u64, create: bool) -> std::io::Result<RawLog> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(path)?;
        if create {
            file.sync_all()?;
            if let Some(d) = path.parent() {
                File::open(d)?.sync_all()?;
            }
        }
        Ok(RawLog {
            file,
            nonce,
            st: Mutex::new(RawState {
                buf: Vec::with_capacity(1 << 20),
                spare: Vec::with_capacity(1 << 20),
                buf_start: 0,
                durable: 0,
                leader: false,
                syncs: 0,
                error: None,
            }),
            cv: Condvar::new(),
        })
    }
    /// Append a frame; returns the log offset where it ends.
    pub fn append(&self, s: u32, seq: u64, kind: u16, payload: &[u8]) -> u64 {
        let mut st = self.st.lock().expect("raw log");
        encode_raw(&mut st.buf, self.nonce, s, seq, kind, payload, true);
        st.buf_start + st.buf.len() as u64
    }
    /// Return once the log is durable up to `end`.
    pub fn wait(&self, end: u64) -> std::io::Result<()> {
        let mut st = self.st.lock().expect("raw log");
        loop {
            if st.durable >= end {
                return Ok(());
            }
            if let Some(e) = &st.error {
                return Err(std::io::Error::other(e.clone()));
            }
            if st.leader {
                st = self.cv.wait(st).expect("raw log");
                continue;
            }
            st.leader = true;
            let fresh = std::mem::take(&mut st.spare);
            let mut buf = std::mem::replace(&mut st.buf, fresh);
            let off = st.buf_start;
            st.buf_start += buf.len() as u64;
            drop(st);
            let r = self
                .file
                .write_all_at(&buf, off)
                .and_then(|_| self.file.sync_data());
            st = self.st.lock().expect("raw log");
            st.leader = false;
            st.syncs += 1;
            match r {
                Ok(()) => st.durable = off + buf.len() as u64,
                Err(e) => st.error = Some(e.to_string()),
            }
            buf.clear();
            st.spare = buf;
            self.cv.notify_all();
        }
    }
    pub fn end(&self) -> u64 {
        let st = self.st.lock().expect("raw log");
        st.buf_start + st.buf.len() as u64
    }
    pub fn syncs(&self) -> u64 {
        self.st.lock().expect("raw log").syncs
    }
}

struct RawStore {
    log: RawLog,
}

impl RawStore {
    fn open(path: &Path, ctx: &Ctx, create: bool) -> Result<Self> {
        Ok(RawStore {
            log: RawLog::open(path, ctx.nonce, create)?,
        })
    }
    fn check(path: &Path, ctx: &Ctx, ck: &mut Checker<'_>) -> Result<(Duration, Duration)> {
        let total: u64 = ck.expected.iter().sum();
        // Reopen = the recovery scan a log without an index needs: validate
        // every frame up to the end.
        let t0 = Instant::now();
        let (frames, _) = scan_raw(path, ctx.nonce, total, |_| {})?;
        let reopen = t0.elapsed();
        if frames != total {
            ck.problem(format!(
                "raw log holds {frames} valid frames, {total} expected"
            ));
        }
        let t1 = Instant::now();
        scan_raw(path, ctx.nonce, total, |f| {
            ck.event(f.session, f.seq, Kind::from_code(f.kind), f.payload)
        })?;
        Ok((reopen, t1.elapsed()))
    }
}

struct RawWriter<'a> {
    log: &'a RawLog,
    ends: HashMap<u32, u64>,
}

impl FleetStore for RawStore {
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(RawWriter {
            log: &self.log,
            ends: HashMap::new(),
        }))
    }
    fn syncs(&self) -> Option<u64> {
        Some(self.log.syncs())
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.log.wait(self.log.end())?;
        Ok(())
    }
}

impl Writer for RawWriter<'_> {
    fn append(&mut self, s: u32, seq: u64, kind: Kind, payload: &[u8]) -> Result<()> {
        let end = self.log.append(s, seq, kind.code(), payload);
        self.ends.insert(s, end);
        Ok(())
    }
    fn wait(&mut self, s: u32) -> Result<()> {
        if let Some(&end) = self.ends.get(&s) {
            self.log.wait(end)?;
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        if let Some(&end) = self.ends.values().max() {
            self.log.wait(end)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_store_makes_its_segments_from_free_files() {
        let base = tempfile::tempdir().unwrap();
        let ctx = Ctx {
            wl: Arc::new(Workload::new(1, 4)),
            dir: base.path().to_path_buf(),
            prealloc: None,
            nonce: 1,
        };
        let ts = TsStore::create_recycled(&ctx, 3, 64 << 10, false).unwrap();
        let free = std::fs::read_dir(base.path().join("turnstone"))
            .unwrap()
            .filter(|e| {
                // The collected files; not the one the store prepares
                // ahead of need (`0000000000.tseg.free`).
                let name = e.as_ref().unwrap().file_name();
                let name = name.to_string_lossy();
                name.ends_with(".tseg.free") && !name.starts_with("0000000000.")
            })
            .count();
        assert_eq!(free, 3);
        let before = ts.store.stats();
        let mut n = 0u64;
        while ts.store.stats().segments_created - before.segments_created < 3 {
            let a = ts.store.append("x", 1, 0, &[7u8; 4000]).unwrap();
            ts.store.wait_durable(a.end).unwrap();
            n += 1;
        }
        let st = ts.store.stats();
        assert_eq!(st.segments_recycled - before.segments_recycled, 3, "{st:?}");
        assert!(n > 0);
    }

    #[test]
    fn raw_frames_round_trip() {
        let mut out = Vec::new();
        encode_raw(&mut out, 9, 3, 17, 5, b"hello", true);
        assert_eq!(out.len() % 8, 0);
        let f = decode_raw(&out, 9).expect("decodes");
        assert_eq!(
            (f.session, f.seq, f.kind, f.payload),
            (3, 17, 5, &b"hello"[..])
        );
        assert!(decode_raw(&out, 10).is_none(), "another run's nonce");
        assert!(decode_raw(&[0u8; 64], 9).is_none(), "zeros");
    }
}
