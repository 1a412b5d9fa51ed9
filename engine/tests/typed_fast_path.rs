//! `Session::append` of the engine's own types (chunks, tool calls and the
//! three surface kinds) serialises the data once, straight into the logged
//! payload, and folds the typed data without parsing it back (issue 16).
//! What it logs and what the live handle derives must be exactly what the
//! general path (JSON text, parsed and checked) logs and derives, and what a
//! fold of the log gives after a reopen.

use std::sync::Arc;

use serde_json::{json, Value};
use turnstone::session::*;
use turnstone::{Error, Store};

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

/// A turn with every fast kind, provider-native content included: a
/// thinking block with its signature, an image, a block type the engine
/// does not know, extra fields, a tool result of one text block (moved into
/// its message), one of blocks, and one with a status.
fn turn() -> Vec<(&'static str, Value, Option<SurfaceOp>)> {
    let app = Some(SurfaceOp::Append);
    vec![
        (
            "user/message",
            json!({"content": [
                {"type": "text", "text": "look at this \"quoted\" \u{1F600} line\nnext", "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
            ]}),
            app,
        ),
        (
            "assistant/chunk",
            json!({"index": 0, "text": "Let me"}),
            None,
        ),
        (
            "assistant/chunk",
            json!({"index": 1, "text": " check\u{0007}."}),
            None,
        ),
        (
            "assistant/message",
            json!({"content": [
                {"type": "thinking", "thinking": "the user wants ls", "signature": "EqQBCkYIARgCIkD=="},
                {"type": "future_block_v9", "payload": {"n": 1}},
                {"type": "text", "text": "Running it."},
                {"type": "tool_use", "id": "call-1", "name": "shell", "input": {"cmd": "ls -la"}},
                {"type": "tool_use", "id": "call-2", "name": "shell", "input": {"cmd": "pwd"}},
                {"type": "tool_use", "id": "call-3", "name": "shell", "input": {"cmd": "false"}}
            ], "usage": {"input_tokens": 10, "output_tokens": 5, "service_tier": "standard"},
               "stop_reason": "tool_use", "id": "msg_01"}),
            app,
        ),
        (
            "tool/call",
            json!({"call_id": "call-1", "name": "shell", "input": {"cmd": "ls -la"}}),
            None,
        ),
        (
            "tool/result",
            json!({"call_id": "call-1", "content": [{"type": "text", "text": "a\nb\n"}]}),
            app,
        ),
        (
            "tool/call",
            json!({"call_id": "call-2", "name": "shell", "input": {"cmd": "pwd"}}),
            None,
        ),
        (
            "tool/result",
            json!({"call_id": "call-2", "content": [
                {"type": "text", "text": "/home"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
            ]}),
            app,
        ),
        (
            "tool/call",
            json!({"call_id": "call-3", "name": "shell", "input": {"cmd": "false"}}),
            None,
        ),
        (
            "tool/result",
            json!({"call_id": "call-3", "content": [{"type": "text", "text": "exit 1"}], "is_error": true, "status": "TOOL_NOT_STARTED"}),
            app,
        ),
    ]
}

/// Append one event as its typed data through `Session::append`.
fn append_typed(s: &mut Session, kind: &str, data: &Value, op: Option<SurfaceOp>) -> u64 {
    let d = data.clone();
    let typed = |op: Option<SurfaceOp>| op.expect("a surface kind takes an op");
    match kind {
        "user/message" => s.append(serde_json::from_value::<UserMessage>(d).unwrap(), typed(op)),
        "assistant/chunk" => s.append(serde_json::from_value::<AssistantChunk>(d).unwrap(), ()),
        "assistant/message" => s.append(
            serde_json::from_value::<AssistantMessage>(d).unwrap(),
            typed(op),
        ),
        "tool/call" => s.append(serde_json::from_value::<ToolCall>(d).unwrap(), ()),
        "tool/result" => s.append(serde_json::from_value::<ToolResult>(d).unwrap(), typed(op)),
        other => panic!("not a fast kind: {other}"),
    }
    .unwrap()
}

/// The logged payloads of a session without the append time.
fn logged(store: &Store, id: &str) -> Vec<(u16, Value)> {
    let n = store.session_len(id).unwrap();
    store
        .read_range(id, 0..n)
        .unwrap()
        .into_iter()
        .map(|e| {
            let mut v: Value = serde_json::from_slice(&e.payload).unwrap();
            v.as_object_mut().unwrap().remove("ts");
            (e.kind, v)
        })
        .collect()
}

fn messages(s: &mut Session) -> Vec<Value> {
    s.derive_messages()
        .iter()
        .map(|m| serde_json::to_value(&**m).unwrap())
        .collect()
}

#[test]
fn typed_appends_log_and_derive_what_json_text_appends_do() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut typed = Session::create(store.clone(), "typed", reg()).unwrap();
    let mut text = Session::create(store.clone(), "text", reg()).unwrap();
    for (kind, data, op) in turn() {
        let a = append_typed(&mut typed, kind, &data, op);
        let b = text.append_json_text(kind, &data.to_string(), op).unwrap();
        assert_eq!(a, b, "{kind}");
    }
    assert_eq!(logged(&store, "typed"), logged(&store, "text"));
    // Provider-native content went into the log unchanged.
    let log = logged(&store, "typed");
    assert_eq!(log[3].1["data"], turn()[3].1);
    let live = messages(&mut typed);
    assert_eq!(live, messages(&mut text));
    assert_eq!(live.len(), 5, "{live:#?}");
    assert_eq!(typed.open_state().calls.len(), 0);
    assert_eq!(typed.open_state().requested.len(), 0);
    drop((typed, text));
    // A fold of the log gives what the live handle derived.
    let mut again = Session::open(store.clone(), "typed", reg()).unwrap();
    assert_eq!(messages(&mut again), live);
    // The moved tool-result text is the text that was logged.
    assert_eq!(live[2]["content"][0]["content"], json!("a\nb\n"));
}

#[test]
fn an_append_after_another_writer_appended_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    s.append(
        TurnStart {
            turn_id: "t1".into(),
        },
        (),
    )
    .unwrap();
    // A raw append behind the handle's back.
    let (kind, payload) = (
        CoreKind::AssistantChunk.code(),
        br#"{"v":1,"data":{"index":0,"text":"x"}}"#,
    );
    store.append("s", kind, 0, payload).unwrap();
    assert_eq!(store.session_len("s"), Some(2));
    for attempt in 0..2 {
        let err = s
            .append(
                AssistantChunk {
                    index: attempt,
                    text: "y".into(),
                },
                (),
            )
            .unwrap_err();
        assert!(
            matches!(&err, Error::Refused(m) if m.contains("appended to by another handle")),
            "{err}"
        );
        let err = s
            .append(
                UserMessage {
                    content: vec![ContentBlock::text("hi")],
                },
                SurfaceOp::Append,
            )
            .unwrap_err();
        assert!(matches!(&err, Error::Refused(_)), "{err}");
    }
    assert_eq!(store.session_len("s"), Some(2), "nothing was appended");
    assert_eq!(s.len(), 1);
}
