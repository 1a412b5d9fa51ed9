//! Session state snapshots (FORMAT.md §17): an open that starts from a
//! snapshot and folds the tail gives the same session as a fold from seq 0;
//! a snapshot that is damaged, leads the log, or belongs to a log that
//! changed is discarded and the open is still right.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use turnstone::session::internals::state_snapshot_path;
use turnstone::session::*;
use turnstone::{Options, Store};

#[derive(Debug, Clone)]
enum Op {
    /// A user message; `Some` replaces a range of the surface.
    User(String, Option<(u8, u8)>),
    /// An assistant message (empty content: derives no message).
    Assistant(String, bool),
    /// An assistant message asking for a tool (left open).
    ToolUse,
    /// A `tool/call` for the n-th open request (or an unrequested one).
    Call(u8),
    /// A `tool/result` for the n-th open call or request (or for nothing).
    Result(u8),
    TurnStart,
    TurnEnd(u8),
    StepStart,
    StepEnd,
    Header(u8),
    Context(u8),
    Meta(u8),
    Plugin(bool),
    Compact(u8, u8),
    Derive,
    /// Write a state snapshot here.
    Snapshot,
}

fn op() -> impl Strategy<Value = Op> {
    let text = "[a-z ]{0,8}";
    prop_oneof![
        5 => (text, proptest::option::of((any::<u8>(), any::<u8>()))).prop_map(|(t, r)| Op::User(t, r)),
        3 => (text, any::<bool>()).prop_map(|(t, e)| Op::Assistant(t, e)),
        2 => Just(Op::ToolUse),
        2 => any::<u8>().prop_map(Op::Call),
        2 => any::<u8>().prop_map(Op::Result),
        1 => Just(Op::TurnStart),
        1 => (0u8..3).prop_map(Op::TurnEnd),
        1 => Just(Op::StepStart),
        1 => Just(Op::StepEnd),
        1 => (0u8..3).prop_map(Op::Header),
        1 => (0u8..3).prop_map(Op::Context),
        1 => (0u8..4).prop_map(Op::Meta),
        1 => any::<bool>().prop_map(Op::Plugin),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Compact(a, b)),
        1 => Just(Op::Derive),
        2 => Just(Op::Snapshot),
    ]
}

fn registry() -> Arc<Registry> {
    let mut r = Registry::new();
    r.register("todo/update", false).unwrap();
    r.register("ui/hint", true).unwrap();
    Arc::new(r)
}

fn opts() -> Options {
    Options {
        segment_bytes: 256 * 1024,
        ..Default::default()
    }
}

fn range(len: usize, a: u8, b: u8) -> (u64, u64) {
    let x = a as usize % (len + 1);
    let y = b as usize % (len + 1);
    (x.min(y) as u64, x.max(y) as u64)
}

