//! The session layer's rules: typed append, surface ops, derive_messages,
//! compaction, pruning, headers, unknown kinds.

use std::sync::Arc;

use serde_json::json;
use turnstone::session::*;
use turnstone::{Error, Store};

fn store() -> (tempfile::TempDir, Arc<Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    (dir, store)
}

fn user(t: &str) -> UserMessage {
    UserMessage {
        content: vec![ContentBlock::text(t)],
    }
}

fn assistant(t: &str) -> AssistantMessage {
    AssistantMessage {
        content: if t.is_empty() {
            vec![]
        } else {
            vec![ContentBlock::text(t)]
        },
        usage: None,
        stop_reason: None,
        extra: Default::default(),
    }
}

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

#[test]
fn derive_messages_maps_kinds_skips_empty_and_keeps_identity() {
    let (_d, store) = store();
    let mut s = Session::create(store, "s", reg()).unwrap();
    s.append(
        TurnStart {
            turn_id: "t".into(),
        },
        (),
    )
    .unwrap();
    s.append(user("hello"), SurfaceOp::Append).unwrap();
    s.append(
        AssistantChunk {
            index: 0,
            text: "par".into(),
        },
        (),
    )
    .unwrap();
    s.append(assistant(""), SurfaceOp::Append).unwrap();
    s.append(
        AssistantMessage {
            content: vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "ls".into(),
                input: json!({"path": "/"}),
                extra: Default::default(),
            }],
            usage: None,
            stop_reason: None,
            extra: Default::default(),
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.append(
        ToolCall {
            call_id: "c1".into(),
            name: "ls".into(),
            input: json!({"path": "/"}),
        },
        (),
    )
    .unwrap();
    s.append(
        ToolResult {
            call_id: "c1".into(),
            content: vec![ContentBlock::text("a b c")],
            is_error: false,
            status: None,
        },
        SurfaceOp::Append,
    )
    .unwrap();
    let msgs = s.derive_messages().to_vec();
    assert_eq!(
        msgs.len(),
        3,
        "empty assistant message skipped, chunk not a message"
    );
    assert_eq!(msgs[0].role, Role::User);
    assert_eq!(msgs[1].role, Role::Assistant);
    assert_eq!(msgs[2].role, Role::User);
    assert!(
        matches!(&msgs[2].content[0], ContentBlock::ToolResult { tool_use_id, content, .. } if tool_use_id == "c1" && content == "a b c")
    );
    // Stable identity when nothing changed; incremental after an append.
    let again = s.derive_messages().to_vec();
    assert!(Arc::ptr_eq(&msgs[0], &again[0]) && Arc::ptr_eq(&msgs[2], &again[2]));
    assert_eq!(s.last_derive_work(), 0);
    s.append(user("next"), SurfaceOp::Append).unwrap();
    let after = s.derive_messages().to_vec();
    assert_eq!(s.last_derive_work(), 1);
    assert_eq!(after.len(), 4);
    assert!(Arc::ptr_eq(&msgs[1], &after[1]));
}

