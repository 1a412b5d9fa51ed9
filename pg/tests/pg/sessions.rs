//! The session layer on both logs, from one test body (issue 18 §4): the
//! same workload through `turnstone::session` on the embedded store and on
//! PostgreSQL must give the same events, the same derived messages and the
//! same provider request bodies, live and after a reopen; a crash at every
//! point of a turn must be repaired the same way; forks and deletion mean
//! the same. Each body takes a [`Kit`], which says how to reach a backend.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use turnstone::session::*;
use turnstone::Store;
use turnstone_pg::{PgEventLog, PgLog, PgOptions};

use super::Ctx;

#[path = "sessions/random.rs"]
mod random;
#[path = "sessions/search.rs"]
mod search;
#[path = "sessions/tools.rs"]
mod tools;
pub use random::random_histories_agree_on_both_backends;
pub use search::search_and_catalog_on_both_backends;
pub use tools::tools_and_views_on_both_backends;

/// One backend: how to get a worker's log, and how a worker dies.
pub struct Kit {
    name: &'static str,
    /// The first worker's log.
    log: LogHandle,
    /// Another worker (embedded: the same store, one process; PostgreSQL:
    /// another connection pool with another lease owner, as another
    /// machine would have).
    second: Box<dyn Fn() -> LogHandle>,
    /// Kill the first worker: what it appended and flushed stays, nothing
    /// is released (PostgreSQL: its pool closes and its leases run out).
    crash: Box<dyn Fn()>,
    /// A takeover is visible ([`Session::took_over`]) on this backend.
    detects_takeover: bool,
    /// Keeps the embedded store's directory.
    _dir: Option<tempfile::TempDir>,
    /// Every connection pool the kit opened, closed when it drops (a test
    /// run shares one server's connection slots).
    pools: Arc<parking_lot::Mutex<Vec<PgLog>>>,
}

impl Drop for Kit {
    fn drop(&mut self) {
        for p in self.pools.lock().drain(..) {
            p.close();
        }
    }
}

impl Kit {
    pub fn embedded() -> Kit {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let second = store.clone();
        Kit {
            name: "embedded",
            log: LogHandle::from(store),
            second: Box::new(move || LogHandle::from(second.clone())),
            crash: Box::new(|| {}),
            detects_takeover: false,
            _dir: Some(dir),
            pools: Default::default(),
        }
    }

    pub fn postgres(cx: &Ctx) -> Kit {
        // Long enough that a renewer delayed on a loaded machine still
        // renews in time (every third of it); short enough to wait out.
        let opts = PgOptions {
            lease_ttl: Duration::from_millis(1500),
            ..PgOptions::default()
        };
        let first = PgLog::connect(&cx.url, opts.clone()).unwrap();
        let closer = first.clone();
        let url = cx.url.clone();
        let pools: Arc<parking_lot::Mutex<Vec<PgLog>>> = Default::default();
        pools.lock().push(first.clone());
        let opened = pools.clone();
        Kit {
            name: "postgres",
            log: LogHandle::from(Arc::new(PgEventLog::new(first, "worker-1"))),
            second: Box::new(move || {
                let log = PgLog::connect(&url, opts.clone()).unwrap();
                opened.lock().push(log.clone());
                LogHandle::from(Arc::new(PgEventLog::new(log, "worker-2")))
            }),
            crash: Box::new(move || {
                closer.close();
                // Its leases run out.
                std::thread::sleep(Duration::from_millis(2000));
            }),
            detects_takeover: true,
            _dir: None,
            pools,
        }
    }
}

fn registry() -> Arc<Registry> {
    let mut r = Registry::new();
    r.register("todo/update", false).unwrap();
    r.register("ui/hint", true).unwrap();
    Arc::new(r)
}

/// What a backend produced, compared across backends.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    /// Every event: (seq, kind name, data, surface op) — everything but the
    /// append time.
    events: Vec<(u64, String, Value, Option<String>)>,
    messages: Value,
    bodies: Vec<Value>,
}

