//! Worker processes and a crashing database: two processes writing one
//! log, a server crash under load, a version-1 database migrated, search
//! across processes.

use super::*;

/// `pg_ctl stop -m immediate` under load, then a restart: every acknowledged
/// event is there, nothing unacknowledged is half there, a writer that saw
/// a failure must acquire again and then continues at the database's end.
pub(super) fn a_database_crash_under_load_loses_nothing_acknowledged(cx: &Ctx) {
    let log = cx.log();
    let sessions = 8;
    let acked: Vec<Arc<parking_lot::Mutex<u64>>> = (0..sessions)
        .map(|_| Arc::new(parking_lot::Mutex::new(0)))
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handles: Vec<_> = (0..sessions)
        .map(|t| {
            let (log, acked, stop) = (log.clone(), acked[t].clone(), stop.clone());
            std::thread::spawn(move || {
                let w = log.acquire(&format!("s{t}"), "w", true).unwrap().writer;
                let mut i = 0u64;
                let mut failures = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if w.append_group(&[(1, 0, &payload(i)), (1, 0, &payload(i + 1))])
                        .is_err()
                    {
                        failures += 1;
                        break;
                    }
                    match w.sync() {
                        Ok(()) => {
                            i += 2;
                            *acked.lock() = i;
                        }
                        Err(PgError::WriterBroken { .. }) | Err(PgError::Database { .. }) => {
                            failures += 1;
                            break;
                        }
                        Err(e) => panic!("unexpected error: {e}"),
                    }
                }
                failures
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    cx.server.control("crash");
    let failures: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(failures > 0, "the crash went unnoticed by every writer");
    // While the database is down: typed errors at once, no hang.
    match log.sessions() {
        Err(PgError::Database { .. }) => {}
        other => panic!("a read with the database down: {other:?}"),
    }
    match PgLog::connect(&cx.url, PgOptions::default()) {
        Err(PgError::Database { op: "connect", .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("connected to a stopped server"),
    }
    cx.server.control("restart");
    // The same log object works again once it is back (new connections).
    assert_eq!(log.sessions().unwrap().len(), sessions);
    let log2 = cx.log();
    for (t, acked) in acked.iter().enumerate() {
        let acked = *acked.lock();
        let name = format!("s{t}");
        let len = log2.session_len(&name).unwrap();
        assert!(len >= acked, "{name}: acknowledged {acked}, found {len}");
        assert_eq!(len % 2, 0, "{name}: half a group survived ({len} events)");
        let evs = log2.read_range(&name, 0..len).unwrap();
        assert!(evs
            .iter()
            .enumerate()
            .all(|(i, e)| e.payload == payload(i as u64)));
        // The old writer is broken; a new acquisition continues at the end.
        let w = log2.acquire(&name, "w", false).unwrap().writer;
        assert_eq!(w.len(), len);
        w.append(1, 0, b"after").unwrap();
        w.sync().unwrap();
    }
    log.close();
}

pub(super) const WORKER_ENV: &str = "TURNSTONE_PG_TEST_WORKER";

/// A worker process (this test binary run again): loops over 4 sessions,
/// taking each lease (100 ms), appending a few events tagged with its name
/// and epoch, syncing some; after each acknowledged sync it appends
/// `session seq payload` to its ledger (fsynced) before going on.
pub(super) fn worker(spec: &str) {
    use std::io::Write;
    let mut parts = spec.splitn(3, ' ');
    let (url, name, ledger) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let log = PgLog::connect(
        url,
        PgOptions {
            lease_ttl: Duration::from_millis(100),
            ..PgOptions::default()
        },
    )
    .unwrap();
    let mut ledger = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .unwrap();
    let mut n = 0u64;
    loop {
        n += 1;
        let session = format!("s{}", n % 4);
        let acq = match log.acquire(&session, name, true) {
            Ok(a) => a,
            Err(PgError::LeaseHeld { .. }) => {
                std::thread::sleep(Duration::from_millis(3));
                continue;
            }
            Err(e) => panic!("{name}: acquire: {e}"),
        };
        if acq.previous_owner.as_deref().is_some_and(|o| o != name) {
            // One write per line: a SIGKILL cuts a line only between
            // writes, so a line is whole or absent (or, had the kill come
            // inside the write, has no newline, which the reader skips).
            ledger
                .write_all(format!("takeover {session}\n").as_bytes())
                .unwrap();
        }
        let w = acq.writer;
        for k in 0..(n % 7 + 1) {
            let p = format!("{name} e{} k{k}", w.epoch());
            let seq = match w.append(1, 0, p.as_bytes()) {
                Ok(s) => s,
                Err(PgError::Fenced { .. }) => break,
                Err(e) => panic!("{name}: append: {e}"),
            };
            if k % 2 == 0 {
                match w.sync() {
                    Ok(()) => {
                        ledger
                            .write_all(format!("acked {session} {seq} {p}\n").as_bytes())
                            .unwrap();
                        ledger.sync_data().unwrap();
                    }
                    Err(PgError::Fenced { .. }) => break,
                    Err(e) => panic!("{name}: sync: {e}"),
                }
            }
        }
        if n.is_multiple_of(3) {
            let _ = w.release();
        }
    }
}

/// Two workers in separate processes contend for the same sessions with
/// short leases while being paused at random (SIGSTOP/SIGCONT) and finally
/// killed (SIGKILL): no session has two writers' events interleaved (the
/// epoch never goes back along a session, and one epoch is one writer),
/// every acknowledged event is there, and takeovers happened.
pub(super) fn two_worker_processes_never_interleave_and_lose_nothing_acknowledged(cx: &Ctx) {
    use rand::Rng;
    cx.log().close(); // the schema, before the workers race to create it
    let dir = std::env::temp_dir().join(format!("turnstone-pg-ledgers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut kids: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            let ledger = dir.join(name);
            std::process::Command::new(&exe)
                .env(
                    WORKER_ENV,
                    format!("{} {name} {}", cx.url, ledger.display()),
                )
                .spawn()
                .unwrap()
        })
        .collect();
    let mut rng = rand::thread_rng();
    let t0 = std::time::Instant::now();
    // At least 3 s, and on until the ledgers show contention (a takeover
    // and acknowledged syncs): on a loaded machine the workers may take
    // most of 3 s to start. At most 60 s.
    let contended = || {
        let (mut takeovers, mut acked) = (0, 0);
        for name in ["a", "b"] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            takeovers += text.lines().filter(|l| l.starts_with("takeover")).count();
            acked += text.lines().filter(|l| l.starts_with("acked")).count();
        }
        takeovers > 0 && acked > 0
    };
    while t0.elapsed() < Duration::from_secs(3)
        || (!contended() && t0.elapsed() < Duration::from_secs(60))
    {
        let k = &kids[rng.gen_range(0..2)];
        let pid = k.id().to_string();
        Command::new("kill").args(["-STOP", &pid]).status().unwrap();
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..300)));
        Command::new("kill").args(["-CONT", &pid]).status().unwrap();
        std::thread::sleep(Duration::from_millis(rng.gen_range(10..100)));
    }
    for k in &mut kids {
        assert!(k.try_wait().unwrap().is_none(), "a worker died early");
        k.kill().unwrap();
        k.wait().unwrap();
    }
    let log = cx.log();
    let mut sql = cx.sql();
    for s in 0..4 {
        let session = format!("s{s}");
        let rows = sql
            .query(
                "SELECT seq, epoch, payload FROM turnstone_events WHERE session = $1 ORDER BY seq",
                &[&session],
            )
            .unwrap();
        let mut last_epoch = 0i64;
        let mut owner_of_epoch = std::collections::HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            let (seq, epoch, payload): (i64, i64, Vec<u8>) = (r.get(0), r.get(1), r.get(2));
            assert_eq!(seq, i as i64, "{session}: seqs are not dense");
            assert!(
                epoch >= last_epoch,
                "{session}: epoch went back at seq {seq}"
            );
            last_epoch = epoch;
            let text = String::from_utf8(payload).unwrap();
            let (writer, rest) = text.split_once(' ').unwrap();
            assert!(
                rest.starts_with(&format!("e{epoch} ")),
                "{session} seq {seq}: {text}"
            );
            let first = owner_of_epoch
                .entry(epoch)
                .or_insert_with(|| writer.to_string());
            assert_eq!(first, writer, "{session}: epoch {epoch} has two writers");
        }
    }
    let mut takeovers = 0;
    let mut acked = 0;
    for name in ["a", "b"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        // Only whole lines: a worker killed while writing its last line
        // had not acknowledged it to anyone.
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            let line = line.trim_end_matches('\n');
            let mut f = line.splitn(4, ' ');
            match f.next().unwrap() {
                "takeover" => takeovers += 1,
                "acked" => {
                    acked += 1;
                    let (session, seq, payload) =
                        (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
                    let seq: u64 = seq.parse().unwrap();
                    let ev = log.read_range(session, seq..seq + 1).unwrap();
                    assert_eq!(
                        ev[0].payload,
                        payload.as_bytes(),
                        "{session} {seq}: acknowledged, then lost"
                    );
                }
                _ => {}
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!("    {acked} acknowledged syncs checked, {takeovers} takeovers");
    assert!(
        acked > 0 && takeovers > 0,
        "no contention happened: {acked} acked, {takeovers} takeovers"
    );
}

pub(super) fn search_finds_text_across_sessions_and_along_a_fork_chain(cx: &Ctx) {
    let log = cx.log();
    let a = log.acquire("a", "w", true).unwrap().writer;
    a.append_group_with_text(&[
        (1, 0, b"{}", Some("the disk is full on host seven")),
        (1, 0, b"{}", None),
        (1, 0, b"{}", Some("retrying the upload")),
    ])
    .unwrap();
    a.sync().unwrap();
    log.fork("a", 2, "b").unwrap();
    let b = log.acquire("b", "w", false).unwrap().writer;
    b.append_group_with_text(&[(1, 0, b"{}", Some("disk cleaned, upload done"))])
        .unwrap();
    b.sync().unwrap();
    let hits = log.search("disk", 10).unwrap();
    let mut at: Vec<(String, u64)> = hits.iter().map(|h| (h.session.clone(), h.seq)).collect();
    at.sort();
    assert_eq!(at, vec![("a".into(), 0), ("b".into(), 2)]);
    let h = hits.iter().find(|h| h.session == "a").unwrap();
    assert!(h.snippet.contains("[disk]"), "{}", h.snippet);
    // A phrase, and negation.
    let hits = log.search("\"upload done\"", 10).unwrap();
    assert_eq!(hits.iter().map(|h| h.seq).collect::<Vec<_>>(), vec![2]);
    assert!(log
        .search("upload -retrying", 10)
        .unwrap()
        .iter()
        .all(|h| h.session == "b"));
    // Session b sees its own events and what it inherits below the fork
    // point (a's seq 0), not a's seq 2 (past the fork).
    let mut in_b: Vec<u64> = log
        .search_session("b", "disk or upload", 10)
        .unwrap()
        .iter()
        .map(|h| h.seq)
        .collect();
    in_b.sort();
    assert_eq!(in_b, vec![0, 2]);
    assert!(log
        .search_session("b", "disk", 10)
        .unwrap()
        .iter()
        .all(|h| h.session == "b"));
    // A deleted session's events are not found (its fork still finds
    // what it inherits).
    log.delete("a").unwrap();
    assert!(log.search("retrying", 10).unwrap().is_empty());
    assert_eq!(log.search_session("b", "seven", 10).unwrap().len(), 1);
    assert_eq!(log.search("disk", 1).unwrap().len(), 1);
}

/// A database written by schema version 1 (the tables as first released,
/// copied here) is upgraded in place: its events are kept and read, and
/// new ones are searchable.
pub(super) fn a_version_1_database_is_migrated_in_place(cx: &Ctx) {
    let mut sql = cx.sql();
    sql.batch_execute(
        "CREATE TABLE turnstone_schema (version integer NOT NULL);
         INSERT INTO turnstone_schema VALUES (1);
         CREATE TABLE turnstone_sessions (
             id text PRIMARY KEY, parent text REFERENCES turnstone_sessions(id),
             fork_seq bigint NOT NULL DEFAULT 0, len bigint NOT NULL DEFAULT 0,
             meta jsonb NOT NULL DEFAULT '{}', lease_owner text,
             lease_epoch bigint NOT NULL DEFAULT 0, lease_expires timestamptz,
             deleted boolean NOT NULL DEFAULT false,
             created_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE turnstone_events (
             session text NOT NULL REFERENCES turnstone_sessions(id), seq bigint NOT NULL,
             kind integer NOT NULL, flags integer NOT NULL, payload bytea NOT NULL,
             epoch bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(),
             PRIMARY KEY (session, seq));
         CREATE TABLE turnstone_snapshots (
             session text NOT NULL REFERENCES turnstone_sessions(id), name text NOT NULL,
             upto bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (session, name));
         INSERT INTO turnstone_sessions (id, len) VALUES ('old', 2);
         INSERT INTO turnstone_events (session, seq, kind, flags, payload, epoch)
             VALUES ('old', 0, 5, 0, 'zero', 1), ('old', 1, 5, 1, 'one', 1);",
    )
    .unwrap();
    let log = cx.log();
    let v: i32 = sql
        .query_one("SELECT version FROM turnstone_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, SCHEMA_VERSION);
    // Step 3 dropped the events' foreign key; the snapshots keep theirs.
    assert_eq!(
        constraints(&mut sql, "turnstone_events"),
        ["turnstone_events_pkey"]
    );
    assert_eq!(
        constraints(&mut sql, "turnstone_snapshots"),
        [
            "turnstone_snapshots_pkey",
            "turnstone_snapshots_session_fkey"
        ]
    );
    let evs = log.read_range("old", 0..2).unwrap();
    assert_eq!(
        evs.iter()
            .map(|e| (e.seq, e.kind, e.flags, e.payload.clone()))
            .collect::<Vec<_>>(),
        vec![(0, 5, 0, b"zero".to_vec()), (1, 5, 1, b"one".to_vec())]
    );
    let w = log.acquire("old", "w", false).unwrap().writer;
    w.append_group_with_text(&[(5, 0, b"two", Some("migrated and searchable"))])
        .unwrap();
    w.sync().unwrap();
    let hits = log.search("searchable", 10).unwrap();
    assert_eq!((hits[0].session.as_str(), hits[0].seq), ("old", 2));
}
