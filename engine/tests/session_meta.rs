//! Session metadata (`session/meta`) and deletion (`session/delete`):
//! metadata is a fold over the log (restored after a crash, inherited by
//! forks up to the fork point); a tombstone makes the session not found by
//! loads, lists and search, while its forks keep working.

use std::path::Path;
use std::sync::Arc;

use turnstone::session::*;
use turnstone::session::{list_sessions, SearchIndex};
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Error, Options, Store};

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

fn user(t: &str) -> UserMessage {
    UserMessage {
        content: vec![ContentBlock::text(t)],
    }
}

fn turn(s: &mut Session, id: &str, text: &str) {
    s.append(TurnStart { turn_id: id.into() }, ()).unwrap();
    s.append(user(text), SurfaceOp::Append).unwrap();
    s.append(
        TurnEnd {
            turn_id: id.into(),
            reason: TurnEndReason::Completed,
        },
        (),
    )
    .unwrap();
}

#[test]
fn metadata_is_a_fold_over_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    s.set_title("first").unwrap();
    s.set_title("second").unwrap();
    s.add_tag("a").unwrap();
    s.add_tag("b").unwrap();
    s.remove_tag("a").unwrap();
    s.set_meta("cwd", "/src").unwrap();
    s.set_meta("user", "u1").unwrap();
    s.remove_meta("user").unwrap();
    let live = s.metadata().clone();
    assert_eq!(live.title.as_deref(), Some("second"));
    assert_eq!(live.tags.iter().collect::<Vec<_>>(), ["b"]);
    assert_eq!(live.fields.len(), 1);
    assert_eq!(live.fields["cwd"], "/src");
    drop(s);
    let back = Session::open(store.clone(), "s", reg()).unwrap();
    assert_eq!(back.metadata(), &live);
    // Metadata is not model-visible.
    let mut back = back;
    assert!(back.derive_messages().is_empty());
}

#[test]
fn bad_metadata_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", reg()).unwrap();
    assert!(matches!(s.add_tag(""), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        s.set_meta("a=b", "c"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        s.set_meta("k", &"x".repeat(META_VALUE_BYTES_MAX + 1)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        s.append(SessionDelete {}, ()),
        Err(Error::Refused(_))
    ));
    assert_eq!(s.len(), 0);
}

#[test]
fn metadata_survives_a_crash_once_durable() {
    let dir = Path::new("/store");
    let sim = SimVfs::new();
    let opts = |sim: &SimVfs| Options {
        vfs: Arc::new(sim.clone()),
        segment_bytes: 32 * 1024,
        ..Default::default()
    };
    let store = Arc::new(Store::open_with(dir, opts(&sim)).unwrap());
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    s.set_title("durable").unwrap();
    s.add_tag("kept").unwrap();
    s.flush().unwrap();
    // Not waited for: may be lost, never half applied.
    sim.set_faults(FaultPlan {
        power_cut_after_ops: Some(sim.ops()),
        ..Default::default()
    });
    let _ = s.set_meta("lost", "maybe");
    drop(s);
    drop(store);
    sim.crash(1);
    let store = Arc::new(Store::open_with(dir, opts(&sim)).unwrap());
    let s = Session::open(store.clone(), "s", reg()).unwrap();
    assert_eq!(s.metadata().title.as_deref(), Some("durable"));
    assert!(s.metadata().tags.contains("kept"));
    assert!(!s.metadata().fields.contains_key("lost"));
}

#[test]
fn fork_inherits_metadata_up_to_the_fork_point_then_has_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut p = Session::create(store.clone(), "p", reg()).unwrap();
    p.set_title("parent").unwrap();
    p.add_tag("shared").unwrap();
    p.set_meta("model", "m1").unwrap();
    turn(&mut p, "t1", "hello");
    p.flush().unwrap();
    let f = fork(&store, "p", None, Some("c")).unwrap();
    // The parent goes on after the fork point: the child does not see it.
    p.set_meta("model", "m2").unwrap();
    p.add_tag("parent-only").unwrap();
    p.flush().unwrap();
    let mut c = Session::open(store.clone(), &f.child, reg()).unwrap();
    assert_eq!(c.metadata().title.as_deref(), Some("parent"));
    assert_eq!(c.metadata().fields["model"], "m1");
    assert!(c.metadata().tags.contains("shared"));
    assert!(!c.metadata().tags.contains("parent-only"));
    c.set_title("child").unwrap();
    c.remove_tag("shared").unwrap();
    assert_eq!(p.metadata().title.as_deref(), Some("parent"));
    assert!(p.metadata().tags.contains("shared"));
    drop(c);
    let c = Session::open_read_only(store.clone(), "c", reg()).unwrap();
    assert_eq!(c.metadata().title.as_deref(), Some("child"));
    assert!(c.metadata().tags.is_empty());
}

