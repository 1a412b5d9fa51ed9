//! Segment collection under a steady fleet with deletions (issue 17 §1):
//! every round opens the store, writes `--sessions` new sessions of
//! `--events` events of `--event-bytes` bytes (each event its own durable
//! append group, like an agent turn), deletes the sessions written
//! `--keep-rounds` rounds before, closes the store and (in the collected
//! run) runs `turnstone::session::gc::collect`. Two stores in the same run,
//! one collected and one never collected, alternate round by round.
//!
//! Prints one JSON object: per run the disk bytes (segment files) and live
//! bytes (payloads of the sessions not deleted) after the last round, the
//! ratio, foreground events/s (median over rounds), and for the collected
//! run the median collection throughput (bytes of sealed segments examined
//! per second, and bytes freed per second).
//!
//! `cargo run --release -p turnstone-benches --bin gc_fleet -- [--rounds N]
//! [--sessions N] [--events N] [--event-bytes N] [--keep-rounds N]`

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use turnstone::gc::CollectOptions;
use turnstone::session::delete;
use turnstone::{Options, Store};

struct Args {
    rounds: usize,
    sessions: usize,
    events: usize,
    event_bytes: usize,
    keep_rounds: usize,
    segment_bytes: u32,
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
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tseg"))
        .map(|e| e.metadata().unwrap().len())
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

struct RunState {
    dir: std::path::PathBuf,
    collect: bool,
    events_per_s: Vec<f64>,
    gc_examined_mb_s: Vec<f64>,
    gc_freed_mb_s: Vec<f64>,
    gc_seconds: Vec<f64>,
}

fn round(st: &mut RunState, a: &Args, r: usize) {
    let store = Arc::new(
        Store::open_with(
            &st.dir,
            Options {
                segment_bytes: a.segment_bytes,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let payload = vec![b'x'; a.event_bytes];
    let started = Instant::now();
    let threads: Vec<_> = (0..a.sessions)
        .map(|s| {
            let store = store.clone();
            let payload = payload.clone();
            let name = format!("r{r}-s{s}");
            let events = a.events;
            std::thread::spawn(move || {
                for _ in 0..events {
                    let ap = store.append(&name, 5, 0, &payload).unwrap();
                    store.wait_durable(ap.end).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    st.events_per_s
        .push((a.sessions * a.events) as f64 / secs.max(1e-9));
    if r >= a.keep_rounds {
        for s in 0..a.sessions {
            delete::delete(&store, &format!("r{}-s{s}", r - a.keep_rounds)).unwrap();
        }
    }
    Arc::into_inner(store).unwrap().close().unwrap();
    if st.collect {
        let t = Instant::now();
        let rep = turnstone::session::gc::collect(&st.dir, &CollectOptions::default()).unwrap();
        let s = t.elapsed().as_secs_f64().max(1e-9);
        st.gc_seconds.push(s);
        st.gc_examined_mb_s
            .push(rep.bytes_before as f64 / s / (1 << 20) as f64);
        st.gc_freed_mb_s
            .push(rep.bytes_reclaimed as f64 / s / (1 << 20) as f64);
    }
}

fn main() {
    let a = Args {
        rounds: arg("--rounds", 24),
        sessions: arg("--sessions", 32),
        events: arg("--events", 64),
        event_bytes: arg("--event-bytes", 4096),
        keep_rounds: arg("--keep-rounds", 2),
        segment_bytes: arg("--segment-mib", 8) as u32 * (1 << 20),
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut runs: Vec<RunState> = [true, false]
        .into_iter()
        .map(|collect| RunState {
            dir: tmp.path().join(if collect { "collected" } else { "plain" }),
            collect,
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
        let name = if st.collect {
            "collected"
        } else {
            "never_collected"
        };
        out.insert(
            name.into(),
            serde_json::json!({
                "disk_bytes": disk,
                "disk_over_live": disk as f64 / live as f64,
                "events_per_s_median": median(&mut st.events_per_s),
                "gc_seconds_median": median(&mut st.gc_seconds),
                "gc_examined_mib_per_s_median": median(&mut st.gc_examined_mb_s),
                "gc_freed_mib_per_s_median": median(&mut st.gc_freed_mb_s),
            }),
        );
    }
    println!("{}", serde_json::Value::Object(out));
}
