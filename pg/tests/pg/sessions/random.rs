//! Model-visible iff logged, as a property on both backends: random
//! histories give the same events, messages and request bodies live and
//! reopened on each backend, and the same on both.

use super::*;

/// One step of a random history (model-visible iff logged, on both logs).
#[derive(Debug, Clone)]
pub enum Op {
    User(String),
    /// A user message replacing surface range (a, b) (mod its length).
    Replace(String, u8, u8),
    Assistant(String),
    ToolRound(String, u16),
    Chunk(String),
    Compact(u8, u8, String),
    Prune(u8),
    Header(u8, u8, bool),
    Plugin(u8),
    /// A user (false) or assistant (true) message of arbitrary JSON blocks.
    Blocks(bool, Vec<Value>),
}

pub(super) fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-z\\\"é😀 ]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{1,6}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

pub(super) fn block() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let ty = prop_oneof![
        Just("text"),
        Just("thinking"),
        Just("redacted_thinking"),
        Just("image"),
        Just("document"),
        Just("reasoning"),
        Just("output_text"),
        Just("hologram"),
    ];
    prop_oneof![
        4 => (ty, "[a-z ]{0,8}", proptest::collection::btree_map("[a-z_]{1,8}", json_value(), 0..3))
            .prop_map(|(t, text, extra)| {
                let mut m: serde_json::Map<String, Value> = extra.into_iter().collect();
                m.insert("type".into(), json!(t));
                for k in ["text", "thinking", "signature", "data"] {
                    if !m.contains_key(k) && text.len() % 2 == 0 {
                        m.insert(k.into(), json!(text.clone()));
                    }
                }
                Value::Object(m)
            }),
        1 => json_value(),
    ]
}

pub fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let text = "[a-zé😀 ]{0,10}";
    prop_oneof![
        4 => text.prop_map(Op::User),
        1 => (text, any::<u8>(), any::<u8>()).prop_map(|(t, a, b)| Op::Replace(t, a, b)),
        3 => text.prop_map(Op::Assistant),
        3 => (text, 0u16..2000).prop_map(|(t, n)| Op::ToolRound(t, n)),
        2 => text.prop_map(Op::Chunk),
        1 => (any::<u8>(), any::<u8>(), text).prop_map(|(a, b, t)| Op::Compact(a, b, t)),
        1 => any::<u8>().prop_map(Op::Prune),
        1 => (0u8..3, 0u8..3, any::<bool>()).prop_map(|(m, t, s)| Op::Header(m, t, s)),
        1 => (0u8..2).prop_map(Op::Plugin),
        2 => (any::<bool>(), proptest::collection::vec(block(), 1..4)).prop_map(|(a, b)| Op::Blocks(a, b)),
    ]
}

pub(super) fn range(len: usize, a: u8, b: u8) -> (u64, u64) {
    let x = a as u64 % (len as u64 + 1);
    let y = b as u64 % (len as u64 + 1);
    (x.min(y), x.max(y))
}

/// Apply `ops` to a new session `name` of `kit`'s log; then the live
/// handle and a reopened one must agree. Returns what they hold.
pub fn random_history(kit: &Kit, name: &str, ops: &[Op]) -> Outcome {
    let reg = registry();
    let mut s = Session::create(kit.log.clone(), name, reg.clone()).unwrap();
    let mut call = 0;
    let refused = |r: turnstone::Result<u64>| {
        assert!(
            matches!(r, Ok(_) | Err(turnstone::Error::Refused(_))),
            "{r:?}"
        );
    };
    for op in ops {
        match op {
            Op::User(t) => {
                s.append(
                    UserMessage {
                        content: vec![ContentBlock::text(t)],
                    },
                    SurfaceOp::Append,
                )
                .unwrap();
            }
            Op::Replace(t, a, b) => {
                let (start, end) = range(s.surface().len(), *a, *b);
                // A replace that would split a tool use from its result is
                // refused (and appends nothing).
                refused(s.append(
                    UserMessage {
                        content: vec![ContentBlock::text(t)],
                    },
                    SurfaceOp::Replace { start, end },
                ));
            }
            Op::Assistant(t) => {
                s.append(
                    AssistantMessage {
                        content: vec![ContentBlock::text(t)],
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
                tool_round(
                    &mut s,
                    &format!("call-{call}"),
                    json!({"cmd": t}),
                    &"r".repeat(*n as usize),
                    n % 7 == 0,
                );
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
                refused(s.compact("c", start, end, t));
            }
            Op::Prune(a) => {
                let len = s.surface().len() as u64;
                if len > 0 {
                    // Only tool results can be pruned; others are refused.
                    let _ = s.prune_tool_result(*a as u64 % len, "[pruned]", 10);
                }
            }
            Op::Header(m, tools, sys) => {
                let mut spec = match s.header() {
                    Some(h) => RequestSpec::carry_forward(h),
                    None => RequestSpec {
                        provider: "p".into(),
                        ..Default::default()
                    },
                };
                spec.model = format!("m{m}");
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
            Op::Blocks(assistant, blocks) => {
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
                // Every block comes back as it went in.
                let ev = &s.events(seq..seq + 1).unwrap()[0];
                assert_eq!(
                    ev.data["content"],
                    Value::Array(blocks.clone()),
                    "{}",
                    kit.name
                );
            }
        }
    }
    s.flush().unwrap();
    let live = outcome(&mut s);
    drop(s);
    let mut again = Session::open_read_only((kit.second)(), name, reg).unwrap();
    assert_eq!(outcome(&mut again), live, "{}: {name} reopened", kit.name);
    live
}

/// Model-visible iff logged, as a property on both logs: random histories
/// give, on each backend, the same events, messages and request bodies live
/// and reopened, and the two backends give the same.
pub fn random_histories_agree_on_both_backends(cx: &Ctx) {
    use proptest::test_runner::{Config, TestRunner};
    let cases: u32 = std::env::var("TURNSTONE_PG_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let n = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&proptest::collection::vec(op(), 1..40), |ops| {
            let name = format!(
                "mv-{}",
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let a = random_history(&e, &name, &ops);
            let b = random_history(&p, &name, &ops);
            proptest::prop_assert_eq!(a, b);
            Ok(())
        })
        .unwrap();
}