fn outcome(s: &mut Session) -> Outcome {
    let events = s
        .events(0..s.len())
        .unwrap()
        .into_iter()
        .map(|e| {
            (
                e.seq,
                e.kind.name().to_string(),
                e.data.clone(),
                e.surface.map(|op| format!("{op:?}")),
            )
        })
        .collect();
    let messages = serde_json::to_value(
        s.derive_messages()
            .iter()
            .map(|m| (**m).clone())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let bodies = Provider::ALL.iter().map(|p| s.request_body(*p)).collect();
    Outcome {
        events,
        messages,
        bodies,
    }
}

/// Provider-native content that must come back unchanged: a thinking
/// block with its signature, an image, an OpenAI reasoning item, and a
/// block type no adapter knows.
fn native_blocks(i: u64) -> Vec<ContentBlock> {
    [
        json!({"type": "thinking", "thinking": format!("plan {i}"), "signature": format!("sig-{i}==")}),
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}),
        json!({"type": "reasoning", "id": format!("rs_{i}"), "summary": [], "encrypted_content": "gAAA"}),
        json!({"type": "hologram", "depth": i, "frames": [1, 2, 3]}),
        json!({"type": "text", "text": format!("answer {i}")}),
    ]
    .into_iter()
    .map(ContentBlock::from_json)
    .collect()
}

/// One turn of a harness: header, user message, a step with a tool call
/// and its result, a final answer. `upto` cuts it after that many appends
/// (a crash); returns the appends made.
fn turn(s: &mut Session, t: u64, upto: usize) -> usize {
    let tid = format!("t{t}");
    let call = format!("call-{t}");
    let mut n = 0;
    // Each step is one append (its seq, unused).
    let mut step = |s: &mut Session, f: &dyn Fn(&mut Session) -> turnstone::Result<u64>| {
        if n < upto {
            f(s).unwrap();
            n += 1;
        }
    };
    step(s, &|s| {
        s.append(
            TurnStart {
                turn_id: tid.clone(),
            },
            (),
        )
    });
    step(s, &|s| {
        let mut spec = match s.header() {
            Some(h) => RequestSpec::carry_forward(h),
            None => RequestSpec {
                provider: "anthropic".into(),
                ..Default::default()
            },
        };
        spec.model = format!("m{}", t % 2);
        spec.system = Some("be brief".into());
        spec.tools = vec![ToolSchema {
            name: "sh".into(),
            description: "run".into(),
            input_schema: json!({"type": "object"}),
            extra: Default::default(),
        }];
        s.prepare_request(&spec).map(|_| 0)
    });
    step(s, &|s| {
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(format!("question {t} é😀"))],
            },
            SurfaceOp::Append,
        )
    });
    step(s, &|s| {
        s.append(
            StepStart {
                turn_id: tid.clone(),
                step_id: "1".into(),
            },
            (),
        )
    });
    step(s, &|s| {
        s.append(
            AssistantChunk {
                index: 0,
                text: "thinking…".into(),
            },
            (),
        )
    });
    step(s, &|s| {
        let mut content = native_blocks(t);
        content.push(ContentBlock::ToolUse {
            id: call.clone(),
            name: "sh".into(),
            input: json!({"cmd": format!("ls {t}")}),
            extra: Default::default(),
        });
        s.append(
            AssistantMessage {
                content,
                usage: Some(Usage::new(10, 3)),
                stop_reason: Some("tool_use".into()),
                extra: Default::default(),
            },
            SurfaceOp::Append,
        )
    });
    step(s, &|s| {
        s.append(
            ToolCall {
                call_id: call.clone(),
                name: "sh".into(),
                input: json!({"cmd": format!("ls {t}")}),
            },
            (),
        )
    });
    step(s, &|s| {
        s.append(
            ToolResult {
                call_id: call.clone(),
                content: vec![ContentBlock::text("a b c")],
                is_error: false,
                status: None,
            },
            SurfaceOp::Append,
        )
    });
    step(s, &|s| {
        s.append(
            StepEnd {
                turn_id: tid.clone(),
                step_id: "1".into(),
                reason: StepEndReason::ToolUse,
            },
            (),
        )
    });
    step(s, &|s| {
        s.append(
            AssistantMessage {
                content: vec![ContentBlock::text(format!("done {t}"))],
                usage: None,
                stop_reason: Some("end_turn".into()),
                extra: Default::default(),
            },
            SurfaceOp::Append,
        )
    });
    step(s, &|s| {
        s.append(
            TurnEnd {
                turn_id: tid.clone(),
                reason: TurnEndReason::Completed,
            },
            (),
        )
    });
    n
}

