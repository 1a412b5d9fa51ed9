//! Durable writers spread over several processes on one store (issue 40,
//! docs/MULTIPROCESS.md): the same writers in one process, in `procs`
//! processes sharing one turnstone store (the first to open it hosts it,
//! the others are its clients), and in `procs` processes writing one SQLite
//! database (WAL, `synchronous=FULL`), in one run, each `--rounds` times,
//! interleaved; medians printed.
//!
//! Each writer has its own session (its own rows in SQLite) and loops for
//! `--secs`: append one event of `--bytes` bytes, then wait until it is
//! durable (turnstone: `append_group` + `sync_session` through the
//! `EventLog` every process uses, holding the session's claim as the
//! session layer does; SQLite: one INSERT in its own
//! transaction). Events/s counts the events whose wait returned.
//!
//! ```sh
//! cargo run --release -p turnstone-benches --bin processes -- --procs 4 --threads 8 --secs 5 --rounds 3
//! ```
//!
//! `--follow N` measures instead how soon a follower in another process
//! (a client) has each of N events after the host's flush of it returned.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use turnstone::backend::EventLog;
use turnstone::Options;

struct Args {
    procs: usize,
    threads: usize,
    secs: f64,
    bytes: usize,
    rounds: usize,
    /// Run only this one (`one`, `shared`, `sqlite`), for profiling.
    only: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        procs: 4,
        threads: 8,
        secs: 5.0,
        bytes: 200,
        rounds: 3,
        only: None,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        let n = &v[i + 1];
        match v[i].as_str() {
            "--procs" => a.procs = n.parse().unwrap(),
            "--threads" => a.threads = n.parse().unwrap(),
            "--secs" => a.secs = n.parse().unwrap(),
            "--bytes" => a.bytes = n.parse().unwrap(),
            "--rounds" => a.rounds = n.parse().unwrap(),
            "--only" => a.only = Some(n.clone()),
            _ => {}
        }
        i += 2;
    }
    a
}

/// Run `threads` writers for `secs` on `log`; events made durable.
fn turnstone_writers(
    log: Arc<dyn EventLog>,
    tag: &str,
    threads: usize,
    secs: f64,
    bytes: usize,
) -> u64 {
    let total = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Barrier::new(threads + 1));
    let mut hs = Vec::new();
    for t in 0..threads {
        let (log, total, stop, go) = (log.clone(), total.clone(), stop.clone(), go.clone());
        let session = format!("{tag}-{t}");
        hs.push(std::thread::spawn(move || {
            let payload = vec![b'x'; bytes];
            // The writer's claim, as the session layer takes it.
            let claim = log.claim(&session).unwrap();
            go.wait();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                log.append_group(&session, &[(300, 0, &payload)]).unwrap();
                log.sync_session(&session).unwrap();
                n += 1;
            }
            log.release(&session, claim.id);
            total.fetch_add(n, Ordering::Relaxed);
        }));
    }
    go.wait();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    total.load(Ordering::Relaxed)
}

fn sqlite_open(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    c.busy_timeout(Duration::from_secs(60)).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "synchronous", "FULL").unwrap();
    c
}

fn sqlite_writers(path: &Path, tag: &str, threads: usize, secs: f64, bytes: usize) -> u64 {
    let total = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Barrier::new(threads + 1));
    let mut hs = Vec::new();
    for t in 0..threads {
        let (total, stop, go) = (total.clone(), stop.clone(), go.clone());
        let session = format!("{tag}-{t}");
        let path = path.to_path_buf();
        hs.push(std::thread::spawn(move || {
            let c = sqlite_open(&path);
            let payload = vec![b'x'; bytes];
            let mut ins = c
                .prepare("INSERT INTO events(session, seq, payload) VALUES (?1, ?2, ?3)")
                .unwrap();
            go.wait();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                ins.execute(rusqlite::params![session, n as i64, payload])
                    .unwrap();
                n += 1;
            }
            total.fetch_add(n, Ordering::Relaxed);
        }));
    }
    go.wait();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    total.load(Ordering::Relaxed)
}

/// A worker process: open, say READY, wait for GO on stdin, write, say the count.
fn worker(kind: &str, path: &Path, threads: usize, secs: f64, bytes: usize) {
    let tag = format!("p{}", std::process::id());
    let log: Option<Arc<dyn EventLog>> = match kind {
        "turnstone" => Some(
            turnstone::share::open(path, Options::default())
                .unwrap()
                .as_log_arc(),
        ),
        _ => None,
    };
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let n = match log {
        Some(log) => {
            let n = turnstone_writers(log.clone(), &tag, threads, secs, bytes);
            // Stay up (hosting) until told: the others may still be writing.
            println!("COUNT {n}");
            std::io::stdout().flush().unwrap();
            line.clear();
            std::io::stdin().read_line(&mut line).unwrap();
            let _ = log.close();
            return;
        }
        None => sqlite_writers(path, &tag, threads, secs, bytes),
    };
    println!("COUNT {n}");
    std::io::stdout().flush().unwrap();
    line.clear();
    std::io::stdin().read_line(&mut line).unwrap();
}

