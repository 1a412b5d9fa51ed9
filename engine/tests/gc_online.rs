//! Online segment collection ([`Store::collect`], FORMAT.md §14.4 on an
//! open store): it frees what a closed-store collection frees while
//! appends, reads and deletes go on, loses nothing at a power cut at any of
//! its file operations, and stops when the store closes.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::gc_fleet::{append_synced, events, fleet, runs_per_session, Events};
use common::{dir, payload_for, sim_opts};
use turnstone::gc::{CollectOptions, CollectReport};
use turnstone::session::gc::{collect_live, Background, BackgroundOptions, Retention};
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Options, Store};

const SEGMENT: u32 = 8192;

fn sealed_bytes(sim: &SimVfs, dir: &Path) -> u64 {
    use turnstone::vfs::Vfs;
    sim.list(dir)
        .unwrap()
        .iter()
        .filter(|n| n.ends_with(".tseg"))
        .filter_map(|n| sim.read_file(&dir.join(n)))
        .map(|b| b.len() as u64)
        .sum()
}

fn check_store(store: &Store, want_a: &Events, want_c: &Events) {
    assert_eq!(&events(store, "a"), want_a, "live session a changed");
    assert_eq!(
        &events(store, "c"),
        want_c,
        "fork c of a deleted parent changed"
    );
    for gone in ["b", "d"] {
        let e = turnstone::session::internals::check_not_deleted(store, gone).unwrap_err();
        assert!(e.is_not_found(), "{gone} came back: {e}");
    }
}

fn live(store: &Store) -> CollectReport {
    collect_live(store, &CollectOptions::default(), &Retention::default()).expect("collect")
}

#[test]
fn an_open_store_is_collected_and_keeps_serving_reads_and_appends() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    fleet(&store);
    let want_a = events(&store, "a");
    let want_c = events(&store, "c");
    let before = sealed_bytes(&sim, &dir());

    let r = live(&store);
    assert!(!r.retry, "nothing raced: {r:?}");
    assert!(r.ranges_rewritten > 0, "{r:?}");
    assert_eq!(r.sessions_reclaimed, 2, "{r:?}");
    assert!(r.bytes_reclaimed > 0, "{r:?}");
    let after = sealed_bytes(&sim, &dir());
    assert!(
        after < before,
        "segment files shrank: {before} -> {after} bytes"
    );

    // The same handle reads every live event through the new positions,
    // and the collected sessions are gone from it at once.
    check_store(&store, &want_a, &want_c);
    assert!(store.session_len("b").is_none() && store.session_len("d").is_none());
    let names: Vec<String> = store.sessions().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["a", "c"], "reclaimed sessions are not listed");
    // Writes go on: appends, a fork of the collected parent's child, and
    // appends under a reclaimed name are refused like after a reopen.
    append_synced(&store, "a", 60, 300);
    store.fork("c", 12, "e").expect("fork of the live fork");
    let err = store.append("b", 5, 0, b"x").unwrap_err();
    assert!(
        matches!(err, turnstone::Error::SessionDeleted { .. }),
        "{err}"
    );
    let want_a = events(&store, "a");
    let want_e = events(&store, "e");
    assert_eq!(want_e[..], want_c[..12]);
    // A second collection finds nothing more to do.
    let again = live(&store);
    assert_eq!(again.sessions_reclaimed, 0, "{again:?}");
    store.close().unwrap();

    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    check_store(&store, &want_a, &want_c);
    assert_eq!(events(&store, "e"), want_e);
    let names: Vec<String> = store.sessions().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["a", "c", "e"]);
}

#[test]
fn a_power_cut_at_every_file_operation_of_an_online_collection_loses_nothing() {
    power_cut_at_every_operation_of_an_online_collection(0);
}

/// The same with recycling on: the collection renames files to free names,
/// and after it the writer makes segments from them.
#[test]
fn a_power_cut_at_every_file_operation_of_a_recycling_collection_loses_nothing() {
    power_cut_at_every_operation_of_an_online_collection(2);
}

