//! Replay, fork, projections, snapshot caches and query over the one log.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use turnstone::session::snapshot::{self, snapshot_path};
use turnstone::session::*;
use turnstone::session::{events, list_sessions, SearchIndex};
use turnstone::session::{fold_arc, TurnStatus};
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Error, Options, RecoveryMode, Store};

fn reg() -> Arc<Registry> {
    let mut r = Registry::new();
    r.register("todo/update", false).unwrap();
    Arc::new(r)
}

fn user(t: &str) -> UserMessage {
    UserMessage {
        content: vec![ContentBlock::text(t)],
    }
}

/// `turns` closed turns, then optionally one open turn.
fn build(s: &mut Session, turns: usize, open: bool) {
    for t in 0..turns + open as usize {
        let id = format!("t{t}");
        s.append(
            TurnStart {
                turn_id: id.clone(),
            },
            (),
        )
        .unwrap();
        s.append(
            user(&format!("question {t} about zebras")),
            SurfaceOp::Append,
        )
        .unwrap();
        s.append(
            AssistantChunk {
                index: 0,
                text: "thin".into(),
            },
            (),
        )
        .unwrap();
        s.append(
            AssistantMessage {
                content: vec![ContentBlock::text(format!("answer {t}"))],
                usage: Some(Usage::new(10, 5)),
                stop_reason: None,
                extra: Default::default(),
            },
            SurfaceOp::Append,
        )
        .unwrap();
        if t < turns {
            s.append(
                TurnEnd {
                    turn_id: id,
                    reason: TurnEndReason::Completed,
                },
                (),
            )
            .unwrap();
        }
    }
}

#[test]
fn replay_streams_every_event_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "a", reg()).unwrap();
    build(&mut s, 3, false);
    // Replay, like every view, shows what is durable.
    s.flush().unwrap();
    let evs: Vec<SessionEvent> = replay(&store, "a", reg(), 0)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(evs.len() as u64, s.len());
    assert!(evs.iter().enumerate().all(|(i, e)| e.seq == i as u64));
    assert_eq!(
        evs.iter()
            .filter(|e| e.kind.name() == "assistant/chunk")
            .count(),
        3
    );
    assert!(evs.iter().all(|e| e.ts.is_some()));
    let tail: Vec<u64> = replay(&store, "a", reg(), 10)
        .unwrap()
        .map(|e| e.unwrap().seq)
        .collect();
    assert_eq!(tail, (10..s.len()).collect::<Vec<_>>());
}

#[test]
fn fork_defaults_to_last_closed_turn_refuses_open_turn_and_copies_no_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "src", reg()).unwrap();
    build(&mut s, 2, true); // 2 closed turns (5 events each), then 4 of an open one
    assert_eq!(s.len(), 14);
    store.sync().unwrap();
    let before = store.durable_pos();
    let f = fork(&store, "src", None, Some("child")).unwrap();
    assert_eq!(f.upto, 10, "default: end of the last closed turn");
    store.sync().unwrap();
    let grown = store.durable_pos().0 - before.0;
    assert!(
        grown < 128,
        "a fork writes one small frame, wrote {grown} bytes"
    );
    match fork(&store, "src", Some(12), None) {
        Err(Error::Refused(m)) => assert!(m.contains("unfinished turn")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        fork(&store, "src", Some(99), None),
        Err(Error::SeqOutOfRange { .. })
    ));
    let g = fork(&store, "src", Some(5), None).unwrap();
    assert!(g.child.starts_with("src.fork-"));
    // The child's messages equal the parent's at the boundary; its appends are its own.
    let mut c = Session::open(store.clone(), "child", reg()).unwrap();
    assert_eq!(c.len(), 10);
    let parent_msgs: Vec<Message> = {
        let mut p = Session::open_read_only(store.clone(), "src", reg()).unwrap();
        p.derive_messages()[..4]
            .iter()
            .map(|m| (**m).clone())
            .collect()
    };
    let child_msgs: Vec<Message> = c.derive_messages().iter().map(|m| (**m).clone()).collect();
    assert_eq!(parent_msgs, child_msgs);
    c.append(user("only in the child"), SurfaceOp::Append)
        .unwrap();
    assert_eq!(store.session_len("src"), Some(14));
    // Forks of forks, across a reopen.
    fork(&store, "child", None, Some("grandchild")).unwrap();
    drop(c);
    drop(s);
    let store = Arc::into_inner(store).unwrap();
    store.close().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let gc = Session::open(store.clone(), "grandchild", reg()).unwrap();
    assert_eq!(gc.len(), 11);
    let last = gc
        .events(10..11)
        .unwrap()
        .pop()
        .unwrap()
        .typed::<UserMessage>()
        .unwrap();
    assert_eq!(last, user("only in the child"));
    let replayed: Vec<u64> = replay(&store, "grandchild", reg(), 0)
        .unwrap()
        .map(|e| e.unwrap().seq)
        .collect();
    assert_eq!(replayed, (0..11).collect::<Vec<_>>());
}

