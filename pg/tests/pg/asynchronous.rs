//! Async waits on PostgreSQL hold no thread: `Session::flush_async` is
//! woken by the commit lane that commits its events, and
//! `SessionSubscription::next_async` by the follower's read-ahead. A first
//! poll returns `Pending` at once, even while the commit cannot happen (a
//! test transaction holds the session's row), and the waker is woken when
//! it does. Each poll runs on a helper thread, so a poll that blocks fails
//! the test instead of hanging it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use turnstone::backend::EventLog;
use turnstone::session::*;
use turnstone_pg::PgEventLog;

use super::Ctx;

/// Counts its wakes.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Counter {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    fn wait_for_a_wake(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.count() == 0 {
            assert!(Instant::now() < deadline, "{what}: never woken");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Run `f` on another thread and give back what it returns, or fail if it
/// takes over 10 s (a poll that blocked).
fn on_a_thread<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what}: the poll blocked its thread"))
}

/// Poll `fut` once with `waker`.
fn poll_once<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(waker))
}

pub fn an_async_flush_waits_without_a_thread(cx: &Ctx) {
    let log = Arc::new(PgEventLog::new(cx.log(), "w"));
    let reg = Arc::new(Registry::new());
    let mut s = Session::create(log.clone(), "s", reg).unwrap();
    s.flush().unwrap();
    let before = EventLog::durable_len(&*log, "s").unwrap().unwrap();
    // A transaction holds the session's row: the commit's fence `UPDATE`
    // waits behind it.
    let mut sql = cx.sql();
    let mut hold = sql.transaction().unwrap();
    hold.query(
        "SELECT 1 FROM turnstone_sessions WHERE id = 's' FOR UPDATE",
        &[],
    )
    .unwrap();
    s.append(
        TurnStart {
            turn_id: "t".into(),
        },
        (),
    )
    .unwrap();
    let counter = Arc::new(Counter::default());
    let waker = Waker::from(counter.clone());
    let wait = s.flush_async();
    let (mut wait, first) = on_a_thread("the first poll of flush_async", {
        let waker = waker.clone();
        move || {
            let mut wait = wait;
            let r = poll_once(&mut wait, &waker).is_pending();
            (wait, r)
        }
    });
    assert!(
        first,
        "flush_async was ready while its commit could not run"
    );
    assert_eq!(EventLog::durable_len(&*log, "s").unwrap(), Some(before));
    assert_eq!(counter.count(), 0, "woken before anything was committed");
    hold.commit().unwrap();
    counter.wait_for_a_wake("flush_async after the commit");
    match poll_once(&mut wait, &waker) {
        Poll::Ready(r) => r.unwrap(),
        Poll::Pending => panic!("woken but not ready after the commit"),
    }
    assert_eq!(EventLog::durable_len(&*log, "s").unwrap(), Some(before + 1));
    // Nothing appended since: ready at once.
    assert!(matches!(
        poll_once(&mut s.flush_async(), &waker),
        Poll::Ready(Ok(()))
    ));
    drop(s);
    log.log().close();
}

pub fn an_async_follower_waits_without_a_thread_and_loses_nothing_when_cancelled(cx: &Ctx) {
    let log = Arc::new(PgEventLog::new(cx.log(), "w"));
    let reg = Arc::new(Registry::new());
    let mut s = Session::create(log.clone(), "f", reg.clone()).unwrap();
    s.flush().unwrap();
    let from = EventLog::durable_len(&*log, "f").unwrap().unwrap();
    let sub = subscribe(&*log as &dyn EventLog, "f", reg, from).unwrap();
    let counter = Arc::new(Counter::default());
    let waker = Waker::from(counter.clone());
    // Poll once with nothing to read, then drop the future (a cancelled
    // `select!` arm would).
    let (mut sub, first) = on_a_thread("the first poll of next_async", {
        let waker = waker.clone();
        move || {
            let mut sub = sub;
            let r = {
                let mut next = Box::pin(sub.next_async());
                next.as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_pending()
            };
            (sub, r)
        }
    });
    assert!(first, "next_async was ready with nothing to read");
    s.append(
        TurnStart {
            turn_id: "t".into(),
        },
        (),
    )
    .unwrap();
    s.flush().unwrap();
    counter.wait_for_a_wake("next_async after a commit");
    // The event was not lost with the dropped future.
    let mut next = Box::pin(sub.next_async());
    let ev = match next.as_mut().poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(Some(r)) => r.unwrap(),
        other => panic!(
            "woken but not ready: {:?}",
            other.map(|o| o.map(|r| r.is_ok()))
        ),
    };
    drop(next);
    assert_eq!(ev.seq, from);
    assert!(
        matches!(ev.kind, EventKind::Core(CoreKind::TurnStart)),
        "{ev:?}"
    );
    // Closing the log ends the follower: `None`, and its waiter is woken.
    let counter = Arc::new(Counter::default());
    let waker = Waker::from(counter.clone());
    let mut next = Box::pin(sub.next_async());
    assert!(next
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    drop(s);
    log.log().close();
    counter.wait_for_a_wake("next_async after the log closed");
    assert!(matches!(
        next.as_mut().poll(&mut Context::from_waker(&waker)),
        Poll::Ready(None)
    ));
}
