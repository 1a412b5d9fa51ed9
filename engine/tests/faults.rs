//! Failed fsyncs, failed writes, a full disk and the store lock
//! (invariants 1, 8 and 9 of ARCHITECTURE.md).
//!
//! An fsync error poisons the store: nothing after it is acknowledged and a
//! reopen finds every acknowledged event (the page cache is not trusted). A
//! failed write keeps its batch, in order, for a retry from the engine's own
//! buffer: a waiter asks for one retry and sees `WriteFailed` only if that
//! fails too. ENOSPC on a write is a failed write.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::vfs::Vfs;
use turnstone::{Error, LogPos, Options, ProblemKind, RecoveryMode, Store};

use common::{cut_power_and_drop, dir, payload_for, seg, sim_opts};

const SEGMENT: u32 = 64 * 1024;

/// Appended events per session (payload by seq) and the acknowledged count.
#[derive(Default, Debug)]
struct Model {
    appended: BTreeMap<String, Vec<Vec<u8>>>,
    acked: BTreeMap<String, u64>,
    pending: Vec<(String, u64, LogPos)>,
}

impl Model {
    fn append(
        &mut self,
        store: &Store,
        session: &str,
        payload: Vec<u8>,
    ) -> turnstone::Result<LogPos> {
        let a = store.append(session, 1, 0, &payload)?;
        let v = self.appended.entry(session.to_string()).or_default();
        assert_eq!(a.seq.0, v.len() as u64, "dense seq from append");
        v.push(payload);
        self.pending.push((session.to_string(), a.seq.0, a.end));
        Ok(a.end)
    }
    fn ack(&mut self, pos: LogPos) {
        let acked = &mut self.acked;
        self.pending.retain(|(s, seq, end)| {
            if *end <= pos {
                let a = acked.entry(s.clone()).or_default();
                *a = (*a).max(seq + 1);
                false
            } else {
                true
            }
        });
    }
    /// Every session is a prefix of what was appended holding every
    /// acknowledged event; returns the recovered lengths.
    fn check(&self, store: &Store, ctx: &str) -> BTreeMap<String, u64> {
        let mut lens = BTreeMap::new();
        for info in store.sessions() {
            let want = self
                .appended
                .get(&info.name)
                .unwrap_or_else(|| panic!("{ctx}: invented session {:?}", info.name));
            assert!(
                info.len <= want.len() as u64,
                "{ctx}: {}: {} events, {} appended",
                info.name,
                info.len,
                want.len()
            );
            let evs = store.read_range(&info.name, 0..info.len).unwrap();
            for (i, e) in evs.iter().enumerate() {
                assert!(e.payload == want[i], "{ctx}: {} seq {i} differs", info.name);
            }
            lens.insert(info.name, info.len);
        }
        for (s, n) in &self.acked {
            let len = lens.get(s).copied().unwrap_or(0);
            assert!(len >= *n, "{ctx}: {s}: {len} recovered, {n} acknowledged");
        }
        lens
    }
}

fn opts(sim: &SimVfs, checkpoints: bool) -> Options {
    Options {
        checkpoints,
        ..sim_opts(sim, SEGMENT)
    }
}

fn is_poisoned<T: std::fmt::Debug>(r: turnstone::Result<T>) -> bool {
    matches!(r, Err(Error::Poisoned { .. }))
}

