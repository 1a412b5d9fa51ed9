//! Target `repair`: session repair over arbitrary event sequences cut by a
//! crash.
//!
//! Two sessions get arbitrary interleaved core events (turns, steps, user and
//! assistant messages with tool uses, tool calls and results, compactions,
//! prunes, chunks, headers, seed markers, ignorable plugin events), appended
//! as raw frames so that sequences a live loop would refuse (a result before
//! its call, a step outside a turn, nested turns, `interrupted` reasons) are
//! covered too; only surface ranges are kept valid, as restore requires. Some
//! events are followed by a sync; the power is cut after an arbitrary number
//! of file operations and the simulator reboots, which truncates each
//! session at an arbitrary point.
//!
//! Properties, for every session after `Host::repair_inactive`:
//! - what survived is a prefix of what was appended, and repair only appended
//!   (the surviving events are unchanged), as many events as it reported;
//! - the open state is idle with no open tool call or requested tool;
//! - the derived messages are valid: every tool use has a tool result after
//!   it — unless a surface replace removed that tool's result from the
//!   surface (see `KNOWN_SPLIT` below);
//! - a second repair appends nothing;
//! - repair survives its own crash: if the power is cut before repair's
//!   events are durable, the next repair does the same again (or nothing, if
//!   they survived), and after a sync a reopen needs no repair.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use serde_json::json;
use turnstone::frame::FLAG_IGNORABLE;
use turnstone::session::internals::{self as event, KIND_CODE_PLUGIN};
use turnstone::session::*;
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Options, Store};

use crate::util::{cut_power_and_drop, dir, segment_bytes, sim_opts};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum OpSel {
    Append,
    Replace { start: u8, len: u8 },
}

#[derive(Arbitrary, Debug)]
enum Ev {
    TurnStart {
        t: u8,
    },
    TurnEnd {
        t: u8,
        reason: u8,
    },
    StepStart {
        t: u8,
        s: u8,
    },
    StepEnd {
        t: u8,
        s: u8,
        reason: u8,
    },
    User {
        op: OpSel,
    },
    Assistant {
        tools: Vec<u8>,
        text: bool,
        op: OpSel,
    },
    Chunk,
    ToolCall {
        id: u8,
    },
    ToolResult {
        id: u8,
        op: OpSel,
    },
    Compaction {
        start: u8,
        len: u8,
    },
    Prune {
        at: u8,
    },
    Header,
    Context,
    EndSeed,
    Plugin,
}

#[derive(Arbitrary, Debug)]
struct Step {
    second_session: bool,
    ev: Ev,
    sync: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    seg: u8,
    /// The power goes off after this many file operations (else only at the
    /// end, after the last sync).
    cut_after_ops: Option<u8>,
    seed: u64,
    seed2: u64,
    steps: Vec<Step>,
}

/// Per session: the surface as restore will rebuild it, and the call id of
/// every tool result (by seq), to build prunes.
#[derive(Default)]
struct Track {
    surface: Surface,
    results: HashMap<u64, String>,
    len: u64,
    appended: Vec<(u16, u16, Vec<u8>)>,
}

fn call_id(id: u8) -> String {
    format!("call-{}", id % 6)
}

fn resolve(op: OpSel, surface: &Surface) -> SurfaceOp {
    match op {
        OpSel::Append => SurfaceOp::Append,
        OpSel::Replace { start, len } => {
            let n = surface.len() as u64;
            let start = start as u64 % (n + 1);
            let end = start + (len as u64 % (n - start + 1));
            SurfaceOp::Replace { start, end }
        }
    }
}

fn turn_reason(r: u8) -> TurnEndReason {
    match r % 4 {
        0 => TurnEndReason::Completed,
        1 => TurnEndReason::Cancelled,
        2 => TurnEndReason::Error {
            message: "boom".into(),
        },
        _ => TurnEndReason::Interrupted,
    }
}

fn step_reason(r: u8) -> StepEndReason {
    match r % 5 {
        0 => StepEndReason::Completed,
        1 => StepEndReason::ToolUse,
        2 => StepEndReason::Cancelled,
        3 => StepEndReason::Error {
            message: "boom".into(),
        },
        _ => StepEndReason::Interrupted,
    }
}

