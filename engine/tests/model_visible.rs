//! Invariant 4, model-visible iff logged: after random appends, replaces,
//! compactions, prunes and header changes, closing and reopening the store
//! gives byte-identical derive_messages() and rebuild_request().

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use turnstone::session::*;
use turnstone::{Options, Store};

#[derive(Debug, Clone)]
enum Op {
    User(String, Option<(u8, u8)>),
    Assistant(String, bool),
    ToolRound(String, usize),
    Chunk(String),
    Compact(u8, u8, String),
    Prune(u8),
    Header(u8, u8, bool),
    Plugin(u8),
    Derive,
    /// A checkpoint: the handle's appends become durable, so a handle that
    /// has not derived drops their messages at its next append.
    Flush,
    /// A user (false) or assistant (true) message of arbitrary JSON blocks:
    /// typed, odd-shaped or unknown, all must come back equal.
    Blocks(bool, Vec<serde_json::Value>),
}

/// Arbitrary JSON: leaves of every kind, nested arrays and objects.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-z\\\"é😀 ]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A block: an object whose `type` is known or not, with arbitrary fields
/// (sometimes the ones its typed variant names), or any JSON at all.
fn block() -> impl Strategy<Value = serde_json::Value> {
    let ty = prop_oneof![
        Just("text"),
        Just("thinking"),
        Just("image"),
        Just("tool_use"),
        Just("tool_result"),
        Just("reasoning"),
        Just("function_call"),
        Just("output_text"),
        Just("message"),
        Just("hologram"),
        Just("web_search_tool_result"),
    ];
    prop_oneof![
        4 => (ty, "[a-z ]{0,8}", proptest::collection::btree_map("[a-z_]{1,10}", json_value(), 0..4))
            .prop_map(|(t, text, extra)| {
                let mut m: serde_json::Map<String, serde_json::Value> = extra.into_iter().collect();
                m.insert("type".into(), json!(t));
                // The fields the typed variants name, so some parse as typed.
                for k in ["text", "thinking", "signature", "id", "name", "call_id", "arguments", "tool_use_id", "role"] {
                    if !m.contains_key(k) && text.len() % 3 != 0 {
                        m.insert(k.into(), json!(text.clone()));
                    }
                }
                m.entry("input").or_insert(json!({"q": text}));
                m.entry("content").or_insert(json!(text));
                serde_json::Value::Object(m)
            }),
        1 => json_value(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let text = "[a-zé😀 ]{0,12}";
    prop_oneof![
        4 => (text, proptest::option::of((any::<u8>(), any::<u8>()))).prop_map(|(t, r)| Op::User(t, r)),
        3 => (text, any::<bool>()).prop_map(|(t, e)| Op::Assistant(t, e)),
        3 => (text, 0usize..3000).prop_map(|(t, n)| Op::ToolRound(t, n)),
        2 => text.prop_map(Op::Chunk),
        1 => (any::<u8>(), any::<u8>(), text).prop_map(|(a, b, t)| Op::Compact(a, b, t)),
        1 => any::<u8>().prop_map(Op::Prune),
        1 => (0u8..3, 0u8..3, any::<bool>()).prop_map(|(m, t, s)| Op::Header(m, t, s)),
        1 => (0u8..2).prop_map(Op::Plugin),
        2 => Just(Op::Derive),
        2 => Just(Op::Flush),
        2 => (any::<bool>(), proptest::collection::vec(block(), 1..4)).prop_map(|(a, b)| Op::Blocks(a, b)),
    ]
}

fn range(len: usize, a: u8, b: u8) -> (u64, u64) {
    let x = a as usize % (len + 1);
    let y = b as usize % (len + 1);
    (x.min(y) as u64, x.max(y) as u64)
}

fn registry() -> Arc<Registry> {
    let mut r = Registry::new();
    r.register("todo/update", false).unwrap();
    r.register("ui/hint", true).unwrap();
    Arc::new(r)
}

fn run(ops: &[Op]) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut logged_blocks: Vec<(u64, serde_json::Value)> = Vec::new();
    // Arbitrary blocks may hold tool uses nobody answers: message validity
    // is only checked for histories without them.
    let mut wild = false;
    let mut unique_ids = 0u64;
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options {
        segment_bytes: 256 * 1024,
        ..Default::default()
    };
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut s = Session::create(store.clone(), "sess", registry()).unwrap();
    let mut call = 0u32;
    for op in ops {
        match op {
            Op::User(t, None) => {
                s.append(
                    UserMessage {
                        content: vec![ContentBlock::text(t)],
                    },
                    SurfaceOp::Append,
                )
                .unwrap();
            }
            Op::User(t, Some((a, b))) => {
                let (start, end) = range(s.surface().len(), *a, *b);
                // A replace that would split a tool use from its result is
                // refused (and appends nothing); anything else must succeed.
                let r = s.append(
                    UserMessage {
                        content: vec![ContentBlock::text(t)],
                    },
                    SurfaceOp::Replace { start, end },
                );
                assert!(
                    matches!(r, Ok(_) | Err(turnstone::Error::Refused(_))),
                    "{r:?}"
                );
            }
            Op::Assistant(t, empty) => {
                let content = if *empty {
                    vec![]
                } else {
                    vec![ContentBlock::text(t)]
                };
                s.append(
                    AssistantMessage {
                        content,
                        usage: Some(Usage::new(3, 1)),
                        stop_reason: None,
                        extra: Default::default(),
                    },
                    SurfaceOp::Append,
                )
                .unwrap();
            }
            Op::ToolRound(t, n) => {
                call += 1;
                let id = format!("call-{call}");
                s.append(
                    AssistantMessage {
                        content: vec![ContentBlock::ToolUse {
                            id: id.clone(),
                            name: "sh".into(),
                            input: json!({"cmd": t, "f": 0.1}),
                            extra: Default::default(),
                        }],
                        usage: None,
                        stop_reason: Some("tool_use".into()),
                        extra: Default::default(),
                    },
                    SurfaceOp::Append,
                )
                .unwrap();
                s.append(
                    ToolCall {
                        call_id: id.clone(),
                        name: "sh".into(),
                        input: json!({"cmd": t}),
                    },
                    (),
                )
                .unwrap();
                s.append(
                    ToolResult {
                        call_id: id,
                        content: vec![ContentBlock::text("r".repeat(*n))],
                        is_error: *n % 7 == 0,
                        status: None,
                    },
                    SurfaceOp::Append,
                )
                .unwrap();
            }
            Op::Chunk(t) => {
                s.append(
                    AssistantChunk {
                        index: 0,
                        text: t.clone(),
                    },
                    (),
                )
                .unwrap();
            }
            Op::Compact(a, b, t) => {
                let (start, end) = range(s.surface().len(), *a, *b);
                let r = s.compact("c", start, end, t);
                assert!(
                    matches!(r, Ok(_) | Err(turnstone::Error::Refused(_))),
                    "{r:?}"
                );
                if !wild {
                    validate_messages(s.derive_messages()).unwrap();
                }
            }
            Op::Prune(a) => {
                let len = s.surface().len();
                if len > 0 {
                    let at = *a as u64 % len as u64;
                    // Only tool results can be pruned; others are refused.
                    let _ = s.prune_tool_result(at, "[pruned]", 10);
                }
            }
            Op::Header(m, tools, sys) => {
                let prev = s.header().cloned();
                let mut spec = match &prev {
                    Some(h) => RequestSpec::carry_forward(h),
                    None => RequestSpec {
                        provider: "p".into(),
                        ..Default::default()
                    },
                };
                spec.model = format!("m{m}");
                spec.adapter_defaults =
                    [("max_tokens".to_string(), json!(1000 * (*m as u64 + 1)))].into();
                spec.tools = (0..*tools)
                    .map(|i| ToolSchema {
                        name: format!("t{i}"),
                        description: "d".into(),
                        input_schema: json!({"type": "object"}),
                        extra: Default::default(),
                    })
                    .collect();
                spec.system = sys.then(|| "system prompt".into());
                s.prepare_request(&spec).unwrap();
            }
            Op::Plugin(k) => {
                let kind = if *k == 0 { "todo/update" } else { "ui/hint" };
                s.append_plugin(kind, &json!({"k": k})).unwrap();
            }
            Op::Derive => {
                s.derive_messages();
            }
            Op::Flush => s.flush().unwrap(),
            Op::Blocks(assistant, blocks) => {
                // A tool-use id is used once per session (the session
                // refuses a second): make every generated id unique.
                let mut blocks = blocks.clone();
                for b in &mut blocks {
                    for key in ["id", "call_id"] {
                        if let Some(serde_json::Value::String(id)) = b.get_mut(key) {
                            unique_ids += 1;
                            id.push_str(&format!("#{unique_ids}"));
                        }
                    }
                }
                let content: Vec<ContentBlock> = blocks
                    .iter()
                    .cloned()
                    .map(ContentBlock::from_json)
                    .collect();
                let seq = if *assistant {
                    s.append(
                        AssistantMessage {
                            content,
                            usage: None,
                            stop_reason: None,
                            extra: Default::default(),
                        },
                        SurfaceOp::Append,
                    )
                } else {
                    s.append(UserMessage { content }, SurfaceOp::Append)
                }
                .unwrap();
                logged_blocks.push((seq, serde_json::Value::Array(blocks.clone())));
                wild = true;
            }
        }
    }
    let live_bodies: Vec<serde_json::Value> =
        Provider::ALL.iter().map(|p| s.request_body(*p)).collect();
    let live_msgs = serde_json::to_vec(
        &s.derive_messages()
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let live_req = serde_json::to_vec(&s.rebuild_request()).unwrap();
    drop(s);
    drop(store);
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let mut r = Session::open(store, "sess", registry()).unwrap();
    let msgs = serde_json::to_vec(
        &r.derive_messages()
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let req = serde_json::to_vec(&r.rebuild_request()).unwrap();
    // Every block comes back equal as JSON, and so does every request body.
    for (seq, blocks) in &logged_blocks {
        let ev = &r.events(*seq..*seq + 1).unwrap()[0];
        assert_eq!(&ev.data["content"], blocks, "seq {seq}: stored blocks");
        let typed: Vec<serde_json::Value> = match ev.kind.name() {
            "user/message" => ev.typed::<UserMessage>().unwrap().content,
            _ => ev.typed::<AssistantMessage>().unwrap().content,
        }
        .iter()
        .map(ContentBlock::to_json)
        .collect();
        assert_eq!(
            &serde_json::Value::Array(typed),
            blocks,
            "seq {seq}: decoded blocks"
        );
    }
    for (p, live) in Provider::ALL.iter().zip(&live_bodies) {
        assert_eq!(&r.request_body(*p), live, "{p} body after reopen");
    }
    (live_msgs, msgs, live_req, req)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn derived_state_survives_reopen_byte_for_byte(ops in proptest::collection::vec(op(), 1..60)) {
        let (live_msgs, msgs, live_req, req) = run(&ops);
        prop_assert_eq!(live_msgs, msgs);
        prop_assert_eq!(live_req, req);
    }
}

#[test]
fn a_replace_heavy_history_survives_reopen() {
    let ops: Vec<Op> = (0..200u32)
        .map(|i| match i % 9 {
            0 => Op::Compact((i % 5) as u8, (i % 3) as u8, format!("sum {i}")),
            1 => Op::Prune(i as u8),
            2 => Op::Header((i % 3) as u8, (i % 2) as u8, i % 4 == 0),
            3 => Op::Derive,
            4 => Op::ToolRound(format!("t{i}"), (i * 13) as usize % 900),
            _ => Op::User(
                format!("u{i}"),
                if i % 4 == 0 { Some((i as u8, 2)) } else { None },
            ),
        })
        .collect();
    let (live_msgs, msgs, live_req, req) = run(&ops);
    assert_eq!(live_msgs, msgs);
    assert_eq!(live_req, req);
    assert!(live_msgs.len() > 100);
}
