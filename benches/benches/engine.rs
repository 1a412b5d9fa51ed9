//! Criterion micro-benchmarks of the engine: `cargo bench -p turnstone-benches`.
//!
//! - `frame`: encode / decode (with checksum) of one frame, 80 B to 64 KiB.
//! - `append`: `Store::append` without a durability wait (write-behind).
//! - `session_append`: `Session::append` of the fleet workload's typed
//!   events (`typed::typed_event`, 24-event turns over 256 sessions) without
//!   a durability wait: the session layer's CPU per event on top of the
//!   store's (the events are built outside the timing).
//! - `group_commit`: T threads, each appends 1 KiB then waits for it to be
//!   durable; throughput is durable appends per second for 1, 4, 16, 64.
//! - `index_lookup`: `Store::read(session, seq)` of a random event, in a
//!   sealed (mapped) segment and in the active segment.
//! - `derive_messages`: a 100k-event session; one call after one append vs a
//!   full rebuild (`Session::open` + derive) vs the rebuild after a replace.
//! - `session_open_100k`: `Session::open` of a 100k-event session with a
//!   fresh state snapshot (FORMAT.md §17) vs the fold from seq 0 (a
//!   read-only open with the snapshot moved aside, which writes none), and
//!   the open from the snapshot plus the first derive (which reads the
//!   surface's messages from the log).
//! - `reopen`: open a large store (`TURNSTONE_BENCH_REOPEN_MB`, default 1024)
//!   with and without its index checkpoint.
//!
//! Stores live in temporary directories under `TURNSTONE_BENCH_DIR` (default:
//! the system temp dir) and are removed at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{
    black_box, criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use turnstone::frame::{decode_frame, encode_frame, Salt};
use turnstone::session::{ContentBlock, Registry, Session, SurfaceOp, UserMessage};
use turnstone::{Options, SegmentId, SessionId, Store};
use turnstone_benches::typed::{compactable_prefix, fill_session};
use turnstone_benches::workload::{mix, Workload};

use turnstone_benches::sys::bench_tempdir as tempdir;

fn frame(c: &mut Criterion) {
    let salt = Salt {
        store_id: [7; 16],
        segment: SegmentId(1),
    };
    let mut g = c.benchmark_group("frame");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    for size in [80usize, 1024, 4096, 65536] {
        let payload = vec![b'x'; size];
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf = Vec::with_capacity(size + 64);
        g.bench_with_input(BenchmarkId::new("encode", size), &payload, |b, p| {
            b.iter(|| {
                buf.clear();
                encode_frame(&mut buf, &salt, SessionId(3), 6, 0, 42, black_box(p));
                black_box(buf.len())
            })
        });
        let mut enc = Vec::new();
        encode_frame(&mut enc, &salt, SessionId(3), 6, 0, 42, &payload);
        g.bench_with_input(BenchmarkId::new("decode", size), &enc, |b, e| {
            b.iter(|| decode_frame(black_box(e), &salt).expect("valid frame"))
        });
    }
    g.finish();
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    for size in [100usize, 1024] {
        let dir = tempdir("turnstone-bench-append-");
        let store = Store::open(dir.path()).expect("open");
        let names: Vec<String> = (0..256).map(|i| format!("session-{i}")).collect();
        let payload = vec![b'a'; size];
        let mut i = 0usize;
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("no_sync", size), |b| {
            b.iter_custom(|iters| {
                let t0 = Instant::now();
                for _ in 0..iters {
                    store
                        .append(&names[i % names.len()], 6, 0, &payload)
                        .expect("append");
                    i += 1;
                }
                let dt = t0.elapsed();
                // Drain the write-behind buffer outside the timing, so the
                // next sample does not pay for (or queue behind) this one.
                store.sync().expect("sync");
                dt
            })
        });
        store.close().expect("close");
    }
    g.finish();
}

fn session_append(c: &mut Criterion) {
    let mut g = c.benchmark_group("session_append");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    let dir = tempdir("turnstone-bench-session-append-");
    let store = Arc::new(Store::open(dir.path()).expect("open"));
    let sessions = 256u32;
    let wl = Workload::new(1, sessions as usize);
    let reg = Arc::new(Registry::new());
    let mut handles: Vec<Session> = (0..sessions)
        .map(|s| Session::create(store.clone(), wl.name(s), reg.clone()).expect("create"))
        .collect();
    let mut next = vec![0u64; sessions as usize];
    let mut turn = 0usize;
    g.throughput(Throughput::Elements(1));
    g.bench_function("fleet_mix", |b| {
        b.iter_custom(|iters| {
            let mut batch = Vec::with_capacity(iters as usize);
            for _ in 0..iters {
                let s = turn % sessions as usize;
                turn += 1;
                batch.push((
                    s,
                    turnstone_benches::typed::typed_event(&wl, s as u32, next[s]),
                ));
                next[s] += 1;
            }
            let t0 = Instant::now();
            for (s, e) in batch {
                e.append_to(&mut handles[s]).expect("append");
            }
            let dt = t0.elapsed();
            store.sync().expect("sync");
            dt
        })
    });
    g.finish();
    drop(handles);
    if let Ok(store) = Arc::try_unwrap(store) {
        store.close().expect("close");
    }
}

