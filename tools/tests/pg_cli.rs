//! `turnstone copy` and the read commands on a PostgreSQL URL, against a
//! real server (no mocks), started the way turnstone-pg's tests start it:
//! `TURNSTONE_PG_URL`, or a private server from `.ci/postgres.sh` (initdb
//! into a temp dir, a loopback port), stopped at the end. Each test gets its
//! own database. A server that cannot start fails the run (never a skip).
//!
//! `harness = false`: this main runs the tests (a name filter as the first
//! argument is honoured, as with libtest).

mod common;
#[path = "../../pg/tests/support/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::*;
use serde_json::Value;
use turnstone::session::{ContentBlock, MetaUpdate, Registry, Session, SurfaceOp, UserMessage};
use turnstone::{Options, Store};
use turnstone_pg::{PgLog, PgOptions};

struct Ctx {
    /// This test's database.
    url: String,
    tmp: tempfile::TempDir,
}

// ---- a source store with everything a copy must keep

/// Above the default blob threshold (256 KiB): stored as a blob.
const BIG: usize = 300_000;

fn user(store: &Arc<Store>, id: &str, create: bool, texts: &[String]) {
    let reg = Arc::new(Registry::new());
    let mut s = if create {
        Session::create(store.clone(), id, reg).unwrap()
    } else {
        Session::open(store.clone(), id, reg).unwrap()
    };
    for t in texts {
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(t)],
            },
            SurfaceOp::Append,
        )
        .unwrap();
    }
}

fn texts(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix} message {i}")).collect()
}

/// root (with a blob-stored block and metadata), a fork of it, a fork of
/// the fork, a second root; a deleted parent with a live fork; a deleted
/// session with no fork (not copied).
fn build_source(dir: &Path) {
    let store = Arc::new(Store::open_with(dir, Options::default()).unwrap());
    let mut big = texts("root", 5);
    // Stored out of line in the source.
    big.push(format!("large {}", "y".repeat(BIG)));
    big.extend(texts("root after", 3));
    user(&store, "root", true, &big);
    {
        let mut s = Session::open(store.clone(), "root", Arc::new(Registry::new())).unwrap();
        s.update_metadata(MetaUpdate {
            title: Some("the root".into()),
            add_tags: vec!["ci".into()],
            ..Default::default()
        })
        .unwrap();
        s.set_meta("user", "alice").unwrap();
    }
    assert!(turnstone::session::internals::has_refs(
        &store.read("root", 5).unwrap().payload
    ));
    turnstone::session::fork(&store, "root", Some(4), Some("child")).unwrap();
    user(&store, "child", false, &texts("child", 4));
    turnstone::session::fork(&store, "child", Some(6), Some("grandchild")).unwrap();
    user(&store, "grandchild", false, &texts("grandchild", 3));
    user(&store, "other", true, &texts("other", 7));
    user(&store, "doomed", true, &texts("doomed", 6));
    turnstone::session::fork(&store, "doomed", Some(3), Some("orphan")).unwrap();
    user(&store, "orphan", false, &texts("orphan", 2));
    turnstone::session::delete(&store, "doomed").unwrap();
    user(&store, "gone", true, &texts("gone", 2));
    turnstone::session::delete(&store, "gone").unwrap();
    let store = Arc::try_unwrap(store).ok().unwrap();
    store.close().unwrap();
}

type Shape = BTreeMap<String, (Option<(String, u64)>, u64, bool)>;
type Events = BTreeMap<String, Vec<(u64, u16, u16, Vec<u8>)>>;