#[test]
fn deleted_session_is_not_found_by_loads_lists_and_search() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "gone", reg()).unwrap();
    turn(&mut s, "t1", "needle in the deleted one");
    let mut k = Session::create(store.clone(), "kept", reg()).unwrap();
    turn(&mut k, "t1", "needle in the kept one");
    k.flush().unwrap();
    drop(k);
    let mut ix = SearchIndex::open(&store).unwrap();
    ix.update(&store, &Registry::new()).unwrap();
    assert_eq!(ix.search("needle", 10).unwrap().len(), 2);

    let seq = s.delete().unwrap();
    assert_eq!(seq, 3);
    let open = Session::open(store.clone(), "gone", reg()).unwrap_err();
    assert!(
        matches!(&open, Error::SessionDeleted { session, seq: 3 } if session == "gone"),
        "{open}"
    );
    assert!(open.is_not_found());
    assert!(Session::open_read_only(store.clone(), "gone", reg())
        .unwrap_err()
        .is_not_found());
    let host = Host::new(store.clone(), reg());
    assert!(host.load("gone").unwrap_err().is_not_found());
    assert!(replay(&store, "gone", reg(), 0)
        .err()
        .is_some_and(|e| e.is_not_found()));
    assert!(fork(&store, "gone", None, None).unwrap_err().is_not_found());
    assert!(delete(&store, "gone").unwrap_err().is_not_found());
    // The id is not reused.
    assert!(matches!(
        Session::create(store.clone(), "gone", reg()),
        Err(Error::SessionExists(_))
    ));
    let ids: Vec<String> = list_sessions(&store)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["kept"]);
    ix.update(&store, &Registry::new()).unwrap();
    let hits = ix.search("needle", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session, "kept");
    assert!(ix
        .search_session(&store, "gone", "needle", 10)
        .unwrap_err()
        .is_not_found());
    // Repairing every inactive session skips the deleted one.
    assert_eq!(host.repair_inactive().unwrap().len(), 1);
    // And it stays deleted after a reopen.
    drop(ix);
    drop(host);
    drop(store);
    let store = Arc::new(Store::open(dir.path()).unwrap());
    assert!(Session::open(store.clone(), "gone", reg())
        .unwrap_err()
        .is_not_found());
}

#[test]
fn delete_is_refused_while_a_writable_handle_holds_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let s = Session::create(store.clone(), "s", reg()).unwrap();
    assert!(matches!(
        delete(&store, "s"),
        Err(Error::SessionLive { .. })
    ));
    drop(s);
    assert!(matches!(
        delete(&store, "nope"),
        Err(Error::UnknownSession(_))
    ));
    delete(&store, "s").unwrap();
    // The claim was released: nothing is live.
    assert!(store.live_sessions().live_since("s").is_none());
}

#[test]
fn fork_of_a_deleted_parent_still_loads_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut p = Session::create(store.clone(), "p", reg()).unwrap();
    p.set_title("parent title").unwrap();
    turn(&mut p, "t1", "inherited text");
    p.flush().unwrap();
    fork(&store, "p", None, Some("c")).unwrap();
    turn(&mut p, "t2", "parent only");
    p.delete().unwrap();

    let mut ix = SearchIndex::open(&store).unwrap();
    ix.update(&store, &Registry::new()).unwrap();
    let check = |store: &Arc<Store>, ix: &SearchIndex| {
        let mut c = Session::open(store.clone(), "c", reg()).unwrap();
        assert_eq!(c.metadata().title.as_deref(), Some("parent title"));
        assert_eq!(c.derive_messages().len(), 1);
        let evs: Vec<SessionEvent> = replay(store, "c", reg(), 0)
            .unwrap()
            .collect::<turnstone::Result<_>>()
            .unwrap();
        assert_eq!(evs.len(), 4);
        turn(&mut c, "t9", "child's own");
        c.flush().unwrap();
        let hits = ix.search_session(store, "c", "inherited", 10).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].session, "c");
        let listed: Vec<String> = list_sessions(store)
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(listed, ["c"]);
        let catalog = Catalog::build(store).unwrap();
        assert!(catalog.get(store, "p").is_none());
        let c = catalog.get(store, "c").unwrap();
        assert_eq!(c.metadata.title.as_deref(), Some("parent title"));
        assert_eq!(c.parent, Some(("p".to_string(), 4)));
        let page = catalog.list(&ListQuery {
            parent: Some("p".into()),
            ..Default::default()
        });
        assert_eq!(
            page.sessions.len(),
            1,
            "a deleted parent's children are listed"
        );
    };
    check(&store, &ix);
    drop(ix);
    drop(store);
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut ix = SearchIndex::open(&store).unwrap();
    ix.update(&store, &Registry::new()).unwrap();
    let c = Session::open_read_only(store.clone(), "c", reg()).unwrap();
    assert_eq!(c.len(), 7);
    drop(c);
    // Across sessions, text is found under the session that wrote it, and
    // a deleted writer is left out; the child's own search finds it.
    assert!(ix.search("inherited", 10).unwrap().is_empty());
    assert_eq!(
        ix.search_session(&store, "c", "inherited", 10)
            .unwrap()
            .len(),
        1
    );
}
