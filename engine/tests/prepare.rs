//! Segments prepared ahead of need (`Options::prepare_segments`, FORMAT.md
//! §6.2 rule 7): a background thread writes a free file of zeros when the
//! writer rolls (or once the segment an open found is a quarter full) while
//! its batches are small, and the writer's next segment is made from it. On
//! the real file system: every event reads back after reopen, the walk
//! finds no damage, an unfinished preparation is removed at open, a
//! prepared file of another length is removed, one of the segment length is
//! used, and nothing is prepared when the option is off, when the store
//! never fills a quarter of a segment, or when batches are large. Kill -9
//! during a preparation is covered by `kill9.rs` (default options).

mod common;

use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

use common::payload_for;
use turnstone::{Options, Store};

const SEGMENT: u32 = 256 * 1024;
const PREPARED: &str = "0000000000.tseg.free";
const PREPARED_TMP: &str = "0000000000.tseg.free.tmp";

fn opts() -> Options {
    Options {
        segment_bytes: SEGMENT,
        ..Default::default()
    }
}

/// Append `n` events of `len` bytes to `name` from `from`, each synced.
fn append(store: &Store, name: &str, from: u64, n: u64, len: usize) {
    for seq in from..from + n {
        let a = store
            .append(name, 1, 0, &payload_for(name, seq, len))
            .expect("append");
        assert_eq!(a.seq.0, seq);
        store.wait_durable(a.end).expect("durable");
    }
}

fn check(store: &Store, name: &str, n: u64, len: usize) {
    let events = store.read_range(name, 0..n).expect("read");
    assert_eq!(events.len() as u64, n);
    for e in events {
        assert_eq!(
            e.payload,
            payload_for(name, e.seq.0, len),
            "seq {}",
            e.seq.0
        );
    }
}

/// Wait (bounded) until the preparer has finished `files` files.
fn wait_prepared(store: &Store, files: u64) {
    let start = Instant::now();
    while store.stats().prepared_files < files {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no prepared file after 20 s: {:?}",
            store.stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A closed store of 40 events of session "a" (over a quarter of its
/// first segment) whose preparer finished a file.
fn store_with_a_prepared_file() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    append(&store, "a", 0, 40, 2000);
    wait_prepared(&store, 1);
    store.close().unwrap();
    dir
}

fn walk_clean(dir: &Path) {
    let summary = turnstone::inspect::walk(dir, |_| ControlFlow::Continue(())).expect("walk");
    assert_eq!(summary.corruptions, 0, "{summary:?}");
    assert_eq!(summary.torn_tails, 0, "{summary:?}");
    assert!(summary.clean_close, "{summary:?}");
}

#[test]
fn later_segments_are_made_from_prepared_files_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    // Each round fills a little over a quarter of a segment, then waits for
    // the preparer (asked at that quarter of the first segment, then at each
    // roll), so every roll finds a prepared file.
    let mut n = 0;
    for round in 1..=5u64 {
        append(&store, "a", n, 40, 2000);
        n += 40;
        wait_prepared(&store, round);
        append(&store, "a", n, 90, 2000);
        n += 90;
    }
    let st = store.stats();
    assert!(st.segments_created >= 4, "{st:?}");
    assert!(st.segments_recycled >= 4, "{st:?}");
    assert_eq!(st.prepare_errors, 0, "{st:?}");
    assert_eq!(st.prepared_bytes, st.prepared_files * u64::from(SEGMENT));
    // The flusher wrote no zeros ahead in a prepared segment: only the
    // 32-byte marker after each batch there.
    check(&store, "a", n, 2000);
    store.close().unwrap();
    walk_clean(dir.path());

    let store = Store::open_with(dir.path(), opts()).unwrap();
    assert!(store.recovery_report().problems.is_empty());
    check(&store, "a", n, 2000);
    store.close().unwrap();
}

#[test]
fn nothing_is_prepared_when_off_or_for_a_small_store() {
    for (o, events) in [
        (
            Options {
                prepare_segments: false,
                ..opts()
            },
            400,
        ),
        // 20 × ~2 KB: under a quarter of the segment.
        (opts(), 20),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(dir.path(), o).unwrap();
        append(&store, "a", 0, events, 2000);
        // Time for a preparer that was asked to finish.
        std::thread::sleep(Duration::from_millis(200));
        let st = store.stats();
        assert_eq!(st.prepared_files, 0, "{st:?}");
        assert_eq!(st.segments_recycled, 0, "{st:?}");
        store.close().unwrap();
        assert!(!dir.path().join(PREPARED).exists());
        check(
            &Store::open_with(dir.path(), opts()).unwrap(),
            "a",
            events,
            2000,
        );
    }
}

#[test]
fn open_removes_an_unfinished_preparation_and_a_file_of_another_length() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    append(&store, "a", 0, 10, 500);
    store.close().unwrap();
    // What a power cut during a preparation leaves, and a prepared file
    // from a run with another segment size.
    std::fs::write(dir.path().join(PREPARED_TMP), vec![0u8; 4096]).unwrap();
    std::fs::write(dir.path().join(PREPARED), vec![0u8; 8192]).unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    assert!(store.recovery_report().problems.is_empty());
    assert!(!dir.path().join(PREPARED_TMP).exists());
    assert!(!dir.path().join(PREPARED).exists());
    check(&store, "a", 10, 500);
    store.close().unwrap();
}