/// Fail the n-th fdatasync for many n: it may hit a batch, a segment
/// creation or a checkpoint. Whatever it hits, nothing acknowledged is lost,
/// and after a batch or segment fsync error the store refuses everything.
#[test]
fn fsync_failure_poisons_and_loses_nothing_acknowledged() {
    let mut poisoned_runs = 0;
    for nth in 1..40u64 {
        for crash in [true, false] {
            let ctx = format!("fsync #{nth} fails, crash {crash}");
            let sim = SimVfs::new();
            sim.set_faults(FaultPlan {
                fail_sync_nth: Some(nth),
                ..Default::default()
            });
            let store = Store::open_with(dir(), opts(&sim, true)).unwrap();
            let mut m = Model::default();
            let mut rng = StdRng::seed_from_u64(nth);
            let mut poisoned = false;
            for i in 0..120u64 {
                let s = format!("s{}", i % 3);
                let len = rng.gen_range(0..9000);
                let seq = m.appended.get(&s).map_or(0, |v| v.len() as u64);
                let res = m.append(&store, &s, payload_for(&s, seq, len));
                if poisoned {
                    assert!(matches!(res, Err(Error::Poisoned { .. })), "{ctx}: {res:?}");
                    continue;
                }
                let end = res.unwrap();
                if i % 3 == 2 {
                    match store.wait_durable(end) {
                        Ok(()) => m.ack(end),
                        Err(Error::Poisoned { op, .. }) => {
                            poisoned = true;
                            let durable = store.durable_pos();
                            assert!(durable < end, "{ctx}: {op}: durable {durable} >= {end}");
                            // Nothing after the failure is acknowledged...
                            assert!(is_poisoned(store.sync()), "{ctx}");
                            assert!(is_poisoned(store.wait_durable(end)), "{ctx}");
                            assert!(is_poisoned(store.append("s0", 1, 0, b"x")), "{ctx}");
                            assert!(is_poisoned(store.create_session("fresh")), "{ctx}");
                            assert_eq!(store.durable_pos(), durable, "{ctx}");
                        }
                        Err(e) => panic!("{ctx}: expected Poisoned, got {e}"),
                    }
                }
            }
            if poisoned {
                poisoned_runs += 1;
                assert!(store.close().is_err(), "{ctx}: close of a poisoned store");
            } else {
                // The failed fsync hit a checkpoint: not fatal, just retried
                // at the next roll or close.
                store.sync().unwrap();
                m.ack(LogPos(u64::MAX));
                drop(store);
            }
            if crash {
                sim.crash(nth);
            }
            let store = Store::open_with(dir(), opts(&sim, true))
                .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            for p in &store.recovery_report().problems {
                assert_eq!(p.kind, ProblemKind::TornTail, "{ctx}: {p:?}");
            }
            m.check(&store, &ctx);
            // The reopened store works: appends continue densely and stick.
            let a = store.append("s0", 1, 0, b"after").unwrap();
            assert_eq!(Some(a.seq.0 + 1), store.session_len("s0"), "{ctx}");
            store.close().unwrap();
            sim.crash(nth + 1000);
            let store = Store::open_with(dir(), opts(&sim, true)).unwrap();
            assert_eq!(
                store.read("s0", a.seq.0).unwrap().payload,
                b"after",
                "{ctx}"
            );
        }
    }
    assert!(poisoned_runs > 40, "{poisoned_runs}");
}

/// After an fsync error the written bytes are in the page cache but not on
/// disk (fsyncgate); the engine must neither acknowledge them nor later
/// "complete" them with another fsync of the same file.
#[test]
fn fsync_error_is_not_retried_into_a_false_acknowledgment() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    let a = store.append("s", 1, 0, b"durable").unwrap();
    store.wait_durable(a.end).unwrap();
    // Open: sync #0 (segment creation); the first batch: sync #1.
    sim.set_faults(FaultPlan {
        fail_sync_nth: Some(2),
        ..Default::default()
    });
    let b = store.append("s", 1, 0, b"lost").unwrap();
    assert!(is_poisoned(store.wait_durable(b.end)));
    // A later waiter on the same data gets the same answer, not a retry.
    let c = store.append("t", 1, 0, b"never");
    assert!(is_poisoned(c));
    assert!(is_poisoned(store.wait_durable(b.end)));
    assert!(store.durable_pos() < b.end);
    drop(store);
    sim.crash(1);
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    assert_eq!(store.session_len("s"), Some(1));
    assert_eq!(store.read("s", 0).unwrap().payload, b"durable");
    assert_eq!(store.session_len("t"), None);
}

/// Writes so far on a fresh simulator after `open` + one synced batch: the
/// segment header (#0) and that batch (#1).
fn store_with_one_batch(sim: &SimVfs, m: &mut Model) -> Store {
    let store = Store::open_with(dir(), opts(sim, false)).unwrap();
    let end = m.append(&store, "s", payload_for("s", 0, 100)).unwrap();
    store.wait_durable(end).unwrap();
    m.ack(end);
    store
}

#[test]
fn one_failed_write_is_retried_and_acknowledged() {
    let sim = SimVfs::new();
    let mut m = Model::default();
    let store = store_with_one_batch(&sim, &mut m);
    sim.set_faults(FaultPlan {
        fail_write_nth: Some(2),
        ..Default::default()
    });
    let e1 = m.append(&store, "s", payload_for("s", 1, 3000)).unwrap();
    let e2 = m.append(&store, "t", payload_for("t", 0, 10)).unwrap();
    // The waiter's one retry rewrites the batch from the engine's buffer.
    store.wait_durable(e2).unwrap();
    m.ack(e2);
    assert!(e1 < e2);
    assert_eq!(store.stats().write_failures, 1, "{:?}", store.stats());
    assert!(store.durable_pos() >= e2);
    cut_power_and_drop(&sim, store);
    sim.crash(7);
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    let lens = m.check(&store, "after retry");
    assert_eq!(lens.get("s"), Some(&2));
    assert_eq!(lens.get("t"), Some(&1));
}