#[test]
fn registry_skips_downstream_work_for_unchanged_states() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "a", reg()).unwrap();
    build(&mut s, 2, true);
    s.append_plugin(
        "todo/update",
        &json!({"id": "1", "text": "write tests", "done": false}),
    )
    .unwrap();
    s.append_plugin(
        "todo/update",
        &json!({"id": "1", "text": "write tests", "done": true}),
    )
    .unwrap();
    let mut r = ProjectionRegistry::new();
    r.register(RunStatus);
    r.register(TokenMeter);
    let notified = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let n2 = notified.clone();
    r.on_change(move |name, ev| n2.lock().push((name, ev.seq)));
    store.sync().unwrap();
    for ev in replay(&store, "a", reg(), 0).unwrap() {
        r.apply(&ev.unwrap());
    }
    // Chunks change nothing; folds are per projection per event.
    assert_eq!(r.folds, 2 * s.len());
    assert!(r.changes < r.folds);
    assert_eq!(notified.lock().len() as u64, r.changes);
    assert!(
        !notified.lock().iter().any(|(_, seq)| *seq == 2),
        "a chunk caused downstream work"
    );
    let run = r.state::<RunStatus>("run-status").unwrap();
    assert_eq!(run.turns_completed, 2);
    assert_eq!(
        run.status,
        TurnStatus::Running {
            turn_id: "t2".into()
        }
    );
    assert!(run.todos["1"].done);
    let tokens = r.state::<TokenMeter>("token-meter").unwrap();
    assert_eq!(tokens.input_tokens, 30);
    // Identity: an ignored event keeps the same Arc.
    let mut st = Arc::new(RunState::default());
    let before = st.clone();
    let chunk = s.events(2..3).unwrap().pop().unwrap();
    assert!(!fold_arc(&RunStatus, &mut st, &chunk));
    assert!(Arc::ptr_eq(&st, &before));
}

#[test]
fn token_meter_honours_prune() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "a", reg()).unwrap();
    s.append(user("go"), SurfaceOp::Append).unwrap();
    s.append(
        ToolResult {
            call_id: "c".into(),
            content: vec![ContentBlock::text("x".repeat(4000))],
            is_error: false,
            status: None,
        },
        SurfaceOp::Append,
    )
    .unwrap();
    let r0 = snapshot::read(&store, &reg(), "a", &TokenMeter)
        .unwrap()
        .state;
    assert_eq!(r0.context_tokens, 1 + 1000);
    s.prune_tool_result(1, "[pruned]", 990).unwrap();
    let r1 = snapshot::read(&store, &reg(), "a", &TokenMeter)
        .unwrap()
        .state;
    assert_eq!(r1.pruned_tokens, 990);
    assert_eq!(r1.prunes, 1);
    assert_eq!(
        r1.context_tokens,
        1 + 10,
        "the replacement is charged the original minus the recorded saving"
    );
}

