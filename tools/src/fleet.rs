//! `turnstone fleet`: simulate an agent fleet on an embedded store.
//!
//! N sessions are spread over T threads. Each thread interleaves its sessions
//! round-robin, one step at a time (an append, and the durability wait that
//! follows it when the agent must block), so many sessions have open turns at
//! once and their frames interleave in the log. A
//! turn is `turn/start`, `user/message`, then one to three steps of
//! `step/start`, 20 `assistant/chunk`, `assistant/message`, `tool/call`, a
//! durability wait (no side effect before durability), `tool/result`,
//! `step/end` and a durability wait before the next model request; then
//! `turn/end`.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use turnstone::{Options, Store};

use crate::kinds::EventKind;
use crate::sink::{EngineSink, Sink};
use crate::Failure;

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Store directory (created if missing; an existing store continues its sessions).
    pub dir: PathBuf,
    /// Number of concurrent agent sessions.
    #[arg(long, default_value_t = 256)]
    pub sessions: usize,
    /// Number of appender threads (sessions are spread over them).
    #[arg(long, default_value_t = 8)]
    pub threads: usize,
    /// Number of events this run appends.
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    /// Segment file size in bytes (engine default when omitted).
    #[arg(long)]
    pub segment_bytes: Option<u32>,
    /// Seed of the workload's random sizes and contents.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// After every durability wait, append `SESSION_ID SEQ` to this file (one
    /// unbuffered write per line, no fsync).
    #[arg(long)]
    pub ack_ledger: Option<PathBuf>,
}

/// Chunks per assistant message.
const CHUNKS: u32 = 20;
/// Bytes of random text each thread draws payload contents from.
const CORPUS_BYTES: usize = 192 * 1024;

/// Where an agent is in its turn: the next action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    TurnStart,
    UserMessage,
    StepStart,
    Chunk(u32),
    AssistantMessage,
    ToolCall,
    /// Durability wait for the `tool/call` before the tool runs.
    AwaitCall,
    ToolResult,
    StepEnd,
    /// Durability wait before the next model request.
    AwaitStep,
    TurnEnd,
}

impl Phase {
    fn is_wait(self) -> bool {
        matches!(self, Phase::AwaitCall | Phase::AwaitStep)
    }
}

struct Agent<T> {
    name: String,
    phase: Phase,
    turn: u64,
    step: u32,
    steps: u32,
    call: u64,
    last: Option<T>,
}

/// What one thread measured.
#[derive(Default)]
struct ThreadResult {
    events: u64,
    bytes: u64,
    ack_us: Vec<u64>,
}

struct Shared<'a> {
    /// Events claimed so far (a claim past the budget stops the thread).
    claimed: AtomicU64,
    budget: u64,
    stop: AtomicBool,
    error: Mutex<Option<String>>,
    ledger: Option<&'a File>,
    ledger_path: Option<&'a std::path::Path>,
    progress: &'a ProgressBar,
}

impl Shared<'_> {
    fn fail(&self, msg: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(msg);
        }
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Random text for payloads: lowercase words and spaces (JSON-safe as is).
fn corpus(rng: &mut StdRng) -> Vec<u8> {
    let mut out = Vec::with_capacity(CORPUS_BYTES + 16);
    while out.len() < CORPUS_BYTES {
        let n = rng.gen_range(1..10);
        for _ in 0..n {
            out.push(b'a' + rng.gen_range(0..26u8));
        }
        out.push(b' ');
    }
    out.truncate(CORPUS_BYTES);
    out
}

struct Gen {
    rng: StdRng,
    corpus: Vec<u8>,
    /// Longest text that still fits in one segment with its frame.
    max_text: usize,
}

impl Gen {
    fn text(&mut self, lo: usize, hi: usize) -> &str {
        let n = self
            .rng
            .gen_range(lo..=hi)
            .min(self.corpus.len())
            .min(self.max_text);
        let start = self.rng.gen_range(0..=self.corpus.len() - n);
        std::str::from_utf8(&self.corpus[start..start + n]).unwrap_or("")
    }
}

