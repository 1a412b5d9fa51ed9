//! Segment collection (FORMAT.md §14): what it frees, what it keeps byte for
//! byte, forks of collected parents, and a power cut at every file
//! operation of a collection.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::gc_fleet::{append_synced, events, fleet, runs_per_session};
use common::{dir, sim_opts};
use turnstone::gc::{CollectOptions, CollectReport};
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Options, Store};

const SEGMENT: u32 = 8192;

fn dir_bytes(sim: &SimVfs, dir: &Path) -> u64 {
    use turnstone::vfs::Vfs;
    sim.list(dir)
        .unwrap()
        .iter()
        .filter_map(|n| sim.read_file(&dir.join(n)))
        .map(|b| b.len() as u64)
        .sum()
}

fn gc_opts(sim: &SimVfs) -> CollectOptions {
    CollectOptions {
        vfs: Arc::new(sim.clone()),
        ..Default::default()
    }
}

fn check_store(store: &Store, want_a: &[(u16, u16, Vec<u8>)], want_c: &[(u16, u16, Vec<u8>)]) {
    assert_eq!(events(store, "a"), want_a, "live session a changed");
    assert_eq!(
        events(store, "c"),
        want_c,
        "fork c of a deleted parent changed"
    );
    for gone in ["b", "d"] {
        let e = turnstone::session::internals::check_not_deleted(store, gone).unwrap_err();
        assert!(e.is_not_found(), "{gone} came back: {e}");
    }
    let names: Vec<String> = store
        .sessions()
        .into_iter()
        .map(|s| s.name)
        .filter(|n| turnstone::session::internals::check_not_deleted(store, n).is_ok())
        .collect();
    assert_eq!(names, vec!["a", "c"]);
}

/// After a completed collection the reclaimed sessions are not even listed
/// (before it, the store lists deleted sessions and the session layer
/// filters them).
fn listed(store: &Store) -> Vec<String> {
    store.sessions().into_iter().map(|s| s.name).collect()
}

#[test]
fn collection_frees_deleted_sessions_and_keeps_live_ones_byte_for_byte() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    fleet(&store);
    let want_a = events(&store, "a");
    let want_c = events(&store, "c");
    assert_eq!(want_c.len(), 15);
    store.close().unwrap();
    let before = dir_bytes(&sim, &dir());

    let dry = turnstone::session::gc::collect(
        dir(),
        &CollectOptions {
            dry_run: true,
            ..gc_opts(&sim)
        },
    )
    .unwrap();
    assert_eq!(dir_bytes(&sim, &dir()), before, "a dry run changed bytes");
    assert!(dry.dry_run && dry.bytes_reclaimed > 0, "{dry:?}");

    let r: CollectReport = turnstone::session::gc::collect(dir(), &gc_opts(&sim)).unwrap();
    assert_eq!(
        r.bytes_reclaimed, dry.bytes_reclaimed,
        "dry run predicted {dry:?}, got {r:?}"
    );
    assert_eq!(r.sessions_reclaimed, 2, "{r:?}");
    assert!(
        r.ranges_rewritten >= 1 && r.segment_files_removed >= 1,
        "{r:?}"
    );
    assert!(r.bytes_live < r.bytes_before, "{r:?}");
    let after = dir_bytes(&sim, &dir());
    assert!(
        after < before && before - after >= r.bytes_reclaimed - 4096,
        "directory {before} -> {after} bytes, report {r:?}"
    );

    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    check_store(&store, &want_a, &want_c);
    assert_eq!(listed(&store), vec!["a", "c"]);
    // Appends go on where they were; a collected name is refused as deleted.
    append_synced(&store, "a", 60, 300);
    append_synced(&store, "c", 15, 200);
    let e = store.append("b", 5, 0, b"x").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let want_a = events(&store, "a");
    let want_c = events(&store, "c");
    store.close().unwrap();

    // Again: nothing new is dead, the live data stays as it is.
    let r2 = turnstone::session::gc::collect(dir(), &gc_opts(&sim)).unwrap();
    assert_eq!(r2.sessions_reclaimed, 0, "{r2:?}");
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    check_store(&store, &want_a, &want_c);
    // Checkpoint path: the close above wrote one after the collection.
    store.close().unwrap();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    assert!(store.recovery_report().checkpoint_used);
    check_store(&store, &want_a, &want_c);
}