#[test]
fn snapshot_cache_folds_only_the_tail_and_discards_what_does_not_match() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "a", reg()).unwrap();
    build(&mut s, 20, false);
    s.flush().unwrap();
    let full = snapshot::read(&store, &reg(), "a", &RunStatus).unwrap();
    assert_eq!(full.snapshot_covered, None);
    assert_eq!(full.folded, 100);
    snapshot::refresh(&store, &reg(), "a", &RunStatus).unwrap();
    build(&mut s, 1, true);
    let r = snapshot::read(&store, &reg(), "a", &RunStatus).unwrap();
    assert_eq!(r.snapshot_covered, Some(100));
    assert_eq!(r.folded, 9);
    assert_eq!(r.state.turns_completed, 21);
    // Writing a snapshot that would lead the durable log is refused.
    s.append(user("not yet durable"), SurfaceOp::Append)
        .unwrap();
    let len = store.session_len("a").unwrap();
    let meta = store.session_meta("a").unwrap();
    if meta.durable_len < len {
        assert!(matches!(
            snapshot::write(&store, "a", &RunStatus, &r.state, len),
            Err(Error::Refused(_))
        ));
    }
    // Corrupt snapshot: discarded, rebuilt from the log, same state.
    let path = snapshot_path(dir.path(), "a", "run-status");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[70] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let r2 = snapshot::read(&store, &reg(), "a", &RunStatus).unwrap();
    assert!(r2.discarded.unwrap().contains("checksum"));
    assert_eq!(r2.snapshot_covered, None);
    assert_eq!(
        r2.state,
        snapshot::read(&store, &reg(), "a", &RunStatus)
            .unwrap()
            .state
    );
    // A snapshot of another version is discarded.
    s.flush().unwrap();
    snapshot::refresh(&store, &reg(), "a", &RunStatus).unwrap();
    struct V2;
    impl Projection for V2 {
        type State = RunState;
        fn name(&self) -> &'static str {
            "run-status"
        }
        fn version(&self) -> u32 {
            2
        }
        fn fold(&self, s: &RunState, e: &SessionEvent) -> Option<RunState> {
            RunStatus.fold(s, e)
        }
    }
    let r3 = snapshot::read(&store, &reg(), "a", &V2).unwrap();
    assert!(r3.discarded.unwrap().contains("version"));
    assert_eq!(
        r3.state,
        snapshot::read(&store, &reg(), "a", &RunStatus)
            .unwrap()
            .state
    );
}

fn sim_opts(sim: &SimVfs, mode: RecoveryMode) -> Options {
    Options {
        vfs: Arc::new(sim.clone()),
        segment_bytes: 16 * 1024,
        recovery_mode: mode,
        ..Default::default()
    }
}

#[test]
fn snapshot_ahead_of_a_truncated_log_is_discarded() {
    let dir = Path::new("/store");
    let sim = SimVfs::new();
    let store =
        Arc::new(Store::open_with(dir, sim_opts(&sim, RecoveryMode::TolerateTornTail)).unwrap());
    let mut s = Session::create(store.clone(), "a", reg()).unwrap();
    build(&mut s, 3, false);
    s.flush().unwrap();
    build(&mut s, 3, false);
    s.flush().unwrap();
    snapshot::refresh(&store, &reg(), "a", &RunStatus).unwrap();
    // Corrupt a batch in the middle of the log, then point-in-time recovery cuts the log there.
    let pos = store.read("a", 16).unwrap().pos;
    drop(s);
    let store = Arc::into_inner(store).unwrap();
    drop(store);
    let seg = dir.join(format!("{:010}.tseg", pos.segment().0));
    sim.poke(&seg, pos.offset() as u64 + 30, &[0xAB]).unwrap();
    sim.set_faults(FaultPlan::default());
    // Remove the checkpoint so the cut is found by the scan.
    let _ = turnstone::vfs::Vfs::remove(&sim, &dir.join("index.ckpt"));
    let store = Arc::new(Store::open_with(dir, sim_opts(&sim, RecoveryMode::PointInTime)).unwrap());
    let len = store.session_len("a").unwrap();
    assert!(len <= 16, "the log was cut ({len})");
    let r = snapshot::read(&store, &reg(), "a", &RunStatus).unwrap();
    assert!(
        r.discarded.as_deref().unwrap().contains("leads the log"),
        "{:?}",
        r.discarded
    );
    // Grow the log past the snapshot point with different events: the source changed.
    let mut s = Session::open(store.clone(), "a", reg()).unwrap();
    for i in 0..40 {
        s.append(user(&format!("new {i}")), SurfaceOp::Append)
            .unwrap();
    }
    s.flush().unwrap();
    let r = snapshot::read(&store, &reg(), "a", &RunStatus).unwrap();
    assert!(
        r.discarded.as_deref().unwrap().contains("source changed"),
        "{:?}",
        r.discarded
    );
    assert_eq!(r.snapshot_covered, None);
}