/// While every write fails, sync returns `WriteFailed` (after its retry) and
/// nothing moves; appends queue up in order behind the failed batch. When the
/// fault clears, the next sync writes them all, in order.
#[test]
fn persistent_write_failure_fails_sync_until_cleared() {
    for clear in [true, false] {
        let ctx = format!("cleared {clear}");
        let sim = SimVfs::new();
        let mut m = Model::default();
        let store = store_with_one_batch(&sim, &mut m);
        let durable = store.durable_pos();
        sim.set_faults(FaultPlan {
            fail_all_writes: true,
            ..Default::default()
        });
        let c = m.append(&store, "s", payload_for("s", 1, 700)).unwrap();
        assert!(
            matches!(store.sync(), Err(Error::WriteFailed { .. })),
            "{ctx}"
        );
        // More appends are accepted (the store is not poisoned) and queue up.
        let d = m.append(&store, "s", payload_for("s", 2, 5000)).unwrap();
        let e = m.append(&store, "u", payload_for("u", 0, 1)).unwrap();
        assert!(c < d && d < e);
        assert!(matches!(
            store.wait_durable(d),
            Err(Error::WriteFailed { .. })
        ));
        assert!(matches!(store.sync(), Err(Error::WriteFailed { .. })));
        assert_eq!(
            store.durable_pos(),
            durable,
            "{ctx}: nothing counted durable"
        );
        assert!(store.stats().write_failures >= 4, "{:?}", store.stats());
        if clear {
            sim.set_faults(FaultPlan::default());
            let to = store.sync().unwrap();
            m.ack(to);
            assert!(store.durable_pos() >= e);
        }
        cut_power_and_drop(&sim, store);
        sim.crash(3);
        let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
        let lens = m.check(&store, &ctx);
        if clear {
            assert_eq!(lens.get("s"), Some(&3), "{ctx}");
            assert_eq!(lens.get("u"), Some(&1), "{ctx}");
        } else {
            // Never written: nothing of it may appear.
            assert_eq!(lens.get("s"), Some(&1), "{ctx}");
            assert_eq!(lens.get("u"), None, "{ctx}");
        }
    }
}

/// close() with writes failing reports the failure instead of hanging, and
/// a reopen has every acknowledged event.
#[test]
fn close_with_failing_writes_returns_the_error() {
    let sim = SimVfs::new();
    let mut m = Model::default();
    let store = store_with_one_batch(&sim, &mut m);
    sim.set_faults(FaultPlan {
        fail_all_writes: true,
        ..Default::default()
    });
    m.append(&store, "s", payload_for("s", 1, 10)).unwrap();
    assert!(matches!(store.close(), Err(Error::WriteFailed { .. })));
    sim.set_faults(FaultPlan::default());
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    assert!(!store.recovery_report().clean_shutdown);
    m.check(&store, "after failed close");
}

/// A full disk on a batch write is a failed write: retried, reported as
/// `WriteFailed`, and fine once space is back.
#[test]
fn enospc_on_write_behaves_like_a_failed_write() {
    let sim = SimVfs::new();
    let mut m = Model::default();
    let store = store_with_one_batch(&sim, &mut m);
    // Bytes written so far: the 64-byte segment header and the batches.
    let written = 64 + store.stats().bytes_written;
    sim.set_faults(FaultPlan {
        enospc_after_bytes: Some(written + 200),
        ..Default::default()
    });
    let small = m.append(&store, "s", payload_for("s", 1, 50)).unwrap();
    store.wait_durable(small).unwrap();
    m.ack(small);
    let big = m.append(&store, "s", payload_for("s", 2, 4000)).unwrap();
    match store.wait_durable(big) {
        Err(Error::WriteFailed { detail }) => {
            assert!(
                detail.contains("space") || detail.contains("28"),
                "{detail}"
            )
        }
        other => panic!("expected WriteFailed, got {other:?}"),
    }
    assert!(store.durable_pos() < big);
    sim.set_faults(FaultPlan::default());
    store.wait_durable(big).unwrap();
    m.ack(big);
    cut_power_and_drop(&sim, store);
    sim.crash(11);
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    assert_eq!(m.check(&store, "enospc").get("s"), Some(&3));
}

