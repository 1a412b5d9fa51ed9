//! Criterion benchmarks of the session views (issue 5, item 6):
//! `cargo bench -p turnstone-benches --bench views`.
//!
//! - `projection_1M`: read a projection (`TokenMeter`, `RunStatus`) of a
//!   1,000,000-event session through `snapshot::read` with a fresh snapshot
//!   file covering all but the last 1,000 events (load the snapshot, fold the
//!   tail) vs folding all 1,000,000 events from seq 0 (the same read path
//!   without a snapshot file).
//! - `fork`: `Store::fork` of a ~100k-event and a ~1k-event session (the fork
//!   call; the fork plus the first read of the child's last event), and the
//!   session layer's `session::fork`, which also scans the prefix for the
//!   last closed turn. Every child stays in the store.
//! - `search_100k`: `SearchIndex::search(term, 20)` over a fleet store (256
//!   sessions, ~100k events) for a term in every user message and for a
//!   term planted in a handful of tool results, and `search_session` of the
//!   common term in one session. The index build time (one
//!   `SearchIndex::update` over the whole store) is printed once.
//!
//! The session mix: turns of `turn/start`, user message, 20 assistant chunks,
//! assistant message (with usage), tool call, tool result (~4 KB, 5% 64 KB),
//! a `todo/update` every 4th turn, `turn/end`, and a compaction every 64
//! turns (~26 events and ~10 KB per turn). Peak RSS is printed after each
//! part.
//!
//! - `append_1KiB`: one `user/message` of ~1 KiB of text appended to a live
//!   session (no durability wait), three ways: typed (`Session::append`),
//!   as a JSON value (`append_json`, what the Python package calls) and as
//!   JSON text (`append_json_text`, what the Node package calls; the text is
//!   written as given).
//!
//! Every bench checks its result before measuring (snapshot state == state
//! folded from 0, fork child length, hit counts), so a broken bench fails.
//! Stores live in temporary directories under `TURNSTONE_BENCH_DIR` (default:
//! the system temp dir) and are removed at the end of each bench function.

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use serde_json::json;
use turnstone::session::internals::{encode_core, encode_plugin, KIND_CODE_PLUGIN};
use turnstone::session::SearchIndex;
use turnstone::session::{
    self, snapshot, CompactionEnd, CompactionStart, CompactionSummary, ContentBlock, CoreKind,
    EventData, Projection, Registry, RunStatus, SurfaceOp, TokenMeter, TurnEnd, TurnEndReason,
    TurnStart, Usage, UserMessage,
};
use turnstone::Store;
use turnstone_benches::sys::proc_status_kib;
use turnstone_benches::typed::{typed_event, TypedEvent};
use turnstone_benches::workload::{Workload, TURN_LEN};

use turnstone_benches::sys::bench_tempdir as tempdir;

/// Peak and current resident memory of the process so far (Linux).
fn rss(what: &str) {
    if let (Some(hwm), Some(now)) = (proc_status_kib("VmHWM"), proc_status_kib("VmRSS")) {
        eprintln!("{what}: peak RSS {} MiB, now {} MiB", hwm >> 10, now >> 10);
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register("todo/update", false)
        .expect("register todo/update");
    r
}

/// Word in every user message (the common search term).
const COMMON: &str = "cargo";
/// Word planted in a few tool results (the rare search term).
const RARE: &str = "xylophone";
/// Turns between compactions (each compaction replaces the whole surface
/// with a summary, as an agent does when its context fills up).
const COMPACT_EVERY: u64 = 64;

/// One encoded event: frame kind, flags, payload, and what the views
/// should make of it.
struct Ev {
    kind: u16,
    flags: u16,
    payload: Vec<u8>,
    input_tokens: u64,
}

/// A realistic agent session: turns of `turn/start`, the fleet turn of
/// `typed.rs` (user message, 20 assistant chunks, assistant message with
/// usage, tool call, tool result), a `todo/update` every 4th turn,
/// `turn/end`; a compaction (start, summary, replacing user message, end)
/// every [`COMPACT_EVERY`] turns.
struct TurnGen<'a> {
    wl: &'a Workload,
    s: u32,
    /// Workload seq where this session's first whole turn starts.
    base: u64,
    turn: u64,
    /// Surface nodes so far.
    nodes: u64,
}

