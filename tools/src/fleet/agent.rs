//! The simulated agent: where it is in its turn ([`Phase`]), the one action
//! it takes next ([`Agent::act`]), how it waits for durability ([`Waits`]),
//! and how a graceful stop closes what it left open ([`wind_down`]). The
//! turn shape the `fleet` module doc describes is written here; the threads
//! that drive agents are in `threads`.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use serde_json::{json, Value};
use turnstone::session::{
    run_tool, run_tool_async, AssistantChunk, AssistantMessage, CancelToken, ContentBlock,
    RequestContext, RequestSpec, Session, SharedSession, StepEnd, StepEndReason, StepStart,
    SurfaceOp, ToolBody, ToolResult, ToolScope, TurnEnd, TurnEndReason, TurnStart, Usage,
    UserMessage,
};

use super::threads::Shared;
use super::workload::{build_spec, Gen, MODELS, TINY_PNG_BASE64};
use super::PLUGIN_KIND;

/// Chunks per assistant message.
const CHUNKS: u32 = 20;
/// A compaction after every this many turns of a session.
const COMPACT_EVERY: u64 = 3;
/// A model switch after every this many turns.
const SWITCH_EVERY: u64 = 10;
/// A plugin event after every this many turns.
const PLUGIN_EVERY: u64 = 2;

/// Where an agent is in its turn: the next action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    TurnStart,
    UserMessage,
    /// `step/start`, `request/header` (when needed), now and then
    /// `request/context`, then the durability checkpoint before the model
    /// request: what an agent loop does back to back.
    StepStart,
    Chunk(u32),
    AssistantMessage,
    /// `tool/call`, checkpoint, body, `tool/result` ([`run_tool`]).
    Tool,
    /// `step/end`, then the durability checkpoint before the next pre-step.
    StepEnd,
    TurnEnd,
    /// Prune, compaction, plugin event, model switch, as due.
    Upkeep,
}

impl Phase {
    /// Most events the action appends.
    pub(super) fn max_events(self) -> u64 {
        match self {
            Phase::StepStart => 3,
            Phase::Tool => 2,
            Phase::Upkeep => 7,
            _ => 1,
        }
    }
}

pub(super) struct Agent {
    pub(super) name: Arc<str>,
    /// Loaded (and repaired) when the agent first acts: a reopened store's
    /// sessions are not all held in memory at once.
    pub(super) session: Option<SharedSession>,
    pub(super) phase: Phase,
    /// Makes turn and call ids unique across runs: the session's length when
    /// this run took it over.
    pub(super) prefix: u64,
    turn: u64,
    step: u32,
    steps: u32,
    model: usize,
    /// Surface length when the current turn started: everything before it
    /// belongs to closed turns and may be compacted.
    turn_mark: u64,
    /// A large tool result (its seq) that may be pruned.
    prune: Option<u64>,
    /// The current step's tool use: (call id, input).
    tool_use: Option<(String, Value)>,
    /// The request spec and the model it is for.
    spec: Option<(usize, RequestSpec)>,
    /// The session was deleted (or deleted and collected): this run leaves
    /// it alone.
    pub(super) gone: bool,
}

impl Agent {
    /// The request spec for the current model: built when the model
    /// changes, as a harness keeps its configuration between requests (the
    /// session resolves and compares it on every request).
    fn spec(&mut self, name: &str) -> &RequestSpec {
        let model = self.model;
        if self.spec.as_ref().is_some_and(|(m, _)| *m != model) {
            self.spec = None;
        }
        &self
            .spec
            .get_or_insert_with(|| (model, build_spec(model, name)))
            .1
    }

