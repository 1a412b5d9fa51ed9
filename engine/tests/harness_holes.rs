//! Regression tests for the integrity holes a harness author hit (issue
//! "Carry a real agent's conversation", §3): each test is one hole.

use std::sync::Arc;

use serde_json::json;
use turnstone::session::*;
use turnstone::{Error, Store};

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

fn user(t: &str) -> UserMessage {
    UserMessage {
        content: vec![ContentBlock::text(t)],
    }
}

fn asks_for(ids: &[&str]) -> AssistantMessage {
    AssistantMessage {
        content: ids
            .iter()
            .map(|id| ContentBlock::tool_use(*id, "shell", json!({"cmd": id})))
            .collect(),
        usage: None,
        stop_reason: Some("tool_use".into()),
        extra: Default::default(),
    }
}

/// Record the `tool/call` of a tool use `asks_for` made.
fn record_call(s: &mut Session, id: &str) {
    s.append(
        ToolCall {
            call_id: id.into(),
            name: "shell".into(),
            input: json!({}),
        },
        (),
    )
    .unwrap();
}

/// (a) A compaction that removes a tool use whose result is still pending
/// is refused; validate_messages checks both directions.
#[test]
fn a_replace_cannot_remove_a_pending_tool_use() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", reg()).unwrap();
    s.append(user("go"), SurfaceOp::Append).unwrap();
    s.append(asks_for(&["c1"]), SurfaceOp::Append).unwrap();
    record_call(&mut s, "c1");
    let err = s.compact("k", 0, 2, "summary").unwrap_err();
    assert!(
        matches!(err, Error::Refused(ref m) if m.contains("pending")),
        "{err}"
    );
    // Nothing was appended by the refused compaction.
    assert_eq!(s.len(), 3);
    // Once answered, compacting use and result together is fine.
    s.append(
        ToolResult {
            call_id: "c1".into(),
            content: vec![ContentBlock::text("ok")],
            is_error: false,
            status: None,
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.compact("k", 0, 3, "summary").unwrap();
    validate_messages(s.derive_messages()).unwrap();

    // validate_messages: an orphan result and a late result are problems.
    let m = |role, content| {
        Arc::new(Message {
            role,
            source_seq: 0,
            kind: String::new(),
            content,
        })
    };
    let orphan = [m(Role::User, vec![ContentBlock::tool_result("x", "r")])];
    assert!(matches!(
        validate_messages(&orphan),
        Err(MessageProblem::OrphanToolResult { .. })
    ));
    let late = [
        m(
            Role::Assistant,
            vec![ContentBlock::tool_use("x", "t", json!({}))],
        ),
        m(Role::User, vec![ContentBlock::text("well?")]),
        m(Role::Assistant, vec![ContentBlock::text("hm")]),
        m(Role::User, vec![ContentBlock::tool_result("x", "r")]),
    ];
    assert!(matches!(
        validate_messages(&late),
        Err(MessageProblem::UnansweredToolUse { message: 0, .. })
    ));
    // Consecutive assistant messages are one turn: its results may follow both.
    let merged = [
        m(
            Role::Assistant,
            vec![ContentBlock::tool_use("x", "t", json!({}))],
        ),
        m(
            Role::Assistant,
            vec![ContentBlock::tool_use("y", "t", json!({}))],
        ),
        m(Role::User, vec![ContentBlock::tool_result("y", "r")]),
        m(Role::User, vec![ContentBlock::tool_result("x", "r")]),
    ];
    validate_messages(&merged).unwrap();
    let twice = [
        m(
            Role::Assistant,
            vec![ContentBlock::tool_use("x", "t", json!({}))],
        ),
        m(Role::User, vec![ContentBlock::tool_result("x", "r")]),
        m(Role::User, vec![ContentBlock::tool_result("x", "r")]),
    ];
    assert!(matches!(
        validate_messages(&twice),
        Err(MessageProblem::DuplicateToolResult { .. })
    ));
}

/// (b) Liveness is a property of the store: a second host cannot load (and
/// "repair") a session that is mid-tool in the first; read-only views work;
/// once the first handle is gone, the second host loads and repairs it.
#[test]
fn a_second_host_cannot_repair_a_live_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let h1 = Host::new(store.clone(), reg());
    let h2 = Host::new(store.clone(), reg());
    let shared = h1.create("s").unwrap();
    {
        let mut s = shared.lock();
        s.append(
            TurnStart {
                turn_id: "t".into(),
            },
            (),
        )
        .unwrap();
        s.append(user("go"), SurfaceOp::Append).unwrap();
        s.append(asks_for(&["c1"]), SurfaceOp::Append).unwrap();
        record_call(&mut s, "c1");
    }
    let err = h2.load("s").unwrap_err();
    assert!(
        matches!(&err, Error::SessionLive { session, .. } if session == "s"),
        "{err}"
    );
    assert!(err.to_string().contains("live"), "{err}");
    // repair_inactive on the second host leaves it alone.
    assert!(h2.repair_inactive().unwrap().is_empty());
    assert!(h2.repair_inactive_each().is_empty());
    // A read-only view of the live session is allowed and appends nothing.
    let mut view = Session::open_read_only(store.clone(), "s", reg()).unwrap();
    assert_eq!(view.derive_messages().len(), 2);
    assert!(view.append(user("x"), SurfaceOp::Append).is_err());
    // The live handle goes on appending.
    shared
        .lock()
        .append(
            ToolResult {
                call_id: "c1".into(),
                content: vec![ContentBlock::text("done")],
                is_error: false,
                status: None,
            },
            SurfaceOp::Append,
        )
        .unwrap();
    let len = shared.lock().len();
    drop(shared);
    // Now inactive everywhere: h2 loads it and repair closes only the turn.
    let (s2, report) = h2.load("s").unwrap();
    let report = report.unwrap();
    assert!(report.tools_outcome_unknown.is_empty(), "{report:?}");
    assert_eq!(report.turns_interrupted, 1);
    assert_eq!(s2.lock().len(), len + 1);
}

