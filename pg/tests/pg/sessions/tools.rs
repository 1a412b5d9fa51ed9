//! Tools and the per-session views on both backends: `run_tool` (a result,
//! an error, a refusal by the guard, a cancelled call), `run_tools_parallel`
//! through a `Host`, metadata, `session::events` with a kind filter,
//! `replay` and `turn_open` give the same log, messages and request bodies
//! on each backend, and the catalog lists the same entry.

use super::*;

/// What the tool run left, compared across backends.
#[derive(Debug, PartialEq)]
pub struct ToolsSeen {
    /// The session as every other body sees it (events, messages, bodies).
    outcome: Outcome,
    /// How each call ended, in call order.
    ended: Vec<String>,
    /// `session::events` of the `tool/result` kind: their seqs.
    results: Vec<u64>,
    /// Events `replay` yields from seq 0, and whether a turn is open.
    replayed: usize,
    open: bool,
    /// The catalog's entry: title, tags, a field, the event count.
    listed: (Option<String>, Vec<String>, Option<String>, u64),
}

fn ended<T: std::fmt::Debug>(o: &ToolOutcome<T>) -> String {
    match o {
        ToolOutcome::Ran { .. } => "ran".into(),
        ToolOutcome::Refused { reason } => format!("refused: {reason}"),
        ToolOutcome::AbortedBeforeDispatch => "aborted".into(),
        other => format!("{other:?}"),
    }
}

fn ask(s: &mut Session, calls: &[ToolCall]) {
    s.append(
        AssistantMessage {
            content: calls
                .iter()
                .map(|c| ContentBlock::tool_use(&c.call_id, &c.name, c.input.clone()))
                .collect(),
            usage: None,
            stop_reason: Some("tool_use".into()),
            extra: Default::default(),
        },
        SurfaceOp::Append,
    )
    .unwrap();
}

fn call(id: &str, q: &str) -> ToolCall {
    ToolCall {
        call_id: id.into(),
        name: "lookup".into(),
        input: json!({"q": q}),
    }
}

/// One turn of sequential tools (each outcome `run_tool` has), then one of
/// parallel tools, on `kit`'s log.
pub fn tools_and_views(kit: &Kit) -> ToolsSeen {
    let host = Arc::new(Host::new(kit.log.clone(), registry()));
    let shared = host.create("tools").unwrap();
    let mut ends = Vec::new();
    {
        let mut s = shared.lock();
        s.set_title("tools on both backends").unwrap();
        s.append(
            MetaUpdate {
                add_tags: vec!["tools".into()],
                ..Default::default()
            },
            (),
        )
        .unwrap();
        s.set_meta("owner", "pg-tests").unwrap();
        s.append(
            TurnStart {
                turn_id: "t1".into(),
            },
            (),
        )
        .unwrap();
        s.append(
            UserMessage {
                content: vec![ContentBlock::text("look three things up")],
            },
            SurfaceOp::Append,
        )
        .unwrap();
        let calls = [call("c1", "ok"), call("c2", "fails"), call("c3", "refused")];
        ask(&mut s, &calls);
        let cancel = CancelToken::new();
        for c in &calls {
            let o = run_tool(
                &mut s,
                ToolScope::model(),
                &c.call_id,
                &c.name,
                c.input.clone(),
                &cancel,
                |tc| match tc.input["q"].as_str() {
                    Some("refused") => Err("not allowed here".to_string()),
                    _ => Ok(()),
                },
                |_, _| {
                    let failed = c.call_id == "c2";
                    ToolBody {
                        content: vec![ContentBlock::text(if failed {
                            "lookup failed: no such entry"
                        } else {
                            "found it"
                        })],
                        is_error: failed,
                        value: (),
                    }
                },
            )
            .unwrap();
            ends.push(ended(&o));
        }
        // A cancelled call: logged as aborted, its body never runs.
        let late = call("c4", "late");
        ask(&mut s, std::slice::from_ref(&late));
        let cancelled = CancelToken::new();
        cancelled.cancel();
        let o = run_tool(
            &mut s,
            ToolScope::model(),
            &late.call_id,
            &late.name,
            late.input.clone(),
            &cancelled,
            |_| Ok(()),
            |_, _| -> ToolBody<()> { panic!("a cancelled call's body ran") },
        )
        .unwrap();
        ends.push(ended(&o));
        s.append(
            TurnEnd {
                turn_id: "t1".into(),
                reason: TurnEndReason::Completed,
            },
            (),
        )
        .unwrap();
        s.append(
            TurnStart {
                turn_id: "t2".into(),
            },
            (),
        )
        .unwrap();
        ask(&mut s, &[call("p1", "a"), call("p2", "b"), call("p3", "c")]);
    }
    let outs = run_tools_parallel(
        &shared,
        vec![call("p1", "a"), call("p2", "b"), call("p3", "c")],
        &CancelToken::new(),
        |_| Ok(()),
        |c| {
            // The bodies run at once and their results are recorded as
            // they finish: spaced 150 ms apart, they finish in call order
            // on both backends, so the two logs can be compared whole.
            let i: u64 = c.call_id[1..].parse().unwrap();
            std::thread::sleep(Duration::from_millis(150 * (i - 1)));
            ToolBody {
                content: vec![ContentBlock::text(format!("answer for {}", c.call_id))],
                is_error: false,
                value: c.call_id.clone(),
            }
        },
    )
    .unwrap();
    ends.extend(outs.iter().map(ended));
    let mut s = shared.lock();
    s.flush().unwrap();
    let outcome = outcome(&mut s);
    let len = s.len();
    drop(s);
    let reg = registry();
    let results = events(&kit.log, &reg, "tools", 0..len, Some(&["tool/result"]))
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    let replayed = replay(&kit.log, "tools", reg.clone(), 0).unwrap().count();
    let open = turn_open(&kit.log, "tools").unwrap();
    let entry = Catalog::build(&kit.log)
        .unwrap()
        .get(&kit.log, "tools")
        .cloned()
        .expect("listed");
    ToolsSeen {
        outcome,
        ended: ends,
        results,
        replayed,
        open,
        listed: (
            entry.metadata.title.clone(),
            entry.metadata.tags.iter().cloned().collect(),
            entry.metadata.fields.get("owner").cloned(),
            entry.events,
        ),
    }
}

pub fn tools_and_views_on_both_backends(cx: &Ctx) {
    let embedded = tools_and_views(&Kit::embedded());
    let postgres = tools_and_views(&Kit::postgres(cx));
    assert_eq!(
        embedded.ended,
        [
            "ran",
            "ran",
            "refused: not allowed here",
            "aborted",
            "ran",
            "ran",
            "ran"
        ]
    );
    assert_eq!(embedded.results.len(), 7, "one result per call");
    assert!(embedded.open, "the second turn is still open");
    assert_eq!(embedded.listed.0.as_deref(), Some("tools on both backends"));
    assert_eq!(embedded.replayed as u64, embedded.listed.3);
    assert_eq!(embedded, postgres, "the two backends differ");
}
