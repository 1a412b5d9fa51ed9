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
//!
//! The code: the options, the run and its report (this file), the
//! session-layer agent both loops drive and the repair checks (`agent`), the
//! kill loop (`kill`), the simulated loop (`sim`) and its file layer
//! (`vfs`), and the self-test (`self_test`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Failure;

mod agent;
mod kill;
mod self_test;
mod sim;
mod vfs;

use kill::{child, kill_fleet, kill_sessions};
use self_test::self_test;
use sim::sim_epoch;

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