impl<T: Copy> Agent<T> {
    /// The next event to append, or `None` for a durability wait. Advances
    /// the phase.
    fn next(&mut self, g: &mut Gen) -> Option<(EventKind, String)> {
        let (turn, step, call) = (self.turn, self.step, self.call);
        let out = match self.phase {
            Phase::TurnStart => {
                self.steps = g.rng.gen_range(1..=3);
                self.step = 0;
                self.phase = Phase::UserMessage;
                (EventKind::TurnStart, format!(r#"{{"turn":{turn}}}"#))
            }
            Phase::UserMessage => {
                self.phase = Phase::StepStart;
                let t = g.text(200, 400);
                (
                    EventKind::UserMessage,
                    format!(r#"{{"role":"user","text":"{t}"}}"#),
                )
            }
            Phase::StepStart => {
                self.phase = Phase::Chunk(0);
                (
                    EventKind::StepStart,
                    format!(r#"{{"turn":{turn},"step":{step}}}"#),
                )
            }
            Phase::Chunk(i) => {
                self.phase = if i + 1 < CHUNKS {
                    Phase::Chunk(i + 1)
                } else {
                    Phase::AssistantMessage
                };
                let t = g.text(60, 100);
                (EventKind::AssistantChunk, format!(r#"{{"delta":"{t}"}}"#))
            }
            Phase::AssistantMessage => {
                self.phase = Phase::ToolCall;
                let t = g.text(800, 1200);
                (
                    EventKind::AssistantMessage,
                    format!(r#"{{"role":"assistant","text":"{t}"}}"#),
                )
            }
            Phase::ToolCall => {
                self.phase = Phase::AwaitCall;
                let t = g.text(40, 160);
                (
                    EventKind::ToolCall,
                    format!(r#"{{"call_id":"call-{call}","tool":"shell","args":{{"cmd":"{t}"}}}}"#),
                )
            }
            Phase::AwaitCall => {
                self.phase = Phase::ToolResult;
                return None;
            }
            Phase::ToolResult => {
                self.phase = Phase::StepEnd;
                self.call += 1;
                let t = if g.rng.gen_bool(0.05) {
                    g.text(56_000, 64_000)
                } else {
                    g.text(3_000, 5_000)
                };
                (
                    EventKind::ToolResult,
                    format!(r#"{{"call_id":"call-{call}","output":"{t}"}}"#),
                )
            }
            Phase::StepEnd => {
                self.phase = Phase::AwaitStep;
                (
                    EventKind::StepEnd,
                    format!(r#"{{"turn":{turn},"step":{step}}}"#),
                )
            }
            Phase::AwaitStep => {
                self.step += 1;
                self.phase = if self.step < self.steps {
                    Phase::StepStart
                } else {
                    Phase::TurnEnd
                };
                return None;
            }
            Phase::TurnEnd => {
                self.phase = Phase::TurnStart;
                self.turn += 1;
                (EventKind::TurnEnd, format!(r#"{{"turn":{turn}}}"#))
            }
        };
        Some(out)
    }
}

fn run_thread<S: Sink>(
    sink: &S,
    sh: &Shared<'_>,
    names: Vec<String>,
    seed: u64,
    max_text: usize,
) -> ThreadResult {
    let mut rng = StdRng::seed_from_u64(seed);
    let corpus = corpus(&mut rng);
    let mut g = Gen {
        rng,
        corpus,
        max_text,
    };
    let mut agents: Vec<Agent<S::Ticket>> = names
        .into_iter()
        .map(|name| Agent {
            name,
            phase: Phase::TurnStart,
            turn: 0,
            step: 0,
            steps: 1,
            call: 0,
            last: None,
        })
        .collect();
    let mut res = ThreadResult::default();
    let mut pending_progress = 0u64;
    'outer: loop {
        for a in agents.iter_mut() {
            if sh.stop.load(Ordering::Relaxed) {
                break 'outer;
            }
            // One step of this agent: its next event, and the durability wait
            // that follows it at once if the agent must block on it.
            if let Some((kind, payload)) = a.next(&mut g) {
                if sh.claimed.fetch_add(1, Ordering::SeqCst) >= sh.budget {
                    break 'outer;
                }
                match sink.append(&a.name, kind, payload.as_bytes()) {
                    Ok(t) => a.last = Some(t),
                    Err(e) => {
                        sh.fail(format!("append to session {}: {e}", a.name));
                        break 'outer;
                    }
                }
                res.events += 1;
                res.bytes += payload.len() as u64;
                pending_progress += 1;
                if pending_progress >= 64 {
                    sh.progress.inc(pending_progress);
                    pending_progress = 0;
                }
                if !a.phase.is_wait() {
                    continue;
                }
                a.next(&mut g);
            }
            let Some(t) = a.last else { continue };
            let t0 = Instant::now();
            if let Err(e) = sink.wait_durable(&a.name, &t) {
                sh.fail(format!("durability wait for session {}: {e}", a.name));
                break 'outer;
            }
            res.ack_us.push(t0.elapsed().as_micros() as u64);
            if let (Some(mut f), Some(p)) = (sh.ledger, sh.ledger_path) {
                let line = format!("{} {}\n", a.name, S::seq(&t));
                if let Err(e) = f.write_all(line.as_bytes()) {
                    sh.fail(format!("write to ack ledger {}: {e}", p.display()));
                    break 'outer;
                }
            }
        }
    }
    sh.progress.inc(pending_progress);
    res
}

/// The one JSON line `fleet` prints (fields in this order).
#[derive(Debug, serde::Serialize)]
struct FleetReport {
    /// Events appended by this run.
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
    let opts_segment_bytes = opts.segment_bytes;
    let store = Store::open_with(&args.dir, opts).map_err(|e| {
        Failure::from(e).context(format!("cannot open store {}", args.dir.display()))
    })?;
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
    let progress = if std::io::stderr().is_terminal() {
        let pb = ProgressBar::new(args.events);
        pb.set_style(
            ProgressStyle::with_template(
                "{spinner} {elapsed_precise} [{bar:40}] {pos}/{len} events ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    } else {
        ProgressBar::hidden()
    };
    let shared = Shared {
        claimed: AtomicU64::new(0),
        budget: args.events,
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
        ledger: ledger.as_ref(),
        ledger_path: args.ack_ledger.as_deref(),
        progress: &progress,
    };
    let sink = EngineSink { store: &store };
    // Payloads must fit in one segment next to the segment and batch headers,
    // a session-define frame and the JSON around the text.
    let max_text = (opts_segment_bytes as usize).saturating_sub(512);
    let started = Instant::now();
    let results: Vec<ThreadResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let names: Vec<String> = (t..args.sessions)
                    .step_by(threads)
                    .map(|i| format!("sess-{i:06}"))
                    .collect();
                let seed = args.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let (sink, shared) = (&sink, &shared);
                s.spawn(move || run_thread(sink, shared, names, seed, max_text))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let synced = store.sync();
    let elapsed = started.elapsed().as_secs_f64();
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
    store
        .close()
        .map_err(|e| Failure::from(e).context(format!("closing store {}", args.dir.display())))?;

    let events: u64 = results.iter().map(|r| r.events).sum();
    let bytes: u64 = results.iter().map(|r| r.bytes).sum();
    let mut acks: Vec<u64> = results.into_iter().flat_map(|r| r.ack_us).collect();
    acks.sort_unstable();
    let report = FleetReport {
        events,
        bytes,
        syncs: stats.syncs,
        events_per_sync: ratio(events as f64, stats.syncs as f64),
        events_per_s: ratio(events as f64, elapsed),
        mb_per_s: ratio(bytes as f64 / 1e6, elapsed),
        ack_p50_us: percentile(&acks, 0.50),
        ack_p99_us: percentile(&acks, 0.99),
    };
    let line = serde_json::to_string(&report)
        .map_err(|e| Failure::io(format!("cannot encode the report: {e}")))?;
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_shape() {
        let mut g = Gen {
            rng: StdRng::seed_from_u64(3),
            corpus: Vec::new(),
            max_text: usize::MAX,
        };
        g.corpus = corpus(&mut g.rng);
        let mut a: Agent<()> = Agent {
            name: "s".into(),
            phase: Phase::TurnStart,
            turn: 0,
            step: 0,
            steps: 1,
            call: 0,
            last: None,
        };
        let mut kinds = Vec::new();
        loop {
            match a.next(&mut g) {
                Some((k, p)) => {
                    serde_json::from_str::<serde_json::Value>(&p).expect("payload is JSON");
                    kinds.push(Some(k));
                    if k == EventKind::TurnEnd {
                        break;
                    }
                }
                None => kinds.push(None),
            }
        }
        assert_eq!(kinds[0], Some(EventKind::TurnStart));
        assert_eq!(kinds[1], Some(EventKind::UserMessage));
        let steps = a.steps as usize;
        let per_step = 1 + CHUNKS as usize + 1 + 1 + 1 + 1 + 1 + 1;
        assert_eq!(kinds.len(), 3 + steps * per_step);
        // Every tool/result follows a durability wait for its tool/call.
        for (i, k) in kinds.iter().enumerate() {
            if *k == Some(EventKind::ToolResult) {
                assert_eq!(kinds[i - 1], None);
                assert_eq!(kinds[i - 2], Some(EventKind::ToolCall));
            }
        }
    }

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