/// Apply `op`; refusals (a replace that would split a tool pair) are fine.
fn apply(s: &mut Session, op: &Op, n: &mut u32) {
    *n += 1;
    let n = *n;
    let r = match op {
        Op::User(t, None) => s.append(
            UserMessage {
                content: vec![ContentBlock::text(t)],
            },
            SurfaceOp::Append,
        ),
        Op::User(t, Some((a, b))) => {
            let (start, end) = range(s.surface().len(), *a, *b);
            s.append(
                UserMessage {
                    content: vec![ContentBlock::text(t)],
                },
                SurfaceOp::Replace { start, end },
            )
        }
        Op::Assistant(t, empty) => s.append(
            AssistantMessage {
                content: if *empty {
                    vec![]
                } else {
                    vec![ContentBlock::text(t)]
                },
                usage: None,
                stop_reason: None,
                extra: Default::default(),
            },
            SurfaceOp::Append,
        ),
        Op::ToolUse => s.append(
            AssistantMessage {
                content: vec![ContentBlock::ToolUse {
                    id: format!("use-{n}"),
                    name: "sh".into(),
                    input: json!({"n": n}),
                    extra: Default::default(),
                }],
                usage: None,
                stop_reason: Some("tool_use".into()),
                extra: Default::default(),
            },
            SurfaceOp::Append,
        ),
        Op::Call(i) => {
            let open: Vec<String> = s.open_state().requested.keys().cloned().collect();
            let id = if open.is_empty() || *i % 5 == 0 {
                format!("free-{n}")
            } else {
                open[*i as usize % open.len()].clone()
            };
            s.append(
                ToolCall {
                    call_id: id,
                    name: "sh".into(),
                    input: json!({}),
                },
                (),
            )
        }
        Op::Result(i) => {
            let mut open: Vec<String> = s.open_state().calls.keys().cloned().collect();
            open.extend(s.open_state().requested.keys().cloned());
            let id = if open.is_empty() || *i % 5 == 0 {
                format!("nobody-{n}")
            } else {
                open[*i as usize % open.len()].clone()
            };
            s.append(
                ToolResult {
                    call_id: id,
                    content: vec![ContentBlock::text(format!("out {n}"))],
                    is_error: *i % 3 == 0,
                    status: None,
                },
                SurfaceOp::Append,
            )
        }
        Op::TurnStart => s.append(
            TurnStart {
                turn_id: format!("t{n}"),
            },
            (),
        ),
        Op::TurnEnd(r) => s.append(
            TurnEnd {
                turn_id: s.open_state().turn.clone().map(|t| t.0).unwrap_or_default(),
                reason: match r {
                    0 => TurnEndReason::Completed,
                    1 => TurnEndReason::Cancelled,
                    _ => TurnEndReason::Error {
                        message: format!("e{n}"),
                    },
                },
            },
            (),
        ),
        Op::StepStart => s.append(
            StepStart {
                turn_id: "t".into(),
                step_id: format!("s{n}"),
            },
            (),
        ),
        Op::StepEnd => s.append(
            StepEnd {
                turn_id: "t".into(),
                step_id: "s".into(),
                reason: StepEndReason::ToolUse,
            },
            (),
        ),
        Op::Header(m) => {
            let spec = RequestSpec {
                provider: "p".into(),
                model: format!("m{m}"),
                system: (*m == 1).then(|| "be brief".into()),
                ..Default::default()
            };
            s.prepare_request(&spec).map(|_| 0)
        }
        Op::Context(w) => s.record_context(RequestContext {
            provider: "p".into(),
            model: format!("m{w}"),
            context_window: 1000 * (*w as u64 + 1),
        }),
        Op::Meta(k) => match k {
            0 => s.set_title(&format!("title {n}")),
            1 => s.add_tag(&format!("tag{}", n % 3)),
            2 => s.remove_tag("tag1"),
            _ => s.set_meta("k", &format!("v{n}")),
        },
        Op::Plugin(ign) => s.append_plugin(
            if *ign { "ui/hint" } else { "todo/update" },
            &json!({"n": n}),
        ),
        Op::Compact(a, b) => {
            let (start, end) = range(s.surface().len(), *a, *b);
            s.compact(&format!("c{n}"), start, end, "summary")
        }
        Op::Derive => {
            s.derive_messages();
            Ok(0)
        }
        Op::Snapshot => s.save_state_snapshot().map(|_| 0),
    };
    assert!(
        matches!(r, Ok(_) | Err(turnstone::Error::Refused(_))),
        "{op:?}: {r:?}"
    );
}

/// Everything a session shows, as comparable JSON.
fn fingerprint(s: &mut Session) -> serde_json::Value {
    let msgs: Vec<Message> = s.derive_messages().iter().map(|m| (**m).clone()).collect();
    let open = s.open_state().clone();
    json!({
        "len": s.len(),
        "surface": s.surface().nodes,
        "generation": s.surface().replace_generation,
        "messages": msgs,
        "header": s.header(),
        "context": s.context(),
        "history_end": s.history_end(),
        "turn": open.turn,
        "step": open.step,
        "calls": open.calls,
        "requested": open.requested,
        "origin": open.origin,
        "unrequested": open.unrequested,
        "turns": s.turns(),
        "metadata": s.metadata(),
        "body": s.request_body(Provider::Anthropic),
    })
}

fn remove_snapshot(dir: &Path, session: &str) {
    let p = state_snapshot_path(dir, session);
    if p.exists() {
        std::fs::remove_file(p).unwrap();
    }
}

