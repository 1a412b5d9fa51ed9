//! `torture --self-test`: plant durability bugs (a file layer that
//! acknowledges fdatasync without syncing, a ledger that claims one more
//! event than was durable) and check that the two loops catch both. Proves
//! the checks can fail, so a clean run means something.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::kill::kill_fleet;
use super::sim::sim_epoch;
use super::{print_json, Counts};
use crate::Failure;

pub(super) fn self_test(dir: &Path, seed: u64) -> Result<ExitCode, Failure> {
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
