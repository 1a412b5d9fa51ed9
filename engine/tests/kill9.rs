//! Real processes, real files: a child process appends from several threads
//! and, after every successful durability wait, records `SESSION SEQ` in a
//! ledger file with one unbuffered append write. The parent kills it with
//! SIGKILL at a random moment, reopens the store and checks that every event
//! in the ledger is there, with the payload the child derived from session
//! and seq, and that every session is dense (invariants 1, 2 and 9).
//!
//! The child is this same test binary, re-run with an environment variable
//! that makes `child_writer` (a no-op otherwise) do the writing.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use turnstone::{Error, Options, ProblemKind, Store};

use common::{direct_io_here, payload_for};

const ENV_DIR: &str = "TURNSTONE_KILL9_DIR";
const ENV_LOCK_PROBE: &str = "TURNSTONE_LOCK_PROBE_DIR";
const ENV_LOCK_EXPECT: &str = "TURNSTONE_LOCK_PROBE_EXPECT";
/// Set for a child that makes its segments from free files.
const ENV_RECYCLE: &str = "TURNSTONE_KILL9_RECYCLE";
/// Set (with `ENV_RECYCLE`) for a child that writes recycled segments'
/// batches around the page cache (`Options::direct_writes`).
const ENV_DIRECT: &str = "TURNSTONE_KILL9_DIRECT";
const THREADS: usize = 4;
const ROUNDS: usize = 6;

fn opts() -> Options {
    Options {
        segment_bytes: 256 * 1024,
        ..Default::default()
    }
}

/// With recycling on (FORMAT.md §6.2 rule 7).
fn recycling_opts() -> Options {
    Options {
        recycle_segments: 64,
        ..opts()
    }
}

/// Copy every sealed segment of the store in `dir` to its free name (what
/// an online collection with recycling leaves), so that the next segments
/// the writer makes are recycled ones. Made durable.
fn plant_free_files(dir: &Path) {
    turnstone::sim::plant_free_files(&turnstone::vfs::OsVfs, dir).expect("plant free files");
}

fn sessions_of(thread: usize) -> [String; 2] {
    [format!("w{thread}-a"), format!("w{thread}-b")]
}

/// Payload length: mostly small, sometimes large enough to roll segments.
fn len_for(session: &str, seq: u64) -> usize {
    let h = payload_for(session, seq, 4);
    let r = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    if r.is_multiple_of(40) {
        20_000 + r % 20_000
    } else {
        r % 1500
    }
}

fn payload(session: &str, seq: u64) -> Vec<u8> {
    payload_for(session, seq, len_for(session, seq))
}

fn self_command(test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"]);
    cmd
}