#[test]
fn replace_rebuilds_and_keeps_originals_in_the_log() {
    let (_d, store) = store();
    let mut s = Session::create(store, "s", reg()).unwrap();
    for t in ["a", "b", "c", "d", "e"] {
        s.append(user(t), SurfaceOp::Append).unwrap();
    }
    let seq = s.compact("k1", 0, 3, "summary of a b c").unwrap();
    assert_eq!(s.surface().nodes, vec![seq, 3, 4]);
    assert_eq!(s.surface().replace_generation, 1);
    let texts: Vec<String> = s
        .derive_messages()
        .iter()
        .map(|m| match &m.content[0] {
            ContentBlock::Text { text, .. } => text.clone(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(texts, vec!["summary of a b c", "d", "e"]);
    assert_eq!(s.last_derive_work(), 3, "a replace rebuilds");
    // The replaced events are still readable.
    let evs = s.events(0..3).unwrap();
    assert_eq!(evs.len(), 3);
    let kinds: Vec<String> = s
        .events(5..9)
        .unwrap()
        .iter()
        .map(|e| e.kind.name().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "compaction/start",
            "compaction/summary",
            "user/message",
            "compaction/end"
        ]
    );
    // Invalid ranges are errors, and nothing was appended.
    let len = s.len();
    assert!(matches!(
        s.append(user("x"), SurfaceOp::Replace { start: 2, end: 9 }),
        Err(Error::SurfaceRange(_))
    ));
    assert!(s.compact("k2", 3, 1, "bad").is_err());
    assert_eq!(s.len(), len);
}

#[test]
fn prune_replaces_tool_result_and_logs_the_prune() {
    let (_d, store) = store();
    let mut s = Session::create(store, "s", reg()).unwrap();
    s.append(user("go"), SurfaceOp::Append).unwrap();
    let big = ToolResult {
        call_id: "c9".into(),
        content: vec![ContentBlock::text("x".repeat(10_000))],
        is_error: false,
        status: None,
    };
    let orig = s.append(big, SurfaceOp::Append).unwrap();
    let rep = s
        .prune_tool_result(1, "[pruned 10000 bytes]", 2500)
        .unwrap();
    assert_eq!(s.surface().nodes, vec![0, rep]);
    let prune = s
        .events(rep - 1..rep)
        .unwrap()
        .pop()
        .unwrap()
        .typed::<CompactionPrune>()
        .unwrap();
    assert_eq!(prune.replaced_seqs, vec![orig]);
    assert_eq!(prune.tokens_saved, 2500);
    match &s.derive_messages()[1].content[0] {
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } => {
            assert_eq!(tool_use_id, "c9");
            assert_eq!(content, "[pruned 10000 bytes]");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        s.prune_tool_result(0, "no", 1).is_err(),
        "node 0 is a user message"
    );
}

#[test]
fn interrupted_is_refused_from_a_live_loop() {
    let (_d, store) = store();
    let mut s = Session::create(store, "s", reg()).unwrap();
    s.append(
        TurnStart {
            turn_id: "t".into(),
        },
        (),
    )
    .unwrap();
    let r = s.append(
        TurnEnd {
            turn_id: "t".into(),
            reason: TurnEndReason::Interrupted,
        },
        (),
    );
    assert!(matches!(r, Err(Error::Refused(_))));
    assert_eq!(s.len(), 1);
    assert!(s.open_state().turn.is_some());
}

#[test]
fn headers_initial_change_resume_and_context() {
    let (_d, store) = store();
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    let mut spec = RequestSpec {
        provider: "p".into(),
        model: "m1".into(),
        explicit: [("temperature".to_string(), json!(0.5))].into(),
        adapter_defaults: [("max_tokens".to_string(), json!(1000))].into(),
        system: Some("be brief".into()),
        tools: vec![],
    };
    assert_eq!(
        s.prepare_request(&spec).unwrap(),
        Some(HeaderReason::Initial)
    );
    assert_eq!(
        s.prepare_request(&spec).unwrap(),
        None,
        "no change, no header"
    );
    let len = s.len();
    s.record_context(RequestContext {
        provider: "p".into(),
        model: "m1".into(),
        context_window: 200_000,
    })
    .unwrap();
    assert_eq!(
        s.prepare_request(&spec).unwrap(),
        None,
        "context is outside change detection"
    );
    assert_eq!(s.len(), len + 1);
    // Route change: previous adapter defaults dropped, explicit kept.
    let mut next = RequestSpec::carry_forward(s.header().unwrap());
    next.model = "m2".into();
    next.adapter_defaults = [("top_p".to_string(), json!(0.9))].into();
    assert_eq!(
        s.prepare_request(&next).unwrap(),
        Some(HeaderReason::Change)
    );
    let h = s.header().unwrap().clone();
    assert_eq!(h.config.model, "m2");
    assert!(!h.config.params.contains_key("max_tokens"));
    assert_eq!(h.config.params["temperature"], json!(0.5));
    spec.tools.push(ToolSchema {
        name: "ls".into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        extra: Default::default(),
    });
    drop(s);
    // A new agent loop over the existing session writes `resume`.
    let mut s = Session::open(store, "s", reg()).unwrap();
    assert_eq!(s.header().unwrap(), &h);
    assert_eq!(
        s.prepare_request(&next).unwrap(),
        Some(HeaderReason::Resume)
    );
    assert_eq!(
        s.prepare_request(&spec).unwrap(),
        Some(HeaderReason::Change)
    );
}

#[test]
fn check_request_reports_first_difference() {
    let (_d, store) = store();
    let mut s = Session::create(store, "s", reg()).unwrap();
    s.append(user("hello"), SurfaceOp::Append).unwrap();
    let mut req = s.rebuild_request();
    s.check_request(&req).unwrap();
    req.messages[0].content = vec![ContentBlock::text("hellO")];
    match s.check_request(&req) {
        Err(Error::RequestMismatch(d)) => assert_eq!(d.path, "/messages/0/content/0/text"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_kinds_refuse_restore_unless_ignorable() {
    let (_d, store) = store();
    let mut r = Registry::new();
    r.register("todo/update", false).unwrap();
    r.register("ui/hint", true).unwrap();
    assert!(r.register("tool/call", false).is_err());
    let r = Arc::new(r);
    let mut s = Session::create(store.clone(), "s", r.clone()).unwrap();
    s.append(user("a"), SurfaceOp::Append).unwrap();
    s.append_plugin("ui/hint", &json!({"x": 1})).unwrap();
    s.append_plugin("todo/update", &json!({"items": []}))
        .unwrap();
    assert!(s.append_plugin("nope", &json!(1)).is_err());
    drop(s);
    // Knowing both: fine.
    assert_eq!(Session::open(store.clone(), "s", r).unwrap().len(), 3);
    // Knowing neither: the ignorable one is skipped, the other refuses.
    match Session::open(store.clone(), "s", reg()) {
        Err(Error::UnknownKind { kind, seq, .. }) => {
            assert_eq!(kind, "todo/update");
            assert_eq!(seq, 2);
        }
        other => panic!("{other:?}"),
    }
    // A raw frame with an unknown core code and no ignorable flag refuses too.
    store.append("raw", 77, 0, br#"{"v":0,"data":{}}"#).unwrap();
    assert!(matches!(
        Session::open(store.clone(), "raw", reg()),
        Err(Error::UnknownKind { .. })
    ));
    store
        .append("raw2", 77, 1, br#"{"v":0,"data":{}}"#)
        .unwrap();
    assert_eq!(
        Session::open(store.clone(), "raw2", reg()).unwrap().len(),
        1
    );
    // Another session format version refuses with a clear error (v 1 is
    // an event holding blob references, FORMAT.md §10).
    store
        .append(
            "v2",
            5,
            0,
            br#"{"v":2,"surface":{"op":"append"},"data":{"content":[]}}"#,
        )
        .unwrap();
    assert!(matches!(
        Session::open(store, "v2", reg()),
        Err(Error::SessionFormat { found: 2, .. })
    ));
}

#[test]
fn repair_inactive_each_repairs_the_others_past_an_unreadable_session() {
    let (_d, store) = store();
    // a: an open turn with a tool call; b: an unknown non-ignorable kind;
    // c: an open turn. Order of creation: a, b, c.
    let mut a = Session::create(store.clone(), "a", reg()).unwrap();
    a.append(
        TurnStart {
            turn_id: "t".into(),
        },
        (),
    )
    .unwrap();
    store.append("b", 77, 0, br#"{"v":0,"data":{}}"#).unwrap();
    let mut c = Session::create(store.clone(), "c", reg()).unwrap();
    c.append(
        TurnStart {
            turn_id: "t".into(),
        },
        (),
    )
    .unwrap();
    drop((a, c));
    store.sync().unwrap();
    let host = Host::new(store.clone(), reg());
    // The fail-fast form stops at b, before c.
    assert!(matches!(
        host.repair_inactive(),
        Err(Error::UnknownKind { .. })
    ));
    let c_len = store.session_len("c").unwrap();
    let out = host.repair_inactive_each();
    let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(
        out[0].1.as_ref().unwrap().is_noop(),
        "a was repaired by the first call"
    );
    assert!(matches!(out[1].1, Err(Error::UnknownKind { .. })));
    let rc = out[2].1.as_ref().unwrap();
    assert_eq!(rc.turns_interrupted, 1);
    assert_eq!(store.session_len("c").unwrap(), c_len + rc.appended);
    // Idempotent: a second pass appends nothing.
    let again = host.repair_inactive_each();
    assert!(again[2].1.as_ref().unwrap().is_noop());
}
