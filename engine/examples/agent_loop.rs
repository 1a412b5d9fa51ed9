//! A runnable agent harness on turnstone's session layer, with a fake model
//! that answers the way Anthropic's Messages API does (thinking with a
//! signature, streamed text, two tool calls at once).
//!
//! It runs a turn, "crashes" in the middle of the next one (the handle is
//! dropped while a tool call is recorded and its result is not), reopens the
//! store, lets repair close what was left open, forks the session at a turn
//! boundary, compacts the first turn, replays, and searches.
//!
//! ```sh
//! cargo run -p turnstone --example agent_loop            # prints what it does
//! cargo test -p turnstone --example agent_loop           # the same, as a test
//! ```

use std::sync::Arc;

use serde_json::{json, Value};
use turnstone::session::*;
use turnstone::Store;

/// The fake model: a response body in Anthropic's shape.
fn model(turn: &str, step: u32) -> Value {
    let content = if step == 0 {
        json!([
            {"type": "thinking", "thinking": "List the files and count the lines.", "signature": "EqQBfake=="},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": format!("toolu_{turn}_{step}a"), "name": "ls", "input": {"path": "."}},
            {"type": "tool_use", "id": format!("toolu_{turn}_{step}b"), "name": "wc", "input": {"path": "README.md"}}
        ])
    } else {
        json!([{"type": "text", "text": "There are 3 files; the README has 42 lines."}])
    };
    json!({
        "id": format!("msg_{turn}_{step}"), "type": "message", "role": "assistant", "model": "claude-x",
        "content": content, "stop_reason": if step == 0 { "tool_use" } else { "end_turn" },
        "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 80}
    })
}

/// One turn: user message, steps until the model stops calling tools. With
/// `crash_in_tool`, the process "dies" after the tool calls are durable and
/// before their results are recorded.
fn turn(
    shared: &SharedSession,
    turn_id: &str,
    question: &str,
    crash_in_tool: bool,
) -> turnstone::Result<bool> {
    {
        let mut s = shared.lock();
        s.append(
            TurnStart {
                turn_id: turn_id.into(),
            },
            (),
        )?;
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(question)],
            },
            SurfaceOp::Append,
        )?;
    }
    for step in 0..4 {
        let step_id = format!("{turn_id}-s{step}");
        let response = {
            let mut s = shared.lock();
            s.append(
                StepStart {
                    turn_id: turn_id.into(),
                    step_id: step_id.clone(),
                },
                (),
            )?;
            s.prepare_request(&RequestSpec {
                provider: "anthropic".into(),
                model: "claude-x".into(),
                explicit: [("max_tokens".to_string(), json!(1024))].into(),
                system: Some("You are a careful coding agent.".into()),
                ..Default::default()
            })?;
            // What the harness sends is what the log rebuilds.
            let body = s.request_body(Provider::Anthropic);
            s.check_request_body(Provider::Anthropic, &body)?;
            s.flush()?;
            let response = model(turn_id, step);
            for (i, chunk) in ["There are ", "3 files."].iter().enumerate() {
                s.append(
                    AssistantChunk {
                        index: i as u32,
                        text: chunk.to_string(),
                    },
                    (),
                )?;
            }
            let m = AssistantMessage::from_response(Provider::Anthropic, &response);
            s.append(m.clone(), SurfaceOp::Append)?;
            m
        };
        let calls = response.tool_calls();
        if calls.is_empty() {
            let mut s = shared.lock();
            s.append(
                StepEnd {
                    turn_id: turn_id.into(),
                    step_id,
                    reason: StepEndReason::Completed,
                },
                (),
            )?;
            s.append(
                TurnEnd {
                    turn_id: turn_id.into(),
                    reason: TurnEndReason::Completed,
                },
                (),
            )?;
            s.flush()?;
            return Ok(true);
        }
        if crash_in_tool {
            // The calls become durable, then the process dies.
            let point = {
                let mut s = shared.lock();
                s.record_tool_calls(&calls)?;
                s.durability_point()
            };
            point.wait()?;
            return Ok(false);
        }
        run_tools_parallel(
            shared,
            calls,
            &CancelToken::new(),
            |_| Ok(()),
            |call| ToolBody {
                content: vec![ContentBlock::text(format!(
                    "{} of {}: ok",
                    call.name, call.input
                ))],
                is_error: false,
                value: (),
            },
        )?;
        let mut s = shared.lock();
        s.append(
            StepEnd {
                turn_id: turn_id.into(),
                step_id,
                reason: StepEndReason::ToolUse,
            },
            (),
        )?;
        s.flush()?;
    }
    Ok(true)
}

fn run(dir: &std::path::Path) -> turnstone::Result<()> {
    {
        let store = Arc::new(Store::open(dir)?);
        let host = Host::new(store.clone(), Arc::new(Registry::new()));
        let shared = host.create("agent-1")?;
        assert!(turn(
            &shared,
            "t1",
            "How many files, and how long is the README?",
            false
        )?);
        assert!(!turn(&shared, "t2", "And now?", true)?);
        println!(
            "crash in the middle of turn t2 ({} events logged)",
            shared.lock().len()
        );
    } // the process "dies": nothing more is written
    let store = Arc::new(Store::open(dir)?);
    let host = Host::new(store.clone(), Arc::new(Registry::new()));
    let (shared, report) = host.load("agent-1")?;
    let report = report.expect("an inactive session is repaired");
    println!(
        "repair: {} tool outcomes unknown, {} turn interrupted",
        report.tools_outcome_unknown.len(),
        report.turns_interrupted
    );
    assert_eq!(report.tools_outcome_unknown.len(), 2);
    let mut s = shared.lock();
    validate_messages(s.derive_messages()).expect("repaired messages are valid for a model");
    let turns: Vec<(String, Option<TurnEndReason>)> = s
        .turns()
        .iter()
        .map(|t| (t.turn_id.clone(), t.reason.clone()))
        .collect();
    println!("turns: {turns:?}");
    s.flush()?;
    let child = s.fork_after_turn("t1", Some("agent-1.retry"))?;
    println!("forked {} at seq {}", child.child, child.upto);
    s.compact_turn(
        "c1",
        "t1",
        "Turn 1: there are 3 files; the README has 42 lines.",
    )?;
    s.flush()?;
    let body = s.request_body(Provider::Anthropic);
    println!(
        "next request: {} messages",
        body["messages"].as_array().map_or(0, Vec::len)
    );
    drop(s);
    let replayed = replay(&store, "agent-1", Arc::new(Registry::new()), 0)?.count();
    println!("replay: {replayed} events");
    #[cfg(feature = "search")]
    {
        let mut ix = turnstone::session::SearchIndex::open(&store)?;
        ix.update(&store, &Registry::new())?;
        let hits = ix.search("README", 5)?;
        println!("search \"README\": {} hits", hits.len());
        assert!(!hits.is_empty());
    }
    Ok(())
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    run(dir.path()).expect("the agent loop runs");
}

#[test]
fn agent_loop_runs() {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path()).unwrap();
}
