//! `cold_reads`: loading one session of a large fleet store with the page
//! cache dropped (issue 21), against SQLite holding the same events.
//!
//! ```text
//! cargo run --release -p turnstone-benches --bin cold_reads -- [--mb 300]
//!     [--sessions 256] [--runs 3] [--dir BASE] [--session K] [--regroup]
//!     [--background-regroup] [--json]
//! ```
//!
//! `--json` adds one last line: a JSON object of the medians (what
//! `compare` reads).
//!
//! With `--regroup` the turnstone store is rewritten by `turnstone gc
//! --regroup` (FORMAT.md §14.4) after it is built: each session's frames
//! then sit together in the compacted segments (the locality rewrite).
//! With `--background-regroup` a `session::gc::Background` collector with
//! `regroup: true` runs while the store is written (every 50 ms, no I/O
//! bound), regrouping each segment as it is sealed: the steady state of a
//! store that regroups in the background (the active segment's tail stays
//! interleaved).
//!
//! Builds a turnstone store of `--mb` MiB of frames whose sessions append in
//! turn (every session's frames interleaved with everyone else's, the worst
//! case for locality and what a fleet of concurrent agents writes), and a
//! SQLite database (`events` with primary key (session, seq), the schema of
//! `compare`) holding the same payloads. Then, per run and per store: open
//! it (turnstone: the index is loaded; SQLite: a fresh connection, no page
//! cache of its own), drop the page cache, and load session `K` whole,
//! touching every payload (turnstone: `Store::visit_range`; SQLite: one
//! `SELECT … WHERE session = ? ORDER BY seq`). Reports, as medians of the
//! runs, the wall time and the bytes the process read from the device
//! (`read_bytes` of `/proc/self/io`, cross-checked against the device's
//! sectors read), and their ratio to the session's own frame bytes; and the
//! time of the same load again at once through the same handle (warm: what
//! the first load left in the page cache and in the process), and through
//! a new handle once every file of both stores is in the page cache (hot: a
//! store just written).
//!
//! The page cache is dropped with `echo 3 > /proc/sys/vm/drop_caches` after
//! `sync` where that is allowed (root), else with
//! `posix_fadvise(POSIX_FADV_DONTNEED)` on every file of both stores; the
//! method used is printed.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use turnstone::Store;
use turnstone_benches::stores::{sqlite_connect, SQLITE_SCHEMA};
use turnstone_benches::sys::{self, Device};
use turnstone_benches::workload::Workload;

type Result<T> = turnstone_benches::stores::Result<T>;

struct Args {
    mb: u64,
    sessions: usize,
    runs: usize,
    base: PathBuf,
    session: u32,
    seed: u64,
    regroup: bool,
    background_regroup: bool,
    json: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: cold_reads [--mb MIB] [--sessions N] [--runs N] [--dir BASE] \
         [--session K] [--seed S] [--regroup] [--background-regroup] [--json]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        mb: 300,
        sessions: 256,
        runs: 3,
        base: std::env::temp_dir(),
        session: 7,
        seed: 1,
        regroup: false,
        background_regroup: false,
        json: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--mb" => a.mb = val().parse().unwrap_or_else(|_| usage()),
            "--sessions" => a.sessions = val().parse().unwrap_or_else(|_| usage()),
            "--runs" => a.runs = val().parse().unwrap_or_else(|_| usage()),
            "--dir" => a.base = PathBuf::from(val()),
            "--session" => a.session = val().parse().unwrap_or_else(|_| usage()),
            "--seed" => a.seed = val().parse().unwrap_or_else(|_| usage()),
            "--regroup" => a.regroup = true,
            "--background-regroup" => a.background_regroup = true,
            "--json" => a.json = true,
            _ => usage(),
        }
    }
    if a.sessions == 0 || a.session as usize >= a.sessions || a.runs == 0 {
        usage();
    }
    a
}

/// One cold load: wall time and bytes read.
#[derive(Debug, Clone, Copy)]
struct Load {
    ms: f64,
    /// `read_bytes` of `/proc/self/io` during the load.
    process_bytes: u64,
    /// Sectors the device read during the load × 512 (every process).
    device_bytes: Option<u64>,
    events: u64,
    payload_bytes: u64,
    /// The same load again right after, through the same handle (warm:
    /// what the first load left in the page cache and the process).
    warm_ms: f64,
    /// The same load through a new handle once every file of both stores
    /// is in the page cache (hot, as for a store just written).
    hot_ms: f64,
}