/// Fill most of segment 1 with acknowledged events, then append one that
/// needs a new segment while the disk has no room for its preallocation.
/// Returns the store, the next seq of "s" (acknowledged: `0..seq`) and the
/// end of the event that waits for the new segment.
fn enospc_at_roll(sim: &SimVfs, m: &mut Model) -> (Store, u64, LogPos) {
    let store = store_with_one_batch(sim, m);
    let mut seq = 1;
    while store.durable_pos().offset() < SEGMENT - 12_000 {
        let end = m.append(&store, "s", payload_for("s", seq, 5000)).unwrap();
        store.wait_durable(end).unwrap();
        m.ack(end);
        seq += 1;
    }
    let written = 64 + store.stats().bytes_written;
    sim.set_faults(FaultPlan {
        enospc_after_bytes: Some(written + 20_000),
        ..Default::default()
    });
    let end = m
        .append(&store, "s", payload_for("s", seq, 15_000))
        .unwrap();
    assert_eq!(end.segment().0, 2, "the event goes to a new segment");
    match store.wait_durable(end) {
        Err(Error::WriteFailed { detail }) => {
            assert!(detail.contains("preallocate segment"), "{detail}")
        }
        other => panic!("expected WriteFailed, got {other:?}"),
    }
    assert!(store.durable_pos() < end);
    (store, seq, end)
}

/// A full disk when a new segment is created (preallocation) is a failed
/// write, not a poisoned store; a power cut then keeps exactly the
/// acknowledged events (the half-made segment is a torn creation).
#[test]
fn enospc_when_rolling_a_segment_loses_nothing_acknowledged() {
    let sim = SimVfs::new();
    let mut m = Model::default();
    let (store, seq, _) = enospc_at_roll(&sim, &mut m);
    cut_power_and_drop(&sim, store);
    sim.crash(5);
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    let lens = m.check(&store, "enospc at roll");
    assert_eq!(lens.get("s"), Some(&seq), "exactly the acknowledged events");
}

/// The same full disk at a roll, then space comes back: the retry reuses
/// the leftover segment file and the batch becomes durable there.
#[test]
fn enospc_when_rolling_a_segment_is_retried_when_space_returns() {
    let sim = SimVfs::new();
    let mut m = Model::default();
    let (store, seq, _) = enospc_at_roll(&sim, &mut m);
    // Still accepting appends, queued behind the failed batch.
    let later = m.append(&store, "t", payload_for("t", 0, 100)).unwrap();
    sim.set_faults(FaultPlan::default());
    store.wait_durable(later).unwrap();
    m.ack(later);
    assert!(store.durable_pos() >= later);
    assert_eq!(store.stats().segments_created, 1, "{:?}", store.stats());
    cut_power_and_drop(&sim, store);
    sim.crash(9);
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    let lens = m.check(&store, "enospc at roll, retried");
    assert_eq!(lens.get("s"), Some(&(seq + 1)));
    assert_eq!(lens.get("t"), Some(&1));
    assert_eq!(store.recovery_report().segments, 2);
}

// ---- one writer per store (invariant 9) ----

#[test]
fn second_writer_in_the_same_process_is_refused() {
    // Simulated file layer.
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    store.append("a", 1, 0, b"x").unwrap();
    match Store::open_with(dir(), opts(&sim, false)) {
        Err(Error::Locked { dir: d, .. }) => assert_eq!(d, dir()),
        other => panic!("expected Locked, got {other:?}"),
    }
    // The refused open changed nothing: the first writer goes on.
    store.sync().unwrap();
    assert_eq!(store.read("a", 0).unwrap().payload, b"x");
    drop(store);
    let store = Store::open_with(dir(), opts(&sim, false)).unwrap();
    assert_eq!(store.session_len("a"), Some(1));
    drop(store);

    // Real files, and a second path spelling of the same directory.
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    assert!(matches!(Store::open(tmp.path()), Err(Error::Locked { .. })));
    let other_spelling = tmp.path().join(".").join("");
    assert!(matches!(
        Store::open(&other_spelling),
        Err(Error::Locked { .. })
    ));
    drop(store);
    Store::open(tmp.path()).unwrap();
}