/// Encode one step as frames (kind code, flags, payload): one, or an atomic
/// group (compaction, prune).
fn encode(ev: &Ev, t: &Track) -> Vec<(u16, u16, Vec<u8>)> {
    fn core<D: EventData>(d: D, op: Option<SurfaceOp>) -> (u16, u16, Vec<u8>) {
        (D::KIND.code(), 0, event::encode_core(&d, op))
    }
    let text = |s: &str| vec![ContentBlock::text(s)];
    match ev {
        Ev::TurnStart { t } => vec![core(
            TurnStart {
                turn_id: format!("t{}", t % 3),
            },
            None,
        )],
        Ev::TurnEnd { t, reason } => vec![core(
            TurnEnd {
                turn_id: format!("t{}", t % 3),
                reason: turn_reason(*reason),
            },
            None,
        )],
        Ev::StepStart { t, s } => vec![core(
            StepStart {
                turn_id: format!("t{}", t % 3),
                step_id: format!("s{}", s % 3),
            },
            None,
        )],
        Ev::StepEnd { t, s, reason } => vec![core(
            StepEnd {
                turn_id: format!("t{}", t % 3),
                step_id: format!("s{}", s % 3),
                reason: step_reason(*reason),
            },
            None,
        )],
        Ev::User { op } => vec![core(
            UserMessage {
                content: text("hello"),
            },
            Some(resolve(*op, &t.surface)),
        )],
        Ev::Assistant {
            tools,
            text: has_text,
            op,
        } => {
            let mut content = Vec::new();
            if *has_text {
                content.push(ContentBlock::text("thinking"));
            }
            for id in tools.iter().take(3) {
                content.push(ContentBlock::ToolUse {
                    id: call_id(*id),
                    name: "shell".into(),
                    input: json!({"cmd": "ls"}),
                    extra: Default::default(),
                });
            }
            vec![core(
                AssistantMessage {
                    content,
                    usage: None,
                    stop_reason: None,
                    extra: Default::default(),
                },
                Some(resolve(*op, &t.surface)),
            )]
        }
        Ev::Chunk => vec![core(
            AssistantChunk {
                index: 0,
                text: "th".into(),
            },
            None,
        )],
        Ev::ToolCall { id } => vec![core(
            ToolCall {
                call_id: call_id(*id),
                name: "shell".into(),
                input: json!({}),
            },
            None,
        )],
        Ev::ToolResult { id, op } => vec![core(
            ToolResult {
                call_id: call_id(*id),
                content: text("ok"),
                is_error: false,
                status: None,
            },
            Some(resolve(*op, &t.surface)),
        )],
        Ev::Compaction { start, len } => {
            let op = resolve(
                OpSel::Replace {
                    start: *start,
                    len: *len,
                },
                &t.surface,
            );
            let id = "c1".to_string();
            vec![
                core(
                    CompactionStart {
                        compaction_id: id.clone(),
                    },
                    None,
                ),
                core(
                    CompactionSummary {
                        compaction_id: id.clone(),
                        text: "summary".into(),
                    },
                    None,
                ),
                core(
                    UserMessage {
                        content: text("summary"),
                    },
                    Some(op),
                ),
                core(CompactionEnd { compaction_id: id }, None),
            ]
        }
        Ev::Prune { at } => {
            if t.surface.is_empty() {
                return Vec::new();
            }
            let at = *at as usize % t.surface.len();
            let seq = t.surface.nodes[at];
            let Some(call) = t.results.get(&seq) else {
                return Vec::new();
            };
            vec![
                core(
                    CompactionPrune {
                        replaced_seqs: vec![seq],
                        tokens_saved: 10,
                    },
                    None,
                ),
                core(
                    ToolResult {
                        call_id: call.clone(),
                        content: text("[pruned]"),
                        is_error: false,
                        status: None,
                    },
                    Some(SurfaceOp::Replace {
                        start: at as u64,
                        end: at as u64 + 1,
                    }),
                ),
            ]
        }
        Ev::Header => vec![core(
            RequestHeader {
                reason: HeaderReason::Initial,
                header: EpochHeader::default(),
            },
            None,
        )],
        Ev::Context => vec![core(
            RequestContext {
                provider: "p".into(),
                model: "m".into(),
                context_window: 1000,
            },
            None,
        )],
        Ev::EndSeed => vec![core(SessionEndSeed {}, None)],
        Ev::Plugin => vec![(
            KIND_CODE_PLUGIN,
            FLAG_IGNORABLE,
            event::encode_plugin("fuzz/note", &json!({"n": 1})),
        )],
    }
}

