//! `turnstone fleet`: simulate an agent fleet writing through the session
//! layer ([`turnstone::session`]).
//!
//! N sessions are spread over T threads; each thread owns its sessions (a
//! session handle is never shared across threads) and interleaves them
//! round-robin, one action at a time, so many turns are open at once and the
//! frames of many sessions interleave in the log. A turn is:
//!
//! `turn/start`, `user/message`, then one to three steps of `step/start`, a
//! `request/header` when needed (`initial`, `change` after a model switch,
//! `resume` for the first request of a reopened session), `request/context`
//! now and then, the checkpoint before the model request, 20
//! `assistant/chunk`, `assistant/message` with a tool use, the tool run
//! through [`run_tool`] (its `tool/call` durable before the body runs),
//! `step/end` and the checkpoint before the next pre-step; then `turn/end`.
//! After a turn, now and then: a pruned large tool result, a compaction that
//! replaces the surface before the last turn with a summary, a plugin event,
//! a model switch. Now and then a step's assistant message is empty (no tool,
//! the turn ends).
//!
//! With `--async` each session is instead a task on its thread's own
//! current-thread runtime and awaits its durability waits
//! ([`Session::flush_async`], [`run_tool_async`]): a session waiting for an
//! fdatasync no longer holds up the other sessions of its thread, as it
//! does when the thread blocks. The turns are the same.
//!
//! When the event budget is spent each thread closes its open turns as
//! cancelled (a graceful stop), so a clean run leaves nothing for repair; a
//! killed run leaves every shape of open state, which the next run (or
//! `turnstone recover`) repairs.
//!
//! On an existing store a session is loaded when its thread first acts on
//! it, not up front: `Host::load` restores it (from its state snapshot,
//! FORMAT.md §17, when one matches) and repairs what an earlier run left
//! open before anything is appended to it. Sessions this run never reaches
//! are neither read nor repaired (the next run to use them repairs them).
//! A graceful stop closes every handle it used, which writes a fresh state
//! snapshot for a session with a long tail.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use futures_util::stream::{FuturesUnordered, StreamExt};
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use turnstone::session::{
    run_tool, run_tool_async, AssistantChunk, AssistantMessage, CancelToken, ContentBlock, Host,
    Registry, RepairReport, RequestContext, RequestSpec, Session, SharedSession, StepEnd,
    StepEndReason, StepStart, ToolBody, ToolResult, ToolSchema, ToolScope, TurnEnd, TurnEndReason,
    TurnStart, Usage, UserMessage,
};
use turnstone::session::{SurfaceOp, SystemPrompt};
use turnstone::{Options, Store};

use crate::Failure;

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Store directory (created if missing; an existing store continues its sessions).
    pub dir: PathBuf,
    /// Number of concurrent agent sessions.
    #[arg(long, default_value_t = 256)]
    pub sessions: usize,
    /// Number of appender threads (each owns a share of the sessions).
    #[arg(long, default_value_t = 8)]
    pub threads: usize,
    /// Events to append; then open turns are closed as cancelled (a few more events).
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    /// Segment file size in bytes (engine default when omitted).
    #[arg(long)]
    pub segment_bytes: Option<u32>,
    /// Seed of the workload's random sizes and contents.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// After every durability wait (checkpoint) returns, append `SESSION_ID SEQ`
    /// to this file: the highest seq of that session now durable (one
    /// unbuffered write per line, no fsync).
    #[arg(long)]
    pub ack_ledger: Option<PathBuf>,
    /// Run each session as a task awaiting its durability waits
    /// (`Session::flush_async`, `run_tool_async`) on a current-thread runtime
    /// per thread, instead of a thread that blocks on each wait.
    #[arg(long = "async")]
    pub async_waits: bool,
}