fn main() {
    if let Err(e) = run(&parse_args()) {
        eprintln!("cold_reads: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<()> {
    std::fs::create_dir_all(&a.base)?;
    let dir = tempfile::Builder::new()
        .prefix("turnstone-cold-")
        .tempdir_in(&a.base)?;
    let device = Device::of(&a.base);
    let wl = Workload::new(a.seed, a.sessions);
    let ts_dir = dir.path().join("turnstone");
    let sql_path = dir.path().join("events.sqlite");
    println!(
        "cold_reads: {} MiB, {} sessions, session {}, {} runs, in {} (device {}, read_ahead_kb {})",
        a.mb,
        a.sessions,
        a.session,
        a.runs,
        a.base.display(),
        device.as_ref().map_or("?".into(), |d| d.name.clone()),
        device
            .as_ref()
            .and_then(Device::read_ahead_kb)
            .map_or("?".into(), |k| k.to_string()),
    );
    let t0 = Instant::now();
    let (events_per_session, frame_bytes, total) = build(a, &wl, &ts_dir, &sql_path)?;
    println!(
        "built both stores in {:.0} s: {} events, {:.0} MiB of frames; session {} has {} events, \
         {} frame bytes ({:.2} MiB)",
        t0.elapsed().as_secs_f64(),
        total.0,
        total.1 as f64 / (1 << 20) as f64,
        a.session,
        events_per_session,
        frame_bytes,
        frame_bytes as f64 / (1 << 20) as f64,
    );
    if a.regroup {
        let t = Instant::now();
        let r = turnstone::session::gc::collect(
            &ts_dir,
            &turnstone::gc::CollectOptions {
                regroup: true,
                ..Default::default()
            },
        )?;
        println!(
            "regrouped: {} range(s) rewritten, {} files removed, {:.0} MiB live, in {:.1} s",
            r.ranges_rewritten,
            r.segment_files_removed,
            r.bytes_live as f64 / (1 << 20) as f64,
            t.elapsed().as_secs_f64()
        );
    }
    let name = wl.name(a.session).to_string();
    let mut ts = Vec::new();
    let mut sql = Vec::new();
    for r in 0..a.runs {
        let t = load_turnstone(&ts_dir, &sql_path, &name, device.as_ref())?;
        let s = load_sqlite(&ts_dir, &sql_path, &name, device.as_ref())?;
        for (store, l) in [("turnstone", &t), ("sqlite", &s)] {
            println!(
                "run {}: {store:9} {:8.1} ms (warm {:6.1} ms, hot {:6.1} ms), read {:>11} B \
                 (device {:>11} B) for {} events, {} payload bytes",
                r + 1,
                l.ms,
                l.warm_ms,
                l.hot_ms,
                l.process_bytes,
                l.device_bytes.map_or("?".into(), |b| b.to_string()),
                l.events,
                l.payload_bytes,
            );
        }
        if t.events != events_per_session || s.events != events_per_session {
            return Err("a store did not return every event of the session".into());
        }
        ts.push(t);
        sql.push(s);
    }
    let med = |v: &[Load], f: fn(&Load) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    println!(
        "\nmedians of {} (cache dropped with {}):",
        a.runs,
        drop_method()
    );
    println!(
        "| store | cold load ms | read bytes | read / session frame bytes | device bytes | \
         warm load ms | hot load ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (store, v) in [("turnstone", &ts), ("sqlite", &sql)] {
        let bytes = med(v, |l| l.process_bytes as f64);
        println!(
            "| {store} | {:.1} | {:.0} | {:.2} | {} | {:.1} | {:.1} |",
            med(v, |l| l.ms),
            bytes,
            bytes / frame_bytes as f64,
            if v.iter().all(|l| l.device_bytes.is_some()) {
                format!("{:.0}", med(v, |l| l.device_bytes.unwrap_or(0) as f64))
            } else {
                "?".into()
            },
            med(v, |l| l.warm_ms),
            med(v, |l| l.hot_ms),
        );
    }
    let ratio = med(&ts, |l| l.ms) / med(&sql, |l| l.ms);
    let bytes_ratio = med(&ts, |l| l.process_bytes as f64) / frame_bytes as f64;
    println!(
        "\nturnstone / sqlite cold load time: {ratio:.2} (target <= 5: {}); \
         turnstone bytes read / session frame bytes: {bytes_ratio:.2} (target <= 4: {})",
        if ratio <= 5.0 { "met" } else { "missed" },
        if bytes_ratio <= 4.0 { "met" } else { "missed" },
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "mb": a.mb,
                "session_frame_bytes": frame_bytes,
                "turnstone_cold_ms": med(&ts, |l| l.ms),
                "sqlite_cold_ms": med(&sql, |l| l.ms),
                "turnstone_read_bytes": med(&ts, |l| l.process_bytes as f64),
                "sqlite_read_bytes": med(&sql, |l| l.process_bytes as f64),
                "turnstone_over_sqlite_ms": ratio,
                "read_over_session_bytes": bytes_ratio,
                "regroup": a.regroup,
                "background_regroup": a.background_regroup,
                "cache_drop": drop_method(),
            })
        );
    }
    Ok(())
}