    /// Perform the next action on the locked session. Returns the durability
    /// latency when the action waited for one.
    ///
    /// With [`Waits::Async`] the durability waits are awaited
    /// ([`Session::flush_async`], [`run_tool_async`]); with
    /// [`Waits::Blocking`] they block the thread ([`Session::flush`],
    /// [`run_tool`]) and the future is ready the first time it is polled.
    pub(super) async fn act(
        &mut self,
        s: &mut Session,
        g: &mut Gen,
        sh: &Shared<'_>,
        waits: Waits,
    ) -> Result<Option<u64>, String> {
        // Shared, not copied: most actions are a chunk and need no ids.
        let name = self.name.clone();
        let err = |what: &str, e: turnstone::Error| format!("{what} in session {name}: {e}");
        let turn_id = || format!("t{}-{}", self.prefix, self.turn);
        let step_id = || format!("s{}", self.step);
        let mut waited = None;
        match self.phase {
            Phase::TurnStart => {
                self.steps = g.rng.gen_range(1..=3);
                self.step = 0;
                self.turn_mark = s.surface().len() as u64;
                s.append(TurnStart { turn_id: turn_id() }, ())
                    .map_err(|e| err("turn/start", e))?;
                self.phase = Phase::UserMessage;
            }
            Phase::UserMessage => {
                let text = g.text(200, 400);
                let mut content = vec![ContentBlock::text(text)];
                if g.rng.gen_bool(0.1) {
                    // A small screenshot, as a harness pastes it.
                    content.push(ContentBlock::image_base64("image/png", TINY_PNG_BASE64));
                }
                s.append(UserMessage { content }, SurfaceOp::Append)
                    .map_err(|e| err("user/message", e))?;
                self.phase = Phase::StepStart;
            }
            Phase::StepStart => {
                s.append(
                    StepStart {
                        turn_id: turn_id(),
                        step_id: step_id(),
                    },
                    (),
                )
                .map_err(|e| err("step/start", e))?;
                let (model, window) = MODELS[self.model];
                let spec = self.spec(&name);
                let reason = s
                    .prepare_request(spec)
                    .map_err(|e| err("request/header", e))?;
                if reason.is_some() || g.rng.gen_bool(0.1) {
                    s.record_context(RequestContext {
                        provider: spec.provider.clone(),
                        model: model.into(),
                        context_window: window,
                    })
                    .map_err(|e| err("request/context", e))?;
                }
                let t0 = Instant::now();
                checkpoint(s, waits)
                    .await
                    .map_err(|e| err("checkpoint before the model request", e))?;
                waited = Some(t0.elapsed().as_micros() as u64);
                sh.ack(&name, s.len() - 1)?;
                self.phase = Phase::Chunk(0);
            }
            Phase::Chunk(i) => {
                let text = g.text(60, 100);
                s.append(AssistantChunk { index: i, text }, ())
                    .map_err(|e| err("assistant/chunk", e))?;
                self.phase = if i + 1 < CHUNKS {
                    Phase::Chunk(i + 1)
                } else {
                    Phase::AssistantMessage
                };
            }
            Phase::AssistantMessage => {
                let msg = self.assistant_message(g);
                s.append(msg, SurfaceOp::Append)
                    .map_err(|e| err("assistant/message", e))?;
                self.phase = if self.tool_use.is_some() {
                    Phase::Tool
                } else {
                    Phase::StepEnd
                };
            }
            Phase::Tool => {
                waited = Some(self.run_shell_tool(s, g, sh, waits).await?);
                self.phase = Phase::StepEnd;
            }
            Phase::StepEnd => {
                let reason = if self.tool_use.is_some() {
                    StepEndReason::ToolUse
                } else {
                    StepEndReason::Completed
                };
                s.append(
                    StepEnd {
                        turn_id: turn_id(),
                        step_id: step_id(),
                        reason,
                    },
                    (),
                )
                .map_err(|e| err("step/end", e))?;
                let t0 = Instant::now();
                checkpoint(s, waits)
                    .await
                    .map_err(|e| err("checkpoint before the next step", e))?;
                waited = Some(t0.elapsed().as_micros() as u64);
                sh.ack(&name, s.len() - 1)?;
                self.step += 1;
                self.phase = if self.step < self.steps {
                    Phase::StepStart
                } else {
                    Phase::TurnEnd
                };
            }
            Phase::TurnEnd => {
                s.append(
                    TurnEnd {
                        turn_id: turn_id(),
                        reason: TurnEndReason::Completed,
                    },
                    (),
                )
                .map_err(|e| err("turn/end", e))?;
                self.turn += 1;
                self.phase = Phase::Upkeep;
            }
            Phase::Upkeep => {
                self.upkeep(s, g)?;
                self.phase = Phase::TurnStart;
            }
        }
        Ok(waited)
    }