/// Chunks per assistant message.
const CHUNKS: u32 = 20;
/// Bytes of random text each thread draws payload contents from.
const CORPUS_BYTES: usize = 192 * 1024;
/// The fleet's plugin event kind (ignorable: any reader may skip it).
pub const PLUGIN_KIND: &str = "fleet/usage";
const MODELS: [(&str, u64); 2] = [("model-large", 200_000), ("model-small", 1_000_000)];
/// A compaction after every this many turns of a session.
const COMPACT_EVERY: u64 = 3;
/// A model switch after every this many turns.
const SWITCH_EVERY: u64 = 10;
/// A plugin event after every this many turns.
const PLUGIN_EVERY: u64 = 2;

/// The request spec of model `model` (an index into [`MODELS`]) for
/// session `name`.
fn build_spec(model: usize, name: &str) -> RequestSpec {
    let (model_name, _) = MODELS[model];
    RequestSpec {
        provider: "provider-a".into(),
        model: model_name.into(),
        explicit: [("temperature".to_string(), json!(0.7))].into(),
        adapter_defaults: [(
            "max_tokens".to_string(),
            json!(if model == 0 { 8192 } else { 4096 }),
        )]
        .into(),
        system: Some(SystemPrompt::from(format!(
            "You are fleet agent {name}. Use the shell tool to inspect the workspace."
        ))),
        tools: vec![tool_schema()],
    }
}

/// Where an agent is in its turn: the next action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
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
    fn max_events(self) -> u64 {
        match self {
            Phase::StepStart => 3,
            Phase::Tool => 2,
            Phase::Upkeep => 7,
            _ => 1,
        }
    }
}

struct Agent {
    name: Arc<str>,
    /// Loaded (and repaired) when the agent first acts: a reopened store's
    /// sessions are not all held in memory at once.
    session: Option<SharedSession>,
    phase: Phase,
    /// Makes turn and call ids unique across runs: the session's length when
    /// this run took it over.
    prefix: u64,
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
    gone: bool,
}

/// What one thread measured.
#[derive(Default)]
struct ThreadResult {
    ack_us: Vec<u64>,
    /// Events appended and not yet counted on the progress bar.
    pending_progress: u64,
    reopened: u64,
    /// Sessions skipped because they were deleted.
    skipped: u64,
    repairs: Vec<RepairReport>,
}

struct Shared<'a> {
    /// Events claimed so far against the budget.
    claimed: AtomicU64,
    budget: u64,
    stop: AtomicBool,
    error: Mutex<Option<String>>,
    ledger: Option<&'a File>,
    ledger_path: Option<&'a Path>,
    progress: &'a ProgressBar,
    /// Writer threads, and those that have finished their first pass (or
    /// ended): see [`FirstPass`].
    threads: usize,
    first_pass_done: AtomicUsize,
}

/// Every writer thread's sessions take their first action before any
/// thread goes on to a second pass. Without this, a thread the scheduler
/// starts late can find the event budget spent by the others, and its
/// sessions never begin (a small `--events` on a loaded machine: a test's
/// `sess-000001` was missing). Counted when the first pass ends, or when
/// the thread ends however it ends (drop), so no thread waits forever.
struct FirstPass<'a> {
    sh: &'a Shared<'a>,
    counted: std::cell::Cell<bool>,
}

impl<'a> FirstPass<'a> {
    fn new(sh: &'a Shared<'a>) -> Self {
        FirstPass {
            sh,
            counted: std::cell::Cell::new(false),
        }
    }

