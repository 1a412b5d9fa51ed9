//! Segment collection under a steady fleet with deletions (issue 17 §1):
//! every round writes `--sessions` new sessions of `--events` events of
//! `--event-bytes` bytes (one thread per session, each event its own
//! durable append, like an agent turn) and deletes the sessions written
//! `--keep-rounds` rounds before. Three stores in the same run alternate
//! round by round:
//! - `online`: the store stays open for every round and a
//!   `turnstone::session::gc::Background` collector runs beside the writers
//!   (every `--gc-interval-ms`, I/O bounded by `--gc-rate-mib` MiB/s);
//! - `never`: the store stays open, nothing is collected (the foreground
//!   baseline for `online`);
//! - `on_demand`: each round reopens the store, and after closing it runs
//!   `turnstone::session::gc::collect` (the `turnstone gc` path).
//!
//! Prints one JSON object: per run the disk bytes (segment files) right
//! after the last round, after the background collector's next two runs
//! (`settled`), and their peak right after any round, over the live bytes
//! (payloads of the sessions not deleted), foreground events/s (median over
//! rounds) and durability wait p50/p99 (over every append of every round),
//! and the collections' throughput (bytes read and written, and bytes
//! freed, per second of collection).
//!
//! `cargo run --release -p turnstone-benches --bin gc_fleet -- [--rounds N]
//! [--sessions N] [--events N] [--event-bytes N] [--keep-rounds N]
//! [--segment-mib N] [--gc-interval-ms N] [--gc-rate-mib N]`

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use turnstone::gc::CollectOptions;
use turnstone::session::gc::{Background, BackgroundOptions};
use turnstone::{Options, Store};

struct Args {
    rounds: usize,
    sessions: usize,
    events: usize,
    event_bytes: usize,
    keep_rounds: usize,
    segment_bytes: u32,
    gc_interval_ms: u64,
    gc_rate_mib: u64,
    /// `--recycle N`: also run `online` with `Options::recycle_segments = N`
    /// (as `online_recycled`); 0: not run.
    recycle: usize,
}

fn arg(name: &str, default: usize) -> usize {
    let v: Vec<String> = std::env::args().collect();
    v.iter()
        .position(|a| a == name)
        .and_then(|i| v.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        // Free files (recycling) are disk the store holds, as segments are.
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.ends_with(".tseg") || n.ends_with(".tseg.free")
        })
        // The collector may remove a file between the listing and the stat:
        // a file gone by then holds no bytes.
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Online,
    /// Online, with recycled segments (`--recycle N`).
    OnlineRecycled,
    Never,
    OnDemand,
}

struct RunState {
    dir: std::path::PathBuf,
    mode: Mode,
    /// The store kept open across rounds (online, never).
    open: Option<Arc<Store>>,
    bg: Option<Background>,
    events_per_s: Vec<f64>,
    waits_us: Vec<u64>,
    peak_disk: u64,
    gc_examined_mb_s: Vec<f64>,
    gc_freed_mb_s: Vec<f64>,
    gc_seconds: Vec<f64>,
}

fn open(st: &RunState, a: &Args) -> Arc<Store> {
    Arc::new(
        Store::open_with(
            &st.dir,
            Options {
                segment_bytes: a.segment_bytes,
                recycle_segments: if st.mode == Mode::OnlineRecycled {
                    a.recycle
                } else {
                    0
                },
                ..Default::default()
            },
        )
        .unwrap(),
    )
}

fn round(st: &mut RunState, a: &Args, r: usize) {
    let store = match &st.open {
        Some(s) => s.clone(),
        None if st.mode == Mode::OnDemand => open(st, a),
        None => {
            let s = open(st, a);
            st.open = Some(s.clone());
            if matches!(st.mode, Mode::Online | Mode::OnlineRecycled) {
                st.bg = Some(
                    Background::start(
                        s.clone(),
                        BackgroundOptions {
                            interval: std::time::Duration::from_millis(a.gc_interval_ms),
                            collect: CollectOptions {
                                rate_bytes_per_sec: Some(a.gc_rate_mib << 20),
                                ..Default::default()
                            },
                            ..Default::default()
                        },
                    )
                    .unwrap(),
                );
            }
            s
        }
    };
    let payload = vec![b'x'; a.event_bytes];
    let started = Instant::now();
    let threads: Vec<_> = (0..a.sessions)
        .map(|s| {
            let store = store.clone();
            let payload = payload.clone();
            let name = format!("r{r}-s{s}");
            let events = a.events;
            std::thread::spawn(move || {
                let mut waits = Vec::with_capacity(events);
                for _ in 0..events {
                    let ap = store.append(&name, 5, 0, &payload).unwrap();
                    let t = Instant::now();
                    store.wait_durable(ap.end).unwrap();
                    waits.push(t.elapsed().as_micros() as u64);
                }
                waits
            })
        })
        .collect();
    for t in threads {
        st.waits_us.extend(t.join().unwrap());
    }
    let secs = started.elapsed().as_secs_f64();
    st.events_per_s
        .push((a.sessions * a.events) as f64 / secs.max(1e-9));
    if r >= a.keep_rounds {
        for s in 0..a.sessions {
            turnstone::session::delete(&store, &format!("r{}-s{s}", r - a.keep_rounds)).unwrap();
        }
    }
    if st.mode != Mode::OnDemand {
        st.peak_disk = st.peak_disk.max(dir_bytes(&st.dir));
        return;
    }
    Arc::into_inner(store).unwrap().close().unwrap();
    {
        let t = Instant::now();
        let rep = turnstone::session::gc::collect(&st.dir, &CollectOptions::default()).unwrap();
        let s = t.elapsed().as_secs_f64().max(1e-9);
        st.gc_seconds.push(s);
        st.gc_examined_mb_s
            .push(rep.bytes_io as f64 / s / (1 << 20) as f64);
        st.gc_freed_mb_s
            .push(rep.bytes_reclaimed as f64 / s / (1 << 20) as f64);
    }
    st.peak_disk = st.peak_disk.max(dir_bytes(&st.dir));
}