impl<'a> TurnGen<'a> {
    fn new(wl: &'a Workload, s: u32) -> Self {
        TurnGen {
            wl,
            s,
            base: (TURN_LEN - wl.position(s, 0)) % TURN_LEN,
            turn: 0,
            nodes: 0,
        }
    }

    fn core<D: EventData>(d: &D, op: Option<SurfaceOp>) -> Ev {
        Ev {
            kind: D::KIND.code(),
            flags: 0,
            payload: encode_core(d, op),
            input_tokens: 0,
        }
    }

    /// The events of the next turn; `plant` puts [`RARE`] in its tool result.
    fn next_turn(&mut self, plant: bool, out: &mut Vec<Ev>) {
        let t = self.turn;
        self.turn += 1;
        let turn_id = format!("turn-{t}");
        out.push(Self::core(
            &TurnStart {
                turn_id: turn_id.clone(),
            },
            None,
        ));
        for i in 0..TURN_LEN {
            let ev = match typed_event(self.wl, self.s, self.base + t * TURN_LEN + i) {
                TypedEvent::User(mut d) => {
                    d.content.insert(
                        0,
                        ContentBlock::text(format!(
                            "please run {COMMON} test in module m{} and fix what fails",
                            t % 50
                        )),
                    );
                    TypedEvent::User(d)
                }
                TypedEvent::Assistant(mut d) => {
                    d.usage = Some(Usage::new(2000 + (t % COMPACT_EVERY) * 1500, 250 + t % 100));
                    TypedEvent::Assistant(d)
                }
                TypedEvent::Result(mut d) if plant => {
                    d.content
                        .push(ContentBlock::text(format!("warning: {RARE} not found")));
                    TypedEvent::Result(d)
                }
                other => other,
            };
            let (input_tokens, surface) = match &ev {
                TypedEvent::Assistant(d) => (d.usage.as_ref().map_or(0, |u| u.input_tokens), true),
                TypedEvent::User(_) | TypedEvent::Result(_) => (0, true),
                TypedEvent::Chunk(_) | TypedEvent::Call(_) => (0, false),
            };
            self.nodes += surface as u64;
            let (kind, payload) = ev.encode();
            out.push(Ev {
                kind,
                flags: 0,
                payload,
                input_tokens,
            });
        }
        if t % 4 == 3 {
            out.push(Ev {
                kind: KIND_CODE_PLUGIN,
                flags: 0,
                payload: encode_plugin(
                    "todo/update",
                    &json!({"id": format!("{}", (t / 4) % 16), "text": format!("fix module m{}", t % 50), "done": t % 8 == 7}),
                ),
                input_tokens: 0,
            });
        }
        out.push(Self::core(
            &TurnEnd {
                turn_id,
                reason: TurnEndReason::Completed,
            },
            None,
        ));
        if (t + 1).is_multiple_of(COMPACT_EVERY) {
            let id = format!("compaction-{t}");
            let summary = format!("summary of turns up to {t}: modules fixed, tests pass");
            out.push(Self::core(
                &CompactionStart {
                    compaction_id: id.clone(),
                },
                None,
            ));
            out.push(Self::core(
                &CompactionSummary {
                    compaction_id: id.clone(),
                    text: summary.clone(),
                },
                None,
            ));
            out.push(Self::core(
                &UserMessage {
                    content: vec![ContentBlock::text(summary)],
                },
                Some(SurfaceOp::Replace {
                    start: 0,
                    end: self.nodes,
                }),
            ));
            out.push(Self::core(&CompactionEnd { compaction_id: id }, None));
            self.nodes = 1;
        }
    }
}