/// Fold the appended frames into the tracker (surface and result ids).
fn track(t: &mut Track, frames: &[(u16, u16, Vec<u8>)]) {
    let reg = Registry::new();
    for (code, flags, payload) in frames {
        let seq = t.len;
        let ev = event::decode(seq, *code, *flags, payload, &reg).expect("own frames decode");
        if let Some(op) = ev.surface {
            t.surface.apply(seq, op).expect("ranges were resolved");
        }
        if let Some(r) = ev.typed::<ToolResult>() {
            t.results.insert(seq, r.call_id);
        }
        t.appended.push((*code, *flags, payload.clone()));
        t.len += 1;
    }
}

const SESSIONS: [&str; 2] = ["r0", "r1"];

/// The structured input `data` decodes to (for failure reports).
pub fn describe(data: &[u8]) -> String {
    format!("{:#?}", Input::arbitrary_take_rest(Unstructured::new(data)))
}

pub fn run(data: &[u8]) {
    let u = Unstructured::new(data);
    let Ok(input) = Input::arbitrary_take_rest(u) else {
        return;
    };
    let sim = SimVfs::new();
    let opts = Options {
        checkpoints: input.seg & 4 != 0,
        ..sim_opts(&sim, segment_bytes(input.seg))
    };
    let store = Store::open_with(dir(), opts.clone()).expect("open a new store");
    if let Some(n) = input.cut_after_ops {
        sim.set_faults(FaultPlan {
            power_cut_after_ops: Some(sim.ops() + n as u64),
            ..Default::default()
        });
    }
    let mut tracks: BTreeMap<&str, Track> = BTreeMap::new();
    for step in input.steps.iter().take(80) {
        let name = SESSIONS[step.second_session as usize];
        let t = tracks.entry(name).or_default();
        let frames = encode(&step.ev, t);
        if frames.is_empty() {
            continue;
        }
        let refs: Vec<(u16, u16, &[u8])> = frames
            .iter()
            .map(|(c, f, p)| (*c, *f, p.as_slice()))
            .collect();
        if store.append_group(name, &refs, |_| {}).is_err() {
            break;
        }
        track(t, &frames);
        if step.sync {
            let _ = store.sync();
        }
    }
    let _ = store.sync();
    cut_power_and_drop(&sim, store);
    sim.crash(input.seed);

    let store = Arc::new(Store::open_with(dir(), opts.clone()).expect("reopen after a crash"));
    let before = survivors(&store, &tracks);
    let reg = Arc::new(Registry::new());
    let host = Host::new(store.clone(), reg.clone());
    let first = host.repair_inactive().expect("repair after a crash");
    check_repaired(&store, &reg, &before, &first);
    let second = host.repair_inactive().expect("second repair");
    assert!(
        second.iter().all(RepairReport::is_noop),
        "a second repair appended: {second:?}"
    );
    drop(host);

    // Crash before repair's events are durable: the next repair redoes it.
    let store = Arc::into_inner(store).expect("one handle");
    cut_power_and_drop(&sim, store);
    sim.crash(input.seed2);
    let store = Arc::new(Store::open_with(dir(), opts.clone()).expect("reopen after repair"));
    let host = Host::new(store.clone(), reg.clone());
    let redo = host
        .repair_inactive()
        .expect("repair after a crash during repair");
    for r in &redo {
        let f = first.iter().find(|f| f.session == r.session);
        assert!(
            r.is_noop() || Some(r) == f,
            "repair after a crash differs from the first repair: {r:?} vs {f:?}"
        );
    }
    check_repaired(&store, &reg, &before, &redo);
    store.sync().expect("sync repair");
    drop(host);
    let store = Arc::into_inner(store).expect("one handle");
    cut_power_and_drop(&sim, store);
    sim.crash(input.seed2 ^ 1);
    let store = Arc::new(Store::open_with(dir(), opts).expect("reopen after synced repair"));
    let host = Host::new(store, reg);
    let last = host.repair_inactive().expect("repair after synced repair");
    assert!(
        last.iter().all(RepairReport::is_noop),
        "repair was synced, yet the next open needed repair: {last:?}"
    );
}