/// Appends in one full turn.
const TURN_APPENDS: usize = 11;

/// A deterministic mix of the session layer's writes after some turns:
/// compaction, a prune, plugin events, metadata, a replace.
fn workload(s: &mut Session) {
    for t in 0..3 {
        assert_eq!(turn(s, t, usize::MAX), TURN_APPENDS);
    }
    s.append_plugin("todo/update", &json!({"items": ["a", "b"]}))
        .unwrap();
    s.append_plugin("ui/hint", &json!({"k": 1})).unwrap();
    s.set_meta("cwd", "/work").unwrap();
    // Prune the first tool result (surface: user, assistant, tool result,
    // assistant, per turn), then compact the first turn's messages.
    s.prune_tool_result(2, "[pruned]", 5).unwrap();
    s.compact("c1", 0, 4, "summary of the start").unwrap();
    turn(s, 3, usize::MAX);
    s.flush().unwrap();
}

/// Model-visible iff logged, on this backend: the live handle and a
/// reopened one (by another worker) agree on everything.
pub fn live_and_reopened_agree(kit: &Kit) -> Outcome {
    let mut s = Session::create(kit.log.clone(), "main", registry()).unwrap();
    workload(&mut s);
    let live = outcome(&mut s);
    drop(s);
    let mut again = Session::open(kit.log.clone(), "main", registry()).unwrap();
    assert_eq!(outcome(&mut again), live, "{}: reopened", kit.name);
    assert!(!again.took_over(), "{}: a released session", kit.name);
    drop(again);
    let other = (kit.second)();
    let mut view = Session::open_read_only(other.clone(), "main", registry()).unwrap();
    assert_eq!(
        outcome(&mut view),
        live,
        "{}: another worker's view",
        kit.name
    );
    // The provider-native blocks came back as they went in.
    let ev = view
        .events(0..view.len())
        .unwrap()
        .into_iter()
        .find(|e| e.kind.name() == "assistant/message")
        .unwrap();
    let content = &ev.data["content"];
    for (i, want) in native_blocks(0).iter().enumerate() {
        assert_eq!(&content[i], &want.to_json(), "{}: block {i}", kit.name);
    }
    validate_messages(view.derive_messages()).unwrap();
    live
}

/// A crash after every append of a turn; another worker loads each
/// session (repairing it). Returns what each repaired session holds.
pub fn every_crash_point_is_repaired(kit: &Kit) -> Vec<(RepairReport, Outcome)> {
    let reg = registry();
    let mut held = Vec::new();
    for k in 0..=TURN_APPENDS {
        let name = format!("crash-{k}");
        let mut s = Session::create(kit.log.clone(), &name, reg.clone()).unwrap();
        turn(&mut s, 0, usize::MAX);
        turn(&mut s, 1, k);
        s.flush().unwrap();
        held.push(s);
    }
    // The worker dies holding all of them.
    (kit.crash)();
    drop(held);
    let other = (kit.second)();
    let host = Host::new(other.clone(), reg.clone());
    let mut out = Vec::new();
    for k in 0..=TURN_APPENDS {
        let name = format!("crash-{k}");
        let (s, report) = host.load(&name).unwrap();
        let report = report.expect("an inactive session is repaired");
        let mut s = s.lock();
        if kit.detects_takeover {
            assert!(s.took_over(), "{}: {name} was taken over", kit.name);
        }
        assert!(s.open_state().is_idle(), "{}: {name}", kit.name);
        assert!(s.open_state().calls.is_empty(), "{}: {name}", kit.name);
        validate_messages(s.derive_messages()).unwrap();
        let mid_turn = k > 0 && k < TURN_APPENDS;
        assert_eq!(
            report.turns_interrupted, mid_turn as u32,
            "{}: {name}",
            kit.name
        );
        // The repair is in the log: a third open finds nothing to do.
        let o = outcome(&mut s);
        out.push((report, o));
    }
    drop(host);
    let third = Host::new((kit.second)(), reg);
    for k in 0..=TURN_APPENDS {
        let (_, report) = third.load(&format!("crash-{k}")).unwrap();
        assert!(
            report.unwrap().is_noop(),
            "{}: crash-{k} repaired twice",
            kit.name
        );
    }
    out
}