/// What a fill appended.
#[derive(Debug, Default, Clone, Copy)]
struct Filled {
    events: u64,
    bytes: u64,
    turns_completed: u64,
    input_tokens: u64,
    /// Turns whose tool result carries [`RARE`].
    planted: u64,
}

impl Filled {
    fn add(&mut self, store: &Store, name: &str, e: &Ev) {
        store
            .append(name, e.kind, e.flags, &e.payload)
            .expect("append");
        self.events += 1;
        self.bytes += e.payload.len() as u64;
        self.input_tokens += e.input_tokens;
        self.turns_completed += (e.kind == CoreKind::TurnEnd.code()) as u64;
    }
}

/// Append to `name` until it holds `n` events; `whole_turns` rounds up to
/// the end of the turn instead of cutting it.
fn fill(store: &Store, name: &str, g: &mut TurnGen, n: u64, whole_turns: bool, f: &mut Filled) {
    let mut buf = Vec::new();
    while f.events < n {
        buf.clear();
        g.next_turn(false, &mut buf);
        for e in &buf {
            if !whole_turns && f.events >= n {
                break;
            }
            f.add(store, name, e);
        }
    }
}

/// A projection read through `snapshot::read` under a name that has no
/// snapshot file: the same read path, folding from seq 0.
struct FromZero<P>(P, &'static str);

impl<P: Projection> Projection for FromZero<P> {
    type State = P::State;
    fn name(&self) -> &'static str {
        self.1
    }
    fn version(&self) -> u32 {
        self.0.version()
    }
    fn fold(&self, state: &Self::State, event: &session::SessionEvent) -> Option<Self::State> {
        self.0.fold(state, event)
    }
}

fn projections(c: &mut Criterion) {
    const EVENTS: u64 = 1_000_000;
    const TAIL: u64 = 1_000;
    const NAME: &str = "long-session";
    let dir = tempdir("turnstone-bench-views-projection-");
    let store = Store::open(dir.path()).expect("open");
    let reg = registry();
    let wl = Workload::new(5, 1);
    let mut g = TurnGen::new(&wl, 0);
    let mut filled = Filled::default();

    let t0 = Instant::now();
    fill(&store, NAME, &mut g, EVENTS - TAIL, false, &mut filled);
    store.sync().expect("sync");
    let built = t0.elapsed();
    // Snapshots of the first EVENTS - TAIL events (refresh folds from 0 and
    // writes the snapshot once the log is durable).
    let t1 = Instant::now();
    let tm = snapshot::refresh(&store, &reg, NAME, &TokenMeter).expect("refresh token-meter");
    let rs = snapshot::refresh(&store, &reg, NAME, &RunStatus).expect("refresh run-status");
    let refreshed = t1.elapsed();
    assert_eq!(tm.snapshot_covered, None);
    assert_eq!(tm.folded, EVENTS - TAIL);
    assert_eq!(rs.folded, EVENTS - TAIL);
    // The tail the snapshots do not cover.
    fill(&store, NAME, &mut g, EVENTS, false, &mut filled);
    store.sync().expect("sync");
    assert_eq!(store.session_len(NAME), Some(EVENTS));
    eprintln!(
        "projection store: {EVENTS} events ({} turns completed), {} MiB of payload, built in {:.1} s; \
         two snapshots of {} events written (refresh: fold from 0 + write) in {:.1} s",
        filled.turns_completed,
        filled.bytes >> 20,
        built.as_secs_f64(),
        EVENTS - TAIL,
        refreshed.as_secs_f64()
    );

    let mut grp = c.benchmark_group("projection_1M");
    grp.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(200));

    // TokenMeter.
    let snap = snapshot::read(&store, &reg, NAME, &TokenMeter).expect("read token-meter");
    let zero = FromZero(TokenMeter, "token-meter-from-0");
    let full = snapshot::read(&store, &reg, NAME, &zero).expect("fold token-meter");
    assert_eq!(
        snap.snapshot_covered,
        Some(EVENTS - TAIL),
        "{:?}",
        snap.discarded
    );
    assert_eq!(snap.folded, TAIL);
    assert_eq!((full.snapshot_covered, full.folded), (None, EVENTS));
    assert_eq!(
        snap.state, full.state,
        "token-meter: snapshot + tail != from 0"
    );
    assert_eq!(full.state.input_tokens, filled.input_tokens);
    assert!(!full.state.nodes.is_empty() && full.state.context_tokens > 0);
    bench_pair(
        &mut grp,
        "token_meter",
        &store,
        &reg,
        NAME,
        &TokenMeter,
        &zero,
    );

    // RunStatus.
    let snap = snapshot::read(&store, &reg, NAME, &RunStatus).expect("read run-status");
    let zero = FromZero(RunStatus, "run-status-from-0");
    let full = snapshot::read(&store, &reg, NAME, &zero).expect("fold run-status");
    assert_eq!(
        snap.snapshot_covered,
        Some(EVENTS - TAIL),
        "{:?}",
        snap.discarded
    );
    assert_eq!((full.snapshot_covered, full.folded), (None, EVENTS));
    assert_eq!(
        snap.state, full.state,
        "run-status: snapshot + tail != from 0"
    );
    assert_eq!(full.state.turns_completed, filled.turns_completed);
    assert_eq!(full.state.todos.len(), 16);
    bench_pair(
        &mut grp,
        "run_status",
        &store,
        &reg,
        NAME,
        &RunStatus,
        &zero,
    );

    grp.finish();
    rss("after projection_1M");
    store.close().expect("close");
    drop(dir);
}