#[test]
fn fork_chain_through_deleted_and_collected_parents_reads_its_whole_history() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    // p: 40 events; q forks p at 25 and adds 20; r forks q at 30 (p 0..25,
    // q 25..30) and adds 5. Then p and q are deleted; filler seals them.
    for i in 0..40 {
        append_synced(&store, "p", i, 300);
    }
    store.fork("p", 25, "q").unwrap();
    for i in 25..45 {
        append_synced(&store, "q", i, 300);
    }
    store.fork("q", 30, "r").unwrap();
    for i in 30..35 {
        append_synced(&store, "r", i, 300);
    }
    let want_r = events(&store, "r");
    assert_eq!(want_r.len(), 35);
    turnstone::session::delete(&store, "p").unwrap();
    turnstone::session::delete(&store, "q").unwrap();
    for i in 0..60 {
        append_synced(&store, "filler", i, 300);
    }
    store.close().unwrap();

    let r = turnstone::session::gc::collect(
        dir(),
        &CollectOptions {
            threshold: 1.0,
            ..gc_opts(&sim)
        },
    )
    .unwrap();
    assert_eq!(r.sessions_reclaimed, 2, "{r:?}");
    // p keeps 25 events (what r reaches through q), q keeps 5 own ones:
    // 30 of the 40 + 20 + 2 tombstones are live.
    assert!(r.bytes_reclaimed > 0, "{r:?}");
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    assert_eq!(events(&store, "r"), want_r);
    assert!(store.session_meta("p").is_none() && store.session_meta("q").is_none());
    // The parent chain is still reported by name.
    let meta = store.session_meta("r").unwrap();
    assert_eq!(meta.parent, Some(("q".to_string(), 30)));
    store.close().unwrap();

    // r deleted too: now nothing of p, q, r is live.
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    turnstone::session::delete(&store, "r").unwrap();
    for i in 60..90 {
        append_synced(&store, "filler", i, 300);
    }
    let want_filler = events(&store, "filler");
    store.close().unwrap();
    let r2 = turnstone::session::gc::collect(dir(), &gc_opts(&sim)).unwrap();
    assert_eq!(r2.sessions_reclaimed, 1, "{r2:?}");
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    assert_eq!(events(&store, "filler"), want_filler);
    let names: Vec<String> = store.sessions().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["filler"]);
}

#[test]
fn a_power_cut_at_every_file_operation_of_a_collection_loses_nothing() {
    let mut cut = 0u64;
    let mut completed = false;
    while !completed {
        for seed in 0..3u64 {
            let sim = SimVfs::new();
            let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
            fleet(&store);
            let want_a = events(&store, "a");
            let want_c = events(&store, "c");
            store.close().unwrap();
            let start = sim.ops();
            sim.set_faults(FaultPlan {
                power_cut_after_ops: Some(start + cut),
                ..Default::default()
            });
            let result = turnstone::session::gc::collect(dir(), &gc_opts(&sim));
            if result.is_ok() && !sim.powered_off() {
                completed = true;
            }
            sim.crash(seed * 1000 + cut);
            let ctx = format!("power cut after {cut} ops of the collection, seed {seed}");
            let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT))
                .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
            check_store(&store, &want_a, &want_c);
            store.close().unwrap();
            // A collection after the interrupted one finishes the job.
            turnstone::session::gc::collect(dir(), &gc_opts(&sim))
                .unwrap_or_else(|e| panic!("{ctx}: second collection failed: {e}"));
            let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT))
                .unwrap_or_else(|e| panic!("{ctx}: open after second collection: {e}"));
            check_store(&store, &want_a, &want_c);
            drop(store);
        }
        cut += 1;
        assert!(cut < 500, "the collection never completed");
    }
    assert!(
        cut > 5,
        "a collection of this store takes more than 5 file operations"
    );
}