/// Run `ops` on a fresh session (seeded with history when `seed`), then
/// open it from its state snapshot and from seq 0; both must show the same.
/// Returns the events the snapshot covered (None: no snapshot was used).
fn check(ops: &[Op], seed: bool) -> Option<u64> {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut s = if seed {
        Session::create_with_history(
            store.clone(),
            "s",
            registry(),
            &[HistoryEvent {
                kind: EventKind::Core(CoreKind::UserMessage),
                data: json!({"content": [{"type": "text", "text": "earlier"}]}),
                surface: Some(SurfaceOp::Append),
                ts: None,
            }],
        )
        .unwrap()
    } else {
        Session::create(store.clone(), "s", registry()).unwrap()
    };
    let mut n = 0;
    let mut expected = None;
    for op in ops {
        if matches!(op, Op::Snapshot) && !s.is_empty() {
            expected = Some(s.len());
        }
        apply(&mut s, op, &mut n);
    }
    let live = fingerprint(&mut s);
    s.flush().unwrap();
    drop(s);
    drop(store);

    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut a = Session::open(store.clone(), "s", registry()).unwrap();
    let used = a.restored_from_snapshot();
    assert_eq!(used, expected, "the open starts from the last snapshot");
    assert_eq!(a.snapshot_discarded(), None);
    let fa = fingerprint(&mut a);
    drop(a);
    let mut v = Session::open_read_only(store.clone(), "s", registry()).unwrap();
    assert_eq!(v.restored_from_snapshot(), used);
    let fv = fingerprint(&mut v);
    drop(v);
    remove_snapshot(dir.path(), "s");
    let mut b = Session::open(store.clone(), "s", registry()).unwrap();
    assert_eq!(b.restored_from_snapshot(), None);
    let fb = fingerprint(&mut b);
    // The live handle's messages were built as it appended; they are the
    // same as the fold's (invariant 4), as is everything else.
    assert_eq!(fa, fb, "open from snapshot vs from seq 0");
    assert_eq!(fv, fb, "read-only view from snapshot vs from seq 0");
    assert_eq!(live, fb, "live handle vs fold from seq 0");
    used
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn open_from_a_state_snapshot_equals_the_fold_from_seq_0(
        ops in proptest::collection::vec(op(), 1..80),
        seed in any::<bool>(),
    ) {
        // The open must start from the last snapshot written (checked in
        // `check`) whenever the ops asked for one after an event.
        let used = check(&ops, seed);
        let wrote = ops.iter().any(|o| matches!(o, Op::Snapshot));
        prop_assert!(wrote || used.is_none());
    }
}

/// A session of `n` user/assistant pairs with a tool left open halfway.
fn long_session(store: &Arc<Store>, id: &str, n: u32) -> Session {
    let mut s = Session::create(store.clone(), id, registry()).unwrap();
    let mut k = 0;
    for i in 0..n {
        apply(&mut s, &Op::User(format!("q{i}"), None), &mut k);
        apply(&mut s, &Op::Assistant(format!("a{i}"), i % 7 == 3), &mut k);
        if i == n / 2 {
            apply(&mut s, &Op::ToolUse, &mut k);
            apply(&mut s, &Op::Call(1), &mut k);
            apply(&mut s, &Op::Header(1), &mut k);
        }
    }
    s
}

#[test]
fn a_snapshot_cuts_the_fold_to_the_tail_and_covers_open_tools() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut s = long_session(&store, "s", 100);
    assert!(s.save_state_snapshot().unwrap());
    let covered = s.len();
    // Nothing new: no second write.
    assert!(!s.save_state_snapshot().unwrap());
    let mut k = 1000;
    apply(&mut s, &Op::User("tail".into(), None), &mut k);
    let want = fingerprint(&mut s);
    s.close().unwrap();
    let mut r = Session::open(store.clone(), "s", registry()).unwrap();
    assert_eq!(r.restored_from_snapshot(), Some(covered));
    assert_eq!(r.open_state().calls.len(), 1, "the open tool call survives");
    assert_eq!(fingerprint(&mut r), want);
    // The restored handle appends on from the right state.
    apply(&mut r, &Op::Result(1), &mut k);
    assert!(r.open_state().calls.is_empty());
}

