//! Event data given as JSON (the bindings' path, issue 39 §1 and §6): a
//! shape error names the kind, the field path and what was expected, in
//! one message; data that is not a JSON object is refused for a core kind
//! (serde would read a struct from an array); nothing is written.

use std::sync::Arc;

use serde_json::json;
use turnstone::session::*;
use turnstone::{Error, Store};

fn session() -> (tempfile::TempDir, Session) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    (dir, s)
}

fn refused(r: turnstone::Result<u64>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn data_that_is_not_an_object_is_refused_naming_the_kind() {
    let (_d, mut s) = session();
    let m = refused(s.append_json_text("turn/start", r#"["x"]"#, None));
    assert!(
        m.contains("turn/start") && m.contains("JSON object") && m.contains("array"),
        "{m}"
    );
    let m = refused(s.append_json("turn/start", json!(["x"]), None));
    assert!(m.contains("turn/start") && m.contains("JSON object"), "{m}");
    // The surface kinds' fast path (text parsed straight into the type).
    let m = refused(s.append_json_text(
        "user/message",
        r#"[[{"type":"text","text":"hi"}]]"#,
        Some(SurfaceOp::Append),
    ));
    assert!(
        m.contains("user/message") && m.contains("JSON object"),
        "{m}"
    );
    let m = refused(s.append_json_text("tool/call", "3", None));
    assert!(m.contains("tool/call") && m.contains("number"), "{m}");
    let g = s.append_json_group(vec![("turn/start".into(), json!("t1"), None)]);
    match g {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("JSON object"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.len(), 0);
}

#[test]
fn a_shape_error_names_the_kind_the_field_and_the_expected_shape() {
    let (_d, mut s) = session();
    let m = refused(s.append_json("turn/end", json!({"turn_id": "t"}), None));
    assert!(m.contains("turn/end") && m.contains("`reason`"), "{m}");
    let m = refused(s.append_json(
        "turn/end",
        json!({"turn_id": "t", "reason": {"kind": "finished"}}),
        None,
    ));
    assert!(
        m.contains("turn/end") && m.contains("reason") && m.contains("completed"),
        "{m}"
    );
    let m = refused(s.append_json_text(
        "tool/result",
        r#"{"call_id": "c", "content": [], "is_error": "yes"}"#,
        Some(SurfaceOp::Append),
    ));
    assert!(
        m.contains("tool/result") && m.contains("is_error") && m.contains("boolean"),
        "{m}"
    );
    let m = refused(s.append_json(
        "request/header",
        json!({"reason": "initial", "header": {"config": {"provider": "anthropic"}}}),
        None,
    ));
    assert!(m.contains("request/header") && m.contains("header"), "{m}");
    assert_eq!(s.len(), 0);
}

#[test]
fn metadata_follows_the_same_rule() {
    let (_d, mut s) = session();
    let m = refused(s.append_json("session/meta", json!([]), None));
    assert!(
        m.contains("session/meta") && m.contains("JSON object"),
        "{m}"
    );
    assert_eq!(s.len(), 0);
}
