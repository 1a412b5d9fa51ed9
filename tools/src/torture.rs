//! `turnstone torture DIR [--seconds S] [--seed N] [--self-test]`: crash
//! torture, two loops taking turns until the time is up.
//!
//! **Kill loop** (real processes, real files). A child runs on a store in
//! `DIR` and is SIGKILLed at a random moment; the store is reopened and
//! recovered, every event the child acknowledged in its ledger must be there,
//! every inactive session is repaired and checked (idle open state, valid
//! message history, a second repair appends nothing), and the next child
//! continues on the same store. Two children alternate: `turnstone fleet
//! --ack-ledger` (raw engine events; repair is checked only if its payloads
//! are session events) and a session-layer agent loop (`torture --child`:
//! turns, steps, tool calls through `Host`, a durability wait before each
//! tool runs and at each step end).
//!
//! **Simulated loop** (in process, `SimVfs`). Each epoch (one seed) runs
//! many crash cycles on one simulated store: session-layer events from
//! several agents, durability waits, then a power cut after a random number
//! of file operations, sometimes after an injected EIO on a write or an
//! fdatasync or ENOSPC; the reboot keeps any subset of the unsynced writes
//! with torn 512-byte sectors, and this module garbles some unsynced sectors
//! too. After each reopen a model checks that every acknowledged event is
//! there byte for byte, that sessions are dense prefixes of what was
//! appended, that only torn tails were reported, and the repair invariants.
//!
//! Output: what was checked, then one JSON line `{"kills", "simulated_crashes",
//! "acked_events_checked", "violations", "seed"}`. The first violation stops
//! the run with exit 1; its `seed` reproduces it (`--seed` runs that epoch of
//! the simulated loop first; a kill-loop violation's seed gives the same
//! workloads, the kill moments differ). `--self-test` plants durability bugs
//! (a file layer that acknowledges fdatasync without syncing; a ledger that
//! claims one more event than was durable) and exits 0 only if both are
//! caught.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use turnstone::session::internals as event;
use turnstone::session::Registry;
use turnstone::session::{
    validate_messages, AssistantMessage, ContentBlock, Host, StepEnd, StepEndReason, StepStart,
    SurfaceOp, ToolCall, ToolResult, TurnEnd, TurnEndReason, TurnStart, UserMessage,
};
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::vfs::{LockGuard, MappedBytes, Vfs, VfsFile};
use turnstone::{Options, ProblemKind, Store};

use crate::Failure;

#[derive(Debug, Args)]
pub struct TortureArgs {
    /// Directory for the stores of the kill loop (created if missing).
    pub dir: PathBuf,
    /// How long to run.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Seed of the first simulated epoch and of the kill loop (random if omitted).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run the checks against planted durability bugs; exit 0 only if they are caught.
    #[arg(long)]
    pub self_test: bool,
    /// Internal: run the session-layer agent workload (the kill loop's child).
    #[arg(long, hide = true)]
    pub child: bool,
}

/// Counters of the final JSON line.
#[derive(Debug, Default)]
struct Counts {
    kills: u64,
    simulated_crashes: u64,
    acked_events_checked: u64,
    violations: u64,
    repairs: u64,
    garbled_sectors: u64,
    faults_injected: u64,
    epochs: u64,
}

/// A broken invariant, with what reproduces it.
#[derive(Debug)]
struct Violation {
    seed: u64,
    what: String,
}

type Check<T = ()> = Result<T, String>;