/// Forks by turn and by message, and deletion: the same on both.
pub fn forks_and_deletion(kit: &Kit) -> (Outcome, Outcome) {
    let reg = registry();
    let mut s = Session::create(kit.log.clone(), "p", reg.clone()).unwrap();
    turn(&mut s, 0, usize::MAX);
    turn(&mut s, 1, usize::MAX);
    turn(&mut s, 2, 3); // a turn still running
    s.flush().unwrap();
    let f = s.fork_after_turn("t0", Some("p-after-t0")).unwrap();
    assert_eq!(f.upto as usize, TURN_APPENDS);
    // The default boundary is the end of the last closed turn.
    let g = fork(s.log(), "p", None, Some("p-closed")).unwrap();
    assert_eq!(g.upto as usize, 2 * TURN_APPENDS);
    assert!(
        fork(s.log(), "p", Some(2 * TURN_APPENDS as u64 + 1), None).is_err(),
        "{}: a fork inside a running turn",
        kit.name
    );
    let mut child = Session::open(kit.log.clone(), "p-after-t0", reg.clone()).unwrap();
    turn(&mut child, 7, usize::MAX);
    child.flush().unwrap();
    let child_out = outcome(&mut child);
    drop(child);
    let closed = {
        let mut c = Session::open_read_only(kit.log.clone(), "p-closed", reg.clone()).unwrap();
        outcome(&mut c)
    };
    // Deleting the parent: not found from then on; its forks still read
    // what they inherit.
    let tomb = s.delete().unwrap();
    assert_eq!(tomb as usize, 2 * TURN_APPENDS + 3);
    let err = Session::open(kit.log.clone(), "p", reg.clone()).unwrap_err();
    assert!(err.is_not_found(), "{}: {err}", kit.name);
    let err = Session::open_read_only((kit.second)(), "p", reg.clone()).unwrap_err();
    assert!(err.is_not_found(), "{}: {err}", kit.name);
    let mut again = Session::open_read_only((kit.second)(), "p-after-t0", reg).unwrap();
    assert_eq!(
        outcome(&mut again),
        child_out,
        "{}: a fork of a deleted parent",
        kit.name
    );
    (child_out, closed)
}

/// Writers exclude each other the way the backend promises: one writable
/// handle per session in a process, and (PostgreSQL) across processes.
pub fn one_writer_per_session(kit: &Kit) {
    let reg = registry();
    let s = Session::create(kit.log.clone(), "w", reg.clone()).unwrap();
    let err = Session::open(kit.log.clone(), "w", reg.clone()).unwrap_err();
    assert!(
        matches!(err, turnstone::Error::SessionLive { .. }),
        "{}: {err}",
        kit.name
    );
    if kit.detects_takeover {
        let err = Session::open((kit.second)(), "w", reg.clone()).unwrap_err();
        assert!(
            matches!(err, turnstone::Error::Fenced { .. }),
            "{}: {err}",
            kit.name
        );
    }
    drop(s);
    // Released: another writer gets it at once, and it is no takeover.
    let s = Session::open((kit.second)(), "w", reg).unwrap();
    assert!(!s.took_over());
}

