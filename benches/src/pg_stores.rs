//! The fleet stores on PostgreSQL (issue 18), selected with `--stores
//! postgres,pg-naive` and a server named by `TURNSTONE_BENCH_PG_URL` (start
//! a private one with `eval "$(bash .ci/postgres.sh start)"` and pass
//! `TURNSTONE_BENCH_PG_URL=$PGURL`). Each run gets a fresh database, dropped
//! after its read-back.
//!
//! | store | append | wait |
//! |---|---|---|
//! | postgres | `turnstone_pg::Writer::append` (queued in the process; one writer and lease per session) | `Writer::sync`: group commit, every session's queued events in one statement |
//! | pg-naive | one `INSERT` per event, autocommit (a commit, and a WAL flush, each) | nothing left to wait for |
//!
//! CPU per event counts this process only; the PostgreSQL server's own CPU
//! is not in it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::stores::{Checker, Ctx, FleetStore, Result, Writer};
use crate::workload::{Kind, Workload};

/// The server's URL, from `TURNSTONE_BENCH_PG_URL`.
pub fn server_url() -> Result<String> {
    std::env::var("TURNSTONE_BENCH_PG_URL").map_err(|_| {
        "the PostgreSQL stores need TURNSTONE_BENCH_PG_URL (see .ci/postgres.sh)".into()
    })
}

/// turnstone-pg's options: the defaults, with `TURNSTONE_BENCH_PG_LANES`
/// overriding the number of commit lanes.
fn options() -> turnstone_pg::PgOptions {
    let mut o = turnstone_pg::PgOptions::default();
    if let Some(n) = std::env::var("TURNSTONE_BENCH_PG_LANES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        o.lanes = n;
    }
    o
}

fn db_name(ctx: &Ctx) -> String {
    format!("tsbench_{:x}", ctx.nonce)
}

fn db_url(ctx: &Ctx) -> Result<String> {
    let url = server_url()?;
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(&url);
    Ok(format!("{base}/{}", db_name(ctx)))
}

fn create_db(ctx: &Ctx) -> Result<()> {
    let mut admin = postgres::Client::connect(&server_url()?, postgres::NoTls)?;
    admin.batch_execute(&format!("CREATE DATABASE {}", db_name(ctx)))?;
    Ok(())
}

fn drop_db(ctx: &Ctx) -> Result<()> {
    let mut admin = postgres::Client::connect(&server_url()?, postgres::NoTls)?;
    admin.batch_execute(&format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        db_name(ctx)
    ))?;
    Ok(())
}

// ---------------------------------------------------------------- postgres (turnstone-pg)

pub struct PgStore {
    log: turnstone_pg::PgLog,
    wl: std::sync::Arc<Workload>,
}

impl PgStore {
    pub fn create(ctx: &Ctx) -> Result<Self> {
        create_db(ctx)?;
        let log = turnstone_pg::PgLog::connect(&db_url(ctx)?, options())?;
        Ok(PgStore {
            log,
            wl: ctx.wl.clone(),
        })
    }

    pub fn check(ctx: &Ctx, ck: &mut Checker<'_>) -> Result<(Duration, Duration)> {
        let t0 = Instant::now();
        let log = turnstone_pg::PgLog::connect(&db_url(ctx)?, options())?;
        let reopen = t0.elapsed();
        let t1 = Instant::now();
        for s in 0..ctx.wl.sessions() as u32 {
            let name = ctx.wl.name(s);
            let len = match log.session_len(name) {
                Ok(n) => n,
                Err(turnstone_pg::PgError::UnknownSession(_)) => 0,
                Err(e) => return Err(e.into()),
            };
            for e in log.read_range(name, 0..len)? {
                ck.event(s, e.seq, Kind::from_code(e.kind), &e.payload);
            }
        }
        let read = t1.elapsed();
        log.close();
        drop(log);
        drop_db(ctx)?;
        Ok((reopen, read))
    }
}

struct PgWriter<'a> {
    log: &'a turnstone_pg::PgLog,
    wl: &'a Workload,
    writers: HashMap<u32, turnstone_pg::Writer>,
}

impl FleetStore for PgStore {
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(PgWriter {
            log: &self.log,
            wl: &self.wl,
            writers: HashMap::new(),
        }))
    }
    fn syncs(&self) -> Option<u64> {
        Some(self.log.stats().commits)
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.log.close();
        Ok(())
    }
}

impl Writer for PgWriter<'_> {
    fn append(&mut self, s: u32, _seq: u64, kind: Kind, payload: &[u8]) -> Result<()> {
        if !self.writers.contains_key(&s) {
            let w = self.log.acquire(self.wl.name(s), "bench", true)?.writer;
            self.writers.insert(s, w);
        }
        self.writers[&s].append(kind.code(), 0, payload)?;
        Ok(())
    }
    fn wait(&mut self, s: u32) -> Result<()> {
        if let Some(w) = self.writers.get(&s) {
            w.sync()?;
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        for w in self.writers.values() {
            w.sync()?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- pg-naive

const NAIVE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS events(
    session text NOT NULL, seq bigint NOT NULL, kind integer NOT NULL, payload bytea NOT NULL,
    PRIMARY KEY (session, seq))";

pub struct PgNaive {
    url: String,
    wl: std::sync::Arc<Workload>,
}

impl PgNaive {
    pub fn create(ctx: &Ctx) -> Result<Self> {
        create_db(ctx)?;
        let url = db_url(ctx)?;
        postgres::Client::connect(&url, postgres::NoTls)?.batch_execute(NAIVE_SCHEMA)?;
        Ok(PgNaive {
            url,
            wl: ctx.wl.clone(),
        })
    }

    pub fn check(ctx: &Ctx, ck: &mut Checker<'_>) -> Result<(Duration, Duration)> {
        let t0 = Instant::now();
        let mut c = postgres::Client::connect(&db_url(ctx)?, postgres::NoTls)?;
        let stmt =
            c.prepare("SELECT seq, kind, payload FROM events WHERE session = $1 ORDER BY seq")?;
        let reopen = t0.elapsed();
        let t1 = Instant::now();
        for s in 0..ctx.wl.sessions() as u32 {
            for r in c.query(&stmt, &[&ctx.wl.name(s)])? {
                let (seq, kind, payload): (i64, i32, Vec<u8>) = (r.get(0), r.get(1), r.get(2));
                ck.event(s, seq as u64, Kind::from_code(kind as u16), &payload);
            }
        }
        let read = t1.elapsed();
        drop(c);
        drop_db(ctx)?;
        Ok((reopen, read))
    }
}

struct NaiveWriter<'a> {
    c: postgres::Client,
    insert: postgres::Statement,
    wl: &'a Workload,
}

impl FleetStore for PgNaive {
    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls)?;
        let insert =
            c.prepare("INSERT INTO events (session, seq, kind, payload) VALUES ($1, $2, $3, $4)")?;
        Ok(Box::new(NaiveWriter {
            c,
            insert,
            wl: &self.wl,
        }))
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

impl Writer for NaiveWriter<'_> {
    fn append(&mut self, s: u32, seq: u64, kind: Kind, payload: &[u8]) -> Result<()> {
        self.c.execute(
            &self.insert,
            &[
                &self.wl.name(s),
                &(seq as i64),
                &(kind.code() as i32),
                &payload,
            ],
        )?;
        Ok(())
    }
    fn wait(&mut self, _s: u32) -> Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}