fn power_cut_at_every_operation_of_an_online_collection(recycle_segments: usize) {
    let opts = |sim: &SimVfs| Options {
        recycle_segments,
        ..sim_opts(sim, SEGMENT)
    };
    let mut recycled = 0;
    let mut cut = 0u64;
    let mut completed = false;
    while !completed {
        for seed in 0..2u64 {
            let sim = SimVfs::new();
            let store = Store::open_with(dir(), opts(&sim)).unwrap();
            fleet(&store);
            let want_c = events(&store, "c");
            let mut want_a = events(&store, "a");
            let start = sim.ops();
            sim.set_faults(FaultPlan {
                power_cut_after_ops: Some(start + cut),
                ..Default::default()
            });
            let result = collect_live(&store, &CollectOptions::default(), &Retention::default());
            if result.is_ok() && !sim.powered_off() {
                completed = true;
                sim.set_faults(FaultPlan::default());
                // Appends after the collection are durable as usual (and
                // roll into recycled segments, when on).
                for seq in 60..100 {
                    append_synced(&store, "a", seq, 300);
                }
                recycled += store.stats().segments_recycled;
                want_a = events(&store, "a");
                store.close().unwrap();
            } else {
                drop(store);
            }
            sim.crash(seed * 1000 + cut);
            let ctx = format!("power cut after {cut} ops of an online collection, seed {seed}");
            let store = Store::open_with(dir(), opts(&sim))
                .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
            check_store(&store, &want_a, &want_c);
            // The next collection (online again) finishes the job.
            live(&store);
            check_store(&store, &want_a, &want_c);
            store.close().unwrap();
            let store = Store::open_with(dir(), opts(&sim))
                .unwrap_or_else(|e| panic!("{ctx}: open after the second collection: {e}"));
            check_store(&store, &want_a, &want_c);
        }
        cut += 1;
        assert!(cut < 500, "the collection never completed");
    }
    assert!(
        cut > 5,
        "an online collection takes more than 5 file operations"
    );
    assert_eq!(recycled > 0, recycle_segments > 0, "{recycled} recycled");
}

/// Length of event `seq` of any session in the concurrent test.
fn len_of(seq: u64) -> usize {
    64 + (seq as usize * 37) % 700
}

#[test]
fn collections_run_while_writers_delete_and_readers_read() {
    writers_deleting_readers_reading_collections_looping(0);
}

/// The same with recycled segments (FORMAT.md §6.2 rule 7): files the
/// collections free become the writers' next segments while readers read
/// every byte.
#[test]
fn collections_recycle_segments_while_writers_delete_and_readers_read() {
    writers_deleting_readers_reading_collections_looping(4);
}