#[test]
fn crash_at_every_step_of_snapshot_writing() {
    let dir = Path::new("/store");
    // Count the operations of one snapshot write.
    let ops_of_write = {
        let sim = SimVfs::new();
        let store = Arc::new(
            Store::open_with(dir, sim_opts(&sim, RecoveryMode::TolerateTornTail)).unwrap(),
        );
        let mut s = Session::create(store.clone(), "a", reg()).unwrap();
        build(&mut s, 4, false);
        s.flush().unwrap();
        let before = sim.ops();
        snapshot::refresh(&store, &reg(), "a", &RunStatus).unwrap();
        sim.ops() - before
    };
    assert!(ops_of_write >= 4);
    for cut in 0..=ops_of_write {
        for seed in 0..4 {
            let sim = SimVfs::new();
            let store = Arc::new(
                Store::open_with(dir, sim_opts(&sim, RecoveryMode::TolerateTornTail)).unwrap(),
            );
            let mut s = Session::create(store.clone(), "a", reg()).unwrap();
            build(&mut s, 2, false);
            s.flush().unwrap();
            snapshot::refresh(&store, &reg(), "a", &RunStatus).unwrap(); // an older snapshot exists
            build(&mut s, 2, false);
            s.flush().unwrap();
            sim.set_faults(FaultPlan {
                power_cut_after_ops: Some(sim.ops() + cut),
                ..Default::default()
            });
            let _ = snapshot::refresh(&store, &reg(), "a", &RunStatus);
            drop(s);
            drop(store);
            sim.crash(cut * 10 + seed);
            let store = Arc::new(
                Store::open_with(dir, sim_opts(&sim, RecoveryMode::TolerateTornTail)).unwrap(),
            );
            let r = snapshot::read(&store, &reg(), "a", &RunStatus).unwrap();
            assert_eq!(r.state.turns_completed, 4, "cut {cut} seed {seed}");
            assert!(
                matches!(r.snapshot_covered, Some(10) | Some(20) | None),
                "cut {cut}: {:?}",
                r.snapshot_covered
            );
        }
    }
}