pub fn run(args: &TortureArgs) -> Result<ExitCode, Failure> {
    if args.child {
        return child(&args.dir, args.seed.unwrap_or(1)).map(|()| ExitCode::SUCCESS);
    }
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| Failure::io(format!("cannot create {}: {e}", args.dir.display())))?;
    let seed = args.seed.unwrap_or_else(|| rand::thread_rng().gen());
    if args.self_test {
        return self_test(&args.dir, seed);
    }
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut c = Counts::default();
    let mut sim_seed = seed;
    let mut kill_rng = StdRng::seed_from_u64(seed ^ 0x6b69_6c6c);
    let mut result: Option<Violation> = None;
    let mut round = 0u64;
    println!(
        "torture: {} s, seed {seed}, stores in {}",
        args.seconds,
        args.dir.display()
    );
    'outer: while Instant::now() < deadline {
        // Simulated epochs for a while, then one kill (a kill takes about
        // a second; the simulated loop gets most of the time).
        let slice = Instant::now() + Duration::from_millis(2500);
        while Instant::now() < slice.min(deadline) {
            if let Err(what) = sim_epoch(sim_seed, false, &mut c) {
                result = Some(Violation {
                    seed: sim_seed,
                    what: format!("simulated loop: {what}"),
                });
                break 'outer;
            }
            sim_seed = sim_seed.wrapping_add(1);
        }
        if Instant::now() >= deadline {
            break;
        }
        let kseed: u64 = kill_rng.gen();
        let r = if round.is_multiple_of(2) {
            kill_fleet(&args.dir, kseed, &mut kill_rng, &mut c, false)
        } else {
            kill_sessions(&args.dir, kseed, &mut kill_rng, &mut c)
        };
        round += 1;
        if let Err(what) = r {
            result = Some(Violation {
                seed: kseed,
                what: format!("kill loop: {what}"),
            });
            break;
        }
    }
    println!(
        "checked: {} kills of a child process (fleet and session agents) with reopen, ledger check and repair;",
        c.kills
    );
    println!(
        "         {} simulated power cuts in {} epochs ({} with an injected EIO/ENOSPC, {} garbled unsynced sectors), each followed by reopen, model check and repair;",
        c.simulated_crashes, c.epochs, c.faults_injected, c.garbled_sectors
    );
    println!(
        "         {} acknowledged events found present after a crash, {} session repairs checked (idle, valid messages, second repair no-op)",
        c.acked_events_checked, c.repairs
    );
    let code = match &result {
        None => ExitCode::SUCCESS,
        Some(v) => {
            c.violations = 1;
            println!("VIOLATION (reproduce with --seed {}): {}", v.seed, v.what);
            ExitCode::from(1)
        }
    };
    print_json(&c, result.as_ref().map_or(seed, |v| v.seed));
    Ok(code)
}

/// The closing JSON line (fields in this order).
#[derive(serde::Serialize)]
struct Summary {
    kills: u64,
    simulated_crashes: u64,
    acked_events_checked: u64,
    violations: u64,
    seed: u64,
}

fn print_json(c: &Counts, seed: u64) {
    let line = Summary {
        kills: c.kills,
        simulated_crashes: c.simulated_crashes,
        acked_events_checked: c.acked_events_checked,
        violations: c.violations,
        seed,
    };
    println!(
        "{}",
        serde_json::to_string(&line).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    );
}

// ---------------------------------------------------------------------------
// The session-layer agent: what both loops append.

/// One agent's place in its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    TurnStart,
    User,
    StepStart,
    Assistant,
    Call,
    /// Durability wait: the tool may run only once its call is durable.
    AwaitCall,
    Result,
    StepEnd,
    /// Durability wait before the next model request.
    AwaitStep,
    TurnEnd,
}

#[derive(Debug, Clone)]
struct Agent {
    /// Makes turn, step and call ids unique across runs on one store.
    prefix: String,
    /// Text sizes are divided by this (the simulated loop keeps events
    /// small: restore and repair parse every event's JSON).
    shrink: usize,
    phase: Phase,
    turn: u64,
    step: u32,
    steps: u32,
}

impl Agent {
    fn new(prefix: String, shrink: usize) -> Self {
        Agent {
            prefix,
            shrink,
            phase: Phase::TurnStart,
            turn: 0,
            step: 0,
            steps: 1,
        }
    }