/// Build both stores; returns (events of one session, frame bytes of
/// session `a.session`, (events, frame bytes) of the whole store).
fn build(
    a: &Args,
    wl: &Workload,
    ts_dir: &Path,
    sql_path: &Path,
) -> Result<(u64, u64, (u64, u64))> {
    let target = a.mb << 20;
    let store = std::sync::Arc::new(Store::open(ts_dir)?);
    let bg = if a.background_regroup {
        Some(turnstone::session::gc::Background::start(
            store.clone(),
            turnstone::session::gc::BackgroundOptions {
                interval: std::time::Duration::from_millis(50),
                collect: turnstone::gc::CollectOptions {
                    regroup: true,
                    rate_bytes_per_sec: None,
                    ..Default::default()
                },
                ..Default::default()
            },
        )?)
    } else {
        None
    };
    let conn = sqlite_connect(sql_path)?;
    // Loading speed only: the reads measured do not depend on it.
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.execute_batch(SQLITE_SCHEMA)?;
    let mut next = 0u64;
    let mut buf = Vec::new();
    let (mut events, mut bytes, mut own) = (0u64, 0u64, 0u64);
    'fill: loop {
        let tx = conn.unchecked_transaction()?;
        {
            let mut ins = tx.prepare_cached(
                "INSERT INTO events(session, seq, kind, payload) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for s in 0..a.sessions as u32 {
                wl.payload_into(s, next, &mut buf);
                let kind = wl.kind(s, next).code();
                store.append(wl.name(s), kind, 0, &buf)?;
                ins.execute(rusqlite::params![wl.name(s), next as i64, kind, &buf])?;
                let frame = turnstone::frame::frame_padded_len(buf.len()) as u64;
                events += 1;
                bytes += frame;
                if s == a.session {
                    own += frame;
                }
            }
        }
        tx.commit()?;
        next += 1;
        if bytes >= target {
            break 'fill;
        }
    }
    if let Some(bg) = bg {
        let st = bg.stop();
        println!(
            "background regroup while writing: {} runs ({} productive), {:.0} MiB of I/O in {:.1} s, {} errors{}",
            st.runs,
            st.productive,
            st.bytes_io as f64 / (1 << 20) as f64,
            st.busy_us as f64 / 1e6,
            st.errors,
            st.last_error.map(|e| format!(" (last: {e})")).unwrap_or_default()
        );
    }
    std::sync::Arc::into_inner(store)
        .ok_or("the store is still shared")?
        .close()?;
    conn.pragma_update(None, "wal_checkpoint", "TRUNCATE")?;
    drop(conn);
    Ok((next, own, (events, bytes)))
}

fn drop_method() -> &'static str {
    if can_drop_caches() {
        "sync; echo 3 > /proc/sys/vm/drop_caches"
    } else {
        "posix_fadvise(POSIX_FADV_DONTNEED) on every file of both stores"
    }
}

fn can_drop_caches() -> bool {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .is_ok()
}

/// Drop the page cache: all of it if allowed, else every file of both
/// stores (they share one parent directory; `sys::drop_page_cache`).
/// (Pages a live map holds survive either way: both loads open their files
/// after the drop.)
fn drop_cache(ts_dir: &Path, sql_path: &Path) -> Result<()> {
    let parent = ts_dir.parent().unwrap_or(ts_dir);
    debug_assert_eq!(sql_path.parent(), Some(parent));
    sys::drop_page_cache(parent)?;
    Ok(())
}