#[test]
fn a_prepared_file_left_by_an_earlier_run_becomes_the_next_segment() {
    let dir = store_with_a_prepared_file();
    let len = std::fs::metadata(dir.path().join(PREPARED)).unwrap().len();
    assert_eq!(len, u64::from(SEGMENT));

    // The next run uses it at its first roll: the open kept it, and this
    // run's preparer was not asked before (under a quarter of the segment
    // it opened with).
    let store = Store::open_with(dir.path(), opts()).unwrap();
    append(&store, "a", 40, 100, 2000);
    let st = store.stats();
    assert!(st.segments_created >= 1, "{st:?}");
    assert!(st.segments_recycled >= 1, "{st:?}");
    check(&store, "a", 140, 2000);
    store.close().unwrap();
    walk_clean(dir.path());
    let store = Store::open_with(dir.path(), opts()).unwrap();
    check(&store, "a", 140, 2000);
    store.close().unwrap();
}

#[test]
fn a_read_only_open_leaves_a_prepared_file_alone() {
    let dir = store_with_a_prepared_file();
    let ro = Store::open_with(
        dir.path(),
        Options {
            read_only: true,
            ..opts()
        },
    )
    .unwrap();
    check(&ro, "a", 40, 2000);
    drop(ro);
    assert!(dir.path().join(PREPARED).exists());
}

/// Batches of ~200 KB amortise an unwritten extent's journal commit
/// themselves: the writer does not ask for prepared files (the rule zero
/// extension follows), so the device does not write each byte twice.
#[test]
fn large_batches_do_not_ask_for_prepared_files() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        segment_bytes: 16 << 20,
        ..Default::default()
    };
    let store = Store::open_with(dir.path(), o.clone()).unwrap();
    // Two rolls, each batch one 200 KB event.
    append(&store, "big", 0, 180, 200_000);
    std::thread::sleep(Duration::from_millis(200));
    let st = store.stats();
    assert!(st.segments_created >= 2, "{st:?}");
    assert_eq!(st.prepared_files, 0, "{st:?}");
    assert_eq!(st.segments_recycled, 0, "{st:?}");
    store.close().unwrap();
    assert!(!dir.path().join(PREPARED).exists());
    check(
        &Store::open_with(dir.path(), o).unwrap(),
        "big",
        180,
        200_000,
    );
}

/// A failed preparation is counted and explained (the step and the file),
/// and costs nothing else: the writer creates its next segment itself.
/// Here a directory sits under the temporary name, so the preparer cannot
/// remove it.
#[test]
fn a_failed_preparation_is_counted_and_explained() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    assert_eq!(store.last_prepare_error(), None);
    std::fs::create_dir(tmp.path().join(PREPARED_TMP)).unwrap();
    // Past a quarter of the first segment (the writer asks), then rolls.
    append(&store, "s", 0, 300, 1000);
    let start = Instant::now();
    while store.stats().prepare_errors == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no failure seen");
        std::thread::sleep(Duration::from_millis(5));
    }
    let err = store.last_prepare_error().expect("a message");
    assert!(err.contains("remove an unfinished prepared file"), "{err}");
    assert!(err.contains(PREPARED_TMP), "{err}");
    assert_eq!(store.stats().prepared_files, 0);
    assert!(
        store.durable_pos().segment().0 > 1,
        "the writer rolled anyway"
    );
    check(&store, "s", 300, 1000);
    drop(store);
    std::fs::remove_dir(tmp.path().join(PREPARED_TMP)).unwrap();
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    check(&store, "s", 300, 1000);
}