/// Every session's (parent, len, deleted) and every event (seq, kind,
/// flags, payload with blob references resolved).
fn contents(dir: &Path) -> (Shape, Events) {
    let store = Store::open_with(
        dir,
        Options {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let (mut shape, mut events) = (Shape::new(), Events::new());
    for s in store.sessions() {
        let deleted = turnstone::session::deleted_at(&store, &s.name)
            .unwrap()
            .is_some();
        let evs = store.read_range(&s.name, 0..s.len).unwrap();
        let evs = evs
            .into_iter()
            .map(|e| {
                let e = turnstone::session::internals::resolve_event(store.blobs(), e).unwrap();
                (e.seq.0, e.kind, e.flags, e.payload)
            })
            .collect();
        shape.insert(s.name.clone(), (s.parent.clone(), s.len, deleted));
        events.insert(s.name, evs);
    }
    (shape, events)
}

fn copy(src: &str, dst: &str) -> Value {
    let out = turnstone(&["copy", src, dst, "--json"]);
    assert_eq!(code(&out), 0, "copy {src} {dst}: {}", stderr(&out));
    json_one(&out)
}

// ---- the tests

fn round_trip_dir_to_postgres_to_dir_keeps_everything(cx: &Ctx) {
    let a = cx.tmp.path().join("a");
    let b = cx.tmp.path().join("b");
    build_source(&a);
    let r = copy(p(&a), &cx.url);
    // root, child, grandchild, other, orphan; doomed only for its fork.
    assert_eq!(r["sessions"], 5, "{r}");
    assert_eq!(r["deleted_ancestors"], 1, "{r}");
    // Own events only: root 9 + 2 meta, child 4, grandchild 3, other 7,
    // orphan 2, doomed's first 3.
    assert_eq!(r["events"], 11 + 4 + 3 + 7 + 2 + 3, "{r}");

    // The database holds forks as forks, and the blob content inline.
    let log = PgLog::connect(&cx.url, PgOptions::default()).unwrap();
    let listed: BTreeMap<String, Option<(String, u64)>> = log
        .sessions()
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.parent))
        .collect();
    assert_eq!(listed.len(), 5, "{listed:?}");
    assert_eq!(listed["child"], Some(("root".into(), 4)));
    assert_eq!(listed["grandchild"], Some(("child".into(), 6)));
    assert_eq!(listed["orphan"], Some(("doomed".into(), 3)));
    assert!(!listed.contains_key("doomed") && !listed.contains_key("gone"));
    let root = log.read_range("root", 0..11).unwrap();
    assert!(root[5].payload.len() > BIG, "the large block is inline");
    assert!(!turnstone::session::internals::has_refs(&root[5].payload));
    // Searchable as a session-layer writer would have made it.
    let hits = log.search("grandchild", 10).unwrap();
    assert_eq!(hits.len(), 3, "{hits:?}");
    log.close();

    let r2 = copy(&cx.url, p(&b));
    assert_eq!(r2["sessions"], 5);
    assert_eq!(r2["events"], r["events"]);
    assert_eq!(r2["bytes"], r["bytes"]);

    let (shape_a, events_a) = contents(&a);
    let (shape_b, events_b) = contents(&b);
    for (id, (parent, len, deleted)) in &shape_a {
        if *deleted && id != "doomed" {
            assert!(!shape_b.contains_key(id), "{id} was copied");
            continue;
        }
        let (pb, lb, db) = &shape_b[id];
        assert_eq!(parent, pb, "{id}: parent");
        assert_eq!(deleted, db, "{id}: deleted");
        if *deleted {
            // Up to its fork point, then a tombstone of its own.
            assert_eq!(*lb, 4, "{id}");
            assert_eq!(events_a[id][..3], events_b[id][..3], "{id}");
            continue;
        }
        assert_eq!(len, lb, "{id}: len");
        assert_eq!(events_a[id], events_b[id], "{id}: events");
    }
    // Directory to directory gives the same.
    let c = cx.tmp.path().join("c");
    let r3 = copy(p(&a), p(&c));
    assert_eq!(
        (&r3["sessions"], &r3["events"]),
        (&r["sessions"], &r["events"])
    );
    // (A tombstone written by a copy has the copy's ts: left out.)
    let no_tombstones = |(shape, mut events): (Shape, Events)| {
        for (id, (.., deleted)) in &shape {
            if *deleted {
                events.get_mut(id).unwrap().pop();
            }
        }
        (shape, events)
    };
    assert_eq!(
        no_tombstones(contents(&c)),
        no_tombstones((shape_b.clone(), events_b.clone()))
    );

    // The large block is a blob of the destination again.
    let st = Store::open_with(
        &b,
        Options {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(turnstone::session::internals::has_refs(
        &st.read("root", 5).unwrap().payload
    ));
    // And every envelope's ts came along (they are in the payloads).
    let ts =
        |e: &(u64, u16, u16, Vec<u8>)| serde_json::from_slice::<Value>(&e.3).unwrap()["ts"].clone();
    assert!(ts(&events_b["grandchild"][7]).is_u64());
    assert_eq!(
        ts(&events_a["grandchild"][7]),
        ts(&events_b["grandchild"][7])
    );
}

fn a_missing_blob_stops_the_copy_naming_session_and_seq(cx: &Ctx) {
    let a = cx.tmp.path().join("a");
    build_source(&a);
    {
        let st = Store::open(&a).unwrap();
        let blobs = st.blobs().list().unwrap();
        assert_eq!(blobs.len(), 1);
        std::fs::remove_file(st.blobs().path(&blobs[0])).unwrap();
        st.close().unwrap();
    }
    let out = turnstone(&["copy", p(&a), &cx.url]);
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(
        err.contains("session \"root\", seq 5: its blob references cannot be resolved"),
        "{err}"
    );
    // Stopped there: nothing of root past seq 4 and no later session.
    let log = PgLog::connect(&cx.url, PgOptions::default()).unwrap();
    let ids: Vec<String> = log.sessions().unwrap().into_iter().map(|s| s.id).collect();
    assert!(ids.len() <= 1, "{ids:?}");
    assert!(log.session_len("root").unwrap_or(0) <= 5);
    log.close();
}

fn copy_into_a_destination_holding_a_session_writes_nothing(cx: &Ctx) {
    let a = cx.tmp.path().join("a");
    build_source(&a);
    let log = PgLog::connect(&cx.url, PgOptions::default()).unwrap();
    let w = log.acquire("other", "someone", true).unwrap().writer;
    w.append(9, 0, b"theirs").unwrap();
    w.sync().unwrap();
    w.release().unwrap();
    let out = turnstone(&["copy", p(&a), &cx.url]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("already has session(s) [\"other\"]"), "{err}");
    assert!(err.contains("nothing was copied"), "{err}");
    // Nothing else was written, and "other" is untouched.
    let ids: Vec<String> = log.sessions().unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, vec!["other".to_string()]);
    assert_eq!(log.read_range("other", 0..1).unwrap()[0].payload, b"theirs");
    assert_eq!(log.session_len("other").unwrap(), 1);
    log.close();

    // A store directory that has one of the sessions, from the database.
    let b = cx.tmp.path().join("b");
    {
        let st = Store::open(&b).unwrap();
        st.append("other", 9, 0, b"mine").unwrap();
        st.sync().unwrap();
        st.close().unwrap();
    }
    let out = turnstone(&["copy", &cx.url, p(&b)]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("already has session(s) [\"other\"]"),
        "{}",
        stderr(&out)
    );
    let st = Store::open(&b).unwrap();
    let names: Vec<String> = st.sessions().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["other".to_string()]);
    assert_eq!(st.read("other", 0).unwrap().payload, b"mine");
    st.close().unwrap();
}