    /// The step's assistant message: usage as a provider reports it, and
    /// (mostly) thinking, text and a shell tool use; sometimes empty, which
    /// ends the turn after this step.
    fn assistant_message(&mut self, g: &mut Gen) -> AssistantMessage {
        // Usage as a provider reports it: cache reads and writes,
        // and a field the engine has no name for.
        let mut usage = Usage::new(g.rng.gen_range(1_000..50_000), g.rng.gen_range(100..2_000));
        usage.cache_read_input_tokens = Some(g.rng.gen_range(0..40_000));
        usage.cache_creation_input_tokens = Some(g.rng.gen_range(0..2_000));
        usage.extra.insert("service_tier".into(), json!("standard"));
        let usage = Some(usage);
        if g.rng.gen_bool(0.03) {
            // An empty reply: no tool, and the turn ends after this step.
            self.tool_use = None;
            self.steps = self.step + 1;
            AssistantMessage {
                content: vec![],
                usage,
                stop_reason: Some("end_turn".into()),
                extra: Default::default(),
            }
        } else {
            let call_id = format!("call-{}-{}-{}", self.prefix, self.turn, self.step);
            let input = json!({ "cmd": g.text(40, 160) });
            self.tool_use = Some((call_id.clone(), input.clone()));
            let mut content = Vec::with_capacity(4);
            if g.rng.gen_bool(0.7) {
                // Extended thinking, with the signature the provider
                // must see again in the next request.
                let sig: String = (0..64)
                    .map(|_| g.rng.gen_range(b'a'..=b'z') as char)
                    .collect();
                content.push(ContentBlock::thinking(
                    g.text(200, 400),
                    format!("Eq{sig}=="),
                ));
            }
            if g.rng.gen_bool(0.02) {
                // A block type this build does not know: kept as it is.
                content.push(ContentBlock::from_json(json!({
                    "type": "fleet_future_block",
                    "payload": {"n": g.rng.gen_range(0..1000), "note": "unknown to the engine"},
                })));
            }
            content.push(ContentBlock::text(g.text(800, 1000)));
            content.push(ContentBlock::tool_use(call_id, "shell", input));
            AssistantMessage {
                content,
                usage,
                stop_reason: Some("tool_use".into()),
                extra: Default::default(),
            }
        }
    }

    /// Run the shell tool the assistant asked for (`run_tool`, or
    /// `run_tool_async` with `--async`), acknowledging its durable call
    /// from inside the body; returns how long the call took to be durable
    /// (µs). A large output is remembered for pruning.
    async fn run_shell_tool(
        &mut self,
        s: &mut Session,
        g: &mut Gen,
        sh: &Shared<'_>,
        waits: Waits,
    ) -> Result<u64, String> {
        let name = self.name.clone();
        let err = |what: &str, e: turnstone::Error| format!("{what} in session {name}: {e}");
        let (call_id, input) = self
            .tool_use
            .clone()
            .ok_or("tool phase without a tool use")?;
        let output = if g.rng.gen_bool(0.05) {
            g.text(56_000, 64_000)
        } else {
            g.text(3_000, 5_000)
        };
        let large = output.len() >= 56_000;
        let blocks = g.rng.gen_bool(0.2);
        let t0 = Instant::now();
        let mut ack_err = None;
        let mut latency = 0;
        let cancel = CancelToken::new();
        let body = |s: &mut Session, _scope: ToolScope| {
            // The tool/call is durable now: acknowledge it.
            latency = t0.elapsed().as_micros() as u64;
            if let Err(e) = sh.ack(s.id(), s.len() - 1) {
                ack_err = Some(e);
            }
            // Some tools answer with blocks (text and an image).
            let content = if blocks {
                vec![
                    ContentBlock::text(output),
                    ContentBlock::image_base64("image/png", TINY_PNG_BASE64),
                ]
            } else {
                vec![ContentBlock::text(output)]
            };
            ToolBody {
                content,
                is_error: false,
                value: (),
            }
        };
        let scope = ToolScope::model();
        let out = match waits {
            Waits::Blocking => run_tool(
                s,
                scope,
                &call_id,
                "shell",
                input,
                &cancel,
                |_| Ok(()),
                body,
            ),
            Waits::Async => {
                run_tool_async(
                    s,
                    scope,
                    &call_id,
                    "shell",
                    input,
                    &cancel,
                    |_| Ok(()),
                    async |s, scope| body(s, scope),
                )
                .await
            }
        }
        .map_err(|e| err("tool run", e))?;
        if let Some(e) = ack_err {
            return Err(e);
        }
        if let turnstone::session::ToolOutcome::Ran { result_seq, .. } = out {
            if large {
                self.prune = Some(result_seq);
            }
        }
        Ok(latency)
    }