fn bench_pair<P: Projection>(
    grp: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    label: &str,
    store: &Store,
    reg: &Registry,
    name: &str,
    p: &P,
    zero: &FromZero<P>,
) {
    grp.measurement_time(Duration::from_secs(2));
    grp.bench_function(BenchmarkId::new(label, "snapshot_plus_1k_tail"), |b| {
        b.iter(|| {
            let r = snapshot::read(store, reg, name, p).expect("read");
            debug_assert!(r.snapshot_covered.is_some());
            black_box(r.folded)
        })
    });
    // Seconds per call: criterion runs the 10 samples of one iteration each
    // (it warns that it needs more time than this; that is intended).
    grp.measurement_time(Duration::from_millis(500));
    grp.bench_function(BenchmarkId::new(label, "from_seq_0"), |b| {
        b.iter(|| {
            let r = snapshot::read(store, reg, name, zero).expect("fold");
            black_box(r.folded)
        })
    });
}

fn fork(c: &mut Criterion) {
    let dir = tempdir("turnstone-bench-views-fork-");
    let store = Store::open(dir.path()).expect("open");
    let wl = Workload::new(9, 2);
    let mut sources = Vec::new();
    for (s, (label, n)) in [("1k", 1_000u64), ("100k", 100_000)]
        .into_iter()
        .enumerate()
    {
        let name = format!("source-{label}");
        let mut g = TurnGen::new(&wl, s as u32);
        let mut f = Filled::default();
        fill(&store, &name, &mut g, n, true, &mut f);
        sources.push((label, name, f.events));
    }
    store.sync().expect("sync");
    for (_, name, len) in &sources {
        // Checks: the child holds exactly the source's events, and the
        // session layer's fork cuts at the end (every turn is closed).
        let child = format!("{name}.check");
        store.fork(name, *len, &child).expect("fork");
        assert_eq!(store.session_len(&child), Some(*len));
        let (a, b) = (
            store.read(name, len - 1).expect("read"),
            store.read(&child, len - 1).expect("read child"),
        );
        assert_eq!((a.kind, a.payload), (b.kind, b.payload));
        let f = session::fork(&store, name, None, Some(&format!("{name}.check2"))).expect("fork");
        assert_eq!(f.upto, *len);
        assert_eq!(store.session_len(&f.child), Some(*len));
    }
    eprintln!(
        "fork sources: {}",
        sources
            .iter()
            .map(|(l, _, n)| format!("{l} = {n} events"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // Every fork stays in the store (8 bytes of index per inherited event),
    // so the measurement times are short: a few thousand forks of the 1k
    // session, a few hundred of the 100k one (~0.5 GB of index in all).
    let mut grp = c.benchmark_group("fork");
    grp.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(50));
    let mut next = 0u64;
    for (label, name, len) in &sources {
        let len = *len;
        grp.measurement_time(Duration::from_millis(if len < 10_000 { 50 } else { 150 }));
        grp.bench_function(BenchmarkId::new("store_fork", label), |b| {
            b.iter(|| {
                next += 1;
                store
                    .fork(name, len, &format!("{name}.f{next}"))
                    .expect("fork")
            })
        });
        grp.bench_function(BenchmarkId::new("store_fork_and_read_last", label), |b| {
            b.iter(|| {
                next += 1;
                let child = format!("{name}.f{next}");
                store.fork(name, len, &child).expect("fork");
                store.read(&child, len - 1).expect("read child")
            })
        });
        grp.bench_function(BenchmarkId::new("session_fork", label), |b| {
            b.iter(|| {
                next += 1;
                let f = session::fork(&store, name, None, Some(&format!("{name}.f{next}")))
                    .expect("fork");
                debug_assert_eq!(f.upto, len);
                f
            })
        });
        rss(&format!("fork {label}: {next} forks so far"));
    }
    grp.finish();
    store.close().expect("close");
    drop(dir);
    rss("after fork (store closed)");
}

fn search(c: &mut Criterion) {
    const SESSIONS: u32 = 256;
    const TURNS: u64 = 15;
    /// Every PLANT_EVERY-th turn of the fleet (in append order) gets RARE.
    const PLANT_EVERY: u64 = 500;
    let dir = tempdir("turnstone-bench-views-search-");
    let store = Store::open(dir.path()).expect("open");
    let reg = registry();
    let wl = Workload::new(11, SESSIONS as usize);
    let mut gens: Vec<TurnGen> = (0..SESSIONS).map(|s| TurnGen::new(&wl, s)).collect();
    let mut f = Filled::default();
    let mut buf = Vec::new();
    let mut global_turn = 0u64;
    // Round-robin by turn, as a fleet interleaves its sessions.
    for _ in 0..TURNS {
        for (s, g) in gens.iter_mut().enumerate() {
            let plant = global_turn % PLANT_EVERY == PLANT_EVERY / 2;
            f.planted += plant as u64;
            global_turn += 1;
            buf.clear();
            g.next_turn(plant, &mut buf);
            for e in &buf {
                f.add(&store, wl.name(s as u32), e);
            }
        }
    }
    store.sync().expect("sync");

    let t0 = Instant::now();
    let mut ix = SearchIndex::open(&store).expect("open index");
    let read = ix.update(&store, &reg).expect("index");
    let build = t0.elapsed();
    assert_eq!(read, f.events);
    let t1 = Instant::now();
    assert_eq!(ix.update(&store, &reg).expect("update"), 0);
    let noop = t1.elapsed();
    eprintln!(
        "search index: {} sessions, {} events ({} MiB of payload) indexed in {:.2} s = {:.1} µs/event \
         ({:.0} events/s); a no-op update {:.2} ms",
        SESSIONS,
        f.events,
        f.bytes >> 20,
        build.as_secs_f64(),
        build.as_secs_f64() * 1e6 / f.events as f64,
        f.events as f64 / build.as_secs_f64(),
        noop.as_secs_f64() * 1e3
    );

    let common = ix.search(COMMON, 20).expect("search");
    assert_eq!(common.len(), 20, "common term: {} hits", common.len());
    assert!(common.iter().all(|h| h.snippet.contains(COMMON)));
    assert!((1..=20).contains(&f.planted), "planted {}", f.planted);
    let rare = ix.search(RARE, 20).expect("search");
    assert_eq!(rare.len() as u64, f.planted, "rare term hits");
    assert!(rare.iter().all(|h| h.snippet.contains(RARE)));
    let one = ix
        .search_session(&store, wl.name(3), COMMON, 20)
        .expect("search one session");
    assert_eq!(one.len() as u64, TURNS, "one user message per turn");

    let mut grp = c.benchmark_group("search_100k");
    grp.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    grp.bench_function(BenchmarkId::new("top20", "common_term"), |b| {
        b.iter(|| black_box(ix.search(COMMON, 20).expect("search").len()))
    });
    grp.bench_function(BenchmarkId::new("top20", "rare_term"), |b| {
        b.iter(|| black_box(ix.search(RARE, 20).expect("search").len()))
    });
    grp.bench_function(BenchmarkId::new("top20_one_session", "common_term"), |b| {
        b.iter(|| {
            black_box(
                ix.search_session(&store, wl.name(3), COMMON, 20)
                    .expect("search")
                    .len(),
            )
        })
    });
    grp.finish();
    rss("after search_100k");
    drop(ix);
    store.close().expect("close");
    drop(dir);
}

fn append_1kib(c: &mut Criterion) {
    use turnstone::session::{ContentBlock, Registry, Session, SurfaceOp, UserMessage};
    let text = "x".repeat(1000);
    let json_text = serde_json::json!({"content": [{"type": "text", "text": text}]}).to_string();
    let mut grp = c.benchmark_group("append_1KiB");
    grp.measurement_time(Duration::from_secs(2));
    for how in ["json_text", "json_value", "typed"] {
        // Each way on its own store, after the previous one's bytes reached
        // the disk: a store that has taken gigabytes appends slower
        // (write-back), which would favour whichever runs first.
        let _ = std::process::Command::new("sync").status();
        let dir = tempdir("turnstone-bench-views-append-");
        let store = std::sync::Arc::new(turnstone::Store::open(dir.path()).expect("open"));
        // A fresh session every 10,000 appends: a session keeps its
        // model-visible messages in memory, and millions of iterations into
        // one session would measure page faults.
        let mut n = 0u64;
        let mut total = 0u64;
        let new_session = |n: u64| {
            Session::create(
                store.clone(),
                &format!("{how}-{n}"),
                std::sync::Arc::new(Registry::new()),
            )
            .expect("create")
        };
        let mut s = new_session(0);
        grp.bench_function(how, |b| {
            b.iter(|| {
                if s.len() == 10_000 {
                    s.flush().expect("flush");
                    n += 1;
                    s = new_session(n);
                }
                total += 1;
                match how {
                    "typed" => s.append(
                        UserMessage {
                            content: vec![ContentBlock::text(text.clone())],
                        },
                        SurfaceOp::Append,
                    ),
                    "json_value" => s.append_json(
                        "user/message",
                        serde_json::from_str(&json_text).expect("json"),
                        Some(SurfaceOp::Append),
                    ),
                    _ => s.append_json_text(
                        "user/message",
                        black_box(&json_text),
                        Some(SurfaceOp::Append),
                    ),
                }
                .expect("append")
            })
        });
        assert_eq!(n * 10_000 + s.len(), total, "{how}: every append counted");
        s.flush().expect("flush");
        drop(s);
        store.shutdown().expect("shutdown");
    }
    grp.finish();
}

criterion_group!(benches, projections, fork, search, append_1kib);
criterion_main!(benches);