fn group_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("group_commit");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1));
    for threads in [1usize, 4, 16, 64] {
        let dir = tempdir("turnstone-bench-commit-");
        let store = Store::open(dir.path()).expect("open");
        let payload = vec![b'c'; 1024];
        g.bench_function(BenchmarkId::new("durable_1KiB_appends", threads), |b| {
            b.iter_custom(|iters| {
                let per = iters.div_ceil(threads as u64).max(1);
                let t0 = Instant::now();
                std::thread::scope(|s| {
                    for t in 0..threads {
                        let store = &store;
                        let payload = &payload;
                        s.spawn(move || {
                            let name = format!("writer-{t}");
                            for _ in 0..per {
                                let a = store.append(&name, 6, 0, payload).expect("append");
                                store.wait_durable(a.end).expect("durable");
                            }
                        });
                    }
                });
                // Scale to the iterations criterion asked for.
                t0.elapsed()
                    .mul_f64(iters as f64 / (per * threads as u64) as f64)
            })
        });
        store.close().expect("close");
    }
    g.finish();
}

fn index_lookup(c: &mut Criterion) {
    const SESSIONS: u64 = 64;
    const EVENTS: u64 = 4000;
    let dir = tempdir("turnstone-bench-index-");
    let opts = || Options {
        segment_bytes: 8 << 20,
        ..Options::default()
    };
    let names: Vec<String> = (0..SESSIONS).map(|i| format!("session-{i}")).collect();
    {
        let store = Store::open_with(dir.path(), opts()).expect("open");
        let payload = vec![b'i'; 200];
        for _ in 0..EVENTS {
            for n in &names {
                store.append(n, 6, 0, &payload).expect("append");
            }
        }
        store.close().expect("close");
    }
    let store = Store::open_with(dir.path(), opts()).expect("reopen");
    let mut g = c.benchmark_group("index_lookup");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .throughput(Throughput::Elements(1));
    // The first 75% of every session lies in sealed segments, the last 1% in
    // the active one.
    for (label, lo, hi) in [
        ("sealed_segment", 0, EVENTS * 3 / 4),
        ("active_segment", EVENTS - EVENTS / 100, EVENTS),
    ] {
        let picks: Vec<(usize, u64)> = (0..4096u64)
            .map(|i| {
                let r = mix(i ^ 0x1D);
                ((r % SESSIONS) as usize, lo + (r >> 32) % (hi - lo).max(1))
            })
            .collect();
        let mut i = 0;
        g.bench_function(BenchmarkId::new("read_by_seq", label), |b| {
            b.iter(|| {
                let (s, seq) = picks[i % picks.len()];
                i += 1;
                black_box(store.read(&names[s], seq).expect("read"))
            })
        });
    }
    g.finish();
    store.close().expect("close");
}

fn derive_messages(c: &mut Criterion) {
    const EVENTS: u64 = 100_000;
    let dir = tempdir("turnstone-bench-derive-");
    let store = Arc::new(Store::open(dir.path()).expect("open"));
    let wl = Workload::new(1, 1);
    let name = wl.name(0).to_string();
    fill_session(&store, &name, &wl, 0, EVENTS).expect("fill");
    let reg = Arc::new(Registry::new());
    let mut s = Session::open(store.clone(), &name, reg.clone()).expect("open session");
    s.derive_messages();
    // The open wrote a state snapshot; the full rebuild below folds from
    // seq 0 (`session_open_100k` measures the open from a snapshot).
    let snap = turnstone::session::internals::state_snapshot_path(dir.path(), &name);
    std::fs::remove_file(&snap).expect("remove the state snapshot");
    let mut g = c.benchmark_group("derive_messages_100k");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat);
    // One call after one append. The append (untimed) costs far more than
    // the call, so each sample times at most 1000 real (append, derive)
    // pairs and scales the mean to the iterations criterion asked for.
    let mut n = 0u64;
    g.bench_function("after_one_append", |b| {
        b.iter_custom(|iters| {
            let real = iters.min(1000);
            let mut timed = Duration::ZERO;
            for _ in 0..real {
                n += 1;
                s.append(
                    UserMessage {
                        content: vec![ContentBlock::text(format!("follow-up {n}"))],
                    },
                    SurfaceOp::Append,
                )
                .expect("append");
                let t0 = Instant::now();
                black_box(s.derive_messages().len());
                timed += t0.elapsed();
            }
            timed.mul_f64(iters as f64 / real as f64)
        })
    });
    // The list rebuilt from the per-node cache after a replace (compaction).
    let mut k = 0u64;
    g.bench_function("after_replace", |b| {
        b.iter_custom(|iters| {
            let real = iters.min(50);
            let mut timed = Duration::ZERO;
            for _ in 0..real {
                k += 1;
                let end = compactable_prefix(&s, &wl, 0, EVENTS);
                s.compact(&format!("c{k}"), 0, end, "summary")
                    .expect("compact");
                let t0 = Instant::now();
                black_box(s.derive_messages().len());
                timed += t0.elapsed();
            }
            timed.mul_f64(iters as f64 / real as f64)
        })
    });
    g.measurement_time(Duration::from_secs(8));
    g.bench_function("full_rebuild_open_and_derive", |b| {
        b.iter(|| {
            let mut fresh =
                Session::open_read_only(store.clone(), &name, reg.clone()).expect("open");
            black_box(fresh.derive_messages().len())
        })
    });
    g.finish();
}