    fn count(&self) {
        if !self.counted.replace(true) {
            self.sh.first_pass_done.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Every thread has counted itself, or the run stops.
    fn all_done(&self) -> bool {
        self.sh.first_pass_done.load(Ordering::SeqCst) >= self.sh.threads
            || self.sh.stop.load(Ordering::Relaxed)
    }

    /// Count this thread, then wait for the others (or a stop).
    fn finish_and_wait(&self) {
        if self.counted.get() {
            return;
        }
        self.count();
        while !self.all_done() {
            std::thread::yield_now();
        }
    }
}

impl Drop for FirstPass<'_> {
    fn drop(&mut self) {
        self.count();
    }
}

impl Shared<'_> {
    fn fail(&self, msg: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(msg);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Claim `n` events of the budget; false once it is spent.
    fn claim(&self, n: u64) -> bool {
        let mut cur = self.claimed.load(Ordering::SeqCst);
        loop {
            if cur >= self.budget {
                return false;
            }
            match self
                .claimed
                .compare_exchange(cur, cur + n, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    fn refund(&self, n: u64) {
        if n > 0 {
            self.claimed.fetch_sub(n, Ordering::SeqCst);
        }
    }

    /// The ack ledger line: `seq` of `session` is durable.
    fn ack(&self, session: &str, seq: u64) -> Result<(), String> {
        if let (Some(mut f), Some(p)) = (self.ledger, self.ledger_path) {
            let line = format!("{session} {seq}\n");
            f.write_all(line.as_bytes())
                .map_err(|e| format!("write to ack ledger {}: {e}", p.display()))?;
        }
        Ok(())
    }
}

/// Random text for payloads: lowercase words and spaces (ASCII, so any
/// byte range of it is a string: `Gen::text` slices without a UTF-8 check).
fn corpus(rng: &mut StdRng) -> String {
    let mut out = String::with_capacity(CORPUS_BYTES + 16);
    while out.len() < CORPUS_BYTES {
        let n = rng.gen_range(1..10);
        for _ in 0..n {
            out.push(char::from(b'a' + rng.gen_range(0..26u8)));
        }
        out.push(' ');
    }
    out.truncate(CORPUS_BYTES);
    out
}

struct Gen {
    rng: StdRng,
    /// Shared by the tasks of one thread ([`Waits::Async`]).
    corpus: Arc<str>,
    /// Longest text that still fits in one segment with its frame.
    max_text: usize,
}

impl Gen {
    fn text(&mut self, lo: usize, hi: usize) -> String {
        let n = self
            .rng
            .gen_range(lo..=hi)
            .min(self.corpus.len())
            .min(self.max_text);
        let start = self.rng.gen_range(0..=self.corpus.len() - n);
        // ASCII: every index is a char boundary.
        self.corpus
            .get(start..start + n)
            .unwrap_or_default()
            .to_owned()
    }
}

/// A 1×1 PNG, base64: the image the fleet's users and tools attach.
const TINY_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn tool_schema() -> ToolSchema {
    ToolSchema {
        name: "shell".into(),
        description: "Run a shell command and return its output.".into(),
        input_schema: json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
        extra: Default::default(),
    }
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
    async fn act(
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
fn wind_down(s: &mut Session) -> turnstone::Result<()> {
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
enum Waits {
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
fn ready<T>(f: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => Err("a blocking action waited on a future".into()),
    }
}

fn new_agent(name: String) -> Agent {
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

/// What an agent's turn to act came to.
enum Next {
    /// It acted (or had nothing to do); it acts again.
    Again,
    /// The event budget is spent: a graceful stop.
    Spent,
    /// The run stops (an error, recorded in [`Shared::error`]).
    Stop,
    /// The agent's session was deleted: it does not act in this run.
    Gone,
}

/// One action of agent `a`: claim its events of the budget, load its
/// session if this is its first, act, give back what it did not append.
///
/// The session's lock is held across the action's durability wait: only
/// this agent's task (or thread) ever locks its session, so no one waits
/// on it, and with [`Waits::Async`] the task stays on its thread's
/// current-thread runtime.
#[allow(clippy::await_holding_lock)]
async fn step(
    a: &mut Agent,
    host: &Host,
    sh: &Shared<'_>,
    g: &mut Gen,
    res: &mut ThreadResult,
    waits: Waits,
) -> Next {
    if sh.stop.load(Ordering::Relaxed) {
        return Next::Stop;
    }
    if a.gone {
        return Next::Gone;
    }
    let max = a.phase.max_events();
    if max > 0 && !sh.claim(max) {
        return Next::Spent;
    }
    let session = match &a.session {
        Some(s) => s.clone(),
        None => match load(host, &a.name, res) {
            Ok(Some(s)) => {
                a.prefix = s.lock().len();
                a.session = Some(s.clone());
                s
            }
            Ok(None) => {
                a.gone = true;
                res.skipped += 1;
                sh.refund(max);
                return Next::Gone;
            }
            Err(e) => {
                sh.fail(e);
                return Next::Stop;
            }
        },
    };
    let mut s = session.lock();
    let before = s.len();
    let r = a.act(&mut s, g, sh, waits).await;
    let added = s.len() - before;
    drop(s);
    sh.refund(max.saturating_sub(added));
    match r {
        Ok(Some(us)) => res.ack_us.push(us),
        Ok(None) => {}
        Err(e) => {
            sh.fail(e);
            return Next::Stop;
        }
    }
    res.pending_progress += added;
    if res.pending_progress >= 64 {
        sh.progress.inc(res.pending_progress);
        res.pending_progress = 0;
    }
    Next::Again
}

/// The end of a thread's run: after a graceful stop, close what each
/// session left open and each handle this run used (the host keeps only
/// weak references): a session with a long tail past its state snapshot
/// gets a fresh one, so the next run's open folds little.
fn finish_thread(sh: &Shared<'_>, agents: Vec<Agent>, graceful: bool, res: &mut ThreadResult) {
    if graceful {
        for a in agents.iter().filter_map(|a| a.session.as_ref()) {
            let mut s = a.lock();
            if let Err(e) = wind_down(&mut s) {
                sh.fail(format!(
                    "closing session {} at the end of the run: {e}",
                    s.id()
                ));
                break;
            }
        }
    }
    sh.progress.inc(res.pending_progress);
    res.pending_progress = 0;
    if graceful {
        for a in agents {
            let Some(shared) = a.session else { continue };
            if let Ok(m) = Arc::try_unwrap(shared) {
                let s = m.into_inner();
                let id = s.id().to_string();
                if let Err(e) = s.close() {
                    sh.fail(format!("closing session {id}: {e}"));
                    break;
                }
            }
        }
    }
}

/// A thread of [`Waits::Blocking`]: its sessions act round-robin, one
/// action at a time, each durability wait blocking the thread.
fn run_thread<'a>(
    host: &Host,
    sh: &'a Shared<'a>,
    names: Vec<String>,
    seed: u64,
    max_text: usize,
) -> ThreadResult {
    let mut rng = StdRng::seed_from_u64(seed);
    let corpus = corpus(&mut rng).into();
    let mut g = Gen {
        rng,
        corpus,
        max_text,
    };
    let mut res = ThreadResult::default();
    let mut agents: Vec<Agent> = names.into_iter().map(new_agent).collect();
    let mut graceful = false;
    let first_pass = FirstPass::new(sh);
    'outer: loop {
        for a in agents.iter_mut() {
            let next =
                ready(async { Ok(step(a, host, sh, &mut g, &mut res, Waits::Blocking).await) });
            match next {
                Ok(Next::Again | Next::Gone) => {}
                Ok(Next::Spent) => {
                    graceful = true;
                    break 'outer;
                }
                Ok(Next::Stop) => break 'outer,
                Err(e) => {
                    sh.fail(e);
                    break 'outer;
                }
            }
        }
        first_pass.finish_and_wait();
        if agents.iter().all(|a| a.gone) {
            // Nothing left for this thread to do.
            graceful = true;
            break;
        }
    }
    first_pass.count();
    finish_thread(sh, agents, graceful, &mut res);
    res
}

/// A thread of [`Waits::Async`]: each of its sessions is a task on this
/// thread's own current-thread runtime, so a session awaiting durability
/// lets the others act. The tasks of one thread share its corpus; each has
/// its own random stream.
fn run_thread_async<'a>(
    host: &Host,
    sh: &'a Shared<'a>,
    names: Vec<String>,
    seed: u64,
    max_text: usize,
) -> ThreadResult {
    let mut res = ThreadResult::default();
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            sh.fail(format!("cannot start a runtime: {e}"));
            return res;
        }
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let corpus: Arc<str> = corpus(&mut rng).into();
    let first_pass = FirstPass::new(sh);
    let total = names.len();
    // Sessions of this thread that have taken their first action.
    let first_done = std::cell::Cell::new(0usize);
    let tasks = names.into_iter().enumerate().map(|(i, name)| {
        let mut g = Gen {
            rng: StdRng::seed_from_u64(seed ^ (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)),
            corpus: corpus.clone(),
            max_text,
        };
        let (first_done, first_pass) = (&first_done, &first_pass);
        async move {
            let mut a = new_agent(name);
            let mut res = ThreadResult::default();
            let mut graceful = false;
            let mut first = true;
            loop {
                let mut gone = false;
                match step(&mut a, host, sh, &mut g, &mut res, Waits::Async).await {
                    Next::Again => {}
                    Next::Gone => gone = true,
                    Next::Spent => {
                        graceful = true;
                        break;
                    }
                    Next::Stop => break,
                }
                if first {
                    // Every session of every thread acts once before any
                    // acts twice (see FirstPass).
                    first = false;
                    first_done.set(first_done.get() + 1);
                    if first_done.get() == total {
                        first_pass.count();
                    }
                    while !first_pass.all_done() {
                        tokio::task::yield_now().await;
                    }
                }
                if gone {
                    break;
                }
            }
            (a, graceful, res)
        }
    });
    let ended: Vec<(Agent, bool, ThreadResult)> =
        rt.block_on(tasks.collect::<FuturesUnordered<_>>().collect());
    // A thread whose sessions did not all act once is counted now, so no
    // other thread waits for it.
    first_pass.count();
    let mut agents = Vec::with_capacity(ended.len());
    let mut graceful = false;
    for (a, g, r) in ended {
        agents.push(a);
        graceful |= g;
        res.ack_us.extend(r.ack_us);
        res.reopened += r.reopened;
        res.skipped += r.skipped;
        res.repairs.extend(r.repairs);
        res.pending_progress += r.pending_progress;
    }
    finish_thread(sh, agents, graceful, &mut res);
    res
}

/// Take over session `name`: reopen it through the host (which repairs
/// what an earlier run left open before anything is appended) or create it.
/// `None`: the session was deleted (its name stays taken after a
/// collection removed it), so this run leaves it alone.
fn load(host: &Host, name: &str, res: &mut ThreadResult) -> Result<Option<SharedSession>, String> {
    let exists = host.store().is_some_and(|s| s.session_len(name).is_some());
    let loaded = if exists {
        host.load(name).map(|(s, report)| {
            res.reopened += 1;
            if let Some(r) = report.filter(|r| !r.is_noop()) {
                res.repairs.push(r);
            }
            s
        })
    } else {
        host.create(name)
    };
    match &loaded {
        Err(turnstone::Error::SessionDeleted { .. } | turnstone::Error::SessionExpired { .. }) => {
            return Ok(None)
        }
        Err(turnstone::Error::SessionExists(_)) if !exists => return Ok(None),
        _ => {}
    }
    loaded.map(Some).map_err(|e| {
        format!(
            "cannot {} session {name}: {}",
            if exists { "reopen" } else { "create" },
            crate::failure::describe(&e)
        )
    })
}

/// The one JSON line `fleet` prints (fields in this order).
#[derive(Debug, serde::Serialize)]
struct FleetReport {
    /// Events appended by this run (repairs and the final cancellations included).
    events: u64,
    /// Payload bytes appended by this run.
    bytes: u64,
    /// fdatasync calls on segment files (from the store's stats).
    syncs: u64,
    events_per_sync: f64,
    events_per_s: f64,
    mb_per_s: f64,
    /// Durability-wait latency percentiles, microseconds.
    ack_p50_us: u64,
    ack_p99_us: u64,
    /// CPU time of the whole process (every thread: the workload generator,
    /// the session layer, the store's flusher) from the first append to the
    /// final sync, per event appended (issue 16 asks for at most 3).
    cpu_us_per_event: f64,
    /// The user and system halves of that CPU time, seconds.
    user_s: f64,
    system_s: f64,
}

/// User and system CPU time of this process (all threads) so far.
fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage only writes into the struct passed to it, which is
    // a plain C struct for which all-zero bytes are a valid value.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

pub fn run(args: &FleetArgs) -> Result<(), Failure> {
    if args.sessions == 0 {
        return Err(Failure::usage("--sessions must be at least 1"));
    }
    if args.threads == 0 {
        return Err(Failure::usage("--threads must be at least 1"));
    }
    let threads = args.threads.min(args.sessions);
    let mut opts = Options::default();
    if let Some(b) = args.segment_bytes {
        opts.segment_bytes = b;
    }
    let segment_bytes = opts.segment_bytes;
    let store = Store::open_with(&args.dir, opts).map_err(|e| {
        Failure::from(e).context(format!("cannot open store {}", args.dir.display()))
    })?;
    let torn = store.recovery_report().torn_bytes_truncated;
    if torn > 0 {
        eprintln!(
            "fleet: recovery truncated a torn tail of {torn} bytes (unacknowledged writes of an interrupted run)"
        );
    }
    let store = Arc::new(store);
    let ledger = match &args.ack_ledger {
        None => None,
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| Failure::io(format!("cannot open ack ledger {}: {e}", p.display())))?,
        ),
    };
    let progress = crate::progress::bar(args.events, "events", false, true);
    let shared = Shared {
        claimed: AtomicU64::new(0),
        budget: args.events,
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
        ledger: ledger.as_ref(),
        ledger_path: args.ack_ledger.as_deref(),
        progress: &progress,
        threads,
        first_pass_done: AtomicUsize::new(0),
    };
    let mut registry = Registry::new();
    registry.register(PLUGIN_KIND, true).map_err(Failure::io)?;
    let host = Host::new(store.clone(), Arc::new(registry));
    // Payloads must fit in one segment next to the segment and batch headers,
    // a session-define frame and the JSON envelope around the text.
    let max_text = (segment_bytes as usize).saturating_sub(1024);
    let before = store.stats();
    let cpu_before = cpu_times();
    let started = Instant::now();
    let results: Vec<ThreadResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let names: Vec<String> = (t..args.sessions)
                    .step_by(threads)
                    .map(|i| format!("sess-{i:06}"))
                    .collect();
                let seed = args.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let (host, shared) = (&host, &shared);
                let run = if args.async_waits {
                    run_thread_async
                } else {
                    run_thread
                };
                s.spawn(move || run(host, shared, names, seed, max_text))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let synced = store.sync();
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_after = cpu_times();
    let user_s = (cpu_after.0.saturating_sub(cpu_before.0)).as_secs_f64();
    let system_s = (cpu_after.1.saturating_sub(cpu_before.1)).as_secs_f64();
    progress.finish_and_clear();
    if let Some(e) = shared
        .error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        return Err(Failure::io(e));
    }
    synced.map_err(|e| Failure::from(e).context("final sync failed".into()))?;
    let stats = store.stats();
    drop(host);
    crate::store_open::close(store, &args.dir)?;

    let reopened: u64 = results.iter().map(|r| r.reopened).sum();
    let skipped: u64 = results.iter().map(|r| r.skipped).sum();
    if skipped > 0 {
        eprintln!(
            "fleet: skipped {skipped} deleted sessions (deleted, or expired by the retention policy; their names stay taken)"
        );
    }
    if reopened > 0 {
        let reps: Vec<&RepairReport> = results.iter().flat_map(|r| &r.repairs).collect();
        eprintln!(
            "fleet: continued {reopened} sessions; repaired {} left open by an earlier run ({} turns interrupted, {} steps closed, {} tools outcome-unknown, {} tools not-started)",
            reps.len(),
            reps.iter().map(|r| r.turns_interrupted as u64).sum::<u64>(),
            reps.iter().map(|r| r.steps_closed as u64).sum::<u64>(),
            reps.iter().map(|r| r.tools_outcome_unknown.len()).sum::<usize>(),
            reps.iter().map(|r| r.tools_not_started.len()).sum::<usize>(),
        );
    }
    let events = stats.appends - before.appends;
    let bytes = stats.payload_bytes - before.payload_bytes;
    let syncs = stats.syncs - before.syncs;
    let mut acks: Vec<u64> = results.into_iter().flat_map(|r| r.ack_us).collect();
    acks.sort_unstable();
    let report = FleetReport {
        events,
        bytes,
        syncs,
        events_per_sync: ratio(events as f64, syncs as f64),
        events_per_s: ratio(events as f64, elapsed),
        mb_per_s: ratio(bytes as f64 / 1e6, elapsed),
        ack_p50_us: percentile(&acks, 0.50),
        ack_p99_us: percentile(&acks, 0.99),
        cpu_us_per_event: ratio((user_s + system_s) * 1e6, events as f64),
        user_s,
        system_s,
    };
    let line = serde_json::to_string(&report)
        .map_err(|e| Failure::io(format!("cannot encode the report: {e}")))?;
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstone::session::validate_messages;

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

    /// A reopened store: a session is loaded (and repaired) when its agent
    /// first acts, the others are not read at all.
    #[test]
    fn a_reopened_store_loads_only_the_sessions_it_uses() {
        let dir = tempfile::tempdir().unwrap();
        run(&FleetArgs {
            dir: dir.path().to_path_buf(),
            sessions: 16,
            threads: 1,
            events: 3000,
            segment_bytes: None,
            seed: 5,
            ack_ledger: None,
            async_waits: false,
        })
        .unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut reg = Registry::new();
        reg.register(PLUGIN_KIND, true).unwrap();
        let reg = Arc::new(reg);
        // A crash left the first session mid-turn.
        {
            let mut s = Session::open(store.clone(), "sess-000000", reg.clone()).unwrap();
            s.append(
                TurnStart {
                    turn_id: "crashed".into(),
                },
                (),
            )
            .unwrap();
            s.flush().unwrap();
        }
        let lens: Vec<u64> = (0..16)
            .map(|i| store.session_len(&format!("sess-{i:06}")).unwrap())
            .collect();
        let host = Host::new(store.clone(), reg);
        let progress = ProgressBar::hidden();
        let sh = Shared {
            claimed: AtomicU64::new(0),
            budget: 12,
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            ledger: None,
            ledger_path: None,
            progress: &progress,
            threads: 1,
            first_pass_done: AtomicUsize::new(0),
        };
        let names: Vec<String> = (0..16).map(|i| format!("sess-{i:06}")).collect();
        let res = run_thread(&host, &sh, names, 9, usize::MAX);
        assert!(sh.error.lock().unwrap().is_none());
        // A budget of 12 events reaches a few sessions, not all 16.
        assert!(
            res.reopened >= 1 && res.reopened < 16,
            "loaded {}",
            res.reopened
        );
        // The crashed session was repaired before its agent appended.
        assert_eq!(res.repairs.len(), 1);
        assert_eq!(res.repairs[0].turns_interrupted, 1);
        let ev = host
            .load("sess-000000")
            .unwrap()
            .0
            .lock()
            .events(lens[0]..lens[0] + 1)
            .unwrap();
        assert_eq!(ev[0].kind.name(), "turn/end");
        // The sessions never reached were not appended to.
        let untouched = (0..16)
            .filter(|i| store.session_len(&format!("sess-{i:06}")).unwrap() == lens[*i])
            .count() as u64;
        assert_eq!(untouched, 16 - res.reopened);
    }

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