/// `procs` worker processes of `kind` on `path`: total durable events.
fn in_processes(kind: &str, path: &Path, a: &Args) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let mut kids = Vec::new();
    for i in 0..a.procs {
        let mut c = Command::new(&exe)
            .args([
                "--worker",
                kind,
                path.to_str().unwrap(),
                &a.threads.to_string(),
                &a.secs.to_string(),
                &a.bytes.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "READY", "worker {i}");
        kids.push((c, out));
    }
    for (c, _) in kids.iter_mut() {
        writeln!(c.stdin.as_mut().unwrap(), "GO").unwrap();
    }
    let mut total = 0;
    for (_, out) in kids.iter_mut() {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        total += line
            .trim()
            .strip_prefix("COUNT ")
            .unwrap()
            .parse::<u64>()
            .unwrap();
    }
    for (mut c, _) in kids {
        let _ = writeln!(c.stdin.as_mut().unwrap(), "END");
        c.wait().unwrap();
    }
    total
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A follower process: follow `session` from 0, say `seq ns` as each
/// event arrives, until `n` events.
fn follower(path: &Path, session: &str, n: u64) {
    let log = turnstone::share::open(path, Options::default())
        .unwrap()
        .as_log_arc();
    let mut f = log.follow(session, 0).unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut out = Vec::new();
    while (out.len() as u64) < n {
        if let Some(e) = f.next_timeout(Duration::from_secs(30)).unwrap() {
            out.push((e.seq, now_ns()));
        } else {
            panic!("no event in 30 s");
        }
    }
    for (seq, ns) in out {
        println!("{seq} {ns}");
    }
}

/// Wake-up latency of a follower in another process: this process hosts
/// and writes one event every 2 ms; the time from its flush returning to
/// the follower process having the event.
fn follow_latency(n: u64) {
    let dir =
        tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into())).unwrap();
    let log = turnstone::share::open(dir.path(), Options::default())
        .unwrap()
        .as_log_arc();
    log.create_session("followed").unwrap();
    log.sync_session("followed").unwrap();
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args([
            "--follower",
            dir.path().to_str().unwrap(),
            "followed",
            &n.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "READY");
    let mut flushed = Vec::new();
    for i in 0..n {
        log.append_group("followed", &[(300, 0, &i.to_le_bytes())])
            .unwrap();
        log.sync_session("followed").unwrap();
        flushed.push(now_ns());
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut lat = Vec::new();
    for line in out.lines() {
        let line = line.unwrap();
        let mut p = line.split(' ');
        let seq: usize = p.next().unwrap().parse().unwrap();
        let ns: u64 = p.next().unwrap().parse().unwrap();
        lat.push(ns.saturating_sub(flushed[seq]) as f64 / 1e6);
    }
    c.wait().unwrap();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |f: f64| lat[((lat.len() - 1) as f64 * f) as usize];
    println!(
        "follower in another process, {} events 2 ms apart: flush returned -> follower has it: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        lat.len(),
        q(0.5),
        q(0.9),
        q(0.99),
        q(1.0)
    );
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--follower") {
        follower(Path::new(&argv[2]), &argv[3], argv[4].parse().unwrap());
        return;
    }
    if argv.get(1).map(String::as_str) == Some("--follow") {
        follow_latency(argv[2].parse().unwrap());
        return;
    }
    if argv.get(1).map(String::as_str) == Some("--worker") {
        let path = PathBuf::from(&argv[3]);
        worker(
            &argv[2],
            &path,
            argv[4].parse().unwrap(),
            argv[5].parse().unwrap(),
            argv[6].parse().unwrap(),
        );
        return;
    }
    let a = args();
    let writers = a.procs * a.threads;
    let (mut one, mut shared, mut sqlite) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..a.rounds {
        let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into()))
            .unwrap();
        let run = |what: &str| a.only.as_deref().is_none_or(|o| o == what);
        let store = dir.path().join(format!("one-{round}"));
        let n = if run("one") {
            let log = turnstone::share::open(&store, Options::default())
                .unwrap()
                .as_log_arc();
            let n = turnstone_writers(log.clone(), "one", writers, a.secs, a.bytes);
            log.close().unwrap();
            n
        } else {
            0
        };
        one.push(n as f64 / a.secs);

        let n = if run("shared") {
            in_processes("turnstone", &dir.path().join(format!("shared-{round}")), &a)
        } else {
            0
        };
        shared.push(n as f64 / a.secs);

        let db = dir.path().join(format!("sqlite-{round}.db"));
        let n = if run("sqlite") {
            sqlite_open(&db)
                .execute_batch(
                    "CREATE TABLE events(session TEXT NOT NULL, seq INTEGER NOT NULL, payload BLOB NOT NULL, PRIMARY KEY(session, seq))",
                )
                .unwrap();
            in_processes("sqlite", &db, &a)
        } else {
            0
        };
        sqlite.push(n as f64 / a.secs);
        eprintln!(
            "round {round}: one process {:.0}/s, {} processes {:.0}/s, sqlite {:.0}/s",
            one[round], a.procs, shared[round], sqlite[round]
        );
    }
    let (o, s, q) = (median(one), median(shared), median(sqlite));
    println!(
        "{writers} durable writers, {} B events, {} s per run, medians of {}:",
        a.bytes, a.secs, a.rounds
    );
    println!("| store | writers | durable events/s | ratio |");
    println!("|---|---|---|---|");
    println!("| turnstone, one process | {writers} threads | {o:.0} | 1.00 |");
    println!(
        "| turnstone, {} processes (one hosts) | {} × {} | {s:.0} | {:.2} |",
        a.procs,
        a.procs,
        a.threads,
        s / o
    );
    println!(
        "| SQLite WAL synchronous=FULL, {} processes | {} × {} | {q:.0} | {:.2} |",
        a.procs,
        a.procs,
        a.threads,
        q / o
    );
    println!("turnstone {} processes / SQLite: {:.1}×", a.procs, s / q);
}
