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
                validate_messages(s.derive_messages()).unwrap();
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
        }
    }
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