#[test]
fn a_store_with_nothing_deleted_is_left_byte_for_byte() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    for i in 0..50 {
        append_synced(&store, "a", i, 300);
    }
    store.close().unwrap();
    use turnstone::vfs::Vfs;
    let snapshot = |sim: &SimVfs| {
        let mut names = sim.list(&dir()).unwrap();
        names.sort();
        names
            .into_iter()
            .map(|n| (n.clone(), sim.read_file(&dir().join(n))))
            .collect::<Vec<_>>()
    };
    let before = snapshot(&sim);
    let r = turnstone::session::gc::collect(dir(), &gc_opts(&sim)).unwrap();
    assert_eq!((r.ranges_rewritten, r.bytes_reclaimed), (0, 0), "{r:?}");
    assert!(r.segments_examined > 1, "{r:?}");
    assert_eq!(snapshot(&sim), before);
    let _ = Options::default();
}

#[test]
fn retention_expires_sessions_by_the_ts_of_their_last_event() {
    use turnstone::session::gc::{collect_with, Retention};
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    let env = |ts: u64, i: u64| {
        format!(
            r#"{{"v":0,"ts":{ts},"data":{{"i":{i},"pad":"{}"}}}}"#,
            "z".repeat(600)
        )
    };
    for i in 0..30u64 {
        let a = store
            .append("stale", 5, 0, env(1_000 + i, i).as_bytes())
            .unwrap();
        store.wait_durable(a.end).unwrap();
        if i == 10 {
            store.fork("stale", 5, "child").unwrap();
        }
        let a = store
            .append("fresh", 5, 0, env(100_000 + i, i).as_bytes())
            .unwrap();
        store.wait_durable(a.end).unwrap();
    }
    for i in 5..8u64 {
        let a = store
            .append("child", 5, 0, env(100_000 + i, i).as_bytes())
            .unwrap();
        store.wait_durable(a.end).unwrap();
    }
    let want_child = events(&store, "child");
    let want_fresh = events(&store, "fresh");
    store.close().unwrap();

    let retention = Retention {
        expire_after_ms: Some(50_000),
        max_age_ms: None,
        max_bytes: None,
        now_ms: Some(120_000),
    };
    let opts = CollectOptions {
        threshold: 1.0,
        ..gc_opts(&sim)
    };
    let r = collect_with(dir(), &opts, &retention).unwrap();
    assert_eq!(r.sessions_reclaimed, 1, "{r:?}");
    assert!(r.bytes_reclaimed > 0, "{r:?}");
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    assert!(
        store.session_meta("stale").is_none(),
        "expired session still found"
    );
    assert_eq!(events(&store, "child"), want_child);
    assert_eq!(events(&store, "fresh"), want_fresh);
    assert_eq!(listed(&store), vec!["fresh", "child"]);
}

#[test]
fn salvage_reads_a_collected_store_like_a_normal_open() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    fleet(&store);
    let want_a = events(&store, "a");
    let want_c = events(&store, "c");
    store.close().unwrap();
    let r = turnstone::session::gc::collect(dir(), &gc_opts(&sim)).unwrap();
    assert!(r.segment_files_removed > 0, "{r:?}");
    let store = Store::open_with(
        dir(),
        Options {
            read_only: true,
            recovery_mode: turnstone::RecoveryMode::Salvage,
            ..sim_opts(&sim, SEGMENT)
        },
    )
    .unwrap();
    assert!(
        store.recovery_report().problems.is_empty(),
        "{:?}",
        store.recovery_report().problems
    );
    check_store(&store, &want_a, &want_c);
    assert_eq!(listed(&store), vec!["a", "c"]);
}