fn session_open(c: &mut Criterion) {
    const EVENTS: u64 = 100_000;
    let dir = tempdir("turnstone-bench-session-open-");
    let store = Arc::new(Store::open(dir.path()).expect("open"));
    let wl = Workload::new(1, 1);
    let name = wl.name(0).to_string();
    fill_session(&store, &name, &wl, 0, EVENTS).expect("fill");
    let reg = Arc::new(Registry::new());
    let mut s = Session::open(store.clone(), &name, reg.clone()).expect("open session");
    // The open wrote a snapshot (its whole fold was past none); make sure.
    s.save_state_snapshot().expect("snapshot");
    let len = s.len();
    drop(s);
    let snap = turnstone::session::internals::state_snapshot_path(dir.path(), &name);
    let aside = snap.with_extension("aside");
    let mut g = c.benchmark_group("session_open_100k");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .sample_size(20)
        .sampling_mode(SamplingMode::Flat);
    g.bench_function("open_from_fresh_snapshot", |b| {
        b.iter(|| {
            let s = Session::open(store.clone(), &name, reg.clone()).expect("open");
            assert_eq!(s.restored_from_snapshot(), Some(len));
            black_box(s.len())
        })
    });
    g.bench_function("read_only_open_from_fresh_snapshot", |b| {
        b.iter(|| {
            let s = Session::open_read_only(store.clone(), &name, reg.clone()).expect("open");
            black_box(s.len())
        })
    });
    g.bench_function("open_from_snapshot_then_derive", |b| {
        b.iter(|| {
            let mut s = Session::open(store.clone(), &name, reg.clone()).expect("open");
            black_box(s.derive_messages().len())
        })
    });
    std::fs::rename(&snap, &aside).expect("move snapshot aside");
    g.bench_function("read_only_open_from_seq_0", |b| {
        b.iter(|| {
            let s = Session::open_read_only(store.clone(), &name, reg.clone()).expect("open");
            assert_eq!(s.restored_from_snapshot(), None);
            black_box(s.len())
        })
    });
    g.bench_function("read_only_open_from_seq_0_then_derive", |b| {
        b.iter(|| {
            let mut s = Session::open_read_only(store.clone(), &name, reg.clone()).expect("open");
            black_box(s.derive_messages().len())
        })
    });
    g.finish();
}

/// The large store of the reopen benchmark (removed when dropped).
fn big_store() -> (tempfile::TempDir, u64) {
    let mb: u64 = std::env::var("TURNSTONE_BENCH_REOPEN_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let dir = tempdir("turnstone-bench-reopen-");
    let store = Store::open(dir.path()).expect("open");
    let wl = Workload::new(1, 256);
    let mut next = vec![0u64; 256];
    let mut buf = Vec::new();
    let mut bytes = 0u64;
    let t0 = Instant::now();
    'fill: loop {
        for s in 0..256u32 {
            let seq = next[s as usize];
            wl.payload_into(s, seq, &mut buf);
            store
                .append(wl.name(s), wl.kind(s, seq).code(), 0, &buf)
                .expect("append");
            next[s as usize] += 1;
            bytes += turnstone::frame::frame_padded_len(buf.len()) as u64;
            if bytes >= mb << 20 {
                break 'fill;
            }
        }
    }
    store.close().expect("close");
    eprintln!(
        "reopen store: {} MiB, {} events, built in {:.1} s",
        bytes >> 20,
        next.iter().sum::<u64>(),
        t0.elapsed().as_secs_f64()
    );
    (dir, bytes)
}

fn reopen(c: &mut Criterion) {
    let (dir, bytes) = big_store();
    let bytes = &bytes;
    let mut g = c.benchmark_group("reopen");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(*bytes));
    for (label, checkpoints) in [("with_checkpoint", true), ("without_checkpoint", false)] {
        g.bench_function(
            BenchmarkId::new(label, format!("{}MiB", bytes >> 20)),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let opts = Options {
                            checkpoints,
                            ..Options::default()
                        };
                        let t0 = Instant::now();
                        let store = Store::open_with(dir.path(), opts).expect("reopen");
                        total += t0.elapsed();
                        assert_eq!(store.recovery_report().checkpoint_used, checkpoints);
                        store.close().expect("close");
                    }
                    total
                })
            },
        );
    }
    g.finish();
}

criterion_group!(
    benches,
    frame,
    append,
    session_append,
    group_commit,
    index_lookup,
    derive_messages,
    session_open,
    reopen
);
criterion_main!(benches);