    /// The next event (kind code, payload), or `None` for a durability wait.
    fn next(&mut self, rng: &mut StdRng, filler: &str) -> Option<(u16, Vec<u8>)> {
        fn core<D: turnstone::session::EventData>(d: D, op: Option<SurfaceOp>) -> (u16, Vec<u8>) {
            (D::KIND.code(), event::encode_core(&d, op))
        }
        let t = format!("{}-t{}", self.prefix, self.turn);
        let s = format!("s{}", self.step);
        let call = format!("call-{}-{}-{}", self.prefix, self.turn, self.step);
        let shrink = self.shrink;
        let text = |n: usize| filler[..(n / shrink).min(filler.len())].to_string();
        let out = match self.phase {
            Phase::TurnStart => {
                self.steps = rng.gen_range(1..=3);
                self.step = 0;
                self.phase = Phase::User;
                core(TurnStart { turn_id: t }, None)
            }
            Phase::User => {
                self.phase = Phase::StepStart;
                let n = rng.gen_range(10..400);
                core(
                    UserMessage {
                        content: vec![ContentBlock::text(text(n))],
                    },
                    Some(SurfaceOp::Append),
                )
            }
            Phase::StepStart => {
                self.phase = Phase::Assistant;
                core(
                    StepStart {
                        turn_id: t,
                        step_id: s,
                    },
                    None,
                )
            }
            Phase::Assistant => {
                self.phase = Phase::Call;
                let n = rng.gen_range(10..1200);
                core(
                    AssistantMessage {
                        content: vec![
                            ContentBlock::text(text(n)),
                            ContentBlock::ToolUse {
                                id: call,
                                name: "shell".into(),
                                input: json!({"cmd": "ls"}),
                                extra: Default::default(),
                            },
                        ],
                        usage: None,
                        stop_reason: None,
                        extra: Default::default(),
                    },
                    Some(SurfaceOp::Append),
                )
            }
            Phase::Call => {
                self.phase = Phase::AwaitCall;
                core(
                    ToolCall {
                        call_id: call,
                        name: "shell".into(),
                        input: json!({"cmd": "ls"}),
                    },
                    None,
                )
            }
            Phase::AwaitCall => {
                self.phase = Phase::Result;
                return None;
            }
            Phase::Result => {
                self.phase = Phase::StepEnd;
                let n = if rng.gen_ratio(1, 20) {
                    rng.gen_range(3000..12000)
                } else {
                    rng.gen_range(10..2000)
                };
                core(
                    ToolResult {
                        call_id: call,
                        content: vec![ContentBlock::text(text(n))],
                        is_error: false,
                        status: None,
                    },
                    Some(SurfaceOp::Append),
                )
            }
            Phase::StepEnd => {
                self.phase = Phase::AwaitStep;
                core(
                    StepEnd {
                        turn_id: t,
                        step_id: s,
                        reason: StepEndReason::ToolUse,
                    },
                    None,
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
                core(
                    TurnEnd {
                        turn_id: t,
                        reason: TurnEndReason::Completed,
                    },
                    None,
                )
            }
        };
        Some(out)
    }
}

fn filler(rng: &mut StdRng) -> String {
    let mut s = String::with_capacity(16_384);
    while s.len() < 16_000 {
        for _ in 0..rng.gen_range(1..9) {
            s.push((b'a' + rng.gen_range(0..26u8)) as char);
        }
        s.push(' ');
    }
    s
}

/// Repair every inactive session and check the repair invariants: after
/// repair each session is idle with no open tool, its messages are valid,
/// and a second repair appends nothing. Returns the number of sessions.
fn check_repair(store: &Arc<Store>) -> Check<u64> {
    let reg = Arc::new(Registry::new());
    let host = Host::new(store.clone(), reg.clone());
    let first = host
        .repair_inactive()
        .map_err(|e| format!("repair after a crash failed: {e}"))?;
    for r in &first {
        // Loading an inactive session restores it and repairs it again:
        // that second repair must append nothing.
        let (s, second) = host
            .load(&r.session)
            .map_err(|e| format!("session {:?} does not restore after repair: {e}", r.session))?;
        if let Some(again) = second.filter(|a| !a.is_noop()) {
            return Err(format!("a second repair appended events: {again:?}"));
        }
        let mut s = s.lock();
        let open = s.open_state();
        if !open.is_idle() || !open.calls.is_empty() || !open.requested.is_empty() {
            return Err(format!(
                "session {:?} is not idle after repair: {open:?}",
                r.session
            ));
        }
        validate_messages(s.derive_messages()).map_err(|e| {
            format!(
                "session {:?}: invalid messages after repair: {e}",
                r.session
            )
        })?;
    }
    Ok(first.len() as u64)
}

// ---------------------------------------------------------------------------
// The kill loop.

fn fleet_paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("fleet"), dir.join("fleet.ledger"))
}

