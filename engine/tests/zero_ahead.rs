//! Zero extension on the real file system: several threads append and wait
//! across many segment rolls while the flusher writes zeros past small
//! batches. Every event must read back after reopen, recovery must find a
//! clean end, and an inspection walk must find no damage (no zero over a
//! batch, nothing non-zero after the end of data in a sealed segment). The
//! kill -9 test (`kill9.rs`) runs with zero extension on too (default
//! options, real files).

mod common;

use std::ops::ControlFlow;
use std::sync::Arc;

use turnstone::{Options, Store};

use common::payload_for;

fn opts(zero_ahead_bytes: u32) -> Options {
    Options {
        segment_bytes: (1 << 20) + 4096 * 3 + 40,
        zero_ahead_bytes,
        ..Default::default()
    }
}

#[test]
fn appends_across_rolls_with_zero_extension_read_back_and_walk_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open_with(dir.path(), opts(64 * 1024)).expect("open"));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let name = format!("s{t}");
                for seq in 0..400u64 {
                    let len = if seq % 37 == 0 {
                        30_000
                    } else {
                        50 + (seq as usize * 7) % 900
                    };
                    let a = store
                        .append(&name, 1, 0, &payload_for(&name, seq, len))
                        .expect("append");
                    assert_eq!(a.seq.0, seq);
                    if seq % 5 == 0 {
                        store.wait_durable(a.end).expect("durable");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer thread");
    }
    store.sync().expect("sync");
    let stats = store.stats();
    assert!(stats.segments_created >= 2, "{stats:?}");
    assert!(stats.zero_fill_bytes > 0, "zeros were written: {stats:?}");
    Arc::try_unwrap(store)
        .expect("one owner")
        .close()
        .expect("close");

    let summary =
        turnstone::inspect::walk(dir.path(), |_| ControlFlow::Continue(())).expect("walk");
    assert_eq!(summary.corruptions, 0, "{summary:?}");
    assert_eq!(summary.torn_tails, 0, "{summary:?}");
    assert!(summary.clean_close);

    let store = Store::open_with(dir.path(), opts(64 * 1024)).expect("reopen");
    assert!(store.recovery_report().problems.is_empty());
    for t in 0..4 {
        let name = format!("s{t}");
        let events = store.read_range(&name, 0..400).expect("read");
        assert_eq!(events.len(), 400);
        for e in events {
            let len = if e.seq.0 % 37 == 0 {
                30_000
            } else {
                50 + (e.seq.0 as usize * 7) % 900
            };
            assert_eq!(e.payload, payload_for(&name, e.seq.0, len));
        }
    }
    store.close().expect("close");
}

#[test]
fn zero_extension_is_off_when_asked_or_without_preallocation() {
    for o in [
        opts(0),
        Options {
            preallocate: false,
            ..opts(64 * 1024)
        },
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_with(dir.path(), o).expect("open");
        for seq in 0..50u64 {
            store.append("a", 1, 0, &[7u8; 3000]).expect("append");
            let _ = seq;
        }
        store.sync().expect("sync");
        assert_eq!(store.stats().zero_fill_bytes, 0);
        store.close().expect("close");
    }
}

/// The zeros of zero extension go around the page cache where the file
/// system takes direct writes, and each batch's write runs on to a page
/// boundary so that the next batch never writes part of a page that is not
/// cached (which would read it from the device first). After one small
/// batch in a fresh segment: the batch's last page is cached, the zeros'
/// pages after it are not, and the bytes read back are zeros.
#[test]
fn zero_extension_leaves_its_zeros_out_of_the_page_cache() {
    use turnstone::vfs::{OsVfs, Vfs};
    let dir = tempfile::tempdir().expect("tempdir");
    // Where direct writes are refused (tmpfs, say), the zeros go through
    // the page cache: nothing to check.
    let probe = dir.path().join("probe");
    std::fs::write(&probe, [0u8; 4096]).expect("probe");
    let direct = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok()
    };
    if !direct {
        eprintln!("direct writes refused here: skipped");
        return;
    }
    let store = Store::open_with(
        dir.path(),
        Options {
            zero_ahead_bytes: 1 << 20,
            prepare_segments: false,
            ..Default::default()
        },
    )
    .expect("open");
    let end = store.append("a", 1, 0, &[7u8; 3000]).expect("append").end;
    store.sync().expect("sync");
    assert!(store.stats().zero_fill_bytes > 0, "{:?}", store.stats());
    let path = dir.path().join(format!("{:010}.tseg", end.segment().0));
    let file = OsVfs.open(&path, false).expect("open segment");
    // The batch ends in the first page (header, batch, one frame).
    let last = end.offset() as u64 / 4096 * 4096;
    assert!(file.is_cached(last, 4096), "the batch's last page");
    assert!(
        !file.is_cached(last + 4096, 4096),
        "the page after the batch's was written around the cache"
    );
    assert!(!file.is_cached(512 << 10, 4096));
    let mut zeros = vec![1u8; 8192];
    file.read_at(&mut zeros, last + 4096).expect("read");
    assert!(zeros.iter().all(|b| *b == 0));
    store.close().expect("close");
}