/// (c) A tool result over the payload limit still closes the call: an error
/// result says why (size and limit), the output stays out of the log.
#[test]
fn an_oversized_tool_result_closes_the_call_with_an_error_result() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    // Blobs off: with them, a large block goes out of line and the result
    // is recorded (tests/blobs.rs).
    store.blobs().set_threshold(usize::MAX);
    let mut s = Session::create(store, "s", reg()).unwrap();
    s.append(asks_for(&["big"]), SurfaceOp::Append).unwrap();
    let huge = "x".repeat(17 << 20); // over the 16 MiB payload limit
    let out = run_tool(
        &mut s,
        ToolScope::model(),
        "big",
        "shell",
        json!({}),
        &CancelToken::new(),
        |_| Ok(()),
        |_, _| ToolBody {
            content: vec![ContentBlock::text(huge.clone())],
            is_error: false,
            value: 7,
        },
    )
    .unwrap();
    let ToolOutcome::ResultNotRecorded {
        value,
        reason,
        result_seq,
    } = out
    else {
        panic!("expected ResultNotRecorded, got {out:?}");
    };
    assert_eq!(value, 7);
    assert!(reason.contains("exceeds the maximum"), "{reason}");
    assert!(s.open_state().calls.is_empty(), "the call is closed");
    let r = s.events(result_seq..result_seq + 1).unwrap()[0]
        .typed::<ToolResult>()
        .unwrap();
    assert!(r.is_error);
    assert!(r.content[0].as_text().unwrap().contains("bytes"));
    validate_messages(s.derive_messages()).unwrap();
}

/// (d) Reads never cause a sync and read only what is durable: views of a
/// live session see its events once group commit made them durable.
#[test]
fn reads_cause_no_sync_and_see_only_durable_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    for i in 0..10 {
        s.append(user(&format!("m{i}")), SurfaceOp::Append).unwrap();
    }
    s.flush().unwrap();
    for i in 10..15 {
        s.append(user(&format!("m{i}")), SurfaceOp::Append).unwrap();
    }
    let syncs = store.stats().syncs;
    let reg = Registry::new();
    for _ in 0..200 {
        let evs = events(&store, &reg, "s", 0..15, None).unwrap();
        assert_eq!(evs.len(), 10, "only the durable events");
        let part = events(&store, &reg, "s", 3..5, None).unwrap();
        assert_eq!(part.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(
            replay(&store, "s", Arc::new(reg.clone()), 0)
                .unwrap()
                .count(),
            10
        );
        let listed = list_sessions(&store).unwrap();
        assert_eq!(listed[0].events, 10);
    }
    assert_eq!(store.stats().syncs, syncs, "reads made nothing durable");
    // The writer's own handle sees its appends at once.
    assert_eq!(s.derive_messages().len(), 15);
    s.flush().unwrap();
    assert_eq!(events(&store, &reg, "s", 0..15, None).unwrap().len(), 15);
}

/// (e) A fork child has its own creation time, and its first request header
/// is a `change` when the config changed.
#[test]
fn fork_child_has_its_own_creation_time_and_logs_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "p", reg()).unwrap();
    let spec = RequestSpec {
        provider: "anthropic".into(),
        model: "m1".into(),
        ..Default::default()
    };
    s.prepare_request(&spec).unwrap();
    s.append(user("hi"), SurfaceOp::Append).unwrap();
    s.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let f = fork(&store, "p", None, Some("c")).unwrap();
    let child = || {
        list_sessions(&store)
            .unwrap()
            .into_iter()
            .find(|x| x.id == "c")
            .unwrap()
    };
    assert_eq!(child().created_ms, None, "no own event yet");
    let mut c = Session::open(store.clone(), &f.child, reg()).unwrap();
    let mut next = spec.clone();
    next.model = "m2".into();
    assert_eq!(
        c.prepare_request(&next).unwrap(),
        Some(HeaderReason::Change)
    );
    c.flush().unwrap();
    let parent = list_sessions(&store).unwrap()[0].clone();
    assert!(child().created_ms.unwrap() >= parent.created_ms.unwrap() + 20);
    // Unchanged config in a new loop is a `resume`.
    drop(c);
    let mut c = Session::open(store.clone(), "c", reg()).unwrap();
    assert_eq!(
        c.prepare_request(&next).unwrap(),
        Some(HeaderReason::Resume)
    );
}