/// The child: runs only when the parent sets `TURNSTONE_KILL9_DIR`.
#[test]
fn child_writer() {
    let Ok(root) = std::env::var(ENV_DIR) else {
        return;
    };
    let root = PathBuf::from(root);
    let opts = if std::env::var(ENV_RECYCLE).is_ok() {
        Options {
            direct_writes: std::env::var(ENV_DIRECT).is_ok(),
            ..recycling_opts()
        }
    } else {
        opts()
    };
    let store = Arc::new(Store::open_with(root.join("store"), opts).expect("child open"));
    let ledger = Arc::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("ledger"))
            .expect("ledger"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            let ledger = ledger.clone();
            let root = root.clone();
            std::thread::spawn(move || {
                let names = sessions_of(t);
                let mut next: Vec<u64> = names
                    .iter()
                    .map(|s| store.session_len(s).unwrap_or(0))
                    .collect();
                let mut round = 0u64;
                while Instant::now() < deadline {
                    round += 1;
                    let k = (round as usize + t) % 2;
                    let s = &names[k];
                    let mut last = None;
                    for _ in 0..1 + round % 4 {
                        let seq = next[k];
                        let a = if round.is_multiple_of(5) {
                            // An atomic group of two events.
                            let (p0, p1) = (payload(s, seq), payload(s, seq + 1));
                            let mut got = Vec::new();
                            store
                                .append_group(s, &[(1, 0, &p0[..]), (2, 0, &p1[..])], |a| {
                                    got.push(a)
                                })
                                .expect("append_group");
                            assert_eq!(got[0].seq.0, seq);
                            next[k] += 2;
                            got[1]
                        } else {
                            let a = store.append(s, 1, 0, &payload(s, seq)).expect("append");
                            next[k] += 1;
                            a
                        };
                        assert_eq!(a.seq.0 + 1, next[k], "dense seqs in the child");
                        last = Some(a);
                    }
                    let a = last.expect("appended");
                    store.wait_durable(a.end).expect("wait_durable");
                    // One write(2) of the whole line, O_APPEND: either the
                    // line is in the ledger or it is not.
                    let line = format!("{s} {}\n", a.seq.0);
                    (&*ledger).write_all(line.as_bytes()).expect("ledger write");
                    // What the parent checks the direct path by (a kill
                    // may leave the file cut: the parent reads it leniently).
                    if t == 0 && round.is_multiple_of(4) {
                        let n = store.stats().direct_batches;
                        std::fs::write(root.join("direct_batches"), n.to_string())
                            .expect("direct_batches");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("child thread");
    }
}

/// Parse the ledger: the highest acknowledged seq per session.
fn read_ledger(path: &Path) -> (BTreeMap<String, u64>, usize) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => panic!("ledger: {e}"),
    };
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "a ledger line was torn: {:?}",
        &text[text.len().saturating_sub(40)..]
    );
    let mut acked = BTreeMap::new();
    let mut lines = 0;
    for line in text.lines() {
        let (s, seq) = line.split_once(' ').expect("SESSION SEQ");
        let seq: u64 = seq.parse().expect("seq");
        let e = acked.entry(s.to_string()).or_insert(0);
        *e = (*e).max(seq + 1);
        lines += 1;
    }
    (acked, lines)
}

fn check_store(store: &Store, acked: &BTreeMap<String, u64>, ctx: &str) -> u64 {
    for p in &store.recovery_report().problems {
        assert_eq!(p.kind, ProblemKind::TornTail, "{ctx}: {p:?}");
    }
    let known: Vec<String> = (0..THREADS).flat_map(sessions_of).collect();
    let mut total = 0;
    for info in store.sessions() {
        assert!(
            known.contains(&info.name),
            "{ctx}: invented session {:?}",
            info.name
        );
        let evs = store.read_range(&info.name, 0..info.len).unwrap();
        assert_eq!(evs.len() as u64, info.len, "{ctx}");
        for (i, e) in evs.iter().enumerate() {
            assert_eq!(e.seq.0, i as u64, "{ctx}");
            assert!(
                e.payload == payload(&info.name, i as u64),
                "{ctx}: {} seq {i}: payload is not the one appended",
                info.name
            );
        }
        total += info.len;
    }
    for (s, n) in acked {
        let len = store.session_len(s).unwrap_or(0);
        assert!(
            len >= *n,
            "{ctx}: {s}: the ledger acknowledges {n} events, the store has {len}"
        );
    }
    total
}

#[test]
fn sigkill_loses_no_acknowledged_event() {
    if std::env::var(ENV_DIR).is_ok() || std::env::var(ENV_LOCK_PROBE).is_ok() {
        return; // we are a child
    }
    kill_rounds(false, false);
}

/// The same, with the child making its segments from free files planted
/// before each round (stale batches of this store after every end of data).
#[test]
fn sigkill_in_recycled_segments_loses_no_acknowledged_event() {
    if std::env::var(ENV_DIR).is_ok() || std::env::var(ENV_LOCK_PROBE).is_ok() {
        return; // we are a child
    }
    kill_rounds(true, false);
}

/// The same in recycled segments, with their batches written around the
/// page cache from the sector before each (`Options::direct_writes`).
#[test]
fn sigkill_with_direct_writes_loses_no_acknowledged_event() {
    if std::env::var(ENV_DIR).is_ok() || std::env::var(ENV_LOCK_PROBE).is_ok() {
        return; // we are a child
    }
    kill_rounds(true, true);
}