fn session_paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("sessions"), dir.join("sessions.ledger"))
}

/// Start a store afresh when it has grown past this (disk space).
const STORE_BYTES_MAX: u64 = 512 << 20;

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn reset_if_big(store: &Path, ledger: &Path) {
    if dir_bytes(store) > STORE_BYTES_MAX {
        let _ = std::fs::remove_dir_all(store);
        let _ = std::fs::remove_file(ledger);
    }
}

/// Run `cmd` and SIGKILL it after a random delay; returns whether it was
/// killed (it may finish first).
fn run_and_kill(mut cmd: Command, rng: &mut StdRng) -> Check<bool> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the child: {e}"))?;
    let delay = Duration::from_millis(rng.gen_range(30..900));
    let started = Instant::now();
    while started.elapsed() < delay {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            if !status.success() {
                return Err(format!("the child failed before the kill: {status}: {err}"));
            }
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().map_err(|e| format!("SIGKILL failed: {e}"))?;
    let _ = child.wait();
    Ok(true)
}

/// Ledger lines `SESSION SEQ`: the highest acknowledged seq per session. A
/// torn last line (the kill hit the write) is ignored.
fn read_ledger(path: &Path) -> Check<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(_) => return Ok(out),
    };
    for line in std::io::BufReader::new(f).lines() {
        let line = line.map_err(|e| format!("read ledger: {e}"))?;
        let mut it = line.split_whitespace();
        let (Some(s), Some(q), None) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let Ok(q) = q.parse::<u64>() else { continue };
        let e = out.entry(s.to_string()).or_insert(0);
        *e = (*e).max(q);
    }
    Ok(out)
}

/// Rewrite the ledger as its per-session maxima (keeps it small).
fn compact_ledger(path: &Path, acked: &BTreeMap<String, u64>) -> Check {
    let mut text = String::new();
    for (s, q) in acked {
        text.push_str(&format!("{s} {q}\n"));
    }
    std::fs::write(path, text).map_err(|e| format!("rewrite ledger: {e}"))
}

/// Every acknowledged event of the ledger is in the store. Returns how many
/// acknowledged events that covers.
fn check_ledger(store: &Store, acked: &BTreeMap<String, u64>) -> Check<u64> {
    let mut n = 0;
    for (s, q) in acked {
        let len = store.session_len(s).unwrap_or(0);
        if len <= *q {
            return Err(format!(
                "session {s:?}: the ledger acknowledges seq {q} but only {len} events were recovered"
            ));
        }
        n += q + 1;
    }
    Ok(n)
}

fn open_after_kill(store_dir: &Path) -> Check<Arc<Store>> {
    let store = Store::open(store_dir).map_err(|e| format!("reopen after SIGKILL failed: {e}"))?;
    if let Some(p) = store
        .recovery_report()
        .problems
        .iter()
        .find(|p| p.kind != ProblemKind::TornTail)
    {
        return Err(format!("a kill left damage that is not a torn tail: {p:?}"));
    }
    Ok(Arc::new(store))
}

/// Whether the store's events are session-layer events (fleet may write raw
/// engine events, which have no repair).
fn holds_session_events(store: &Store) -> bool {
    let reg = Registry::new();
    store.sessions().iter().filter(|s| s.len > 0).all(|s| {
        store
            .read(&s.name, 0)
            .map(|e| event::decode(0, e.kind, e.flags, &e.payload, &reg).is_ok())
            .unwrap_or(false)
    })
}

