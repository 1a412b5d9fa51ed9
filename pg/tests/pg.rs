//! The PostgreSQL log against a real server (no mocks). With
//! `TURNSTONE_PG_URL` set the tests use that server; otherwise the harness
//! starts a private one with `.ci/postgres.sh` (initdb into a temp dir, a
//! loopback port) and stops it at the end. Each test gets its own database.
//! Tests that crash the server run only on a private one.
//!
//! `harness = false`: this main runs the tests (a name filter as the first
//! argument is honoured, as with libtest).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use turnstone::backend::EventLog;
use turnstone_pg::{PgError, PgLog, PgOptions, SCHEMA_VERSION};

#[path = "support/server.rs"]
mod server;
use server::Server;

struct Ctx {
    server: Arc<Server>,
    /// This test's database.
    url: String,
}

impl Ctx {
    fn log(&self) -> PgLog {
        PgLog::connect(&self.url, PgOptions::default()).unwrap()
    }
    fn log_with(&self, opts: PgOptions) -> PgLog {
        PgLog::connect(&self.url, opts).unwrap()
    }
    fn sql(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).unwrap()
    }
}

fn payload(i: u64) -> Vec<u8> {
    format!("event {i} {}", "x".repeat((i % 7) as usize * 50)).into_bytes()
}

// ---- the tests