    /// Between turns: maybe prune a large tool result, compact every
    /// `COMPACT_EVERY` turns, a plugin event every `PLUGIN_EVERY`, switch
    /// model every `SWITCH_EVERY`.
    fn upkeep(&mut self, s: &mut Session, g: &mut Gen) -> Result<(), String> {
        let name = self.name.clone();
        let err = |what: &str, e: turnstone::Error| format!("{what} in session {name}: {e}");
        if let Some(seq) = self.prune.take() {
            let at = s.surface().nodes.iter().position(|n| *n == seq);
            if let (Some(at), true) = (at, g.rng.gen_bool(0.5)) {
                s.prune_tool_result(
                    at as u64,
                    "[tool output pruned: it was large and is no longer needed]",
                    16_000,
                )
                .map_err(|e| err("prune", e))?;
            }
        }
        if self.turn.is_multiple_of(COMPACT_EVERY) && self.turn_mark >= 2 {
            let summary = format!("Summary of the conversation so far: {}", g.text(300, 600));
            s.compact(
                &format!("c{}-{}", self.prefix, self.turn),
                0,
                self.turn_mark,
                &summary,
            )
            .map_err(|e| err("compaction", e))?;
        }
        if self.turn.is_multiple_of(PLUGIN_EVERY) {
            let data = json!({"turns": self.turn, "tokens": g.rng.gen_range(10_000..500_000)});
            s.append_plugin(PLUGIN_KIND, &data)
                .map_err(|e| err("plugin event", e))?;
        }
        if self.turn.is_multiple_of(SWITCH_EVERY) {
            self.model ^= 1;
        }
        Ok(())
    }
}

/// Close what a graceful stop leaves open: tools the assistant asked for get
/// a cancelled result, the open step and turn end as cancelled.
pub(super) fn wind_down(s: &mut Session) -> turnstone::Result<()> {
    let open = s.open_state().clone();
    let mut ids: Vec<(&(u64, u32), &String)> =
        open.origin.iter().map(|(id, at)| (at, id)).collect();
    ids.sort();
    for (_, id) in ids {
        s.append(
            ToolResult {
                call_id: id.clone(),
                content: vec![ContentBlock::text(
                    "cancelled: the agent stopped before this tool ran",
                )],
                is_error: true,
                status: None,
            },
            SurfaceOp::Append,
        )?;
    }
    if let Some((turn_id, step_id, _)) = open.step {
        s.append(
            StepEnd {
                turn_id,
                step_id,
                reason: StepEndReason::Cancelled,
            },
            (),
        )?;
    }
    if let Some((turn_id, _)) = open.turn {
        s.append(
            TurnEnd {
                turn_id,
                reason: TurnEndReason::Cancelled,
            },
            (),
        )?;
    }
    Ok(())
}

/// How agents wait for durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waits {
    /// A thread per share of the sessions, blocked by each wait: while one
    /// of its sessions waits, the thread's other sessions wait with it.
    Blocking,
    /// A task per session on a current-thread runtime per thread: a
    /// session's wait holds no thread, so the thread's other sessions go on.
    Async,
}

