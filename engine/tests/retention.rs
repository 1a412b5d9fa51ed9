//! Retention (issue 17 §2; FORMAT.md §18): a store's `retention.json`
//! expires sessions by TTL and age, store-wide and per session; an expired
//! session vanishes at once from loads and lists like a deleted one, and
//! collections (on demand and online) reclaim it; `max_bytes` evicts the
//! sessions whose last event is oldest first, sparing held and kept ones.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::payload_for;
use turnstone::gc::CollectOptions;
use turnstone::session::gc::{collect_live, collect_with, Retention};
use turnstone::session::retention::{Policy, SessionPolicy};
use turnstone::session::*;
use turnstone::vfs::OsVfs;
use turnstone::{Error, Options, Store};

fn opts() -> Options {
    Options {
        segment_bytes: 8 << 10,
        ..Default::default()
    }
}

fn write_session(store: &Arc<Store>, id: &str, n: usize) {
    let mut s = Session::create(store.clone(), id, Arc::new(Registry::new())).unwrap();
    for i in 0..n {
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(format!(
                    "{id} says {i} {}",
                    "x".repeat(300)
                ))],
            },
            SurfaceOp::Append,
        )
        .unwrap();
    }
    s.flush().unwrap();
}

fn open(store: &Arc<Store>, id: &str) -> turnstone::Result<Session> {
    Session::open_read_only(store.clone(), id, Arc::new(Registry::new()))
}

fn per_session(p: &mut Policy, id: &str, sp: SessionPolicy) {
    p.sessions.insert(id.to_string(), sp);
}

#[test]
fn an_expired_session_vanishes_at_once_and_a_collection_reclaims_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(tmp.path(), opts()).unwrap());
    for id in ["old", "fresh", "kept"] {
        write_session(&store, id, 20);
    }
    // Old enough for a 1 ms TTL (the events' ts are append times).
    std::thread::sleep(Duration::from_millis(20));
    assert!(open(&store, "old").is_ok(), "no policy yet");
    // A 1 ms TTL for "old" only; a store-wide 1 ms TTL that "kept" is
    // exempt from; "fresh" has no rule of its own.
    let mut p = Policy::default();
    per_session(
        &mut p,
        "old",
        SessionPolicy {
            expire_after_ms: Some(1),
            ..Default::default()
        },
    );
    p.save(&OsVfs, tmp.path()).unwrap();
    let e = open(&store, "old").unwrap_err();
    assert!(matches!(e, Error::SessionExpired { .. }), "{e}");
    assert!(e.is_not_found());
    assert!(open(&store, "fresh").is_ok() && open(&store, "kept").is_ok());
    let listed: Vec<String> = list_sessions(&store)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, vec!["fresh", "kept"]);
    let cat = Catalog::build(&store).unwrap();
    let q = ListQuery {
        limit: 10,
        ..Default::default()
    };
    let ids: Vec<String> = cat.list(&q).sessions.into_iter().map(|e| e.id).collect();
    assert_eq!(ids, vec!["fresh", "kept"]);
    assert_eq!(cat.len(), 2, "len counts what list shows");
    assert!(cat.get(&store, "old").is_none());
    assert!(
        turnstone::session::internals::check_not_deleted(&store, "old")
            .unwrap_err()
            .is_not_found()
    );
    let mut ix = SearchIndex::open(&store).unwrap();
    ix.update(&store, &Registry::new()).unwrap();
    let hits = |q: &str| ix.search(q, 100).unwrap().len();
    assert_eq!(hits("old"), 0, "search leaves the expired session out");
    assert_eq!(hits("fresh"), 20, "and finds the others");

    // Store-wide now; "kept" is exempt.
    p.expire_after_ms = Some(1);
    per_session(
        &mut p,
        "kept",
        SessionPolicy {
            keep: true,
            ..Default::default()
        },
    );
    p.save(&OsVfs, tmp.path()).unwrap();
    assert!(open(&store, "fresh").unwrap_err().is_not_found());
    assert!(open(&store, "kept").is_ok());

    // An online collection reclaims both expired sessions.
    let r = collect_live(
        &store,
        &CollectOptions {
            threshold: 1.0,
            ..Default::default()
        },
        &Retention::default(),
    )
    .unwrap();
    assert!(r.ranges_rewritten > 0, "{r:?}");
    assert_eq!(r.sessions_reclaimed, 2, "{r:?}");
    assert_eq!(store.reclaimed_names(), vec!["old", "fresh"]);
    assert!(open(&store, "kept").is_ok());
    // Without the policy the reclaimed sessions do not come back.
    std::fs::remove_file(tmp.path().join("retention.json")).unwrap();
    assert!(open(&store, "old").unwrap_err().is_not_found());
    Arc::into_inner(store).unwrap().close().unwrap();
    let store = Arc::new(Store::open_with(tmp.path(), opts()).unwrap());
    let names: Vec<String> = store.sessions().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["kept"]);
}