fn percentile(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let a = Args {
        rounds: arg("--rounds", 24),
        sessions: arg("--sessions", 32),
        events: arg("--events", 64),
        event_bytes: arg("--event-bytes", 4096),
        keep_rounds: arg("--keep-rounds", 2),
        segment_bytes: arg("--segment-mib", 8) as u32 * (1 << 20),
        gc_interval_ms: arg("--gc-interval-ms", 100) as u64,
        gc_rate_mib: arg("--gc-rate-mib", 64) as u64,
        recycle: arg("--recycle", 0),
    };
    let tmp = tempfile::tempdir().unwrap();
    let name = |m: Mode| match m {
        Mode::Online => "online",
        Mode::OnlineRecycled => "online_recycled",
        Mode::Never => "never",
        Mode::OnDemand => "on_demand",
    };
    let mut runs: Vec<RunState> = [
        Mode::Online,
        Mode::OnlineRecycled,
        Mode::Never,
        Mode::OnDemand,
    ]
    .into_iter()
    .filter(|m| *m != Mode::OnlineRecycled || a.recycle > 0)
    .map(|mode| RunState {
        dir: tmp.path().join(name(mode)),
        mode,
        open: None,
        bg: None,
        waits_us: Vec::new(),
        peak_disk: 0,
        events_per_s: Vec::new(),
        gc_examined_mb_s: Vec::new(),
        gc_freed_mb_s: Vec::new(),
        gc_seconds: Vec::new(),
    })
    .collect();
    for r in 0..a.rounds {
        for st in runs.iter_mut() {
            round(st, &a, r);
        }
    }
    let written = (a.rounds * a.sessions * a.events * a.event_bytes) as u64;
    let live = (a.keep_rounds.min(a.rounds) * a.sessions * a.events * a.event_bytes) as u64;
    let mut out = serde_json::Map::new();
    out.insert("written_payload_bytes".into(), written.into());
    out.insert("live_payload_bytes".into(), live.into());
    out.insert(
        "written_over_live".into(),
        (written as f64 / live as f64).into(),
    );
    for st in runs.iter_mut() {
        let disk = dir_bytes(&st.dir);
        // The background collector's view: after two more of its runs
        // (the last round's deletions are not collected yet at `disk`).
        let settled = match &st.bg {
            Some(bg) => {
                let from = bg.stats().runs;
                let deadline = Instant::now() + std::time::Duration::from_secs(60);
                while bg.stats().runs < from + 2 && Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                dir_bytes(&st.dir)
            }
            None => disk,
        };
        if let Some(bg) = st.bg.take() {
            let stats = bg.stop();
            let busy = (stats.busy_us as f64 / 1e6).max(1e-9);
            st.gc_seconds.push(busy / stats.runs.max(1) as f64);
            st.gc_examined_mb_s
                .push(stats.bytes_io as f64 / busy / (1 << 20) as f64);
            st.gc_freed_mb_s
                .push(stats.bytes_reclaimed as f64 / busy / (1 << 20) as f64);
            out.insert(
                format!("{}_collector", name(st.mode)),
                serde_json::to_value(&stats).unwrap(),
            );
        }
        let mut recycled = 0;
        if let Some(s) = st.open.take() {
            recycled = s.stats().segments_recycled;
            Arc::into_inner(s).unwrap().close().unwrap();
        }
        out.insert(
            name(st.mode).into(),
            serde_json::json!({
                "disk_bytes": disk,
                "disk_over_live": disk as f64 / live as f64,
                "settled_disk_over_live": settled as f64 / live as f64,
                "peak_disk_over_live": st.peak_disk as f64 / live as f64,
                "wait_p50_us": percentile(&mut st.waits_us, 0.5),
                "wait_p99_us": percentile(&mut st.waits_us, 0.99),
                "events_per_s_median": median(&mut st.events_per_s),
                "gc_seconds_median": median(&mut st.gc_seconds),
                "gc_io_mib_per_s_median": median(&mut st.gc_examined_mb_s),
                "gc_freed_mib_per_s_median": median(&mut st.gc_freed_mb_s),
                "segments_recycled": recycled,
            }),
        );
    }
    println!("{}", serde_json::Value::Object(out));
}