/// Every file of both stores.
fn store_files(ts_dir: &Path, sql_path: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(ts_dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.push(sql_path.to_path_buf());
    Ok(files)
}

/// Read every file of both stores, so that the page cache holds them.
fn cache_files(ts_dir: &Path, sql_path: &Path) -> Result<()> {
    for f in store_files(ts_dir, sql_path)? {
        std::hint::black_box(std::fs::read(f)?);
    }
    Ok(())
}

/// Run `load` with the cache cold, measuring it; then again (warm).
fn measure(
    ts_dir: &Path,
    sql_path: &Path,
    device: Option<&Device>,
    mut load: impl FnMut() -> Result<(u64, u64)>,
) -> Result<Load> {
    drop_cache(ts_dir, sql_path)?;
    let p0 = sys::process_read_bytes().ok_or("no /proc/self/io")?;
    let d0 = device.and_then(Device::bytes_read);
    let t0 = Instant::now();
    let (events, payload_bytes) = load()?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let p1 = sys::process_read_bytes().ok_or("no /proc/self/io")?;
    let d1 = device.and_then(Device::bytes_read);
    let t1 = Instant::now();
    load()?;
    let warm_ms = t1.elapsed().as_secs_f64() * 1e3;
    Ok(Load {
        ms,
        process_bytes: p1 - p0,
        device_bytes: d0.zip(d1).map(|(a, b)| b - a),
        events,
        payload_bytes,
        warm_ms,
        hot_ms: 0.0,
    })
}

fn load_turnstone(
    ts_dir: &Path,
    sql_path: &Path,
    name: &str,
    dev: Option<&Device>,
) -> Result<Load> {
    let visit = |store: &Store| -> Result<(u64, u64)> {
        let mut sum = 0u64;
        let mut payload = 0u64;
        let n = store.visit_range(name, 0..u64::MAX, |e| {
            // Touch every byte, as an export would.
            sum = sum.wrapping_add(e.payload.iter().map(|b| *b as u64).sum::<u64>());
            payload += e.payload.len() as u64;
            ControlFlow::Continue(())
        })?;
        std::hint::black_box(sum);
        Ok((n, payload))
    };
    // Open first (the index checkpoint is read here): the load measured is
    // the session's read; its segments are mapped or opened only by it.
    let store = Store::open(ts_dir)?;
    let mut l = measure(ts_dir, sql_path, dev, || visit(&store))?;
    store.close()?;
    // Hot: a new handle on a store whose files are all cached.
    let store = Store::open(ts_dir)?;
    cache_files(ts_dir, sql_path)?;
    let t = Instant::now();
    visit(&store)?;
    l.hot_ms = t.elapsed().as_secs_f64() * 1e3;
    store.close()?;
    Ok(l)
}

fn load_sqlite(ts_dir: &Path, sql_path: &Path, name: &str, dev: Option<&Device>) -> Result<Load> {
    let load = |conn: &rusqlite::Connection| -> Result<(u64, u64)> {
        let mut stmt = conn
            .prepare_cached("SELECT kind, payload FROM events WHERE session = ?1 ORDER BY seq")?;
        let mut rows = stmt.query([name])?;
        let (mut n, mut payload, mut sum) = (0u64, 0u64, 0u64);
        while let Some(row) = rows.next()? {
            let _kind: i64 = row.get(0)?;
            let p = row.get_ref(1)?.as_blob()?;
            sum = sum.wrapping_add(p.iter().map(|b| *b as u64).sum::<u64>());
            payload += p.len() as u64;
            n += 1;
        }
        std::hint::black_box(sum);
        Ok((n, payload))
    };
    let conn = sqlite_connect(sql_path)?;
    let mut l = measure(ts_dir, sql_path, dev, || load(&conn))?;
    drop(conn);
    let conn = sqlite_connect(sql_path)?;
    cache_files(ts_dir, sql_path)?;
    let t = Instant::now();
    load(&conn)?;
    l.hot_ms = t.elapsed().as_secs_f64() * 1e3;
    drop(conn);
    Ok(l)
}