/// The surviving events of every session, checked to be a prefix of what
/// was appended.
fn survivors(store: &Store, tracks: &BTreeMap<&str, Track>) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for info in store.sessions() {
        let t = tracks
            .get(info.name.as_str())
            .unwrap_or_else(|| panic!("invented session {:?}", info.name));
        let evs = store.read_range(&info.name, 0..info.len).expect("read");
        assert!(evs.len() <= t.appended.len(), "more events than appended");
        for (e, (code, flags, payload)) in evs.iter().zip(&t.appended) {
            assert!(
                e.kind == *code && e.flags == *flags && e.payload == *payload,
                "{}: seq {} differs from what was appended",
                info.name,
                e.seq.0
            );
        }
        out.insert(info.name, evs.into_iter().map(|e| e.payload).collect());
    }
    out
}

/// Repair's postconditions for every session.
fn check_repaired(
    store: &Arc<Store>,
    reg: &Arc<Registry>,
    before: &BTreeMap<String, Vec<Vec<u8>>>,
    reports: &[RepairReport],
) {
    for (name, old) in before {
        let mut s = Session::open(store.clone(), name, reg.clone()).expect("restore");
        let report = reports.iter().find(|r| &r.session == name);
        let len = s.len() as usize;
        assert!(len >= old.len(), "{name}: repair removed events");
        let now = store.read_range(name, 0..old.len() as u64).expect("read");
        assert!(
            now.iter().map(|e| &e.payload).eq(old.iter()),
            "{name}: repair changed durable events"
        );
        if let Some(r) = report {
            assert!(
                len - old.len() >= r.appended as usize,
                "{name}: repair reported {} events, the log grew by {}",
                r.appended,
                len - old.len()
            );
        }
        let open = s.open_state().clone();
        assert!(open.is_idle(), "{name}: not idle after repair: {open:?}");
        assert!(
            open.calls.is_empty() && open.requested.is_empty(),
            "{name}: open tools after repair: {open:?}"
        );
        let msgs = s.derive_messages().to_vec();
        if let Err(e) = validate_messages(&msgs) {
            known_split(&s, &msgs, &e);
        }
    }
}

/// KNOWN_SPLIT: a surface replace (a compaction, or any surface event with a
/// replace range) may remove a tool result from the surface while its tool
/// use stays, or insert a result before its tool use; repair cannot see
/// that, because the tool is closed in the log. Reported as a finding (see
/// `engine/tests/fuzz_replay.rs`); here the target only checks that this is
/// the cause: every unanswered tool use on the surface has a tool result in
/// the log, and the surface has seen a replace.
fn known_split(s: &Session, _msgs: &[Arc<Message>], err: &MessageProblem) {
    let replaced = s.surface().replace_generation > 0;
    let evs = s.events(0..s.len()).expect("read session");
    // The generator may give two tool uses one id (no provider does); the
    // messages then cannot pair them, whatever repair does.
    let uses = |id: &str| -> usize {
        evs.iter()
            .filter_map(|e| e.typed::<AssistantMessage>())
            .flat_map(|m| m.content)
            .filter(|b| b.client_tool_use().is_some_and(|(u, _)| u == id))
            .count()
    };
    let id = match err {
        MessageProblem::UnansweredToolUse { id, .. }
        | MessageProblem::OrphanToolResult { id, .. }
        | MessageProblem::LateToolResult { id, .. }
        | MessageProblem::DuplicateToolResult { id, .. } => id.clone(),
        _ => String::new(),
    };
    assert!(
        replaced || uses(&id) > 1,
        "{}: invalid messages after repair, with no replace or reused tool-use id to explain it: {err}",
        s.id()
    );
    if let MessageProblem::UnansweredToolUse { .. } = err {
        let answered = evs
            .iter()
            .any(|e| e.typed::<ToolResult>().is_some_and(|r| r.call_id == id));
        assert!(
            answered,
            "{}: invalid messages after repair ({err}): tool use {id:?} is not answered",
            s.id()
        );
    }
}