fn kill_rounds(recycle: bool, direct: bool) {
    let opts = || Options {
        direct_writes: direct,
        ..if recycle { recycling_opts() } else { opts() }
    };
    let mut recycled_active = 0;
    let mut direct_batches = 0u64;
    let tmp = tempfile::tempdir().unwrap();
    let ledger = tmp.path().join("ledger");
    let mut rng = rand::thread_rng();
    let mut last_lines = 0;
    for round in 0..ROUNDS {
        let delay = rng.gen_range(50..=400);
        let ctx = format!("round {round} (killed after {delay} ms)");
        if recycle && round > 0 {
            plant_free_files(&tmp.path().join("store"));
        }
        let mut cmd = self_command("child_writer");
        if recycle {
            cmd.env(ENV_RECYCLE, "1");
        }
        if direct {
            cmd.env(ENV_DIRECT, "1");
        }
        let mut child = cmd
            .env(ENV_DIR, tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        // Odd rounds kill at a random moment from the start (possibly during
        // the child's open and recovery); even rounds first wait for the
        // child's first acknowledgment, so that they surely kill a writer.
        if round % 2 == 0 {
            let deadline = Instant::now() + Duration::from_secs(30);
            while read_ledger(&ledger).1 <= last_lines {
                assert!(
                    Instant::now() < deadline,
                    "{ctx}: the child acknowledged nothing"
                );
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("{ctx}: the child exited early: {status:?}");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().expect("SIGKILL"); // Child::kill is SIGKILL on Unix
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "{ctx}: the child ended on its own: {status:?}"
        );

        let (acked, lines) = read_ledger(&ledger);
        assert!(lines >= last_lines, "{ctx}");
        assert!(round % 2 == 1 || lines > last_lines, "{ctx}");
        last_lines = lines;
        // The lock died with the child.
        let store = Store::open_with(tmp.path().join("store"), opts())
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        let total = check_store(&store, &acked, &ctx);
        eprintln!(
            "{ctx}: {lines} ledger lines, {total} events, report {:?}",
            store.recovery_report().problems
        );
        let active = store.durable_pos().segment();
        let head = std::fs::read(tmp.path().join(format!("store/{:010}.tseg", active.0))).unwrap();
        recycled_active += turnstone::frame::header_is_recycled(&head) as u32;
        store.close().unwrap();
        // The most any child reported (each starts from 0).
        let n = std::fs::read_to_string(tmp.path().join("direct_batches"))
            .ok()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        direct_batches = direct_batches.max(n);
    }
    if recycle {
        assert!(
            recycled_active > 0,
            "the child never wrote in a recycled segment"
        );
    }
    // (Where the file system refuses O_DIRECT, tmpfs say, none is.)
    assert_eq!(
        direct_batches > 0,
        direct && direct_io_here(tmp.path()),
        "{direct_batches} batches written directly"
    );
}

/// The child side of the cross-process lock test.
#[test]
fn child_lock_probe() {
    let Ok(dir) = std::env::var(ENV_LOCK_PROBE) else {
        return;
    };
    let expect = std::env::var(ENV_LOCK_EXPECT).unwrap();
    match (expect.as_str(), Store::open(&dir)) {
        ("locked", Err(Error::Locked { .. })) => {}
        ("free", Ok(store)) => store.close().unwrap(),
        (e, other) => panic!("expected {e}, got {other:?}"),
    }
}

/// A second writer in another process is refused while the first holds the
/// store, and admitted once it is gone.
#[test]
fn second_writer_in_another_process_is_refused() {
    if std::env::var(ENV_DIR).is_ok() || std::env::var(ENV_LOCK_PROBE).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let probe = |expect: &str| {
        self_command("child_lock_probe")
            .env(ENV_LOCK_PROBE, tmp.path())
            .env(ENV_LOCK_EXPECT, expect)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run child")
            .success()
    };
    let store = Store::open(tmp.path()).unwrap();
    store.append("a", 1, 0, b"x").unwrap();
    store.sync().unwrap();
    assert!(probe("locked"), "another process opened a locked store");
    assert!(!probe("free"), "the probe must be able to fail");
    drop(store);
    assert!(probe("free"), "the lock outlived its store");
    let store = Store::open(tmp.path()).unwrap();
    assert_eq!(store.read("a", 0).unwrap().payload, b"x");
}