#[test]
fn search_leaves_out_a_session_collected_before_its_tombstone_was_indexed() {
    use turnstone::session::{
        ContentBlock, Registry, SearchIndex, Session, SurfaceOp, UserMessage,
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("store");
    let opts = Options {
        segment_bytes: 16 << 10,
        ..Default::default()
    };
    let store = Arc::new(Store::open_with(&d, opts.clone()).unwrap());
    for name in ["gone", "keep"] {
        let mut s = Session::create(store.clone(), name, Arc::new(Registry::new())).unwrap();
        for i in 0..30 {
            let text = format!("{name} needle{i} {}", "w ".repeat(300));
            s.append(
                UserMessage {
                    content: vec![ContentBlock::text(text)],
                },
                SurfaceOp::Append,
            )
            .unwrap();
            s.flush().unwrap();
        }
    }
    // Indexed while alive; deleted and collected before the next update.
    let mut ix = SearchIndex::open(&store).unwrap();
    ix.update(&store, &Registry::new()).unwrap();
    assert!(ix
        .search("gone", 10)
        .unwrap()
        .iter()
        .any(|h| h.session == "gone"));
    drop(ix);
    turnstone::session::delete(&store, "gone").unwrap();
    Arc::into_inner(store).unwrap().close().unwrap();
    let r = turnstone::session::gc::collect(
        &d,
        &CollectOptions {
            threshold: 1.0,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.sessions_reclaimed, 1, "{r:?}");
    let store = Arc::new(Store::open_with(&d, opts).unwrap());
    let mut ix = SearchIndex::open(&store).unwrap();
    ix.update(&store, &Registry::new()).unwrap();
    let hits = ix.search("needle3", 10).unwrap();
    assert!(hits.iter().all(|h| h.session != "gone"), "{hits:?}");
    assert!(hits.iter().any(|h| h.session == "keep"), "{hits:?}");
}

/// `regroup` rewrites sealed segments that hold no garbage too, so that
/// each session's frames sit together (issue 21): every event reads back
/// byte for byte, and the interleaved sessions of the sealed segments
/// become one run each (the active segment's tail aside). A power cut at
/// every file operation of it loses nothing.
#[test]
fn regroup_puts_each_sessions_frames_together_and_survives_power_cuts() {
    let build = |sim: &SimVfs| {
        let store = Store::open_with(dir(), sim_opts(sim, SEGMENT)).unwrap();
        for i in 0..40u64 {
            for s in ["a", "b", "c"] {
                append_synced(&store, s, i, 250);
            }
        }
        let want: Vec<_> = ["a", "b", "c"].iter().map(|s| events(&store, s)).collect();
        store.close().unwrap();
        want
    };
    let sim = SimVfs::new();
    let want = build(&sim);
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    let before = runs_per_session(&store);
    store.close().unwrap();
    assert!(
        before.values().all(|&r| r > 10),
        "interleaved to start with: {before:?}"
    );
    // Without regroup nothing changes (nothing is dead).
    let plain = turnstone::session::gc::collect(dir(), &gc_opts(&sim)).unwrap();
    assert_eq!(plain.ranges_rewritten, 0);
    let r = turnstone::session::gc::collect(
        dir(),
        &CollectOptions {
            regroup: true,
            ..gc_opts(&sim)
        },
    )
    .unwrap();
    assert!(
        r.ranges_rewritten >= 1 && r.segment_files_removed > 0,
        "{r:?}"
    );
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    for (s, w) in ["a", "b", "c"].iter().zip(&want) {
        assert_eq!(&events(&store, s), w, "{s} changed");
    }
    let after = runs_per_session(&store);
    assert!(
        after.values().all(|&r| r == 1),
        "not grouped: {after:?} (before {before:?})"
    );
    store.close().unwrap();
    // A second regroup leaves the compacted file alone.
    let again = turnstone::session::gc::collect(
        dir(),
        &CollectOptions {
            regroup: true,
            ..gc_opts(&sim)
        },
    )
    .unwrap();
    assert_eq!(again.ranges_rewritten, 0, "{again:?}");

    // Power cuts at every file operation of a regroup.
    let mut cut = 0u64;
    loop {
        let sim = SimVfs::new();
        let want = build(&sim);
        let start = sim.ops();
        sim.set_faults(FaultPlan {
            power_cut_after_ops: Some(start + cut),
            ..Default::default()
        });
        let done = turnstone::session::gc::collect(
            dir(),
            &CollectOptions {
                regroup: true,
                ..gc_opts(&sim)
            },
        )
        .is_ok()
            && !sim.powered_off();
        sim.crash(cut);
        let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT))
            .unwrap_or_else(|e| panic!("power cut after {cut} ops of a regroup: {e}"));
        for (s, w) in ["a", "b", "c"].iter().zip(&want) {
            assert_eq!(&events(&store, s), w, "{s} changed, cut after {cut} ops");
        }
        drop(store);
        if done {
            break;
        }
        cut += 1;
        assert!(cut < 500, "the regroup never completed");
    }
}
