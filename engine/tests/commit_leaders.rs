//! The commit path with waiting threads leading writes
//! (`Options::flush_in_caller`, commit/queue.rs): one batch in flight
//! whichever thread writes it, no waiter left waiting when threads, tasks
//! and the flusher share the work, and everything acknowledged is there
//! after a reopen.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use turnstone::{Options, Store};

fn open(dir: &std::path::Path, flush_in_caller: bool) -> Store {
    Store::open_with(
        dir,
        Options {
            flush_in_caller,
            // Small segments: rolls (and their checkpoints, written by the
            // flusher beside the leaders) happen during the test.
            segment_bytes: 256 << 10,
            ..Options::default()
        },
    )
    .unwrap()
}

/// A lone thread appending and waiting writes its own batches; with the
/// option off, only the flusher does.
#[test]
fn a_lone_waiter_writes_its_own_batches() {
    for on in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), on);
        for i in 0..50u32 {
            let a = store.append("s", 1, 0, &i.to_le_bytes()).unwrap();
            store.wait_durable(a.end).unwrap();
            assert!(store.durable_pos() >= a.end);
        }
        let st = store.stats();
        if on {
            // The flusher may take a batch now and then (it is woken after
            // a batch when more is wanted), but most are the caller's.
            assert!(st.caller_batches >= 25, "{st:?}");
        } else {
            assert_eq!(st.caller_batches, 0, "{st:?}");
        }
        store.close().unwrap();
    }
}

/// Threads leading writes, tasks waiting without a thread, a sync of the
/// whole log and segment rolls, all at once: every wait returns (a lost
/// wake-up would leave one waiting, and the watchdog fails the test), every
/// acknowledged event is durable when its wait returns, and all of them are
/// there after a reopen.
#[test]
fn threads_tasks_and_the_flusher_share_the_writes_without_a_lost_wake_up() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path(), true));
    let (tx, rx) = mpsc::channel::<(String, u64)>();
    let mut handles = Vec::new();
    const ROUNDS: u64 = 200;
    for t in 0..6 {
        let (store, tx) = (store.clone(), tx.clone());
        handles.push(std::thread::spawn(move || {
            let name = format!("thread-{t}");
            for r in 0..ROUNDS {
                let mut end = None;
                for k in 0..3u64 {
                    let payload = vec![(r * 3 + k) as u8; 100 + (t * 97 + r as usize) % 900];
                    end = Some(store.append(&name, 1, 0, &payload).unwrap().end);
                }
                let end = end.unwrap();
                if r % 50 == 49 {
                    store.sync().unwrap();
                } else {
                    store.wait_durable(end).unwrap();
                }
                assert!(store.durable_pos() >= end, "acknowledged but not durable");
            }
            tx.send((name, ROUNDS * 3)).unwrap();
        }));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for t in 0..4 {
        let (store, tx) = (store.clone(), tx.clone());
        rt.spawn(async move {
            let name = format!("task-{t}");
            for r in 0..ROUNDS {
                let a = store.append(&name, 2, 0, &r.to_le_bytes()).unwrap();
                store.wait_durable_async(a.end).await.unwrap();
                assert!(store.durable_pos() >= a.end, "acknowledged but not durable");
            }
            tx.send((name, ROUNDS)).unwrap();
        });
    }
    drop(tx);
    let mut done = Vec::new();
    for _ in 0..10 {
        let got = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a waiter was left waiting");
        done.push(got);
    }
    for h in handles {
        h.join().unwrap();
    }
    rt.shutdown_timeout(Duration::from_secs(5));
    let st = store.stats();
    assert!(st.caller_batches > 0, "{st:?}");
    assert!(st.segments_created > 0, "{st:?}");
    let store = Arc::try_unwrap(store).unwrap();
    store.close().unwrap();

    let store = open(dir.path(), true);
    for (name, n) in done {
        assert_eq!(store.session_len(&name), Some(n), "{name}");
    }
    store.close().unwrap();
}