#[test]
fn a_damaged_snapshot_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut s = long_session(&store, "s", 50);
    s.save_state_snapshot().unwrap();
    let want = fingerprint(&mut s);
    drop(s);
    let path = state_snapshot_path(dir.path(), "s");
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let mut r = Session::open(store.clone(), "s", registry()).unwrap();
    assert_eq!(r.restored_from_snapshot(), None);
    assert!(r.snapshot_discarded().unwrap().contains("checksum"));
    assert_eq!(fingerprint(&mut r), want);
    // Cut short: discarded too.
    std::fs::write(&path, &bytes[..40]).unwrap();
    drop(r);
    let mut r = Session::open(store, "s", registry()).unwrap();
    assert_eq!(r.restored_from_snapshot(), None);
    assert!(r.snapshot_discarded().is_some());
    assert_eq!(fingerprint(&mut r), want);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else if e.file_name() != "LOCK" && e.file_name() != "lock" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn a_snapshot_that_leads_the_log_or_of_a_changed_log_is_discarded() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let store = Arc::new(Store::open_with(&a, opts()).unwrap());
    let s = long_session(&store, "s", 20);
    s.flush().unwrap();
    drop(s);
    drop(store);
    // `b`: the store as it was at 20 rounds (a backup, or a point-in-time
    // restore).
    copy_dir(&a, &b);
    let store = Arc::new(Store::open_with(&a, opts()).unwrap());
    let mut s = Session::open(store.clone(), "s", registry()).unwrap();
    let mut k = 500;
    for i in 0..10 {
        apply(&mut s, &Op::User(format!("more {i}"), None), &mut k);
    }
    assert!(s.save_state_snapshot().unwrap());
    drop(s);
    drop(store);
    // The newer snapshot lands in the older store: it leads that log.
    let snap = state_snapshot_path(&a, "s");
    std::fs::create_dir_all(b.join("snapshots")).unwrap();
    std::fs::copy(&snap, state_snapshot_path(&b, "s")).unwrap();
    let store_b = Arc::new(Store::open_with(&b, opts()).unwrap());
    let mut r = Session::open(store_b.clone(), "s", registry()).unwrap();
    assert_eq!(r.restored_from_snapshot(), None);
    assert!(
        r.snapshot_discarded().unwrap().contains("leads the log"),
        "{:?}",
        r.snapshot_discarded()
    );
    // The older log grows past the snapshot point with other events: the
    // event at the snapshot point differs.
    for i in 0..15 {
        apply(&mut r, &Op::Assistant(format!("other {i}"), false), &mut k);
    }
    r.flush().unwrap();
    let want = fingerprint(&mut r);
    drop(r);
    std::fs::copy(&snap, state_snapshot_path(&b, "s")).unwrap();
    let mut r = Session::open(store_b, "s", registry()).unwrap();
    assert_eq!(r.restored_from_snapshot(), None);
    assert!(
        r.snapshot_discarded().unwrap().contains("differs"),
        "{:?}",
        r.snapshot_discarded()
    );
    assert_eq!(fingerprint(&mut r), want);
}

#[test]
fn a_snapshot_is_not_used_by_a_process_that_would_refuse_its_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut s = long_session(&store, "s", 5);
    s.append_plugin("todo/update", &json!({})).unwrap();
    s.save_state_snapshot().unwrap();
    drop(s);
    // Without `todo/update` registered, the fold from seq 0 refuses the
    // session; so must the open with a snapshot.
    let bare = Arc::new(Registry::new());
    let err = Session::open(store.clone(), "s", bare.clone()).unwrap_err();
    assert!(
        matches!(err, turnstone::Error::UnknownKind { .. }),
        "{err:?}"
    );
    // A read-only view shows it (as an opaque event), from seq 0.
    let v = Session::open_read_only(store, "s", bare).unwrap();
    assert_eq!(v.restored_from_snapshot(), None);
    assert!(v.snapshot_discarded().unwrap().contains("todo/update"));
}

