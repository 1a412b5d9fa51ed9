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
//!
//! The code: the options and the run (this file), the agent and its
//! actions (`agent`), what the agents write (`workload`), the writer
//! threads that drive them (`threads`), the report (`report`).
//!
//! [`run_tool`]: turnstone::session::run_tool
//! [`run_tool_async`]: turnstone::session::run_tool_async
//! [`Session::flush_async`]: turnstone::session::Session::flush_async

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Args;
use turnstone::session::{Host, Registry, RepairReport};
use turnstone::{Options, Store};

use crate::Failure;

mod agent;
mod report;
mod threads;
mod workload;

use report::{cpu_times, percentile, ratio, FleetReport};
use threads::{run_thread, run_thread_async, Shared, ThreadResult};

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

/// The fleet's plugin event kind (ignorable: any reader may skip it).
pub const PLUGIN_KIND: &str = "fleet/usage";

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