fn writers_deleting_readers_reading_collections_looping(recycle_segments: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = || Options {
        segment_bytes: 64 << 10,
        recycle_segments,
        ..Default::default()
    };
    let store = Arc::new(Store::open_with(tmp.path(), opts()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    // Collections finished so far: the writers wait for two more at a few
    // rounds, so that collections run between their deletes however fast
    // the writers are (the assertions below count them).
    let collections = Arc::new(AtomicU64::new(0));
    // Writers: each keeps one session for good and writes then deletes a
    // stream of short-lived ones.
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (store, collections) = (store.clone(), collections.clone());
            std::thread::spawn(move || {
                let keep = format!("keep-{w}");
                let mut kept = 0u64;
                for round in 0..40u64 {
                    let tmp = format!("tmp-{w}-{round}");
                    for seq in 0..30u64 {
                        store
                            .append(&tmp, 5, 0, &payload_for(&tmp, seq, len_of(seq)))
                            .unwrap();
                        let a = store
                            .append(&keep, 5, 0, &payload_for(&keep, kept, len_of(kept)))
                            .unwrap();
                        kept += 1;
                        if seq % 10 == 9 {
                            store.wait_durable(a.end).unwrap();
                        }
                    }
                    store.sync().unwrap();
                    turnstone::session::delete(&store, &tmp).unwrap();
                    if round % 10 == 9 {
                        // (Bounded: a collector that panicked is reported
                        // when it is joined.)
                        let seen = collections.load(Ordering::SeqCst);
                        let until = Instant::now() + Duration::from_secs(10);
                        while collections.load(Ordering::SeqCst) < seen + 2
                            && Instant::now() < until
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
                store.sync().unwrap();
                kept
            })
        })
        .collect();
    // Readers: every event of a kept session reads back as written.
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    for w in 0..3 {
                        let keep = format!("keep-{w}");
                        let Some(len) = store.session_len(&keep) else {
                            continue;
                        };
                        let from = (reads * 7 + r) % len.max(1);
                        for e in store.read_range(&keep, from..len).unwrap() {
                            assert_eq!(
                                e.payload,
                                payload_for(&keep, e.seq.0, len_of(e.seq.0)),
                                "{keep} seq {} read back wrong",
                                e.seq.0
                            );
                        }
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    // The collector.
    let collector = {
        let (store, stop, collections) = (store.clone(), stop.clone(), collections.clone());
        std::thread::spawn(move || {
            let mut reports = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let r = collect_live(
                    &store,
                    &CollectOptions {
                        threshold: 0.9,
                        ..Default::default()
                    },
                    &Retention::default(),
                )
                .unwrap();
                reports.push(r);
                collections.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
            reports
        })
    };
    let kept: Vec<u64> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    // One more collection with every writer done, so the last deletes are
    // collected too.
    stop.store(true, Ordering::SeqCst);
    let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    let mut reports = collector.join().unwrap();
    reports.push(live(&store));
    assert!(reads > 0);
    let productive = reports.iter().filter(|r| r.ranges_rewritten > 0).count();
    assert!(
        productive >= 2,
        "collections rewrote segments while writers ran: {reports:?}"
    );
    let reclaimed: u64 = reports.iter().map(|r| r.sessions_reclaimed).sum();
    assert!(
        reclaimed >= 60,
        "most short-lived sessions were reclaimed: {reclaimed} of 120"
    );
    // Each reclaimed session is counted once: the store lists exactly the
    // others (deleted ones still listed until their tombstones are
    // collected, which the session layer hides).
    assert_eq!(
        store.sessions().len() as u64,
        3 + 120 - reclaimed,
        "sessions still listed"
    );

    let check = |store: &Store| {
        for (w, n) in kept.iter().enumerate() {
            let keep = format!("keep-{w}");
            let got = store.read_range(&keep, 0..u64::MAX).unwrap();
            assert_eq!(got.len() as u64, *n, "{keep} lost events");
            for e in got {
                assert_eq!(e.payload, payload_for(&keep, e.seq.0, len_of(e.seq.0)));
            }
        }
        let mut names: Vec<String> = store
            .sessions()
            .into_iter()
            .map(|s| s.name)
            .filter(|n| turnstone::session::internals::check_not_deleted(store, n).is_ok())
            .collect();
        names.sort();
        assert_eq!(names, vec!["keep-0", "keep-1", "keep-2"]);
    };
    check(&store);
    let store = Arc::into_inner(store).expect("one handle left");
    let recycled = store.stats().segments_recycled;
    store.close().unwrap();
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    check(&store);
    // Disk follows live data: the sealed segments hold little besides the
    // kept sessions' frames.
    let live_bytes: u64 = (0..3)
        .map(|w| (0..kept[w]).map(|s| len_of(s) as u64 + 32).sum::<u64>())
        .sum();
    let on_disk: u64 = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tseg"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(
        on_disk < live_bytes * 3 + (128 << 10),
        "{on_disk} bytes of segments for {live_bytes} live bytes"
    );
    if recycle_segments > 0 {
        assert!(
            store.stats().segments_recycled == 0,
            "a reopened store has made no segment yet"
        );
        assert!(recycled > 0, "no segment was recycled");
    }
}

#[test]
fn a_background_collector_reclaims_deleted_sessions_and_stops_with_the_store() {
    let sim = SimVfs::new();
    let store = Arc::new(Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap());
    fleet(&store);
    let want_a = events(&store, "a");
    let want_c = events(&store, "c");
    let before = sealed_bytes(&sim, &dir());
    let bg = Background::start(
        store.clone(),
        BackgroundOptions {
            interval: Duration::from_millis(5),
            ..Default::default()
        },
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while bg.stats().productive == 0 {
        assert!(Instant::now() < deadline, "no collection: {:?}", bg.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    check_store(&store, &want_a, &want_c);
    assert!(sealed_bytes(&sim, &dir()) < before);
    let stats = bg.stats();
    assert_eq!(stats.sessions_reclaimed, 2, "{stats:?}");
    assert_eq!(stats.errors, 0, "{stats:?}");
    // Closing the store ends the collector's thread (it sees `Closed`).
    store.shutdown().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let runs = bg.stats().runs;
    std::thread::sleep(Duration::from_millis(50));
    assert!(bg.stats().runs <= runs + 1, "it stopped running");
    assert!(Instant::now() < deadline);
    let stats = bg.stop();
    assert_eq!(stats.errors, 0, "{stats:?}");
}

#[test]
fn closing_the_store_stops_a_slow_collection_before_it_renames_anything() {
    let sim = SimVfs::new();
    let store = Arc::new(Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap());
    fleet(&store);
    let want_a = events(&store, "a");
    let want_c = events(&store, "c");
    let files = |sim: &SimVfs| {
        use turnstone::vfs::Vfs;
        let mut v: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for n in sim.list(&dir()).unwrap() {
            if n.ends_with(".tseg") {
                v.insert(n.clone(), sim.read_file(&dir().join(&n)).unwrap());
            }
        }
        v
    };
    let handle = {
        let store = store.clone();
        std::thread::spawn(move || {
            collect_live(
                &store,
                &CollectOptions {
                    rate_bytes_per_sec: Some(1024),
                    ..Default::default()
                },
                &Retention::default(),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let segments_before_close = files(&sim);
    store.shutdown().unwrap();
    let result = handle.join().unwrap();
    assert!(
        matches!(result, Err(turnstone::Error::Closed)),
        "the collection stopped: {result:?}"
    );
    let after = files(&sim);
    // Closing appends a clean-close marker to the last segment only.
    let sealed = |m: &BTreeMap<String, Vec<u8>>| {
        let mut m = m.clone();
        m.pop_last();
        m
    };
    assert_eq!(
        sealed(&segments_before_close),
        sealed(&after),
        "no sealed segment changed"
    );
    drop(store);
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    check_store(&store, &want_a, &want_c);
}

/// A regroup (issue 21's locality) runs online too: the sealed segments of
/// an open store are rewritten with each session's frames together, reads
/// and appends go on, and a reopen reads the same events.
#[test]
fn an_online_regroup_puts_each_sessions_frames_together() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    for i in 0..40u64 {
        for s in ["a", "b", "c"] {
            append_synced(&store, s, i, 250);
        }
    }
    let before = runs_per_session(&store);
    assert!(before.values().all(|&r| r > 10), "interleaved: {before:?}");
    let r = collect_live(
        &store,
        &CollectOptions {
            regroup: true,
            ..Default::default()
        },
        &Retention::default(),
    )
    .unwrap();
    assert!(r.ranges_rewritten >= 1, "{r:?}");
    let after = runs_per_session(&store);
    assert!(after.values().all(|&r| r == 1), "not grouped: {after:?}");
    for i in 40..45u64 {
        for s in ["a", "b", "c"] {
            append_synced(&store, s, i, 250);
        }
    }
    let want: Vec<Events> = ["a", "b", "c"].iter().map(|s| events(&store, s)).collect();
    for (s, w) in ["a", "b", "c"].iter().zip(&want) {
        for (seq, e) in w.iter().enumerate() {
            assert_eq!(e.2, payload_for(s, seq as u64, 250), "{s} seq {seq}");
        }
    }
    store.close().unwrap();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    for (s, w) in ["a", "b", "c"].iter().zip(&want) {
        assert_eq!(&events(&store, s), w, "{s} changed across reopen");
    }
}

/// A catalog kept across an online collection (which moves define frames
/// and may move a session's frames before the catalog's folded position)
/// lists, after a refresh, exactly what a catalog built afresh lists.
#[test]
fn a_catalog_kept_across_an_online_collection_matches_a_fresh_one() {
    use turnstone::session::{Catalog, ListQuery};
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    fleet(&store);
    let mut kept = Catalog::build(&store).unwrap();
    let q = ListQuery {
        limit: 100,
        ..Default::default()
    };
    let ids =
        |c: &Catalog| -> Vec<String> { c.list(&q).sessions.into_iter().map(|e| e.id).collect() };
    assert_eq!(ids(&kept), vec!["a", "c"]);
    let r = live(&store);
    assert!(r.ranges_rewritten > 0, "{r:?}");
    append_synced(&store, "a", 60, 300);
    kept.refresh(&store).unwrap();
    let fresh = Catalog::build(&store).unwrap();
    assert_eq!(ids(&kept), ids(&fresh));
    for id in ["a", "c"] {
        let (k, f) = (kept.get(&store, id), fresh.get(&store, id));
        assert!(k.is_some(), "{id} is found in the kept catalog");
        assert_eq!(k, f, "{id}");
    }
    assert_eq!(kept.get(&store, "a").unwrap().events, 61);
}

/// A collection that moves a session's define frame keeps its state
/// snapshot usable (the snapshot names the define's position; the
/// collection points it at the new one), online and on demand.
#[test]
fn state_snapshots_survive_a_collection_that_moves_their_define() {
    use turnstone::session::{ContentBlock, Registry, Session, SurfaceOp, UserMessage};
    for online in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let opts = || Options {
            segment_bytes: 8 << 10,
            ..Default::default()
        };
        let store = Arc::new(Store::open_with(tmp.path(), opts()).unwrap());
        let reg = || Arc::new(Registry::new());
        let mut gone = Session::create(store.clone(), "gone", reg()).unwrap();
        let mut long = Session::create(store.clone(), "long", reg()).unwrap();
        for i in 0..60 {
            for s in [&mut gone, &mut long] {
                s.append(
                    UserMessage {
                        content: vec![ContentBlock::text(format!("{i} {}", "y".repeat(300)))],
                    },
                    SurfaceOp::Append,
                )
                .unwrap();
                s.flush().unwrap();
            }
        }
        long.save_state_snapshot().unwrap();
        let len = long.len();
        let want = long.derive_messages().len();
        drop(long);
        gone.delete().unwrap();
        let before = store.session_meta("long").unwrap().define_pos;
        let gc = CollectOptions {
            threshold: 1.0,
            ..Default::default()
        };
        let store = if online {
            let r = collect_live(&store, &gc, &Retention::default()).unwrap();
            assert!(!r.moved_defines.is_empty(), "{r:?}");
            store
        } else {
            Arc::into_inner(store).unwrap().close().unwrap();
            let r = turnstone::session::gc::collect(tmp.path(), &gc).unwrap();
            assert!(!r.moved_defines.is_empty(), "{r:?}");
            Arc::new(Store::open_with(tmp.path(), opts()).unwrap())
        };
        let after = store.session_meta("long").unwrap().define_pos;
        assert_ne!(before, after, "the define moved (online {online})");
        let mut s = Session::open(store.clone(), "long", reg()).unwrap();
        assert_eq!(
            s.restored_from_snapshot(),
            Some(len),
            "online {online}: {:?}",
            s.snapshot_discarded()
        );
        assert_eq!(s.derive_messages().len(), want);
    }
}

/// A read-only open (another process's `turnstone sessions` or `dump` on a
/// live store) while a collector rewrites and removes segment files: every
/// open succeeds and sees every session that stays live (an open that found
/// the directory changed under it opens again).
#[test]
fn read_only_opens_racing_online_collections_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = || Options {
        segment_bytes: SEGMENT * 2,
        preallocate: false,
        ..Default::default()
    };
    let store = Arc::new(Store::open_with(tmp.path(), opts()).unwrap());
    store.create_session("keep").unwrap();
    for seq in 0..20 {
        append_synced(&store, "keep", seq, 300);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let churn = {
        let (store, stop, rounds) = (store.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("tmp{n}");
                store.create_session(&id).unwrap();
                for seq in 0..8 {
                    append_synced(&store, &id, seq, 2000);
                }
                turnstone::session::delete(&store, &id).unwrap();
                live(&store);
                n += 1;
                rounds.store(n, Ordering::Relaxed);
            }
        })
    };
    // Opens until the collector has run 40 rounds (at least 150 opens).
    let mut opens = 0;
    while opens < 150 || rounds.load(Ordering::Relaxed) < 40 {
        let ro = Store::open_with(
            tmp.path(),
            Options {
                read_only: true,
                ..opts()
            },
        )
        .unwrap_or_else(|e| panic!("read-only open {opens}: {e}"));
        assert_eq!(ro.session_len("keep"), Some(20), "open {opens}");
        drop(ro);
        opens += 1;
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    eprintln!(
        "{opens} read-only opens during {} create-delete-collect rounds",
        rounds.load(Ordering::Relaxed)
    );
}

/// What an interrupted collection left (`N.tseg.tmp`, `gc.manifest.tmp`,
/// FORMAT.md §14) is removed by the next collection, the online one too: a
/// store collected only online never kept them for good.
#[test]
fn an_online_collection_removes_what_an_interrupted_one_left() {
    use turnstone::vfs::Vfs;
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    fleet(&store);
    let leftovers = ["0000000099.tseg.tmp", "gc.manifest.tmp"];
    for name in leftovers {
        let f = sim.create_new(&dir().join(name)).unwrap();
        f.write_all_at(b"half a collection", 0).unwrap();
    }
    // A dry run changes nothing, leftovers included.
    let dry = store
        .collect(
            &CollectOptions {
                dry_run: true,
                ..Default::default()
            },
            &|_| false,
        )
        .unwrap();
    assert!(dry.dry_run);
    for name in leftovers {
        assert!(sim.exists(&dir().join(name)), "{name} removed by a dry run");
    }
    // A collection with nothing to collect removes them.
    let r = store
        .collect(&CollectOptions::default(), &|_| false)
        .unwrap();
    assert_eq!(r.ranges_rewritten, 0, "{r:?}");
    for name in leftovers {
        assert!(!sim.exists(&dir().join(name)), "{name} left behind");
    }
    store.close().unwrap();
}