#[test]
fn fork_children_snapshot_their_own_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut p = long_session(&store, "parent", 30);
    assert!(p.save_state_snapshot().unwrap());
    let upto = p.len() - 4;
    p.flush().unwrap();
    drop(p);
    store.fork("parent", upto, "child").unwrap();
    let mut c = Session::open(store.clone(), "child", registry()).unwrap();
    // The parent's snapshot covers other events than the child's log.
    assert_eq!(c.restored_from_snapshot(), None);
    let mut k = 2000;
    for i in 0..6 {
        apply(&mut c, &Op::User(format!("child {i}"), None), &mut k);
    }
    assert!(c.save_state_snapshot().unwrap());
    apply(&mut c, &Op::ToolUse, &mut k);
    let want = fingerprint(&mut c);
    c.close().unwrap();
    let mut r = Session::open(store.clone(), "child", registry()).unwrap();
    assert_eq!(r.restored_from_snapshot(), Some(upto + 6));
    assert_eq!(fingerprint(&mut r), want);
    drop(r);
    remove_snapshot(dir.path(), "child");
    let mut r = Session::open(store.clone(), "child", registry()).unwrap();
    assert_eq!(fingerprint(&mut r), want);
    // The parent is untouched by the child's snapshot.
    let mut p = Session::open(store.clone(), "parent", registry()).unwrap();
    assert_eq!(p.restored_from_snapshot(), Some(upto + 4));
    let from_snapshot = fingerprint(&mut p);
    drop(p);
    remove_snapshot(dir.path(), "parent");
    let mut p = Session::open(store, "parent", registry()).unwrap();
    assert_eq!(fingerprint(&mut p), from_snapshot);
}

#[test]
fn open_and_close_write_snapshots_of_long_tails() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let s = long_session(&store, "s", 600);
    let len = s.len();
    assert!(len >= turnstone::session::internals::STATE_SNAPSHOT_TAIL);
    // Dropped, not closed: no snapshot.
    drop(s);
    assert!(!state_snapshot_path(dir.path(), "s").exists());
    // The open folds the whole session and writes one.
    let s = Session::open(store.clone(), "s", registry()).unwrap();
    assert_eq!(s.restored_from_snapshot(), None);
    assert!(state_snapshot_path(dir.path(), "s").exists());
    drop(s);
    let mut s = Session::open(store.clone(), "s", registry()).unwrap();
    assert_eq!(s.restored_from_snapshot(), Some(len));
    let mut k = 9000;
    for i in 0..turnstone::session::internals::STATE_SNAPSHOT_TAIL {
        apply(&mut s, &Op::User(format!("x{i}"), None), &mut k);
    }
    s.close().unwrap();
    let s = Session::open(store, "s", registry()).unwrap();
    assert_eq!(
        s.restored_from_snapshot(),
        Some(len + turnstone::session::internals::STATE_SNAPSHOT_TAIL)
    );
}

#[test]
fn a_restored_message_that_cannot_be_read_is_an_error_not_a_shorter_request() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    // Enough events to seal the first 256 KiB segment.
    let mut s = long_session(&store, "s", 1500);
    assert!(s.save_state_snapshot().unwrap());
    let len = s.len();
    s.close().unwrap();
    let pos = store.read("s", 0).unwrap().pos;
    assert!(store.read("s", len - 1).unwrap().pos.segment() != pos.segment());
    drop(store);
    // Damage the first user message's frame (a surface node the snapshot
    // keeps only the key of).
    let seg = dir
        .path()
        .join(turnstone::frame::segment_file_name(pos.segment()));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[pos.offset() as usize + 30] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut r = Session::open(store, "s", registry()).unwrap();
    assert_eq!(r.restored_from_snapshot(), Some(len));
    assert!(r.try_derive_messages().is_err());
    // The infallible call gives no messages rather than a list missing one,
    // and the handle refuses to append on top of state it could not read.
    assert!(r.derive_messages().is_empty());
    let err = r
        .append(
            UserMessage {
                content: vec![ContentBlock::text("more")],
            },
            SurfaceOp::Append,
        )
        .unwrap_err();
    assert!(err.to_string().contains("could not be read"), "{err}");
}