#[test]
fn query_lists_filters_and_searches() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut a = Session::create(store.clone(), "a", reg()).unwrap();
    build(&mut a, 2, false);
    let mut b = Session::create(store.clone(), "b", reg()).unwrap();
    build(&mut b, 0, true);
    b.append(
        ToolResult {
            call_id: "c".into(),
            content: vec![ContentBlock::text("the giraffe file is 42 bytes")],
            is_error: false,
            status: None,
        },
        SurfaceOp::Append,
    )
    .unwrap();
    b.compact("k", 0, 1, "summary mentions okapis").unwrap();
    store.sync().unwrap();
    let list = list_sessions(&store).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[0].id.as_str(), list[0].events, list[0].open_turn),
        ("a", 10, false)
    );
    assert!(list[1].open_turn);
    assert!(list[0].created_ms.unwrap() <= list[0].updated_ms.unwrap());
    let calls = events(&store, &reg(), "a", 0..100, Some(&["user/message"])).unwrap();
    assert_eq!(calls.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 6]);
    let ranged = events(&store, &reg(), "a", 2..4, None).unwrap();
    assert_eq!(ranged.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
    let mut ix = SearchIndex::open(&store).unwrap();
    assert!(ix.update(&store, &reg()).unwrap() > 0);
    let hits = ix.search("giraffe", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!((hits[0].session.as_str(), hits[0].seq), ("b", 4));
    assert!(hits[0].snippet.contains("[giraffe]"), "{}", hits[0].snippet);
    assert_eq!(
        ix.search("okapis", 10).unwrap().len(),
        2,
        "the summary event and the summary message"
    );
    assert_eq!(ix.search("zebras", 10).unwrap().len(), 3);
    // Incremental: only new durable events are read; odd syntax is searched as a phrase.
    assert_eq!(ix.update(&store, &reg()).unwrap(), 0);
    a.append(user("a late zebras question"), SurfaceOp::Append)
        .unwrap();
    a.flush().unwrap();
    assert_eq!(ix.update(&store, &reg()).unwrap(), 1);
    assert_eq!(ix.search("zebras", 10).unwrap().len(), 4);
    assert!(ix.search("\"unbalanced", 10).is_ok());
    // The index is derived: delete it and rebuild.
    drop(ix);
    std::fs::remove_file(dir.path().join("search.sqlite")).unwrap();
    let mut ix = SearchIndex::open(&store).unwrap();
    ix.update(&store, &reg()).unwrap();
    assert_eq!(ix.search("zebras", 10).unwrap().len(), 4);
}

#[test]
fn search_session_sees_inherited_events_only_below_the_fork_point() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    // a: 2 closed turns (10 events, "zebras" at seq 1 and 6).
    let mut a = Session::create(store.clone(), "a", reg()).unwrap();
    build(&mut a, 2, false);
    // b = a[0..5] (first turn only), then b's own message.
    let b = fork(&store, "a", Some(5), Some("b")).unwrap();
    assert_eq!(b.upto, 5);
    let mut b = Session::open(store.clone(), "b", reg()).unwrap();
    b.append(user("b talks about zebras too"), SurfaceOp::Append)
        .unwrap();
    // a writes more after the fork: b must not see it.
    a.append(user("a late zebras question"), SurfaceOp::Append)
        .unwrap();
    // c = all of b (a[0..5] + b's seq 5).
    fork(&store, "b", None, Some("c")).unwrap();
    store.sync().unwrap();
    let mut ix = SearchIndex::open(&store).unwrap();
    ix.update(&store, &reg()).unwrap();
    let seqs = |hits: Vec<turnstone::backend::Hit>, who: &str| {
        let mut v: Vec<u64> = hits
            .iter()
            .map(|h| {
                assert_eq!(
                    h.session, who,
                    "hits are reported under the queried session"
                );
                h.seq
            })
            .collect();
        v.sort();
        v
    };
    // Globally every event is indexed once, under its writer.
    let all = ix.search("zebras", 50).unwrap();
    let mut by: Vec<(String, u64)> = all.iter().map(|h| (h.session.clone(), h.seq)).collect();
    by.sort();
    assert_eq!(
        by,
        vec![
            ("a".into(), 1),
            ("a".into(), 6),
            ("a".into(), 10),
            ("b".into(), 5)
        ]
    );
    assert_eq!(
        seqs(ix.search_session(&store, "a", "zebras", 50).unwrap(), "a"),
        vec![1, 6, 10]
    );
    assert_eq!(
        seqs(ix.search_session(&store, "b", "zebras", 50).unwrap(), "b"),
        vec![1, 5]
    );
    assert_eq!(
        seqs(ix.search_session(&store, "c", "zebras", 50).unwrap(), "c"),
        vec![1, 5]
    );
    // What c reads at those seqs is the hit's text.
    let c_events = events(&store, &reg(), "c", 0..10, Some(&["user/message"])).unwrap();
    assert_eq!(
        c_events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 5]
    );
    assert!(matches!(
        ix.search_session(&store, "nope", "zebras", 5),
        Err(Error::UnknownSession(_))
    ));
}

