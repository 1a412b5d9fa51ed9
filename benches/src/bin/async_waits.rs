//! Durability waits without a thread: 1,000 concurrent sessions doing fleet
//! turns (two durability waits per 24-event turn, `benches/src/workload.rs`)
//! on a 2-worker tokio runtime with `Store::wait_durable_async`, next to the
//! blocking `Store::wait_durable` with 8 and 64 threads, in the same run.
//!
//!   cargo run --release -p turnstone-benches --bin async_waits -- \
//!       [--sessions 1000] [--seconds 5] [--runs 3] [--pg URL]
//!
//! With `--pg URL` (a server's URL; each run gets a fresh database of its
//! own, dropped after) the same three modes run on turnstone-pg's log
//! instead, through the session layer's log interface: appends queued on
//! one lease per session, async waits with `EventLog::poll_durable` (woken
//! by the commit lane), blocking ones with `EventLog::sync_session`.
//!
//! Prints one JSON line per (run, mode), then the medians. Every store is
//! reopened after its run and each session's length and last payload are
//! checked against what the run counted as appended.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use turnstone::backend::EventLog;
use turnstone::Store;
use turnstone_benches::sys;
use turnstone_benches::workload::Workload;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
/// One blocking thread's outcome: (session index, events appended) pairs and wait latencies.
type ThreadOut = (Vec<(usize, u64)>, Vec<u64>);

#[derive(Debug, Clone, Copy)]
enum Mode {
    Async { workers: usize },
    Blocking { threads: usize },
}

impl Mode {
    fn name(self) -> String {
        match self {
            Mode::Async { workers } => format!("async ({workers} workers, a task per session)"),
            Mode::Blocking { threads } => format!("blocking ({threads} threads)"),
        }
    }
}

struct Outcome {
    events: u64,
    secs: f64,
    waits_us: Vec<u64>,
    syncs: u64,
    /// Events appended per session.
    counts: Vec<u64>,
}

/// One session's turns until the deadline: append, and wait where the
/// workload says so. Returns (events, wait latencies).
async fn session_task(
    store: Arc<Store>,
    wl: Arc<Workload>,
    s: u32,
    deadline: Instant,
) -> Result<(u64, Vec<u64>)> {
    let mut seq = 0u64;
    let mut lat = Vec::new();
    let mut buf = Vec::new();
    while Instant::now() < deadline {
        wl.payload_into(s, seq, &mut buf);
        let a = store.append(wl.name(s), wl.kind(s, seq).code(), 0, &buf)?;
        seq += 1;
        if wl.waits_after(s, seq - 1) {
            let t0 = Instant::now();
            store.wait_durable_async(a.end).await?;
            lat.push(t0.elapsed().as_micros() as u64);
        } else if seq.is_multiple_of(8) {
            // Model the other awaits of a harness (streaming chunks): let
            // other tasks run.
            tokio::task::yield_now().await;
        }
    }
    Ok((seq, lat))
}

/// Every session a task on a `workers`-thread runtime, running `task(s)`;
/// returns each session's count and every wait latency.
fn drive_async<F>(workers: usize, n: usize, task: impl Fn(u32) -> F) -> Result<(Vec<u64>, Vec<u64>)>
where
    F: std::future::Future<Output = Result<(u64, Vec<u64>)>> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .build()?;
    let results = rt.block_on(async {
        let tasks: Vec<_> = (0..n as u32).map(|s| tokio::spawn(task(s))).collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await);
        }
        out
    });
    let (mut counts, mut waits) = (vec![0u64; n], Vec::new());
    for (s, r) in results.into_iter().enumerate() {
        let (c, lat) = r.map_err(|e| format!("task: {e}"))??;
        counts[s] = c;
        waits.extend(lat);
    }
    Ok((counts, waits))
}

/// Append one event: (session, seq, payload) to what its wait needs.
type AppendFn<'a, T> = dyn Fn(u32, u64, &[u8]) -> Result<T> + Sync + 'a;