/// Projection caches and session state snapshots (FORMAT.md §12, §17):
/// written once the events are durable, used by the next read or open,
/// which folds only the tail; a snapshot that no longer matches the log
/// is discarded. Returns the projection states, compared across backends.
pub fn snapshots_cover_what_is_durable(kit: &Kit) -> (RunState, TokenState) {
    let reg = registry();
    let mut s = Session::create(kit.log.clone(), "snap", reg.clone()).unwrap();
    for t in 0..4 {
        turn(&mut s, t, usize::MAX);
    }
    s.flush().unwrap();
    let len = s.len();
    let log = kit.log.as_ref();
    let full = snapshot::read(log, &reg, "snap", &RunStatus).unwrap();
    assert_eq!(full.snapshot_covered, None, "{}", kit.name);
    assert_eq!(full.folded, len);
    snapshot::refresh(log, &reg, "snap", &RunStatus).unwrap();
    snapshot::refresh(log, &reg, "snap", &TokenMeter).unwrap();
    let cached = snapshot::read(log, &reg, "snap", &RunStatus).unwrap();
    assert_eq!(cached.snapshot_covered, Some(len), "{}", kit.name);
    assert_eq!(cached.folded, 0, "{}", kit.name);
    assert_eq!(cached.state, full.state);
    // More turns: only the tail is folded, to the same state as from 0.
    turn(&mut s, 4, usize::MAX);
    s.flush().unwrap();
    let tail = snapshot::read(log, &reg, "snap", &RunStatus).unwrap();
    assert_eq!(tail.snapshot_covered, Some(len));
    assert_eq!(tail.folded as usize, TURN_APPENDS);
    assert_eq!(tail.state.turns_completed, 5, "{}", kit.name);
    // The session's own state: saved, and the next open starts from it.
    assert!(s.save_state_snapshot().unwrap(), "{}", kit.name);
    let live = outcome(&mut s);
    let len = s.len();
    drop(s);
    let mut again = Session::open((kit.second)(), "snap", reg.clone()).unwrap();
    assert_eq!(again.restored_from_snapshot(), Some(len), "{}", kit.name);
    assert_eq!(
        outcome(&mut again),
        live,
        "{}: from the state snapshot",
        kit.name
    );
    // A snapshot that leads the log is refused; one of a session whose
    // log changed under it would be discarded (checked by `read`).
    assert!(
        matches!(
            snapshot::write(log, "snap", &RunStatus, &tail.state, len + 5),
            Err(turnstone::Error::Refused(_))
        ),
        "{}",
        kit.name
    );
    let tokens = snapshot::read(log, &reg, "snap", &TokenMeter).unwrap();
    assert_eq!(tokens.snapshot_covered, Some(len - TURN_APPENDS as u64));
    (tail.state, tokens.state)
}

/// A follower on another worker sees every durable event once, in order,
/// as the writer makes it durable, and ends after the tombstone.
pub fn a_follower_sees_every_event_once(kit: &Kit) -> Vec<(u64, String)> {
    let reg = registry();
    let mut s = Session::create(kit.log.clone(), "fol", reg.clone()).unwrap();
    turn(&mut s, 0, usize::MAX);
    s.flush().unwrap();
    let other = (kit.second)();
    let mut sub = subscribe(&other, "fol", reg.clone(), 0).unwrap();
    let mut seen = Vec::new();
    let mut take = |sub: &mut SessionSubscription, n: usize| {
        for _ in 0..n {
            let e = sub.next().expect("the follower ended").unwrap();
            seen.push((e.seq, e.kind.name().to_string()));
        }
    };
    take(&mut sub, TURN_APPENDS);
    assert!(
        sub.try_next().unwrap().is_none(),
        "{}: nothing more yet",
        kit.name
    );
    // The writer goes on, from another thread, while the follower waits.
    let writer = std::thread::spawn(move || {
        turn(&mut s, 1, usize::MAX);
        s.flush().unwrap();
        s.delete().unwrap();
    });
    take(&mut sub, TURN_APPENDS + 1);
    writer.join().unwrap();
    assert!(
        sub.next().is_none(),
        "{}: ends after the tombstone",
        kit.name
    );
    assert_eq!(
        seen.iter().map(|e| e.0).collect::<Vec<_>>(),
        (0..2 * TURN_APPENDS as u64 + 1).collect::<Vec<_>>(),
        "{}",
        kit.name
    );
    assert_eq!(seen.last().unwrap().1, "session/delete");
    // A deleted session cannot be followed.
    assert!(subscribe(&other, "fol", reg, 0).unwrap_err().is_not_found());
    seen
}

