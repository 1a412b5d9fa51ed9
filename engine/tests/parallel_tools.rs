//! Parallel tool calls: the calls of one assistant message are recorded in
//! one group with one durability wait, the bodies run concurrently without
//! holding the session, results are recorded as they finish, and adapters
//! send them in the order the model asked. A power cut at every file
//! operation of that sequence repairs to valid messages.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;
use turnstone::session::*;
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Error, Options, Store};

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

fn calls(n: usize) -> Vec<ToolCall> {
    (0..n)
        .map(|i| ToolCall {
            call_id: format!("call-{i}"),
            name: "sleep".into(),
            input: json!({"ms": 100 * (i + 1)}),
        })
        .collect()
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

#[test]
fn four_tools_run_at_once_and_results_are_sent_in_call_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let host = Arc::new(Host::new(store.clone(), reg()));
    let shared = host.create("s").unwrap();
    let calls = calls(4);
    {
        let mut s = shared.lock();
        s.append(
            TurnStart {
                turn_id: "t".into(),
            },
            (),
        )
        .unwrap();
        s.append(
            UserMessage {
                content: vec![ContentBlock::text("go")],
            },
            SurfaceOp::Append,
        )
        .unwrap();
        ask(&mut s, &calls);
    }
    let syncs = store.stats().syncs;
    let (running, max_running) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let load_refused = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let out = run_tools_parallel(
        &shared,
        calls.clone(),
        &CancelToken::new(),
        |_| Ok(()),
        |call| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            max_running.fetch_max(now, Ordering::SeqCst);
            // Every call is durable before any body runs.
            assert!(store.session_meta("s").unwrap().durable_len >= 7);
            // Another thread's load is refused at once, not blocked for the turn.
            load_refused
                .lock()
                .push(matches!(host.load("s"), Err(Error::Refused(_))));
            // The longest call finishes first, so results arrive reversed.
            std::thread::sleep(Duration::from_millis(
                500 - call.input["ms"].as_u64().unwrap(),
            ));
            running.fetch_sub(1, Ordering::SeqCst);
            ToolBody {
                content: vec![ContentBlock::text(format!("{} done", call.call_id))],
                is_error: false,
                value: call.call_id.clone(),
            }
        },
    )
    .unwrap();
    let elapsed = t0.elapsed();
    assert_eq!(
        max_running.load(Ordering::SeqCst),
        4,
        "the four bodies overlapped"
    );
    // Sequential bodies take at least 100+200+300+400 ms.
    assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    assert!(load_refused.lock().iter().all(|r| *r));
    // One group, one wait: the calls cost one fdatasync.
    assert_eq!(store.stats().syncs, syncs + 1);
    for (o, c) in out.iter().zip(&calls) {
        assert!(matches!(o, ToolOutcome::Ran { value, .. } if *value == c.call_id));
    }
    let mut s = shared.lock();
    validate_messages(s.derive_messages()).unwrap();
    // Logged in completion order; sent in call order.
    let body = s.request_body(Provider::Anthropic);
    let results = body["messages"][2]["content"].as_array().unwrap();
    let ids: Vec<&str> = results
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call-0", "call-1", "call-2", "call-3"]);
    let chat = s.request_body(Provider::OpenAiChat);
    let ids: Vec<&str> = chat["messages"].as_array().unwrap()[2..6]
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call-0", "call-1", "call-2", "call-3"]);
}

#[test]
fn cancelled_while_persisting_no_body_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let host = Host::new(store, reg());
    let shared = host.create("s").unwrap();
    let calls = calls(2);
    ask(&mut shared.lock(), &calls);
    let cancel = CancelToken::new();
    cancel.cancel();
    let ran = AtomicUsize::new(0);
    let out = run_tools_parallel(
        &shared,
        calls,
        &cancel,
        |c| {
            if c.call_id == "call-1" {
                Err("no".into())
            } else {
                Ok(())
            }
        },
        |_| {
            ran.fetch_add(1, Ordering::SeqCst);
            ToolBody {
                content: vec![],
                is_error: false,
                value: (),
            }
        },
    )
    .unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert!(matches!(out[0], ToolOutcome::AbortedBeforeDispatch));
    assert!(matches!(out[1], ToolOutcome::Refused { .. }));
    validate_messages(shared.lock().derive_messages()).unwrap();
}