#[test]
fn a_collection_on_demand_applies_the_policy_file_and_its_own_overrides() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(tmp.path(), opts()).unwrap());
    for id in ["a", "b"] {
        write_session(&store, id, 20);
    }
    Arc::into_inner(store).unwrap().close().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut p = Policy::default();
    per_session(
        &mut p,
        "a",
        SessionPolicy {
            expire_after_ms: Some(1),
            ..Default::default()
        },
    );
    p.save(&OsVfs, tmp.path()).unwrap();
    let gc = CollectOptions {
        threshold: 1.0,
        ..Default::default()
    };
    let r = collect_with(tmp.path(), &gc, &Retention::default()).unwrap();
    assert_eq!(r.sessions_reclaimed, 1, "the file's rule for a: {r:?}");
    // An explicit store-wide TTL for this collection adds b.
    let r = collect_with(
        tmp.path(),
        &gc,
        &Retention {
            expire_after_ms: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.sessions_reclaimed, 1, "b by the override: {r:?}");
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    assert!(store.sessions().is_empty());
}

/// Sessions of raw events (no `ts`: no time rule applies), written one
/// after the other, each its own durable appends.
fn raw_fleet(store: &Store, n: usize, events: u64) {
    for s in 0..n {
        let id = format!("s{s}");
        for i in 0..events {
            let a = store.append(&id, 5, 0, &payload_for(&id, i, 300)).unwrap();
            store.wait_durable(a.end).unwrap();
        }
    }
    // Seal the last of them.
    for i in 0..40 {
        let a = store
            .append("tail", 5, 0, &payload_for("tail", i, 300))
            .unwrap();
        store.wait_durable(a.end).unwrap();
    }
}

#[test]
fn max_bytes_evicts_the_oldest_sessions_first_sparing_held_and_kept_ones() {
    for spare in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_with(tmp.path(), opts()).unwrap());
        raw_fleet(&store, 6, 20);
        let mut p = Policy {
            max_bytes: Some(16 << 10),
            ..Default::default()
        };
        let _held = if spare {
            // s0 is in use in this process, s1 is kept by the policy.
            per_session(
                &mut p,
                "s1",
                SessionPolicy {
                    keep: true,
                    ..Default::default()
                },
            );
            Some(store.live_sessions().claim("s0", 0).unwrap())
        } else {
            None
        };
        p.save(&OsVfs, tmp.path()).unwrap();
        let r = collect_live(
            &store,
            &CollectOptions {
                threshold: 1.0,
                ..Default::default()
            },
            &Retention::default(),
        )
        .unwrap();
        let ctx = format!("spare {spare}: {r:?}");
        assert!(r.sessions_evicted >= 2, "{ctx}");
        assert!(r.bytes_live <= 16 << 10, "{ctx}");
        let evicted = store.reclaimed_names();
        let mut expect: Vec<String> = (0..6)
            .map(|s| format!("s{s}"))
            .chain(["tail".to_string()])
            .collect();
        if spare {
            expect.retain(|s| s != "s0" && s != "s1");
        }
        expect.truncate(evicted.len());
        assert_eq!(evicted, expect, "oldest first ({ctx})");
        for s in 0..6 {
            let id = format!("s{s}");
            let gone = evicted.contains(&id);
            assert_eq!(store.session_len(&id).is_none(), gone, "{id} ({ctx})");
            if !gone {
                let got = store.read_range(&id, 0..20).unwrap();
                assert_eq!(got.len(), 20, "{id} kept whole ({ctx})");
            }
        }
        if !evicted.contains(&"tail".to_string()) {
            assert_eq!(store.session_len("tail"), Some(40), "{ctx}");
        }
        if spare {
            // The spared ones survive even though the budget is still
            // exceeded without them.
            assert_eq!(store.session_len("s0"), Some(20));
            assert_eq!(store.session_len("s1"), Some(20));
        }
    }
}