/// The same bodies on both backends; the outcomes must be equal.
pub fn session_layer_on_both_backends(cx: &Ctx) {
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    let live = live_and_reopened_agree(&e);
    assert_eq!(live, live_and_reopened_agree(&p));
    // What the session layer appends on PostgreSQL is indexed for its
    // text search, at the seq the session holds it.
    let log = PgLog::connect(&cx.url, PgOptions::default()).unwrap();
    let hits = log.search("question", 100).unwrap();
    let want: Vec<u64> = live
        .events
        .iter()
        .filter(|e| e.1 == "user/message" && e.2.to_string().contains("question"))
        .map(|e| e.0)
        .collect();
    let mut got: Vec<u64> = hits
        .iter()
        .filter(|h| h.session == "main")
        .map(|h| h.seq)
        .collect();
    got.sort();
    assert!(!want.is_empty());
    assert_eq!(got, want, "{hits:?}");
    log.close();
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    let (er, pr) = (
        every_crash_point_is_repaired(&e),
        every_crash_point_is_repaired(&p),
    );
    for (k, (a, b)) in er.iter().zip(&pr).enumerate() {
        assert_eq!(a.0.appended, b.0.appended, "crash-{k}: repair");
        assert_eq!(
            a.0.tools_outcome_unknown, b.0.tools_outcome_unknown,
            "crash-{k}"
        );
        assert_eq!(a.0.tools_not_started, b.0.tools_not_started, "crash-{k}");
        assert_eq!(a.1, b.1, "crash-{k}: repaired session");
    }
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    assert_eq!(forks_and_deletion(&e), forks_and_deletion(&p));
    // The listing: the deleted parent is gone, its forks are listed with
    // their parent and length, the same on both.
    type Row = (String, u64, bool, Option<(String, u64)>);
    let listed = |kit: &Kit| -> Vec<Row> {
        list_sessions(kit.log.as_ref())
            .unwrap()
            .into_iter()
            // One database holds every body's sessions.
            .filter(|s| s.id.starts_with("p"))
            .map(|s| {
                // A fork's creation is its first own event (p-closed has none).
                assert!(s.updated_ms.is_some() && s.updated_ms >= s.created_ms);
                (s.id, s.events, s.open_turn, s.parent)
            })
            .collect()
    };
    let (le, lp) = (listed(&e), listed(&p));
    assert_eq!(le, lp);
    assert_eq!(
        le.iter().map(|l| l.0.as_str()).collect::<Vec<_>>(),
        ["p-after-t0", "p-closed"]
    );
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    assert_eq!(
        snapshots_cover_what_is_durable(&e),
        snapshots_cover_what_is_durable(&p)
    );
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    assert_eq!(
        a_follower_sees_every_event_once(&e),
        a_follower_sees_every_event_once(&p)
    );
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    one_writer_per_session(&e);
    one_writer_per_session(&p);
}

/// The model calls tool `sh` with `input` (an assistant `tool_use`, the
/// `tool/call`) and it answers `output`.
fn tool_round(s: &mut Session, call: &str, input: Value, output: &str, is_error: bool) {
    s.append(
        AssistantMessage {
            content: vec![ContentBlock::ToolUse {
                id: call.to_string(),
                name: "sh".into(),
                input: input.clone(),
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
            call_id: call.to_string(),
            name: "sh".into(),
            input,
        },
        (),
    )
    .unwrap();
    s.append(
        ToolResult {
            call_id: call.to_string(),
            content: vec![ContentBlock::text(output)],
            is_error,
            status: None,
        },
        SurfaceOp::Append,
    )
    .unwrap();
}

/// History longer than one 32 MiB batch, created all or nothing through a
/// staging session (`Session::create_with_history`): the session holds
/// every event, the staging session is deleted and not listed.
pub fn history_over_one_batch(kit: &Kit) -> Outcome {
    let history: Vec<HistoryEvent> = (0..17_000u64)
        .map(|i| HistoryEvent {
            kind: EventKind::Core(CoreKind::UserMessage),
            data: json!({"content": [{"type": "text", "text": format!("{i:05} {}", "h".repeat(2_000))}]}),
            surface: Some(SurfaceOp::Append),
            ts: Some(1_000 + i),
        })
        .collect();
    let s = Session::create_with_history(kit.log.clone(), "big", registry(), &history).unwrap();
    assert_eq!(s.len(), 17_001, "{}", kit.name);
    drop(s);
    let names: Vec<String> = list_sessions(kit.log.as_ref())
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .filter(|id| id == "big" || id.starts_with(STAGING_PREFIX))
        .collect();
    assert_eq!(names, ["big"], "{}", kit.name);
    let mut s = Session::open(kit.log.clone(), "big", registry()).unwrap();
    outcome(&mut s)
}

pub fn history_over_one_batch_on_both_backends(cx: &Ctx) {
    let (e, p) = (Kit::embedded(), Kit::postgres(cx));
    let a = history_over_one_batch(&e);
    assert_eq!(a.events.len(), 17_001);
    assert!(a == history_over_one_batch(&p), "the backends differ");
}
