//! Following a session live (`Store::subscribe`) and waiting for durability
//! without a thread (`Store::wait_durable_async`): subscribers see every
//! durable event exactly once, in order, never an event that is not durable,
//! and cost the writer no fdatasync.

use std::sync::Arc;
use std::time::Duration;

use turnstone::{Options, Store, FOLLOW_POLL};

fn open(dir: &std::path::Path) -> Arc<Store> {
    Arc::new(Store::open(dir).unwrap())
}

fn payload(i: u64) -> Vec<u8> {
    format!("event-{i}").into_bytes()
}

fn big(i: u64) -> Vec<u8> {
    let mut p = payload(i);
    p.resize(p.len() + 300, b'.');
    p
}

/// The writer: `rounds` rounds of `per` appends then one sync, so that
/// without anyone else asking, exactly one fdatasync per round happens.
fn write_rounds(store: &Store, session: &str, rounds: u64, per: u64) {
    for r in 0..rounds {
        for j in 0..per {
            store.append(session, 1, 0, &payload(r * per + j)).unwrap();
        }
        store.sync().unwrap();
        // Let subscribers run between rounds (they must still ask for nothing).
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn syncs_for(subscribers: usize) -> (u64, Vec<Vec<u64>>) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_session("s").unwrap();
    store.sync().unwrap();
    let before = store.stats().syncs;
    let (rounds, per) = (60, 10);
    let total = rounds * per;
    let handles: Vec<_> = (0..subscribers)
        .map(|_| {
            let sub = store.subscribe("s", 0).unwrap();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                for ev in sub {
                    let ev = ev.unwrap();
                    assert_eq!(ev.payload, payload(ev.seq.0), "payload of seq {}", ev.seq.0);
                    seen.push(ev.seq.0);
                    if seen.len() as u64 == total {
                        break;
                    }
                }
                seen
            })
        })
        .collect();
    write_rounds(&store, "s", rounds, per);
    let syncs = store.stats().syncs - before;
    let seen = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (syncs, seen)
}

#[test]
fn eight_subscribers_see_every_durable_event_once_and_cost_no_fdatasync() {
    let (alone, _) = syncs_for(0);
    let (with, seen) = syncs_for(8);
    assert_eq!(alone, 60, "one fdatasync per round without subscribers");
    assert_eq!(
        with, alone,
        "subscribers changed the writer's fdatasync count"
    );
    assert_eq!(seen.len(), 8);
    for (i, s) in seen.iter().enumerate() {
        let want: Vec<u64> = (0..600).collect();
        assert_eq!(s, &want, "subscriber {i}: every event once, in seq order");
    }
}

#[test]
fn events_appear_only_once_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append("s", 1, 0, b"a").unwrap();
    store.sync().unwrap();
    let mut sub = store.subscribe("s", 0).unwrap();
    assert_eq!(sub.try_next().unwrap().unwrap().payload, b"a");
    store.append("s", 1, 0, b"b").unwrap();
    // Appended, not durable: a subscriber must not see it, and asking must
    // not make it durable.
    assert!(sub.try_next().unwrap().is_none());
    assert!(sub.try_next().unwrap().is_none());
    assert_eq!(
        store.session_meta("s").unwrap().durable_len,
        1,
        "the subscriber caused a flush"
    );
    store.sync().unwrap();
    let ev = sub.try_next().unwrap().unwrap();
    assert_eq!((ev.seq.0, ev.payload.as_slice()), (1, &b"b"[..]));
    assert_eq!(sub.next_seq(), 2);
}

#[test]
fn resumes_from_any_seq_including_a_forks_inherited_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for i in 0..10 {
        store.append("parent", 1, 0, &payload(i)).unwrap();
    }
    store.fork("parent", 6, "child").unwrap();
    for i in 6..9 {
        store.append("child", 1, 0, &payload(100 + i)).unwrap();
    }
    store.sync().unwrap();
    let want = |from: u64| -> Vec<(u64, Vec<u8>)> {
        (from..9)
            .map(|s| (s, if s < 6 { payload(s) } else { payload(100 + s) }))
            .collect()
    };
    for from in [0, 3, 5, 6, 8, 9] {
        let mut sub = store.subscribe("child", from).unwrap();
        let mut got = Vec::new();
        while let Some(ev) = sub.try_next().unwrap() {
            got.push((ev.seq.0, ev.payload));
        }
        assert_eq!(got, want(from), "child from seq {from}");
    }
    // The parent's events after the fork point are not the child's.
    let mut sub = store.subscribe("child", 0).unwrap();
    let n = std::iter::from_fn(|| sub.try_next().unwrap()).count();
    assert_eq!(n, 9);
}

