//! A repeated tool-use id is refused at append, not run again (issue 39
//! §4): providers refuse a conversation where two tool uses share an id,
//! and a harness that re-appends an answered assistant message (a retry
//! after a crash) must not run its tools a second time. The ids a session
//! has used survive a reopen from its state snapshot.

use std::sync::Arc;

use serde_json::json;
use turnstone::session::*;
use turnstone::{Error, Store};

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

fn call(id: &str) -> ToolCall {
    ToolCall {
        call_id: id.into(),
        name: "shell".into(),
        input: json!({}),
    }
}

fn result(id: &str) -> ToolResult {
    ToolResult {
        call_id: id.into(),
        content: vec![ContentBlock::text("ok")],
        is_error: false,
        status: None,
    }
}

fn user(t: &str) -> UserMessage {
    UserMessage {
        content: vec![ContentBlock::text(t)],
    }
}

fn refused(e: Error, id: &str) {
    assert!(
        matches!(e, Error::Refused(ref m) if m.contains(id)),
        "expected a refusal naming {id}: {e}"
    );
}

/// c1 asked for, called and answered.
fn answered(s: &mut Session) {
    s.append(user("go"), SurfaceOp::Append).unwrap();
    s.append(asks_for(&["c1"]), SurfaceOp::Append).unwrap();
    s.append(call("c1"), ()).unwrap();
    s.append(result("c1"), SurfaceOp::Append).unwrap();
}

#[test]
fn an_answered_tool_use_id_is_refused_in_a_new_assistant_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    answered(&mut s);
    let before = s.len();
    refused(
        s.append(asks_for(&["c2", "c1"]), SurfaceOp::Append)
            .unwrap_err(),
        "c1",
    );
    assert_eq!(s.len(), before, "nothing appended");
    // Nor can its tool be called again.
    refused(s.append(call("c1"), ()).unwrap_err(), "c1");
    assert_eq!(s.len(), before);
    // A fresh id is fine.
    s.append(asks_for(&["c2"]), SurfaceOp::Append).unwrap();
}

#[test]
fn an_open_tool_use_id_is_refused_in_a_second_message_and_twice_in_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    s.append(user("go"), SurfaceOp::Append).unwrap();
    refused(
        s.append(asks_for(&["c1", "c1"]), SurfaceOp::Append)
            .unwrap_err(),
        "c1",
    );
    s.append(asks_for(&["c1"]), SurfaceOp::Append).unwrap();
    refused(
        s.append(asks_for(&["c1"]), SurfaceOp::Append).unwrap_err(),
        "c1",
    );
    // The call is recorded once; a second tool/call for it is refused.
    s.append(call("c1"), ()).unwrap();
    refused(s.append(call("c1"), ()).unwrap_err(), "c1");
}

#[test]
fn the_run_tool_wrapper_does_not_run_an_answered_tool_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    answered(&mut s);
    let mut ran = false;
    let out = run_tool(
        &mut s,
        ToolScope::model(),
        "c1",
        "shell",
        json!({}),
        &CancelToken::new(),
        |_| Ok(()),
        |_, _| {
            ran = true;
            ToolBody {
                content: vec![ContentBlock::text("again")],
                is_error: false,
                value: (),
            }
        },
    );
    assert!(out.is_err(), "{out:?}");
    assert!(!ran, "the body of an answered tool ran again");
}

#[test]
fn used_ids_survive_a_reopen_from_the_state_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
        answered(&mut s);
        s.flush().unwrap();
        s.save_state_snapshot().unwrap();
    }
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::open(store, "s", Arc::new(Registry::new())).unwrap();
    assert_eq!(
        s.restored_from_snapshot(),
        Some(4),
        "the reopen used the state snapshot"
    );
    refused(
        s.append(asks_for(&["c1"]), SurfaceOp::Append).unwrap_err(),
        "c1",
    );
}

#[test]
fn a_replace_may_carry_the_ids_it_replaces() {
    // Pruning a result re-writes a tool_result for the same id, and an edit
    // of an assistant message keeps its tool uses: a replace is not a repeat.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    answered(&mut s);
    s.append(result("c1"), SurfaceOp::Replace { start: 2, end: 3 })
        .unwrap();
    s.append(asks_for(&["c1"]), SurfaceOp::Replace { start: 1, end: 2 })
        .unwrap();
}

#[test]
fn a_group_that_calls_one_tool_twice_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    s.append(user("go"), SurfaceOp::Append).unwrap();
    s.append(asks_for(&["c1", "c2"]), SurfaceOp::Append)
        .unwrap();
    let before = s.len();
    let call_json = |id: &str| {
        (
            "tool/call".to_string(),
            json!({"call_id": id, "name": "shell", "input": {}}),
            None,
        )
    };
    refused(
        s.append_json_group(vec![call_json("c1"), call_json("c2"), call_json("c1")])
            .unwrap_err(),
        "c1",
    );
    assert_eq!(s.len(), before, "nothing of the group was written");
    s.append_json_group(vec![call_json("c1"), call_json("c2")])
        .unwrap();
}

#[test]
fn record_tool_calls_refuses_an_answered_or_repeated_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    answered(&mut s);
    s.append(asks_for(&["c2"]), SurfaceOp::Append).unwrap();
    let before = s.len();
    refused(
        s.record_tool_calls(&[call("c2"), call("c1")]).unwrap_err(),
        "c1",
    );
    refused(
        s.record_tool_calls(&[call("c2"), call("c2")]).unwrap_err(),
        "c2",
    );
    assert_eq!(s.len(), before, "nothing of either group was written");
    s.record_tool_calls(&[call("c2")]).unwrap();
}