/// The durability checkpoint: every event the session appended is durable.
async fn checkpoint(s: &Session, waits: Waits) -> turnstone::Result<()> {
    match waits {
        Waits::Blocking => s.flush(),
        Waits::Async => s.flush_async().await,
    }
}

/// Run a future that never waits (an action with [`Waits::Blocking`]) to
/// its end on this thread.
pub(super) fn ready<T>(
    f: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => Err("a blocking action waited on a future".into()),
    }
}

pub(super) fn new_agent(name: String) -> Agent {
    Agent {
        name: name.into(),
        session: None,
        phase: Phase::TurnStart,
        prefix: 0,
        turn: 0,
        step: 0,
        steps: 1,
        model: 0,
        turn_mark: 0,
        prune: None,
        tool_use: None,
        spec: None,
        gone: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
    use std::sync::Mutex;

    use indicatif::ProgressBar;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use turnstone::session::{validate_messages, Host, Registry};
    use turnstone::Store;

    use crate::fleet::workload::corpus;

    /// One agent through several turns on a real store: the turn shape, and
    /// every durability wait acknowledged after its events, blocking or
    /// awaited.
    #[test]
    fn turn_shape_through_the_session_layer() {
        turn_shape(Waits::Blocking);
    }

    #[test]
    fn turn_shape_with_async_waits() {
        turn_shape(Waits::Async);
    }

    fn turn_shape(waits: Waits) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut reg = Registry::new();
        reg.register(PLUGIN_KIND, true).unwrap();
        let host = Host::new(store.clone(), Arc::new(reg));
        let progress = ProgressBar::hidden();
        let sh = Shared {
            claimed: AtomicU64::new(0),
            budget: u64::MAX,
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            ledger: None,
            ledger_path: None,
            progress: &progress,
            threads: 1,
            first_pass_done: AtomicUsize::new(0),
        };
        let mut rng = StdRng::seed_from_u64(3);
        let corpus = corpus(&mut rng).into();
        let mut g = Gen {
            rng,
            corpus,
            max_text: usize::MAX,
        };
        let session = host.create("s").unwrap();
        let mut a = new_agent("s".into());
        a.session = Some(session.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut s = session.lock();
        let mut phases = Vec::new();
        let mut waited = 0;
        while a.turn < 12 {
            phases.push(a.phase);
            let before = s.len();
            let acted = match waits {
                Waits::Blocking => ready(a.act(&mut s, &mut g, &sh, waits)),
                Waits::Async => rt.block_on(a.act(&mut s, &mut g, &sh, waits)),
            };
            if acted.unwrap().is_some() {
                waited += 1;
            }
            if matches!(phases.last(), Some(Phase::StepStart | Phase::StepEnd)) {
                // A checkpoint: everything the session appended is durable.
                let (st, pos) = s.durability_point().log_pos().unwrap();
                assert!(st.durable_pos() >= pos, "{:?}", phases.last());
            }
            assert!(s.len() - before <= phases.last().unwrap().max_events());
        }
        assert!(waited > 12, "{waited} waits");
        assert!(phases.contains(&Phase::Tool));
        let ev = s.events(0..s.len()).unwrap();
        let kinds: Vec<&str> = ev.iter().map(|e| e.kind.name()).collect();
        for k in [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "assistant/chunk",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end",
            "compaction/start",
            "compaction/summary",
            "compaction/end",
            PLUGIN_KIND,
        ] {
            assert!(kinds.contains(&k), "{k} missing");
        }
        // Headers: initial, then a change at the model switch after turn 10.
        let reasons: Vec<String> = ev
            .iter()
            .filter(|e| e.kind.name() == "request/header")
            .map(|e| e.data["reason"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(reasons, ["initial", "change"]);
        // Every tool/result directly follows its tool/call.
        for (i, k) in kinds.iter().enumerate() {
            if *k == "tool/call" {
                assert_eq!(kinds[i + 1], "tool/result");
            }
        }
        validate_messages(s.derive_messages()).unwrap();
        wind_down(&mut s).unwrap();
        assert!(s.open_state().is_idle());
    }
}