#[test]
fn replay_yields_the_events_before_an_unreadable_one_then_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    build(&mut s, 1, false);
    let good = store.session_len("s").unwrap();
    drop(s);
    // A kind from a newer build is shown as it is (opaque) …
    store
        .append("s", 77, 0, br#"{"v":0,"data":{"x":1}}"#)
        .unwrap();
    // … but a payload that is no session envelope is an error; events after
    // it are not reached.
    store.append("s", 5, 0, b"not json").unwrap();
    store.append("s", 77, 0, br#"{"v":0,"data":{}}"#).unwrap();
    store.sync().unwrap();
    let items: Vec<_> = replay(&store, "s", reg(), 0).unwrap().collect();
    assert_eq!(
        items.len() as u64,
        good + 2,
        "the good events, the opaque one, then one error"
    );
    for (i, it) in items[..good as usize].iter().enumerate() {
        assert_eq!(it.as_ref().unwrap().seq, i as u64);
    }
    let opaque = items[good as usize].as_ref().unwrap();
    assert_eq!(opaque.kind, EventKind::Plugin("unknown/77".into()));
    assert_eq!(opaque.data, serde_json::json!({"x": 1}));
    match &items[good as usize + 1] {
        Err(Error::BadEvent { seq, .. }) => assert_eq!(*seq, good + 1),
        other => panic!("{other:?}"),
    }
}

/// Kinds this process does not know: a read-only open shows them as opaque
/// events; a writable open refuses, naming kind and seq; typed custom events
/// round-trip and refuse a newer version.
#[test]
fn unknown_kinds_open_read_only_and_custom_events_are_typed() {
    use serde::{Deserialize, Serialize};
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Todo {
        items: Vec<String>,
    }
    impl CustomEvent for Todo {
        const KIND: &'static str = "harness/todo";
        const VERSION: u32 = 1;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut with = Registry::new();
    with.register_custom::<Todo>().unwrap();
    let with = Arc::new(with);
    let mut s = Session::create(store.clone(), "s", with.clone()).unwrap();
    s.append(
        UserMessage {
            content: vec![ContentBlock::text("hi")],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    let seq = s
        .append_custom(&Todo {
            items: vec!["a".into()],
        })
        .unwrap();
    // A version from the future is refused with a typed error.
    s.append_plugin(
        "harness/todo",
        &serde_json::json!({"version": 9, "event": {"items": []}}),
    )
    .unwrap();
    let evs = s.events(0..s.len()).unwrap();
    assert_eq!(
        evs[seq as usize].custom::<Todo>().unwrap().unwrap(),
        Todo {
            items: vec!["a".into()]
        }
    );
    assert!(matches!(
        evs[seq as usize + 1].custom::<Todo>(),
        Some(Err(CustomEventError::NewerVersion { found: 9, .. }))
    ));
    assert!(evs[0].custom::<Todo>().is_none());
    s.flush().unwrap();
    drop(s);
    // A process that does not know `todo/update` (not ignorable).
    let err = Session::open(store.clone(), "s", reg()).unwrap_err();
    assert!(
        matches!(&err, Error::UnknownKind { seq: 1, kind, .. } if kind == "harness/todo"),
        "{err}"
    );
    let mut view = Session::open_read_only(store.clone(), "s", reg()).unwrap();
    assert_eq!(view.len(), 3);
    assert_eq!(view.derive_messages().len(), 1);
    let evs = view.events(0..3).unwrap();
    assert_eq!(evs[1].kind, EventKind::Plugin("harness/todo".into()));
    let replayed: Vec<_> = replay(&store, "s", reg(), 0)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(replayed[1].kind, EventKind::Plugin("harness/todo".into()));
    assert_eq!(replayed[1].data["event"]["items"][0], "a");
}
