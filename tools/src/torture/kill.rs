//! The kill loop (real processes, real files): start a child on a store
//! under `DIR` (`turnstone fleet --ack-ledger`, or the session-layer agent
//! loop of [`child`]), SIGKILL it at a random moment, reopen and recover the
//! store, and check every event its ledger acknowledged and every repair.
//! Apart from the simulated loop: it needs the `turnstone` binary and the
//! real file system, and checks what a real crash of a process leaves.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use turnstone::session::internals as event;
use turnstone::session::Registry;
use turnstone::{Options, ProblemKind, Store};

use super::agent::{check_repair, filler, Agent};
use super::{Check, Counts};
use crate::Failure;

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

pub(super) fn kill_fleet(
    dir: &Path,
    seed: u64,
    rng: &mut StdRng,
    c: &mut Counts,
    plant_extra: bool,
) -> Check {
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

pub(super) fn kill_sessions(dir: &Path, seed: u64, rng: &mut StdRng, c: &mut Counts) -> Check {
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
pub(super) fn child(dir: &Path, seed: u64) -> Result<(), Failure> {
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