fn sim_opts(sim: &SimVfs) -> Options {
    Options {
        vfs: Arc::new(sim.clone()),
        segment_bytes: 32 * 1024,
        ..Default::default()
    }
}

/// The parallel sequence; returns the bodies that ran. Stops at the first
/// error (a power cut).
fn script(shared: &SharedSession, ran: &Mutex<Vec<String>>) -> turnstone::Result<()> {
    let calls = calls(4);
    {
        let mut s = shared.lock();
        s.append(
            TurnStart {
                turn_id: "t".into(),
            },
            (),
        )?;
        s.append(
            UserMessage {
                content: vec![ContentBlock::text("go")],
            },
            SurfaceOp::Append,
        )?;
        ask(&mut s, &calls);
        // The response is made durable before the calls are recorded, so a
        // cut between the two leaves uses without calls (TOOL_NOT_STARTED).
        s.flush()?;
    }
    run_tools_parallel(
        shared,
        calls,
        &CancelToken::new(),
        |_| Ok(()),
        |call| {
            ran.lock().push(call.call_id.clone());
            ToolBody {
                content: vec![ContentBlock::text("ok")],
                is_error: false,
                value: (),
            }
        },
    )?;
    let mut s = shared.lock();
    s.flush()?;
    s.append(
        TurnEnd {
            turn_id: "t".into(),
            reason: TurnEndReason::Completed,
        },
        (),
    )?;
    s.flush()
}

#[test]
fn a_power_cut_at_every_step_of_parallel_tools_repairs_to_valid_messages() {
    let dir = Path::new("/store");
    let sim = SimVfs::new();
    {
        let store = Arc::new(Store::open_with(dir, sim_opts(&sim)).unwrap());
        let host = Host::new(store, reg());
        let shared = host.create("s").unwrap();
        shared.lock().flush().unwrap();
        let before = sim.ops();
        script(&shared, &Mutex::new(vec![])).unwrap();
        assert!(sim.ops() > before);
    }
    let total = sim.ops();
    let (mut unknown, mut not_started, mut kept) = (0, 0, 0);
    for cut in 0..total + 2 {
        let sim = SimVfs::new();
        let store = Arc::new(Store::open_with(dir, sim_opts(&sim)).unwrap());
        let host = Host::new(store.clone(), reg());
        let shared = host.create("s").unwrap();
        shared.lock().flush().unwrap();
        sim.set_faults(FaultPlan {
            power_cut_after_ops: Some(sim.ops() + cut),
            ..Default::default()
        });
        let ran = Mutex::new(vec![]);
        let _ = script(&shared, &ran);
        drop(shared);
        drop(host);
        drop(store);
        sim.crash(cut);
        let store = Arc::new(Store::open_with(dir, sim_opts(&sim)).unwrap());
        if store.session_len("s").is_none() {
            continue;
        }
        let view = Session::open_read_only(store.clone(), "s", reg()).unwrap();
        let evs = view.events(0..view.len()).unwrap();
        // No body ran unless its tool/call is durable.
        for id in ran.lock().iter() {
            assert!(
                evs.iter()
                    .any(|e| e.typed::<ToolCall>().is_some_and(|c| &c.call_id == id)),
                "cut {cut}: body {id} ran without a durable call"
            );
        }
        let results_before = evs
            .iter()
            .filter(|e| e.typed::<ToolResult>().is_some())
            .count();
        drop(view);
        let host = Host::new(store.clone(), reg());
        let (shared, report) = host.load("s").unwrap();
        let report = report.unwrap();
        let mut s = shared.lock();
        validate_messages(s.derive_messages()).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert!(
            s.open_state().is_idle() && s.open_state().calls.is_empty(),
            "cut {cut}"
        );
        unknown += report.tools_outcome_unknown.len();
        not_started += report.tools_not_started.len();
        kept += results_before;
        assert!(repair(&mut s, &[]).unwrap().is_noop(), "cut {cut}");
    }
    assert!(
        unknown > 0 && not_started > 0 && kept > 0,
        "{unknown} {not_started} {kept}"
    );
}