/// The names of a table's constraints, sorted.
fn constraints(sql: &mut postgres::Client, table: &str) -> Vec<String> {
    sql.query(
        "SELECT conname::text FROM pg_constraint WHERE conrelid = $1::text::regclass ORDER BY 1",
        &[&table],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn schema_is_created_once_and_a_newer_one_is_refused(cx: &Ctx) {
    let a = cx.log();
    a.close();
    // A second connect migrates nothing and keeps data.
    let b = cx.log();
    b.create_session("s").unwrap();
    b.close();
    let c = cx.log();
    assert_eq!(c.sessions().unwrap().len(), 1);
    c.close();
    let mut sql = cx.sql();
    let v: i32 = sql
        .query_one("SELECT version FROM turnstone_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, SCHEMA_VERSION);
    assert_eq!(
        constraints(&mut sql, "turnstone_events"),
        ["turnstone_events_pkey"]
    );
    sql.execute("UPDATE turnstone_schema SET version = 99", &[])
        .unwrap();
    match PgLog::connect(&cx.url, PgOptions::default()) {
        Err(PgError::SchemaTooNew { found: 99, known }) => assert_eq!(known, SCHEMA_VERSION),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
}

fn appends_are_dense_durable_and_read_back(cx: &Ctx) {
    let log = cx.log();
    let w = log.acquire("s", "worker-1", true).unwrap().writer;
    for i in 0..10 {
        assert_eq!(w.append(7, (i % 2) as u16, &payload(i)).unwrap(), i);
    }
    // Queued, not yet acknowledged: another connection may or may not see
    // them; after sync it must.
    w.sync().unwrap();
    let first = w
        .append_group(&[(8, 0, b"g0"), (8, 0, b"g1"), (8, 1, b"g2")])
        .unwrap();
    assert_eq!(first, 10);
    w.sync().unwrap();
    log.close();
    let log = cx.log();
    assert_eq!(log.session_len("s").unwrap(), 13);
    let evs = log.read_range("s", 0..13).unwrap();
    for (i, e) in evs.iter().enumerate().take(10) {
        assert_eq!((e.seq, e.kind, e.flags), (i as u64, 7, (i % 2) as u16));
        assert_eq!(e.payload, payload(i as u64));
    }
    assert_eq!(evs[12].payload, b"g2");
    assert_eq!(evs[12].flags, 1);
    assert!(matches!(
        log.read_range("s", 0..14),
        Err(PgError::SeqOutOfRange { len: 13, .. })
    ));
    assert!(matches!(
        log.read_range("nope", 0..0),
        Err(PgError::UnknownSession(_))
    ));
    // A writer acquired again continues at the end.
    let w = log.acquire("s", "worker-1", false).unwrap().writer;
    assert_eq!(w.append(1, 0, b"more").unwrap(), 13);
    w.sync().unwrap();
    assert_eq!(log.session_len("s").unwrap(), 14);
}

fn concurrent_writers_share_commits(cx: &Ctx) {
    let log = cx.log();
    let threads = 32;
    let per = 20u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let log = log.clone();
            s.spawn(move || {
                let w = log
                    .acquire(&format!("s{t}"), "worker", true)
                    .unwrap()
                    .writer;
                for i in 0..per {
                    w.append(1, 0, &payload(i)).unwrap();
                    w.sync().unwrap();
                }
            });
        }
    });
    let stats = log.stats();
    assert_eq!(stats.events, threads * per);
    // 640 acknowledged syncs; group commit makes far fewer statements.
    assert!(
        stats.commits < threads * per,
        "no commit was shared: {stats:?}"
    );
    for t in 0..threads {
        let evs = log.read_range(&format!("s{t}"), 0..per).unwrap();
        assert_eq!(evs.len() as u64, per);
        assert!(evs
            .iter()
            .enumerate()
            .all(|(i, e)| e.payload == payload(i as u64)));
    }
    eprintln!("    {} syncs in {} commits", threads * per, stats.commits);
}

fn a_writer_whose_lease_was_taken_over_is_fenced_and_writes_nothing(cx: &Ctx) {
    // a's process "pauses" (it renews nothing: a stopped process cannot).
    let opts = PgOptions {
        lease_ttl: Duration::from_millis(1000),
        renew_leases: false,
        ..PgOptions::default()
    };
    let a_log = cx.log_with(opts.clone());
    let b_log = cx.log_with(opts);
    let a = a_log.acquire("s", "a", true).unwrap();
    assert_eq!(a.previous_owner, None);
    let a = a.writer;
    a.append(1, 0, b"a0").unwrap();
    a.sync().unwrap();
    // Held: b is refused while a's lease lives (each commit renews it).
    match b_log.acquire("s", "b", false) {
        Err(PgError::LeaseHeld { owner, .. }) => assert_eq!(owner, "a"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("two writers hold one session"),
    }
    // a pauses past its lease; b takes over.
    std::thread::sleep(Duration::from_millis(1300));
    let b = b_log.acquire("s", "b", false).unwrap();
    assert_eq!(b.previous_owner.as_deref(), Some("a"));
    let b = b.writer;
    assert!(b.epoch() > a.epoch());
    assert_eq!(b.len(), 1);
    // a wakes up and writes: fenced, nothing of it lands.
    a.append(1, 0, b"a1 (must not land)").unwrap();
    match a.sync() {
        Err(PgError::Fenced { held, current, .. }) => {
            assert_eq!(held, a.epoch());
            assert_eq!(current, b.epoch());
        }
        other => panic!("a stale writer was not fenced: {other:?}"),
    }
    assert!(matches!(a.append(1, 0, b"a2"), Err(PgError::Fenced { .. })));
    b.append(1, 0, b"b1").unwrap();
    b.sync().unwrap();
    let evs: Vec<Vec<u8>> = b_log
        .read_range("s", 0..2)
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect();
    assert_eq!(evs, vec![b"a0".to_vec(), b"b1".to_vec()]);
    // Released, the session is free at once.
    b.release().unwrap();
    let again = a_log.acquire("s", "a", false).unwrap();
    assert_eq!(again.previous_owner, None);
    assert_eq!(again.writer.len(), 2);
}

/// `sync` waits for what the writer queued before the call and reports its
/// commit as it is: a writer whose events are all committed syncs fine
/// even after the log closed (which breaks every writer); writing and
/// releasing the lease are refused then.
fn sync_reports_committed_events_of_a_closed_writer(cx: &Ctx) {
    let log = cx.log();
    let w = log.acquire("s", "w", true).unwrap().writer;
    w.append(1, 0, b"e0").unwrap();
    w.append(1, 0, b"e1").unwrap();
    w.sync().unwrap();
    log.close();
    assert!(w.is_broken(), "closing the log breaks its writers");
    w.sync().expect("everything it queued is committed");
    w.sync_to(2).unwrap();
    assert!(matches!(w.append(1, 0, b"e2"), Err(PgError::Closed)));
    assert!(matches!(w.release(), Err(PgError::Closed)));
    let again = cx.log();
    assert_eq!(again.session_len("s").unwrap(), 2);
    again.close();
}

fn stale_and_fresh_writers_in_one_batch(cx: &Ctx) {
    // Two writers of one session in one process (the second acquisition
    // fences the first): their queued events can meet in one batch; only
    // the newest epoch's land.
    let log = cx.log();
    let old = log.acquire("s", "w", true).unwrap().writer;
    let new = log.acquire("s", "w", false).unwrap().writer;
    old.append(1, 0, b"old").unwrap();
    new.append(1, 0, b"new").unwrap();
    assert!(matches!(old.sync(), Err(PgError::Fenced { .. })));
    new.sync().unwrap();
    let evs = log.read_range("s", 0..1).unwrap();
    assert_eq!(evs[0].payload, b"new");
    assert_eq!(log.session_len("s").unwrap(), 1);
}

fn forks_read_their_parents_events_even_after_the_parent_is_deleted(cx: &Ctx) {
    let log = cx.log();
    let w = log.acquire("p", "w", true).unwrap().writer;
    for i in 0..5 {
        w.append(1, 0, &payload(i)).unwrap();
    }
    w.sync().unwrap();
    log.fork("p", 3, "c").unwrap();
    assert!(matches!(
        log.fork("p", 6, "c2"),
        Err(PgError::SeqOutOfRange { len: 5, .. })
    ));
    assert!(matches!(
        log.fork("p", 1, "c"),
        Err(PgError::SessionExists(_))
    ));
    let c = log.acquire("c", "w", false).unwrap().writer;
    assert_eq!(c.len(), 3);
    c.append(2, 0, b"own 3").unwrap();
    c.append(2, 0, b"own 4").unwrap();
    c.sync().unwrap();
    // A fork of the fork.
    log.fork("c", 4, "g").unwrap();
    log.delete("p").unwrap();
    // The deleted parent's writer is fenced; the parent is gone from reads
    // and lists, its events still back its forks.
    w.append(1, 0, b"late").unwrap();
    assert!(matches!(w.sync(), Err(PgError::SessionDeleted(_))));
    assert!(matches!(
        log.read_range("p", 0..1),
        Err(PgError::SessionDeleted(_))
    ));
    let ids: Vec<String> = log.sessions().unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, vec!["c".to_string(), "g".to_string()]);
    let c_evs = log.read_range("c", 0..5).unwrap();
    let want: Vec<Vec<u8>> = (0..3)
        .map(payload)
        .chain([b"own 3".to_vec(), b"own 4".to_vec()])
        .collect();
    assert_eq!(
        c_evs.iter().map(|e| e.payload.clone()).collect::<Vec<_>>(),
        want
    );
    assert_eq!(
        c_evs.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    let g_evs = log.read_range("g", 1..4).unwrap();
    assert_eq!(
        g_evs.iter().map(|e| e.payload.clone()).collect::<Vec<_>>(),
        want[1..4].to_vec()
    );
    assert!(matches!(
        log.acquire("p", "w", false),
        Err(PgError::SessionDeleted(_))
    ));
    assert!(matches!(
        log.create_session("p"),
        Err(PgError::SessionExists(_))
    ));
}

/// `lock_stream_session` excludes other holders of the same session's lock
/// (another log handle, as another process would be) until it is dropped,
/// and not holders of another session's; a dropped lock's connection goes
/// back to the pool unlocked (the next lock on it is not held twice).
fn a_session_lock_excludes_other_holders_until_dropped(cx: &Ctx) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (one, two) = (cx.log(), cx.log());
    let held = one.lock_stream_session("ds/1").unwrap();
    // Another session's lock is independent ("ds/2" and "ds/1" do not
    // share a hash).
    let other = two.lock_stream_session("ds/2").unwrap();
    drop(other);
    let released = Arc::new(AtomicBool::new(false));
    let waiter = {
        let released = released.clone();
        std::thread::spawn(move || {
            let got = two.lock_stream_session("ds/1").unwrap();
            let after_release = released.load(Ordering::SeqCst);
            drop(got);
            // Again, on the connection the pool got back.
            drop(two.lock_stream_session("ds/1").unwrap());
            after_release
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the second holder waits");
    released.store(true, Ordering::SeqCst);
    drop(held);
    assert!(
        waiter.join().unwrap(),
        "it got the lock only after the first let go"
    );
    // The first handle takes it again at once: the other handle's pooled
    // connection let it go (a lock kept by it would make this wait 30 s
    // and fail).
    let t = std::time::Instant::now();
    drop(one.lock_stream_session("ds/1").unwrap());
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// `collect_deleted` removes deleted sessions' events except the prefix
/// their forks read (through a chain of deleted forks too), and their
/// snapshots; live sessions and what forks read are untouched; a second
/// run removes nothing.
fn collecting_deleted_sessions_keeps_what_forks_read(cx: &Ctx) {
    let log = cx.log();
    let write = |id: &str, from: u64, to: u64| {
        let w = log.acquire(id, "t", true).unwrap().writer;
        for i in from..to {
            assert_eq!(w.append(1, 0, &payload(i)).unwrap(), i);
        }
        w.sync().unwrap();
        w.release().unwrap();
    };
    // a (10) <- b at 6 (to 12) <- c at 8 (to 9, live); d (5) alone; f live.
    write("a", 0, 10);
    log.fork("a", 6, "b").unwrap();
    write("b", 6, 12);
    log.fork("b", 8, "c").unwrap();
    write("c", 8, 9);
    write("d", 0, 5);
    write("f", 0, 7);
    log.put_snapshot("d", "p", 5, b"cache").unwrap();
    log.put_snapshot("f", "p", 7, b"cache").unwrap();
    let read_all = |id: &str, len: u64| log.read_range(id, 0..len).unwrap();
    let (c_before, f_before) = (read_all("c", 9), read_all("f", 7));
    assert_eq!(c_before.len(), 9);
    for id in ["a", "b", "d"] {
        log.delete(id).unwrap();
    }
    let r = log.collect_deleted().unwrap();
    let mut sql = cx.sql();
    let rows = |sql: &mut postgres::Client, id: &str| -> Vec<i64> {
        sql.query(
            "SELECT seq FROM turnstone_events WHERE session = $1 ORDER BY seq",
            &[&id],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    assert_eq!(
        rows(&mut sql, "a"),
        (0..6).collect::<Vec<i64>>(),
        "a keeps what b's fork reads"
    );
    assert_eq!(
        rows(&mut sql, "b"),
        vec![6, 7],
        "b keeps what c reads of it"
    );
    assert_eq!(rows(&mut sql, "d"), Vec::<i64>::new());
    assert_eq!(rows(&mut sql, "f").len(), 7);
    assert_eq!(
        r,
        turnstone_pg::PgCollectReport {
            deleted_sessions: 3,
            events_removed: 4 + 4 + 5,
            snapshots_removed: 1,
        }
    );
    assert_eq!(read_all("c", 9), c_before, "the fork reads all it read");
    assert_eq!(read_all("f", 7), f_before);
    assert!(log.snapshot("f", "p").unwrap().is_some());
    // d is emptied for good and not examined again; a and b still are.
    let collected = |sql: &mut postgres::Client| -> Vec<String> {
        sql.query(
            "SELECT id FROM turnstone_sessions WHERE collected ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    assert_eq!(collected(&mut sql), ["d"]);
    let again = log.collect_deleted().unwrap();
    assert_eq!((again.deleted_sessions, again.events_removed), (2, 0));
    // Once the last reader goes, the rest goes too.
    log.delete("c").unwrap();
    let r = log.collect_deleted().unwrap();
    assert_eq!(r.events_removed, 6 + 2 + 1);
    for id in ["a", "b", "c"] {
        assert!(rows(&mut sql, id).is_empty(), "{id}");
    }
    assert_eq!(collected(&mut sql), ["a", "b", "c", "d"]);
    assert_eq!(log.collect_deleted().unwrap().deleted_sessions, 0);
}

fn snapshots_round_trip(cx: &Ctx) {
    let log = cx.log();
    log.create_session("s").unwrap();
    assert_eq!(log.snapshot("s", "proj").unwrap(), None);
    log.put_snapshot("s", "proj", 3, b"abc").unwrap();
    log.put_snapshot("s", "proj", 5, b"abcde").unwrap();
    assert_eq!(
        log.snapshot("s", "proj").unwrap(),
        Some((5, b"abcde".to_vec()))
    );
}

// ---- two worker processes contending for the same sessions

// ---- one test body, both backends (turnstone::backend::EventLog)

fn log_conformance(log: &dyn EventLog) {
    use turnstone::Error;
    let name = log.backend();
    assert_eq!(log.durable_len("a").unwrap(), None, "{name}");
    // Dense seqs, groups, durability.
    assert_eq!(log.append_group("a", &[(3, 0, b"a0")]).unwrap(), 0);
    assert_eq!(
        log.append_group("a", &[(3, 0, b"a1"), (4, 1, b"a2"), (3, 0, b"a3")])
            .unwrap(),
        1
    );
    log.sync_session("a").unwrap();
    assert_eq!(log.durable_len("a").unwrap(), Some(4), "{name}");
    let evs = log.read_range("a", 0..4).unwrap();
    assert_eq!(
        evs.iter()
            .map(|e| (e.seq, e.kind, e.flags, e.payload.clone()))
            .collect::<Vec<_>>(),
        vec![
            (0, 3, 0, b"a0".to_vec()),
            (1, 3, 0, b"a1".to_vec()),
            (2, 4, 1, b"a2".to_vec()),
            (3, 3, 0, b"a3".to_vec())
        ],
        "{name}"
    );
    assert_eq!(log.read_range("a", 1..3).unwrap().len(), 2);
    // Errors, of the same kinds.
    assert!(
        matches!(
            log.read_range("a", 0..5),
            Err(Error::SeqOutOfRange { len: 4, .. })
        ),
        "{name}"
    );
    assert!(
        matches!(log.read_range("zz", 0..0), Err(Error::UnknownSession(_))),
        "{name}"
    );
    log.create_session("b").unwrap();
    assert!(
        matches!(log.create_session("b"), Err(Error::SessionExists(_))),
        "{name}"
    );
    assert_eq!(log.durable_len("b").unwrap(), Some(0));
    // Forks by reference, and a fork of a fork.
    assert!(
        matches!(log.fork("a", 5, "f"), Err(Error::SeqOutOfRange { .. })),
        "{name}"
    );
    log.fork("a", 2, "f").unwrap();
    assert_eq!(log.parent("f").unwrap(), Some(("a".to_string(), 2)));
    assert_eq!(log.parent("a").unwrap(), None);
    assert_eq!(log.append_group("f", &[(5, 0, b"f2")]).unwrap(), 2);
    log.sync_session("f").unwrap();
    log.fork("f", 3, "g").unwrap();
    assert_eq!(log.append_group("g", &[(5, 0, b"g3")]).unwrap(), 3);
    log.sync_session("g").unwrap();
    let g: Vec<Vec<u8>> = log
        .read_range("g", 0..4)
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect();
    assert_eq!(
        g,
        vec![
            b"a0".to_vec(),
            b"a1".to_vec(),
            b"f2".to_vec(),
            b"g3".to_vec()
        ],
        "{name}"
    );
    // a goes on; its forks do not see it.
    log.append_group("a", &[(3, 0, b"a4")]).unwrap();
    log.sync_session("a").unwrap();
    assert_eq!(log.durable_len("f").unwrap(), Some(3));
    assert_eq!(
        log.sessions().unwrap(),
        vec!["a".to_string(), "b".into(), "f".into(), "g".into()],
        "{name}"
    );
}

fn event_log_conformance_embedded(_cx: &Ctx) {
    let dir = tempfile::tempdir().unwrap();
    let store = turnstone::Store::open(dir.path()).unwrap();
    log_conformance(&store);
    store.close().unwrap();
}

fn event_log_conformance_postgres(cx: &Ctx) {
    let log = turnstone_pg::PgEventLog::new(cx.log(), "test");
    log_conformance(&log);
    // A second owner cannot write a leased session: a typed error, and
    // nothing of it lands.
    let other = turnstone_pg::PgEventLog::new(cx.log(), "other");
    match other.append_group("a", &[(1, 0, b"x")]) {
        Err(turnstone::Error::Fenced { .. }) => {}
        r => panic!("a second owner wrote a leased session: {r:?}"),
    }
    assert_eq!(log.durable_len("a").unwrap(), Some(5));
}

/// An idle writer keeps its session while its process lives (the renewer),
/// and loses it once the process stops renewing.
fn a_live_idle_writer_keeps_its_lease(cx: &Ctx) {
    // A TTL long enough that a renewer thread delayed by a loaded machine
    // (CI shares two cores) still renews in time: it renews every third.
    let short = PgOptions {
        lease_ttl: Duration::from_millis(1000),
        ..PgOptions::default()
    };
    let a_log = cx.log_with(short.clone());
    let b_log = cx.log_with(short);
    let a = a_log.acquire("s", "a", true).unwrap().writer;
    a.append(1, 0, b"a0").unwrap();
    a.sync().unwrap();
    std::thread::sleep(Duration::from_millis(2500)); // 2.5 TTLs, idle
    assert!(matches!(
        b_log.acquire("s", "b", false),
        Err(PgError::LeaseHeld { .. })
    ));
    a.append(1, 0, b"a1").unwrap();
    a.sync().unwrap();
    // a's log closes (its renewer stops): b gets the session after a TTL.
    a_log.close();
    std::thread::sleep(Duration::from_millis(1300));
    let b = b_log.acquire("s", "b", false).unwrap();
    assert_eq!(b.previous_owner.as_deref(), Some("a"));
    assert_eq!(b.writer.len(), 2);
}

#[path = "pg/sessions.rs"]
mod sessions;

#[path = "pg/asynchronous.rs"]
mod asynchronous;
#[path = "pg/follow.rs"]
mod follow;
#[path = "pg/processes.rs"]
mod processes;

type TestFn = fn(&Ctx);

fn main() {
    if let Ok(spec) = std::env::var(processes::WORKER_ENV) {
        processes::worker(&spec);
        return;
    }
    let tests: &[(&str, TestFn, bool)] = &[
        (
            "collecting_deleted_sessions_keeps_what_forks_read",
            collecting_deleted_sessions_keeps_what_forks_read,
            false,
        ),
        (
            "a_session_lock_excludes_other_holders_until_dropped",
            a_session_lock_excludes_other_holders_until_dropped,
            false,
        ),
        (
            "schema_is_created_once_and_a_newer_one_is_refused",
            schema_is_created_once_and_a_newer_one_is_refused,
            false,
        ),
        (
            "appends_are_dense_durable_and_read_back",
            appends_are_dense_durable_and_read_back,
            false,
        ),
        (
            "concurrent_writers_share_commits",
            concurrent_writers_share_commits,
            false,
        ),
        (
            "a_writer_whose_lease_was_taken_over_is_fenced_and_writes_nothing",
            a_writer_whose_lease_was_taken_over_is_fenced_and_writes_nothing,
            false,
        ),
        (
            "a_live_idle_writer_keeps_its_lease",
            a_live_idle_writer_keeps_its_lease,
            false,
        ),
        (
            "stale_and_fresh_writers_in_one_batch",
            stale_and_fresh_writers_in_one_batch,
            false,
        ),
        (
            "sync_reports_committed_events_of_a_closed_writer",
            sync_reports_committed_events_of_a_closed_writer,
            false,
        ),
        (
            "forks_read_their_parents_events_even_after_the_parent_is_deleted",
            forks_read_their_parents_events_even_after_the_parent_is_deleted,
            false,
        ),
        (
            "a_subscriber_is_woken_by_commits",
            follow::a_subscriber_is_woken_by_commits,
            false,
        ),
        (
            "a_watcher_wakes_when_the_session_grows",
            follow::a_watcher_wakes_when_the_session_grows,
            false,
        ),
        (
            "many_followers_share_one_listening_connection",
            follow::many_followers_share_one_listening_connection,
            false,
        ),
        (
            "dropping_the_last_handle_closes_the_log",
            follow::dropping_the_last_handle_closes_the_log,
            false,
        ),
        (
            "a_follower_far_behind_catches_up_in_order",
            follow::a_follower_far_behind_catches_up_in_order,
            false,
        ),
        ("snapshots_round_trip", snapshots_round_trip, false),
        (
            "event_log_conformance_embedded",
            event_log_conformance_embedded,
            false,
        ),
        (
            "event_log_conformance_postgres",
            event_log_conformance_postgres,
            false,
        ),
        (
            "an_async_flush_waits_without_a_thread",
            asynchronous::an_async_flush_waits_without_a_thread,
            false,
        ),
        (
            "an_async_follower_waits_without_a_thread_and_loses_nothing_when_cancelled",
            asynchronous::an_async_follower_waits_without_a_thread_and_loses_nothing_when_cancelled,
            false,
        ),
        (
            "session_layer_on_both_backends",
            sessions::session_layer_on_both_backends,
            false,
        ),
        (
            "history_over_one_batch_on_both_backends",
            sessions::history_over_one_batch_on_both_backends,
            false,
        ),
        (
            "search_and_catalog_on_both_backends",
            sessions::search_and_catalog_on_both_backends,
            false,
        ),
        (
            "tools_and_views_on_both_backends",
            sessions::tools_and_views_on_both_backends,
            false,
        ),
        (
            "random_histories_agree_on_both_backends",
            sessions::random_histories_agree_on_both_backends,
            false,
        ),
        (
            "search_finds_text_across_sessions_and_along_a_fork_chain",
            processes::search_finds_text_across_sessions_and_along_a_fork_chain,
            false,
        ),
        (
            "a_version_1_database_is_migrated_in_place",
            processes::a_version_1_database_is_migrated_in_place,
            false,
        ),
        (
            "two_worker_processes_never_interleave_and_lose_nothing_acknowledged",
            processes::two_worker_processes_never_interleave_and_lose_nothing_acknowledged,
            false,
        ),
        (
            "a_database_crash_under_load_loses_nothing_acknowledged",
            processes::a_database_crash_under_load_loses_nothing_acknowledged,
            true,
        ),
    ];
    server::run_tests("turnstone_test", tests, |f, url, server| {
        f(&Ctx {
            server: server.clone(),
            url,
        })
    });
}