/// The sessions spread over `threads` threads, each appending one event of
/// its sessions in turn (`append(s, seq, payload)`) and waiting where the
/// workload says (`wait(s, what append returned)`), from seq `first` until
/// the deadline; returns each session's count and every wait latency.
fn drive_blocking<T>(
    threads: usize,
    wl: &Workload,
    first: u64,
    deadline: Instant,
    append: &AppendFn<'_, T>,
    wait: &(dyn Fn(u32, T) -> Result<()> + Sync),
) -> Result<(Vec<u64>, Vec<u64>)> {
    let n = wl.sessions();
    let outs = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> Result<ThreadOut> {
                    let mine: Vec<usize> = (0..n).filter(|s| s % threads == t).collect();
                    let mut next = vec![first; mine.len()];
                    let mut lat = Vec::new();
                    let mut buf = Vec::new();
                    'run: loop {
                        for (i, &s) in mine.iter().enumerate() {
                            if Instant::now() >= deadline {
                                break 'run;
                            }
                            let (s32, seq) = (s as u32, next[i]);
                            wl.payload_into(s32, seq, &mut buf);
                            let mark = append(s32, seq, &buf)?;
                            next[i] += 1;
                            if wl.waits_after(s32, seq) {
                                let t0 = Instant::now();
                                wait(s32, mark)?;
                                lat.push(t0.elapsed().as_micros() as u64);
                            }
                        }
                        if mine.is_empty() {
                            break;
                        }
                    }
                    Ok((mine.into_iter().zip(next).collect(), lat))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect::<Vec<_>>()
    });
    let (mut counts, mut waits) = (vec![0u64; n], Vec::new());
    for o in outs {
        let (c, lat) = o?;
        for (s, k) in c {
            counts[s] = k;
        }
        waits.extend(lat);
    }
    Ok((counts, waits))
}

fn run(mode: Mode, wl: &Arc<Workload>, dir: &Path, seconds: f64) -> Result<Outcome> {
    let store = Arc::new(Store::open(dir)?);
    let n = wl.sessions();
    let syncs0 = store.stats().syncs;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let (counts, mut waits_us) = match mode {
        Mode::Async { workers } => drive_async(workers, n, |s| {
            session_task(store.clone(), wl.clone(), s, deadline)
        })?,
        Mode::Blocking { threads } => drive_blocking(
            threads,
            wl,
            0,
            deadline,
            &|s, seq, buf| {
                Ok(store
                    .append(wl.name(s), wl.kind(s, seq).code(), 0, buf)?
                    .end)
            },
            &|_, end| Ok(store.wait_durable(end)?),
        )?,
    };
    // Everything counted is durable once the last wait returned; sync the
    // tail appended after each session's last wait, then measure.
    store.sync()?;
    let secs = start.elapsed().as_secs_f64();
    let syncs = store.stats().syncs - syncs0;
    drop(store);
    check(dir, wl, &counts)?;
    waits_us.sort_unstable();
    Ok(Outcome {
        events: counts.iter().sum(),
        secs,
        waits_us,
        syncs,
        counts,
    })
}

/// One session's turns on another log until the deadline (see
/// [`session_task`]): appends queued, async waits by `poll_durable`.
async fn log_session_task(
    log: Arc<dyn EventLog>,
    wl: Arc<Workload>,
    s: u32,
    deadline: Instant,
) -> Result<(u64, Vec<u64>)> {
    // Seq 0 was appended before the measured window.
    let mut seq = 1u64;
    let mut lat = Vec::new();
    let mut buf = Vec::new();
    let name = wl.name(s);
    while Instant::now() < deadline {
        wl.payload_into(s, seq, &mut buf);
        log.append_group(name, &[(wl.kind(s, seq).code(), 0, &buf)])?;
        seq += 1;
        if wl.waits_after(s, seq - 1) {
            let t0 = Instant::now();
            std::future::poll_fn(|cx| log.poll_durable(name, seq, cx)).await?;
            lat.push(t0.elapsed().as_micros() as u64);
        } else if seq.is_multiple_of(8) {
            tokio::task::yield_now().await;
        }
    }
    Ok((seq, lat))
}

/// [`run`] on turnstone-pg's log in a fresh database `db` of the server
/// at `url`.
fn run_pg(mode: Mode, wl: &Arc<Workload>, url: &str, db: &str, seconds: f64) -> Result<Outcome> {
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url);
    let mut admin = postgres::Client::connect(url, postgres::NoTls)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))?;
    admin.batch_execute(&format!("CREATE DATABASE {db}"))?;
    let db_url = format!("{base}/{db}");
    let pg = turnstone_pg::PgLog::connect(&db_url, turnstone_pg::PgOptions::default())?;
    let log: Arc<dyn EventLog> = Arc::new(turnstone_pg::PgEventLog::new(pg.clone(), "bench"));
    let n = wl.sessions();
    // Sessions and their leases first, outside the measured window.
    for s in 0..n as u32 {
        log.create_session(wl.name(s))?;
        log.append_group(wl.name(s), &[(wl.kind(s, 0).code(), 0, &wl.payload(s, 0))])?;
    }
    for s in 0..n as u32 {
        log.sync_session(wl.name(s))?;
    }
    let commits0 = pg.stats().commits;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let (counts, mut waits_us) = match mode {
        Mode::Async { workers } => drive_async(workers, n, |s| {
            log_session_task(log.clone(), wl.clone(), s, deadline)
        })?,
        Mode::Blocking { threads } => drive_blocking(
            threads,
            wl,
            1,
            deadline,
            &|s, seq, buf| Ok(log.append_group(wl.name(s), &[(wl.kind(s, seq).code(), 0, buf)])?),
            &|s, _| Ok(log.sync_session(wl.name(s))?),
        )?,
    };
    for s in 0..n as u32 {
        log.sync_session(wl.name(s))?;
    }
    let secs = start.elapsed().as_secs_f64();
    let syncs = pg.stats().commits - commits0;
    // Read back: every session's length and last payload.
    for (s, &c) in counts.iter().enumerate() {
        let name = wl.name(s as u32);
        let len = log.durable_len(name)?.unwrap_or(0);
        if len != c {
            return Err(
                format!("session {name}: {len} events in the database, {c} appended").into(),
            );
        }
        let e = log.read_range(name, c - 1..c)?;
        if e[0].payload != wl.payload(s as u32, c - 1) {
            return Err(format!("session {name}: last payload differs").into());
        }
    }
    drop(log);
    pg.close();
    drop(pg);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))?;
    waits_us.sort_unstable();
    Ok(Outcome {
        // Events appended in the measured window.
        events: counts.iter().sum::<u64>() - n as u64,
        secs,
        waits_us,
        syncs,
        counts,
    })
}