fn read_commands_on_a_url_print_what_they_print_on_the_directory(cx: &Ctx) {
    let a = cx.tmp.path().join("a");
    build_source(&a);
    copy(p(&a), &cx.url);
    let same = |args: &[&str]| {
        let out = same_on_both(&a, &cx.url, args);
        assert!(!out.is_empty(), "{args:?} printed nothing");
        out
    };
    let listed = same(&["sessions", "--json"]);
    assert_eq!(listed.lines().count(), 5, "{listed}");
    // Metadata, times and forks came along: filters answer alike.
    assert_eq!(same(&["sessions", "--tag", "ci"]).lines().count(), 1);
    same(&["sessions", "--where", "user=alice", "--json"]);
    same(&["sessions", "--parent", "child"]);
    same(&["sessions", "--newest-first", "--limit", "2"]);
    same(&["sessions"]);
    for s in ["root", "child", "grandchild", "orphan", "other"] {
        let exported = same(&["export", "--session", s]);
        assert!(exported.lines().all(|l| l.contains("\"ts\":")), "{s}");
        same(&["replay", "--session", s, "--json"]);
        same(&["replay", "--session", s]);
    }
    // The blob-stored block comes out inline from both.
    assert!(same(&["export", "--session", "root"]).contains(&"y".repeat(1000)));
    // Search: PostgreSQL's own text search, the same hits here.
    let out = turnstone(&["search", &cx.url, "grandchild", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let hits = json_lines(&out);
    assert_eq!(hits.len(), 3);
    assert!(hits.iter().all(|h| h["session"] == "grandchild"));
    let out = turnstone(&[
        "search",
        &cx.url,
        "root",
        "--session",
        "grandchild",
        "--json",
    ]);
    let hits = json_lines(&out);
    // root's messages 0..4 are inherited through child (fork at 4, then at 6).
    assert_eq!(hits.len(), 4, "{hits:?}");
    for s in ["nope", "doomed"] {
        let out = turnstone(&["search", &cx.url, "root", "--session", s]);
        assert_eq!(code(&out), 2, "{s}");
        assert!(stderr(&out).contains("has no session"), "{}", stderr(&out));
    }
    // Unknown, deleted, and a flag that only means something for a directory.
    for s in ["nope", "doomed", "gone"] {
        let out = turnstone(&["export", &cx.url, "--session", s]);
        assert_eq!(code(&out), 2);
        assert!(stderr(&out).contains("has no session"), "{}", stderr(&out));
    }
    let out = turnstone(&["export", &cx.url, "--session", "root", "--salvage"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--salvage"));
}

/// Run `args` (the command, then its arguments) on the directory and on
/// the URL; both must succeed and print the same.
fn same_on_both(dir: &Path, url: &str, args: &[&str]) -> String {
    let with = |target: &str| {
        let mut v = vec![args[0], target];
        v.extend_from_slice(&args[1..]);
        let out = turnstone(&v);
        assert_eq!(code(&out), 0, "{v:?}: {}", stderr(&out));
        stdout(&out)
    };
    let (d, u) = (with(p(dir)), with(url));
    assert_eq!(d, u, "{args:?}");
    d
}

/// The session layer on a URL (issue 18): `messages`, `meta`, `fork` and
/// `delete` do on the database what they do on the directory.
fn session_commands_on_a_url_do_what_they_do_on_the_directory(cx: &Ctx) {
    let a = cx.tmp.path().join("a");
    build_source(&a);
    copy(p(&a), &cx.url);
    let url = cx.url.as_str();
    for s in ["root", "child", "grandchild", "orphan", "other"] {
        let m = same_on_both(&a, url, &["messages", "--session", s, "--json"]);
        assert!(m.lines().count() >= 2, "{s}: {m}");
        same_on_both(&a, url, &["messages", "--session", s]);
        same_on_both(
            &a,
            url,
            &["messages", "--session", s, "--format", "anthropic"],
        );
        same_on_both(&a, url, &["meta", "--session", s, "--json"]);
    }
    // A blob-stored block on one side, inline on the other: the same message.
    assert!(
        same_on_both(&a, url, &["messages", "--session", "root", "--json"])
            .contains(&"y".repeat(1000))
    );
    // Writes through the session layer, leased on the database.
    let meta = same_on_both(
        &a,
        url,
        &[
            "meta",
            "--session",
            "other",
            "--set",
            "team=infra",
            "--tag",
            "t2",
            "--json",
        ],
    );
    assert!(meta.contains("infra"), "{meta}");
    assert_eq!(
        same_on_both(&a, url, &["sessions", "--tag", "t2"])
            .lines()
            .count(),
        1
    );
    let child = same_on_both(
        &a,
        url,
        &[
            "fork",
            "--session",
            "root",
            "--at",
            "3",
            "--child",
            "root-3",
        ],
    );
    assert_eq!(child.trim(), "root-3");
    let m = same_on_both(&a, url, &["messages", "--session", "root-3", "--json"]);
    assert_eq!(m.lines().count(), 3, "{m}");
    same_on_both(&a, url, &["delete", "--session", "other"]);
    for target in [p(&a), url] {
        let out = turnstone(&["messages", target, "--session", "other"]);
        assert_eq!(code(&out), 2, "{target}: {}", stderr(&out));
        let out = turnstone(&["delete", target, "--session", "other"]);
        assert_eq!(code(&out), 2, "deleted twice on {target}");
        let out = turnstone(&["fork", target, "--session", "nope"]);
        assert_eq!(code(&out), 2, "{target}");
    }
    let listed = same_on_both(&a, url, &["sessions"]);
    assert!(!listed.contains("other"), "{listed}");
    assert!(listed.contains("root-3"), "{listed}");
}

/// `turnstone gc URL` removes a deleted session's events (a live fork's
/// inherited prefix stays readable); store-directory options are refused.
fn gc_on_a_url_removes_deleted_sessions_events(cx: &Ctx) {
    let log = PgLog::connect(&cx.url, PgOptions::default()).unwrap();
    let w = log.acquire("gone", "t", true).unwrap().writer;
    for i in 0..6u8 {
        w.append(1, 0, &[i; 8]).unwrap();
    }
    w.sync().unwrap();
    w.release().unwrap();
    log.fork("gone", 4, "kept").unwrap();
    log.delete("gone").unwrap();
    let before = log.read_range("kept", 0..4).unwrap();
    let out = turnstone(&["gc", &cx.url, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json_one(&out);
    assert_eq!(v["deleted_sessions"], 1, "{v}");
    assert_eq!(v["events_removed"], 2, "events 4 and 5: no fork reads them");
    assert_eq!(log.read_range("kept", 0..4).unwrap(), before);
    let out = turnstone(&["gc", &cx.url, "--json"]);
    assert_eq!(json_one(&out)["events_removed"], 0);
    let out = turnstone(&["gc", &cx.url, "--regroup"]);
    assert_eq!(code(&out), 2, "a usage error: {}", stderr(&out));
    assert!(stderr(&out).contains("--regroup applies to a store directory"));
    log.close();
}

fn main() {
    type Test = fn(&Ctx);
    let tests: Vec<(&str, Test, bool)> = vec![
        (
            "round_trip_dir_to_postgres_to_dir_keeps_everything",
            round_trip_dir_to_postgres_to_dir_keeps_everything,
            false,
        ),
        (
            "read_commands_on_a_url_print_what_they_print_on_the_directory",
            read_commands_on_a_url_print_what_they_print_on_the_directory,
            false,
        ),
        (
            "session_commands_on_a_url_do_what_they_do_on_the_directory",
            session_commands_on_a_url_do_what_they_do_on_the_directory,
            false,
        ),
        (
            "a_missing_blob_stops_the_copy_naming_session_and_seq",
            a_missing_blob_stops_the_copy_naming_session_and_seq,
            false,
        ),
        (
            "gc_on_a_url_removes_deleted_sessions_events",
            gc_on_a_url_removes_deleted_sessions_events,
            false,
        ),
        (
            "copy_into_a_destination_holding_a_session_writes_nothing",
            copy_into_a_destination_holding_a_session_writes_nothing,
            false,
        ),
    ];
    server::run_tests("turnstone_cli_test", &tests, |f, url, _| {
        f(&Ctx {
            url,
            tmp: tempfile::tempdir().unwrap(),
        })
    });
}
