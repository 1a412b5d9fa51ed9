//! A segment read whole (`log/reader.rs`, `scan_due`): every session of a
//! store written around the page cache (`Options::direct_writes`) read back
//! while writing goes on, and again after reopening. The reader fetches
//! uncached runs by exact reads until they have cost what reading their
//! segment whole would, then reads the segment (the active one: its durable
//! bytes below the run) whole through the page cache; the events read are
//! the ones written, whichever way they were fetched.

mod common;

use common::{direct_io_here, payload_for};
use turnstone::{Options, Store};

const SESSIONS: u64 = 32;

fn opts() -> Options {
    Options {
        segment_bytes: 1 << 20,
        prepare_segments: true,
        direct_writes: true,
        ..Default::default()
    }
}

fn len_of(s: u64, seq: u64) -> usize {
    100 + ((s * 131 + seq * 17) % 29) as usize * 100
}

fn check_all(store: &Store, rounds: u64) {
    for s in 0..SESSIONS {
        let name = format!("s{s}");
        let events = store.read_range(&name, 0..rounds).unwrap();
        assert_eq!(events.len() as u64, rounds, "{name}");
        for e in &events {
            assert_eq!(
                e.payload,
                payload_for(&name, e.seq.0, len_of(s, e.seq.0)),
                "{name} seq {}",
                e.seq.0
            );
        }
    }
}

#[test]
fn every_session_of_a_directly_written_store_reads_back_while_writing_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    if !direct_io_here(tmp.path()) {
        eprintln!("direct writes refused here: skipped");
        return;
    }
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    let mut rounds = 0;
    while rounds < 40 || store.durable_pos().segment().0 < 4 {
        for s in 0..SESSIONS {
            let name = format!("s{s}");
            store
                .append(&name, 1, 0, &payload_for(&name, rounds, len_of(s, rounds)))
                .unwrap();
        }
        store.sync().unwrap();
        rounds += 1;
        if rounds % 6 == 0 {
            check_all(&store, rounds);
        }
    }
    check_all(&store, rounds);
    let stats = store.stats();
    assert!(stats.direct_batches > 0, "{stats:?}");
    assert!(stats.segments_read_whole > 0, "{stats:?}");
    assert!(stats.segment_bytes_read_whole > 0, "{stats:?}");
    drop(store);

    // Cold (what a restart of the machine leaves): every session read
    // back reads the segments whole, each once, far fewer bytes than
    // reading them again and again.
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    assert!(store.recovery_report().problems.is_empty());
    evict(tmp.path());
    check_all(&store, rounds);
    let stats = store.stats();
    let segments = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "tseg")
        })
        .count() as u64;
    assert!(
        stats.segments_read_whole >= segments - 1 && stats.segments_read_whole <= segments + 16,
        "{segments} segments: {stats:?}"
    );
    assert!(
        stats.segment_bytes_read_whole <= segments << 20,
        "{stats:?}"
    );
}

/// Drop the store's segment files from the page cache.
fn evict(dir: &std::path::Path) {
    use std::os::fd::AsRawFd;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "tseg") {
            let f = std::fs::File::open(&path).unwrap();
            // SAFETY: the descriptor is open for the call; the advice only
            // drops clean cached pages of the file, which reads fetch again.
            let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(rc, 0, "{}", path.display());
        }
    }
}