fn snapshot_os(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn snapshot_sim(sim: &SimVfs) -> BTreeMap<String, Vec<u8>> {
    sim.list(&dir())
        .unwrap()
        .into_iter()
        .map(|n| {
            let bytes = sim.read_file(&dir().join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

#[test]
fn read_only_open_alongside_the_writer_changes_no_byte() {
    let tmp = tempfile::tempdir().unwrap();
    // No checkpoints and no segment prepared ahead: the writer's background
    // checkpoint or preparer would change bytes while the reader is open.
    let small = Options {
        segment_bytes: SEGMENT,
        checkpoints: false,
        prepare_segments: false,
        ..Default::default()
    };
    let store = Store::open_with(tmp.path(), small.clone()).unwrap();
    for i in 0..200u64 {
        store.append("a", 1, 0, &payload_for("a", i, 1000)).unwrap();
    }
    store.sync().unwrap();
    let before = snapshot_os(tmp.path());
    assert!(before.len() >= 3, "several segments: {:?}", before.keys());
    let ro = Store::open_with(
        tmp.path(),
        Options {
            read_only: true,
            ..small.clone()
        },
    )
    .unwrap();
    assert_eq!(ro.session_len("a"), Some(200));
    for i in [0, 77, 199] {
        assert_eq!(ro.read("a", i).unwrap().payload, payload_for("a", i, 1000));
    }
    assert!(matches!(ro.append("a", 1, 0, b"no"), Err(Error::ReadOnly)));
    assert!(matches!(ro.create_session("b"), Err(Error::ReadOnly)));
    drop(ro);
    assert!(
        snapshot_os(tmp.path()) == before,
        "a read-only open changed bytes"
    );
    // The writer still works after the reader has gone.
    store.append("a", 1, 0, b"more").unwrap();
    store.close().unwrap();
    assert!(snapshot_os(tmp.path()) != before);
}

/// A read-only open of a damaged store reports what a writer would repair,
/// in every mode, and changes no byte; the writer's open then does repair.
#[test]
fn read_only_open_of_a_damaged_store_changes_no_byte() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), opts(&sim, true)).unwrap();
    for i in 0..60u64 {
        store.append("a", 1, 0, &payload_for("a", i, 3000)).unwrap();
    }
    store.sync().unwrap();
    let end = store.durable_pos();
    cut_power_and_drop(&sim, store);
    sim.crash(0);
    // Stale bytes after the end: a torn tail.
    sim.poke(
        &seg(&dir(), end.segment().0),
        end.offset() as u64,
        &[9; 100],
    )
    .unwrap();
    let before = snapshot_sim(&sim);
    for mode in [
        RecoveryMode::TolerateTornTail,
        RecoveryMode::PointInTime,
        RecoveryMode::AbsoluteConsistency,
    ] {
        let ro = Store::open_with(
            dir(),
            Options {
                read_only: true,
                recovery_mode: mode,
                ..opts(&sim, true)
            },
        );
        match (mode, ro) {
            (RecoveryMode::AbsoluteConsistency, Err(Error::TornTailRefused { .. })) => {}
            (RecoveryMode::AbsoluteConsistency, other) => panic!("{other:?}"),
            (_, Ok(ro)) => {
                let r = ro.recovery_report();
                assert_eq!(r.problems.len(), 1, "{r:?}");
                assert_eq!(r.problems[0].kind, ProblemKind::TornTail);
                assert_eq!(ro.session_len("a"), Some(60));
                assert_eq!(
                    ro.read("a", 59).unwrap().payload,
                    payload_for("a", 59, 3000)
                );
            }
            (_, Err(e)) => panic!("{mode:?}: {e}"),
        }
        assert!(
            snapshot_sim(&sim) == before,
            "{mode:?}: read-only open changed bytes"
        );
    }
    let store = Store::open_with(dir(), opts(&sim, true)).unwrap();
    assert_eq!(store.recovery_report().torn_bytes_truncated, 100);
    assert!(
        snapshot_sim(&sim) != before,
        "the writer zeroes the torn tail"
    );
    drop(store);

    // A corrupt store: read-only point-in-time shows the cut, changes nothing.
    let id = seg(&dir(), 1);
    let mut b = sim.read_file(&id).unwrap();
    b[3000] ^= 1;
    sim.poke(&id, 3000, &b[3000..3001]).unwrap();
    let before = snapshot_sim(&sim);
    let ro = Store::open_with(
        dir(),
        Options {
            read_only: true,
            recovery_mode: RecoveryMode::PointInTime,
            checkpoints: false,
            ..opts(&sim, true)
        },
    )
    .unwrap();
    assert!(ro
        .recovery_report()
        .problems
        .iter()
        .any(|p| p.kind == ProblemKind::Corruption));
    assert!(ro.session_len("a").unwrap_or(0) < 60);
    drop(ro);
    assert!(snapshot_sim(&sim) == before);
    assert!(matches!(
        Store::open_with(
            dir(),
            Options {
                checkpoints: false,
                ..opts(&sim, true)
            }
        ),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn read_only_open_of_a_missing_store_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    match Store::open_with(
        &missing,
        Options {
            read_only: true,
            ..Default::default()
        },
    ) {
        Err(Error::NoStore { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(!missing.exists(), "a read-only open created the directory");
}