/// Reopen and check every session's length and last payload.
fn check(dir: &Path, wl: &Workload, counts: &[u64]) -> Result<()> {
    let store = Store::open(dir)?;
    for (s, &c) in counts.iter().enumerate() {
        let name = wl.name(s as u32);
        let len = store.session_len(name).unwrap_or(0);
        if len != c {
            return Err(format!("session {name}: {len} events after reopen, {c} appended").into());
        }
        if c > 0 {
            let e = store.read(name, c - 1)?;
            if e.payload != wl.payload(s as u32, c - 1) {
                return Err(format!("session {name}: last payload differs after reopen").into());
            }
        }
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let mut sessions = 1000usize;
    let mut seconds = 5.0f64;
    let mut runs = 3usize;
    let mut pg_url: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--sessions" => sessions = val()?.parse()?,
            "--seconds" => seconds = val()?.parse()?,
            "--runs" => runs = val()?.parse()?,
            "--pg" => pg_url = Some(val()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let wl = Arc::new(Workload::new(0x5EED, sessions));
    let modes = [
        Mode::Async { workers: 2 },
        Mode::Blocking { threads: 8 },
        Mode::Blocking { threads: 64 },
    ];
    let mut per_mode: Vec<Vec<(f64, u64, u64)>> = vec![Vec::new(); modes.len()];
    for r in 0..runs {
        for (m, mode) in modes.iter().enumerate() {
            let o = match &pg_url {
                Some(url) => run_pg(*mode, &wl, url, "turnstone_async_waits", seconds)?,
                None => {
                    let dir = sys::bench_tempdir("turnstone-async-");
                    run(*mode, &wl, dir.path(), seconds)?
                }
            };
            let eps = o.events as f64 / o.secs;
            let p50 = sys::percentile(&o.waits_us, 50.0);
            let p99 = sys::percentile(&o.waits_us, 99.0);
            let active = o.counts.iter().filter(|c| **c > 0).count();
            println!(
                "{}",
                json!({
                    "run": r, "mode": mode.name(), "sessions": sessions,
                    "sessions_that_appended": active,
                    "durable_events_per_s": eps.round(), "waits": o.waits_us.len(),
                    "wait_p50_us": p50, "wait_p99_us": p99,
                    "backend": if pg_url.is_some() { "postgres" } else { "embedded" },
                    "fdatasyncs_or_commits": o.syncs,
                    "loadavg_1m": sys::loadavg().map(|l| l.0),
                })
            );
            per_mode[m].push((eps, p50, p99));
        }
    }
    let base = median(per_mode[0].iter().map(|x| x.0).collect());
    let backend = if pg_url.is_some() {
        "turnstone-pg"
    } else {
        "the embedded store"
    };
    println!("\nmedians of {runs} runs, {sessions} sessions, {seconds} s each, on {backend}:");
    println!("| mode | durable events/s | ÷ async | wait p50 ms | wait p99 ms |");
    println!("|---|---:|---:|---:|---:|");
    for (m, mode) in modes.iter().enumerate() {
        let eps = median(per_mode[m].iter().map(|x| x.0).collect());
        let p50 = median(per_mode[m].iter().map(|x| x.1 as f64).collect());
        let p99 = median(per_mode[m].iter().map(|x| x.2 as f64).collect());
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} |",
            mode.name(),
            eps,
            eps / base,
            p50 / 1000.0,
            p99 / 1000.0
        );
    }
    Ok(())
}