#[test]
fn unknown_session_is_refused_and_close_ends_subscriptions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(matches!(
        store.subscribe("nope", 0),
        Err(turnstone::Error::UnknownSession(s)) if s == "nope"
    ));
    store.append("s", 1, 0, b"a").unwrap();
    store.sync().unwrap();
    let sub = store.subscribe("s", 0).unwrap();
    let follower = std::thread::spawn(move || sub.map(|e| e.unwrap().seq.0).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(50));
    store.close().unwrap();
    assert_eq!(
        follower.join().unwrap(),
        vec![0],
        "the subscription ends at close"
    );
}

#[test]
fn a_read_only_store_follows_what_another_writer_appends() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments: the follower must cross segment rolls.
    let writer = Arc::new(
        Store::open_with(
            dir.path(),
            Options {
                segment_bytes: 64 * 1024,
                ..Options::default()
            },
        )
        .unwrap(),
    );
    for i in 0..5 {
        writer.append("s", 1, 0, &big(i)).unwrap();
    }
    writer.sync().unwrap();
    let ro = Store::open_with(
        dir.path(),
        Options {
            read_only: true,
            ..Options::default()
        },
    )
    .unwrap();
    let (before, rolls_before) = (writer.stats().syncs, writer.stats().segments_created);
    let total = 5 + 40 * 25;
    let subs: Vec<_> = (0..3)
        .map(|k| {
            let sub = ro.subscribe("s", k).unwrap();
            std::thread::spawn(move || {
                sub.take(total as usize - k as usize)
                    .map(|e| {
                        let e = e.unwrap();
                        assert_eq!(e.payload, big(e.seq.0));
                        e.seq.0
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    // A session the read-only store has never seen appears too.
    for r in 0..40u64 {
        for j in 0..25u64 {
            writer.append("s", 1, 0, &big(5 + r * 25 + j)).unwrap();
        }
        writer.append("later", 1, 0, b"x").unwrap();
        writer.sync().unwrap();
    }
    // One fdatasync per round, plus one per segment roll (the batch splits).
    let rolls = writer.stats().segments_created - rolls_before;
    assert!(rolls > 0, "the test should cross a segment roll");
    assert_eq!(
        writer.stats().syncs - before,
        40 + rolls,
        "followers cost the writer fdatasyncs"
    );
    for (k, h) in subs.into_iter().enumerate() {
        let want: Vec<u64> = (k as u64..total).collect();
        assert_eq!(h.join().unwrap(), want, "read-only subscriber from {k}");
    }
    assert!(ro.refresh().is_ok());
    assert_eq!(ro.session_len("later"), Some(40));
    assert_eq!(ro.read("later", 39).unwrap().payload, b"x");
    // Waiting for more, a read-only subscription ends when its store goes.
    let sub = ro.subscribe("later", 0).unwrap();
    let waiting = std::thread::spawn(move || sub.count());
    std::thread::sleep(FOLLOW_POLL * 3);
    drop(ro);
    assert_eq!(waiting.join().unwrap(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tasks_wait_for_durability_on_two_threads() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut tasks = Vec::new();
    for t in 0..1000u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("s{t}");
            for turn in 0..3u64 {
                let a = store.append(&name, 1, 0, &payload(turn)).unwrap();
                store.wait_durable_async(a.end).await.unwrap();
                assert!(store.durable_pos() >= a.end);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let st = store.stats();
    assert_eq!(st.appends, 3000);
    // Waits were shared: far fewer fdatasyncs than waits.
    assert!(st.syncs < 3000, "{} fdatasyncs for 3000 waits", st.syncs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_subscribers_follow_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_session("s").unwrap();
    let mut followers = Vec::new();
    for _ in 0..8 {
        let mut sub = store.subscribe("s", 0).unwrap();
        followers.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            while let Some(ev) = sub.next_async().await {
                seqs.push(ev.unwrap().seq.0);
                if seqs.len() == 200 {
                    break;
                }
            }
            seqs
        }));
    }
    let w = store.clone();
    tokio::task::spawn_blocking(move || write_rounds(&w, "s", 20, 10))
        .await
        .unwrap();
    for f in followers {
        assert_eq!(f.await.unwrap(), (0..200).collect::<Vec<u64>>());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_subscription_ends_when_the_store_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.append("s", 1, 0, b"a").unwrap();
    store.sync().unwrap();
    let mut sub = store.subscribe("s", 0).unwrap();
    let follower = tokio::spawn(async move {
        let mut n = 0;
        while let Some(ev) = sub.next_async().await {
            ev.unwrap();
            n += 1;
        }
        n
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(store);
    let n = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("the subscription ended")
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn shutdown_through_a_shared_handle_closes_and_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let other = store.clone(); // a session or a binding still holds it
    store.append("s", 1, 0, b"a").unwrap();
    let sub = store.subscribe("s", 0).unwrap();
    let follower = std::thread::spawn(move || sub.map(|e| e.unwrap().seq.0).collect::<Vec<_>>());
    store.shutdown().unwrap();
    assert!(matches!(
        other.append("s", 1, 0, b"b"),
        Err(turnstone::Error::Closed)
    ));
    assert_eq!(
        other.read("s", 0).unwrap().payload,
        b"a",
        "durable data stays readable"
    );
    assert_eq!(
        follower.join().unwrap(),
        vec![0],
        "subscriptions end at shutdown"
    );
    store.shutdown().unwrap(); // again: nothing to do
                               // The lock is free although `other` is alive.
    let reopened = Store::open(dir.path()).unwrap();
    assert_eq!(reopened.session_len("s"), Some(1));
    assert!(reopened.recovery_report().problems.is_empty());
}

/// A waker that counts its wake-ups.
struct Counter(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn woken(c: &Counter) -> usize {
    c.0.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn a_session_follower_is_woken_only_by_its_own_sessions_batches() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_session("a").unwrap();
    store.create_session("b").unwrap();
    store.sync().unwrap();
    let counts: Vec<Arc<Counter>> = (0..2)
        .map(|_| Arc::new(Counter(Default::default())))
        .collect();
    let mut next = store.subscribe("b", 0).unwrap();
    let mut ready = store.subscribe("b", 0).unwrap();
    {
        // Both kinds of wait leave their waker for session b.
        let w0 = std::task::Waker::from(counts[0].clone());
        let w1 = std::task::Waker::from(counts[1].clone());
        let mut f0 = std::pin::pin!(next.next_async());
        assert!(matches!(
            f0.as_mut().poll(&mut Context::from_waker(&w0)),
            Poll::Pending
        ));
        let mut f1 = std::pin::pin!(ready.ready_async());
        assert!(matches!(
            f1.as_mut().poll(&mut Context::from_waker(&w1)),
            Poll::Pending
        ));
        // Ten fdatasyncs of batches holding only session a wake neither.
        for i in 0..10 {
            store.append("a", 1, 0, &payload(i)).unwrap();
            store.sync().unwrap();
        }
        assert!(store.stats().syncs >= 10);
        assert_eq!((woken(&counts[0]), woken(&counts[1])), (0, 0));
        // A batch holding session b wakes both, and both are then ready.
        let b = store.append("b", 1, 0, b"for b").unwrap();
        store.wait_durable(b.end).unwrap();
        assert_eq!((woken(&counts[0]), woken(&counts[1])), (1, 1));
        match f0.as_mut().poll(&mut Context::from_waker(&w0)) {
            Poll::Ready(Some(Ok(ev))) => assert_eq!(ev.payload, b"for b"),
            other => panic!("next_async after the wake-up: {other:?}"),
        }
        assert!(matches!(
            f1.as_mut().poll(&mut Context::from_waker(&w1)),
            Poll::Ready(true)
        ));
    }
    // ready_async read nothing: the event is still next.
    assert_eq!(ready.next_seq(), 0);
    assert_eq!(ready.try_next().unwrap().unwrap().payload, b"for b");
    // Closing the store wakes a waiting follower, which then ends.
    let c = Arc::new(Counter(Default::default()));
    let w = std::task::Waker::from(c.clone());
    {
        let mut f = std::pin::pin!(ready.ready_async());
        assert!(matches!(
            f.as_mut().poll(&mut Context::from_waker(&w)),
            Poll::Pending
        ));
        store.shutdown().unwrap();
        assert_eq!(woken(&c), 1);
        assert!(matches!(
            f.as_mut().poll(&mut Context::from_waker(&w)),
            Poll::Ready(false)
        ));
    }
}

/// The store's follower through the trait every log shares
/// (`EventLog::follow`): a timed wait with nothing durable returns
/// `Ok(None)` when the time is up, a durable event comes at once, an
/// appended but not durable one never, and a closed store ends it with
/// `Error::Closed`.
#[test]
fn the_stores_follower_through_the_log_trait_waits_with_a_timeout() {
    use turnstone::backend::EventLog;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append("s", 1, 0, &payload(0)).unwrap();
    store.sync().unwrap();
    let mut f = store.follow("s", 0).unwrap();
    let e = f.next_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!((e.seq, e.payload), (0, payload(0)));
    let t = std::time::Instant::now();
    assert!(f
        .next_timeout(Duration::from_millis(100))
        .unwrap()
        .is_none());
    assert!(t.elapsed() >= Duration::from_millis(100));
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            store.append("s", 1, 0, &payload(1)).unwrap();
            store.sync().unwrap();
        })
    };
    let e = f.next_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!((e.seq, e.payload), (1, payload(1)));
    writer.join().unwrap();
    assert!(f.next_timeout(Duration::ZERO).unwrap().is_none());
    store.shutdown().unwrap();
    assert!(matches!(
        f.next_timeout(Duration::from_secs(5)),
        Err(turnstone::Error::Closed)
    ));
    assert!(store.follow("nope", 0).err().unwrap().is_not_found());
}