fn kill_fleet(dir: &Path, seed: u64, rng: &mut StdRng, c: &mut Counts, plant_extra: bool) -> Check {
    let (store_dir, ledger) = fleet_paths(dir);
    reset_if_big(&store_dir, &ledger);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("fleet")
        .arg(&store_dir)
        .args(["--sessions", "16", "--threads", "4", "--events", "200000"])
        .args(["--segment-bytes", "1048576", "--seed", &seed.to_string()])
        .arg("--ack-ledger")
        .arg(&ledger);
    let killed = run_and_kill(cmd, rng)?;
    c.kills += u64::from(killed);
    let mut acked = read_ledger(&ledger)?;
    let store = open_after_kill(&store_dir)?;
    if plant_extra {
        // Self-test: a ledger claiming one more event than the store holds.
        match store.sessions().into_iter().next() {
            Some(s) => {
                acked.insert(s.name, s.len);
            }
            None => return Ok(()),
        }
    }
    c.acked_events_checked += check_ledger(&store, &acked)?;
    if holds_session_events(&store) {
        c.repairs += check_repair(&store)?;
    }
    compact_ledger(&ledger, &acked)?;
    Ok(())
}

fn kill_sessions(dir: &Path, seed: u64, rng: &mut StdRng, c: &mut Counts) -> Check {
    let (store_dir, ledger) = session_paths(dir);
    reset_if_big(&store_dir, &ledger);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("torture")
        .arg(dir)
        .arg("--child")
        .args(["--seed", &seed.to_string()]);
    let killed = run_and_kill(cmd, rng)?;
    c.kills += u64::from(killed);
    let acked = read_ledger(&ledger)?;
    let store = open_after_kill(&store_dir)?;
    c.acked_events_checked += check_ledger(&store, &acked)?;
    c.repairs += check_repair(&store)?;
    store
        .sync()
        .map_err(|e| format!("sync after repair: {e}"))?;
    compact_ledger(&ledger, &acked)?;
    Ok(())
}

