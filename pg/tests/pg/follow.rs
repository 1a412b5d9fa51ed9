//! Following a session on PostgreSQL: subscribers and watchers woken by
//! commits, one listening connection for many followers, a follower far
//! behind, the last handle closing the log.

use super::*;

pub(super) fn a_subscriber_is_woken_by_commits(cx: &Ctx) {
    let log = cx.log();
    log.create_session("s").unwrap();
    let mut sub = log.subscribe("s", 0).unwrap();
    assert_eq!(sub.next_timeout(Duration::from_millis(50)).unwrap(), None);
    let writer_log = log.clone();
    let t = std::thread::spawn(move || {
        let w = writer_log.acquire("s", "w", false).unwrap().writer;
        for i in 0..20 {
            w.append(1, 0, &payload(i)).unwrap();
            w.sync().unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    for i in 0..20u64 {
        let e = sub
            .next_timeout(Duration::from_secs(10))
            .unwrap()
            .unwrap_or_else(|| panic!("event {i} never came"));
        assert_eq!((e.seq, e.payload), (i, payload(i)));
    }
    t.join().unwrap();
    assert_eq!(sub.next_timeout(Duration::from_millis(50)).unwrap(), None);
}

/// Poll `f` until it is ready, parking this thread between polls (woken
/// by the waker it was given), for at most `limit`.
pub(super) fn block_on_poll<T>(
    limit: Duration,
    mut f: impl FnMut(&mut std::task::Context<'_>) -> std::task::Poll<T>,
) -> Option<T> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let std::task::Poll::Ready(v) = f(&mut cx) {
            return Some(v);
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::park_timeout(deadline - now);
    }
}

pub(super) fn a_watcher_wakes_when_the_session_grows(cx: &Ctx) {
    let log = cx.log();
    log.create_session("w").unwrap();
    let mut watch = log.watch("w", 0).unwrap();
    assert!(
        block_on_poll(Duration::from_millis(100), |c| watch.poll_grown(c)).is_none(),
        "nothing committed yet"
    );
    // Another process's commits wake it (LISTEN/NOTIFY), with the length.
    let other = cx.log();
    let w = other.acquire("w", "other", false).unwrap().writer;
    for i in 0..3 {
        w.append(1, 0, &payload(i)).unwrap();
    }
    w.sync().unwrap();
    // The three may commit in one transaction or several: each commit's
    // notification wakes it with the length then; told what it saw, it
    // waits for the next, until the end.
    let mut wakes = 0;
    loop {
        let grown = block_on_poll(Duration::from_secs(10), |c| watch.poll_grown(c))
            .expect("woken by a commit")
            .unwrap();
        wakes += 1;
        assert!((1..=3).contains(&grown), "grown to {grown}");
        if grown == 3 {
            break;
        }
        watch.seen(grown);
    }
    assert!(wakes <= 3, "{wakes} wake-ups for 3 commits at most");
    // Told what was read, it waits for more than that.
    watch.seen(3);
    assert!(block_on_poll(Duration::from_millis(100), |c| watch.poll_grown(c)).is_none());
    w.append(1, 0, &payload(3)).unwrap();
    w.sync().unwrap();
    let grown = block_on_poll(Duration::from_secs(10), |c| watch.poll_grown(c))
        .expect("woken by the second commit")
        .unwrap();
    assert_eq!(grown, 4);
    // A watch started at the end of what is committed waits; one started
    // before it is ready at once.
    let mut late = log.watch("w", 4).unwrap();
    assert!(block_on_poll(Duration::from_millis(100), |c| late.poll_grown(c)).is_none());
    let mut early = log.watch("w", 1).unwrap();
    assert_eq!(
        block_on_poll(Duration::from_secs(1), |c| early.poll_grown(c))
            .unwrap()
            .unwrap(),
        4
    );
    // Closing the log ends it.
    log.close();
    let end = block_on_poll(Duration::from_secs(10), |c| late.poll_grown(c)).expect("ended");
    assert!(matches!(end, Err(PgError::Closed)), "{end:?}");
}

/// Connections this test's database has open.
pub(super) fn connections(cx: &Ctx) -> i64 {
    let mut sql = cx.sql();
    let n: i64 = sql
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    n - 1 // this one
}

/// 250 followers (more than the server's 200 connections) share one
/// listening connection: every follower gets its session's events, in
/// order, each once; dropped followers are let go; closing the log ends
/// the rest with `Closed`.
pub(super) fn many_followers_share_one_listening_connection(cx: &Ctx) {
    let log = cx.log();
    let sessions = 25u64;
    for s in 0..sessions {
        log.create_session(&format!("s{s}")).unwrap();
    }
    let before = connections(cx);
    let mut subs: Vec<(u64, turnstone_pg::Subscription)> = (0..250)
        .map(|i| {
            (
                i % sessions,
                log.subscribe(&format!("s{}", i % sessions), 0).unwrap(),
            )
        })
        .collect();
    let grown = connections(cx) - before;
    assert!(grown <= 3, "250 followers opened {grown} connections");
    let writers: Vec<_> = (0..sessions)
        .map(|s| log.acquire(&format!("s{s}"), "w", false).unwrap().writer)
        .collect();
    for round in 0..2u64 {
        for (s, w) in writers.iter().enumerate() {
            for i in 0..3 {
                w.append(1, 0, format!("s{s} e{}", round * 3 + i).as_bytes())
                    .unwrap();
            }
        }
        for w in &writers {
            w.sync().unwrap();
        }
        for (s, sub) in subs.iter_mut() {
            for i in round * 3..round * 3 + 3 {
                let e = sub
                    .next_timeout(Duration::from_secs(20))
                    .unwrap()
                    .unwrap_or_else(|| panic!("s{s}: event {i} never came"));
                assert_eq!((e.seq, e.payload), (i, format!("s{s} e{i}").into_bytes()));
            }
            assert_eq!(sub.next_timeout(Duration::ZERO).unwrap(), None);
            assert_eq!(sub.next_seq(), round * 3 + 3);
        }
        // Half the followers go away before the second round.
        subs.truncate(125);
    }
    assert!(connections(cx) - before <= 3);
    log.close();
    for (s, sub) in subs.iter_mut() {
        match sub.next_timeout(Duration::from_secs(20)) {
            Err(PgError::Closed) => {}
            other => panic!("s{s}: after close: {other:?}"),
        }
    }
}

/// Dropping every handle of a log (its writers and followers included)
/// closes it as `close` does: what was queued is committed, and its
/// threads and connections go.
pub(super) fn dropping_the_last_handle_closes_the_log(cx: &Ctx) {
    let before = connections(cx);
    let log = cx.log();
    let w = log.acquire("s", "w", true).unwrap().writer;
    w.append(1, 0, b"queued").unwrap();
    let mut sub = log.subscribe("s", 0).unwrap();
    assert!(connections(cx) > before);
    drop(log);
    drop(w); // the last handle: its queued event is committed first
             // The follower ends with the log.
    loop {
        match sub.next_timeout(Duration::from_secs(20)) {
            Ok(Some(_)) => continue,
            Err(PgError::Closed) => break,
            other => panic!("after the last handle went: {other:?}"),
        }
    }
    drop(sub);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while connections(cx) > before {
        assert!(
            std::time::Instant::now() < deadline,
            "{} connections left open by a dropped log",
            connections(cx) - before
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let evs = cx.log().read_range("s", 0..1).unwrap();
    assert_eq!(evs[0].payload, b"queued");
}

/// A follower far behind (3000 events, past the read-ahead bound) gets
/// them all in order, as it takes them: the reader stops at the bound and
/// resumes when the follower takes events.
pub(super) fn a_follower_far_behind_catches_up_in_order(cx: &Ctx) {
    let log = cx.log();
    let w = log.acquire("s", "w", true).unwrap().writer;
    for i in 0..3000u64 {
        w.append(1, 0, &payload(i)).unwrap();
    }
    w.sync().unwrap();
    let mut sub = log.subscribe("s", 0).unwrap();
    for i in 0..3000u64 {
        let e = sub
            .next_timeout(Duration::from_secs(20))
            .unwrap()
            .unwrap_or_else(|| panic!("event {i} never came"));
        assert_eq!((e.seq, e.payload), (i, payload(i)));
    }
    assert_eq!(sub.next_timeout(Duration::from_millis(50)).unwrap(), None);
    // From the middle, too.
    let mut sub = log.subscribe("s", 2500).unwrap();
    assert_eq!(
        sub.next_timeout(Duration::from_secs(20))
            .unwrap()
            .unwrap()
            .seq,
        2500
    );
}