/// The kill loop's session-layer child: agents appending session events (the
/// envelopes `Session` writes), a durability wait before each tool runs and
/// at each step end, each wait acknowledged in the ledger. Runs until
/// killed. The parent repairs the sessions after each kill, so every agent
/// starts a new turn.
fn child(dir: &Path, seed: u64) -> Result<(), Failure> {
    let (store_dir, ledger) = session_paths(dir);
    let store = Store::open_with(
        &store_dir,
        Options {
            segment_bytes: 1 << 20,
            // Half the children write prepared segments' batches around
            // the page cache (`Options::direct_writes`).
            direct_writes: seed.is_multiple_of(2),
            ..Default::default()
        },
    )?;
    let mut led = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&ledger)
        .map_err(|e| Failure::io(format!("ledger {}: {e}", ledger.display())))?;
    let mut rng = StdRng::seed_from_u64(seed);
    let text = filler(&mut rng);
    let mut agents: Vec<(String, Agent)> = (0..8)
        .map(|i| (format!("agent-{i}"), Agent::new(format!("k{seed:x}"), 1)))
        .collect();
    loop {
        for (id, a) in agents.iter_mut() {
            match a.next(&mut rng, &text) {
                Some((code, payload)) => {
                    store.append(id, code, 0, &payload)?;
                }
                None => {
                    store.sync_session(id)?;
                    let len = store.session_len(id).unwrap_or(0);
                    if len > 0 {
                        writeln!(led, "{id} {}", len - 1)
                            .map_err(|e| Failure::io(format!("ledger: {e}")))?;
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The simulated loop.

/// Unsynced written ranges per file, for garbling at a crash; optionally a
/// planted bug that acknowledges fdatasync without doing it.
#[derive(Debug, Default)]
struct Tracker {
    unsynced: HashMap<PathBuf, Vec<(u64, u64)>>,
}

#[derive(Debug, Clone)]
struct TortureVfs {
    sim: SimVfs,
    tracker: Arc<Mutex<Tracker>>,
    /// Self-test: fdatasync returns Ok without syncing.
    lie: bool,
}

#[derive(Debug)]
struct TortureFile {
    inner: Arc<dyn VfsFile>,
    path: PathBuf,
    tracker: Arc<Mutex<Tracker>>,
    lie: bool,
}

impl VfsFile for TortureFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_all_at(buf, offset)?;
        self.tracker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unsynced
            .entry(self.path.clone())
            .or_default()
            .push((offset, offset + buf.len() as u64));
        Ok(())
    }
    fn sync_data(&self) -> std::io::Result<()> {
        if self.lie {
            return Ok(());
        }
        self.inner.sync_data()?;
        self.tracker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unsynced
            .remove(&self.path);
        Ok(())
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn allocate(&self, len: u64) -> std::io::Result<()> {
        self.inner.allocate(len)
    }
    fn map(&self) -> std::io::Result<MappedBytes> {
        self.inner.map()
    }
}

impl TortureVfs {
    fn wrap(&self, f: Arc<dyn VfsFile>, path: &Path) -> Arc<dyn VfsFile> {
        Arc::new(TortureFile {
            inner: f,
            path: path.to_path_buf(),
            tracker: self.tracker.clone(),
            lie: self.lie,
        })
    }

    /// Reboot: the simulator keeps a random subset of unsynced writes with
    /// torn sectors; then some sectors of unsynced writes become garbage.
    fn crash(&self, seed: u64, rng: &mut StdRng) -> u64 {
        self.sim.crash(seed);
        let ranges = std::mem::take(
            &mut self
                .tracker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unsynced,
        );
        let mut garbled = 0;
        for (path, rs) in ranges {
            let Some(len) = self.sim.read_file(&path).map(|b| b.len() as u64) else {
                continue;
            };
            for (from, to) in rs {
                let mut at = from;
                while at < to.min(len) {
                    let sector_end = ((at / 512) + 1) * 512;
                    let end = sector_end.min(to).min(len);
                    if rng.gen_ratio(1, 16) {
                        let junk: Vec<u8> = (at..end).map(|_| rng.gen()).collect();
                        let _ = self.sim.poke(&path, at, &junk);
                        garbled += 1;
                    }
                    at = end;
                }
            }
        }
        garbled
    }
}

impl Vfs for TortureVfs {
    fn open(&self, path: &Path, write: bool) -> std::io::Result<Arc<dyn VfsFile>> {
        Ok(self.wrap(self.sim.open(path, write)?, path))
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Arc<dyn VfsFile>> {
        let f = self.sim.create_new(path)?;
        self.tracker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unsynced
            .remove(path);
        Ok(self.wrap(f, path))
    }
    fn create_truncate(&self, path: &Path) -> std::io::Result<Arc<dyn VfsFile>> {
        let f = self.sim.create_truncate(path)?;
        Ok(self.wrap(f, path))
    }
    fn exists(&self, path: &Path) -> bool {
        self.sim.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.sim.rename(from, to)?;
        let mut t = self.tracker.lock().unwrap_or_else(|p| p.into_inner());
        let moved = t.unsynced.remove(from);
        t.unsynced.remove(to);
        if let Some(r) = moved {
            t.unsynced.insert(to.to_path_buf(), r);
        }
        Ok(())
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.sim.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.sim.sync_dir(dir)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.sim.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.sim.create_dir_all(dir)
    }
    fn lock_exclusive(&self, path: &Path) -> std::io::Result<Box<dyn LockGuard>> {
        self.sim.lock_exclusive(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.sim.is_dir(path)
    }
}

/// What the simulated loop appended to one session.
#[derive(Debug, Default)]
struct SimSession {
    /// Payload (and kind) of every event, by seq.
    events: Vec<(u16, Vec<u8>)>,
    /// Leading events acknowledged durable.
    acked: usize,
    /// Events already compared byte for byte (they cannot change later).
    verified: usize,
}

const SIM_DIR: &str = "/torture";
const SIM_AGENTS: usize = 4;
const CYCLES_PER_EPOCH: u32 = 6;

/// One epoch: a fresh simulated store, many crash cycles on it.
fn sim_epoch(seed: u64, lie: bool, c: &mut Counts) -> Check {
    let mut rng = StdRng::seed_from_u64(seed);
    let vfs = TortureVfs {
        sim: SimVfs::new(),
        tracker: Arc::default(),
        lie,
    };
    let segment_bytes = [8_192u32, 16_384, 65_536][rng.gen_range(0..3)];
    let checkpoints = rng.gen_bool(0.3);
    let text = filler(&mut rng);
    let opts = Options {
        vfs: Arc::new(vfs.clone()),
        segment_bytes,
        checkpoints,
        flush_bytes: usize::MAX,
        preallocate: rng.gen_bool(0.7),
        ..Default::default()
    };
    let names: Vec<String> = (0..SIM_AGENTS).map(|i| format!("a{i}")).collect();
    let mut model: BTreeMap<String, SimSession> = BTreeMap::new();
    c.epochs += 1;
    for cycle in 0..CYCLES_PER_EPOCH {
        let ctx = |what: String| format!("epoch {seed} cycle {cycle}: {what}");
        let store =
            Store::open_with(SIM_DIR, opts.clone()).map_err(|e| ctx(format!("open: {e}")))?;
        // Faults for this cycle, then a power cut somewhere.
        let plan = match rng.gen_range(0..10) {
            0 => FaultPlan {
                fail_sync_nth: Some(vfs.sim.syncs() + rng.gen_range(0..6)),
                ..Default::default()
            },
            1 => FaultPlan {
                fail_write_nth: Some(vfs.sim.writes() + rng.gen_range(0..6)),
                ..Default::default()
            },
            2 => FaultPlan {
                enospc_after_bytes: Some(rng.gen_range(0..4_000_000)),
                ..Default::default()
            },
            _ => FaultPlan::default(),
        };
        if plan.fail_sync_nth.is_some() || plan.fail_write_nth.is_some() {
            c.faults_injected += 1;
        }
        vfs.sim.set_faults(FaultPlan {
            power_cut_after_ops: Some(vfs.sim.ops() + rng.gen_range(1..120)),
            ..plan
        });
        let mut agents: Vec<Agent> = (0..SIM_AGENTS)
            .map(|_| Agent::new(format!("c{cycle}"), 4))
            .collect();
        let steps = rng.gen_range(10..80);
        'work: for _ in 0..steps {
            let i = rng.gen_range(0..SIM_AGENTS);
            let name = &names[i];
            match agents[i].next(&mut rng, &text) {
                Some((code, payload)) => match store.append(name, code, 0, &payload) {
                    Ok(a) => {
                        let m = model.entry(name.clone()).or_default();
                        if a.seq.0 as usize != m.events.len() {
                            return Err(ctx(format!(
                                "{name}: append got seq {}, the next dense seq is {}",
                                a.seq.0,
                                m.events.len()
                            )));
                        }
                        m.events.push((code, payload));
                    }
                    Err(_) => break 'work,
                },
                None => {
                    if store.sync_session(name).is_ok() {
                        let m = model.entry(name.clone()).or_default();
                        m.acked = m.events.len();
                    } else {
                        break 'work;
                    }
                }
            }
        }
        // Power cut (if it has not happened), reboot with torn and garbled
        // unsynced sectors.
        vfs.sim.set_faults(FaultPlan {
            power_cut_after_ops: Some(vfs.sim.ops()),
            ..Default::default()
        });
        drop(store);
        c.garbled_sectors += vfs.crash(rng.gen(), &mut rng);
        c.simulated_crashes += 1;

        let store = Store::open_with(SIM_DIR, opts.clone())
            .map_err(|e| ctx(format!("reopen after a power cut failed: {e}")))?;
        if let Some(p) = store
            .recovery_report()
            .problems
            .iter()
            .find(|p| p.kind != ProblemKind::TornTail)
        {
            return Err(ctx(format!(
                "a power cut left damage that is not a torn tail: {p:?}"
            )));
        }
        for info in store.sessions() {
            if !model.contains_key(&info.name) {
                return Err(ctx(format!("invented session {:?}", info.name)));
            }
        }
        for (name, m) in model.iter_mut() {
            let len = store.session_len(name).unwrap_or(0) as usize;
            if len < m.acked {
                return Err(ctx(format!(
                    "{name}: {len} events recovered but {} were acknowledged durable",
                    m.acked
                )));
            }
            if len > m.events.len() {
                return Err(ctx(format!(
                    "{name}: {len} events recovered but only {} were appended",
                    m.events.len()
                )));
            }
            c.acked_events_checked += m.acked as u64;
            let from = m.verified.min(len);
            if from < len {
                let got = store
                    .read_range(name, from as u64..len as u64)
                    .map_err(|e| ctx(format!("{name}: read: {e}")))?;
                for (e, want) in got.iter().zip(&m.events[from..len]) {
                    if e.kind != want.0 || e.payload != want.1 {
                        return Err(ctx(format!(
                            "{name} seq {}: recovered event differs from the appended one",
                            e.seq.0
                        )));
                    }
                }
            }
            m.events.truncate(len);
            m.verified = len;
            m.acked = len;
        }
        model.retain(|name, _| store.session_len(name).is_some());
        let store = Arc::new(store);
        c.repairs += check_repair(&store).map_err(ctx)?;
        // Repair's events join the model once durable.
        store
            .sync()
            .map_err(|e| ctx(format!("sync after repair: {e}")))?;
        for (name, m) in model.iter_mut() {
            let len = store.session_len(name).unwrap_or(0);
            if len as usize > m.events.len() {
                for e in store
                    .read_range(name, m.events.len() as u64..len)
                    .map_err(|e| ctx(format!("read repair events: {e}")))?
                {
                    m.events.push((e.kind, e.payload));
                }
            }
            m.acked = m.events.len();
            m.verified = m.events.len();
        }
        drop(store);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Self-test.

fn self_test(dir: &Path, seed: u64) -> Result<ExitCode, Failure> {
    let mut c = Counts::default();
    println!("self-test: planting durability bugs; each must be caught");
    // 1. A file layer that acknowledges fdatasync without doing it.
    let mut caught_sim = None;
    let started = Instant::now();
    let mut s = seed;
    while started.elapsed() < Duration::from_secs(20) {
        if let Err(what) = sim_epoch(s, true, &mut c) {
            caught_sim = Some(what);
            break;
        }
        s = s.wrapping_add(1);
    }
    match &caught_sim {
        Some(what) => println!("  fsync that lies: caught (epoch {s}): {what}"),
        None => println!("  fsync that lies: NOT caught"),
    }
    // 2. A ledger that claims one more event than was durable.
    let mut rng = StdRng::seed_from_u64(seed);
    let sub = dir.join("self-test");
    let _ = std::fs::remove_dir_all(&sub);
    std::fs::create_dir_all(&sub)
        .map_err(|e| Failure::io(format!("cannot create {}: {e}", sub.display())))?;
    let mut caught_kill = None;
    for _ in 0..5 {
        match kill_fleet(&sub, rng.gen(), &mut rng, &mut c, true) {
            Err(what) if what.contains("the ledger acknowledges") => {
                caught_kill = Some(what);
                break;
            }
            Err(what) => {
                println!("  unexpected failure around the planted ledger: {what}");
                break;
            }
            Ok(()) => {}
        }
    }
    let _ = std::fs::remove_dir_all(&sub);
    match &caught_kill {
        Some(what) => println!("  ledger claiming an extra event: caught: {what}"),
        None => println!("  ledger claiming an extra event: NOT caught"),
    }
    let both = caught_sim.is_some() && caught_kill.is_some();
    c.violations = u64::from(caught_sim.is_some()) + u64::from(caught_kill.is_some());
    if both {
        println!("self-test passed: the checks catch planted durability bugs");
    } else {
        println!("self-test FAILED: a planted bug went unnoticed");
    }
    print_json(&c, seed);
    Ok(if both {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
