//! Recycled segments (FORMAT.md §6.2 rule 7, `Options::recycle_segments`)
//! on the real file system: an online collection keeps the files it frees
//! as free files, new segments are made from them, their stale bytes are
//! never taken for data or for damage, a torn batch in one is repaired, and
//! `verify` agrees. Power cuts at every step are in `crash_sim.rs`.

mod common;

use std::path::Path;

use common::gc_fleet::append_synced;
use common::{direct_io_here, payload_for};
use turnstone::gc::CollectOptions;
use turnstone::{Options, ProblemKind, RecoveryMode, Store};

const SEGMENT: u32 = 64 * 1024;

/// Without the preparer (`prepare.rs` tests it): the free files here are
/// the collected ones only, so the tests can count them.
fn opts() -> Options {
    Options {
        segment_bytes: SEGMENT,
        recycle_segments: 3,
        prepare_segments: false,
        ..Default::default()
    }
}

fn names_with(dir: &Path, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(suffix))
        .collect();
    v.sort();
    v
}

fn check_live(store: &Store, n: u64) {
    assert_eq!(store.session_len("live"), Some(n));
    for (seq, e) in store.read_range("live", 0..n).unwrap().iter().enumerate() {
        assert_eq!(e.payload, payload_for("live", seq as u64, 700), "seq {seq}");
    }
}

/// Fill several segments with a session the collection then declares dead,
/// collect online: the freed files (all but the first of the range) become
/// free files, at most `recycle_segments` of them.
fn store_with_free_files(dir: &Path) -> (Store, u64) {
    let store = Store::open_with(dir, opts()).unwrap();
    let mut live = 0;
    for i in 0..400u64 {
        append_synced(&store, "dead", i, 2000);
        if i % 10 == 0 {
            append_synced(&store, "live", live, 700);
            live += 1;
        }
    }
    let r = store
        .collect(&CollectOptions::default(), &|c| c.name == "dead")
        .unwrap();
    assert!(r.ranges_rewritten > 0, "{r:?}");
    (store, live)
}

#[test]
fn collected_files_become_segments_and_reopen_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, mut live) = store_with_free_files(tmp.path());
    let free = names_with(tmp.path(), ".tseg.free");
    assert_eq!(free.len(), 3, "bounded by recycle_segments: {free:?}");
    for f in &free {
        let len = std::fs::metadata(tmp.path().join(f)).unwrap().len();
        assert_eq!(len, SEGMENT as u64, "{f}");
    }

    // New segments come from the free files.
    let before = store.stats();
    while store.stats().segments_created - before.segments_created < 3 {
        append_synced(&store, "live", live, 700);
        live += 1;
    }
    let st = store.stats();
    assert_eq!(st.segments_recycled - before.segments_recycled, 3, "{st:?}");
    assert!(names_with(tmp.path(), ".tseg.free").is_empty());
    check_live(&store, live);
    let active = store.durable_pos().segment();
    store.close().unwrap();

    // The active segment is a recycled one: past its end of data lie stale
    // batches (non-zero bytes), yet the reopen is clean.
    let path = tmp.path().join(format!("{:010}.tseg", active.0));
    let bytes = std::fs::read(&path).unwrap();
    assert!(turnstone::frame::header_is_recycled(&bytes));
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    let r = store.recovery_report().clone();
    assert!(r.clean_shutdown && r.problems.is_empty(), "{r:?}");
    let end = store.durable_pos().offset() as usize;
    assert!(
        bytes[end + 32..].iter().any(|b| *b != 0),
        "stale bytes lie after the end of data"
    );
    check_live(&store, live);
    drop(store);

    // So does a salvage open, which reads past damage: the stale batches
    // are not frames of this store.
    let salvage = Store::open_with(
        tmp.path(),
        Options {
            recovery_mode: RecoveryMode::Salvage,
            read_only: true,
            ..opts()
        },
    )
    .unwrap();
    assert!(
        salvage.recovery_report().problems.is_empty(),
        "{:?}",
        salvage.recovery_report()
    );
    check_live(&salvage, live);
    drop(salvage);

    // verify and dump read it the same way: no problem anywhere.
    walk_finds_a_clean_close(tmp.path());
}

/// In a recycled segment every write ends on a page boundary: the zeros
/// after each batch (the end marker, FORMAT.md §6.2 rule 7) run on to the
/// next multiple of 4 KiB, so that a buffered write never ends inside a
/// page the page cache may not hold (a collected file's pages are usually
/// cold, and such a write reads the page from the device first). Past that
/// boundary the free file's stale bytes stay.
/// `verify` and `dump`'s walk reads the store in `dir` as recovery does:
/// no problem anywhere, and a clean close at the end.
fn walk_finds_a_clean_close(dir: &Path) {
    let summary = turnstone::inspect::walk(dir, |_| std::ops::ControlFlow::Continue(())).unwrap();
    assert_eq!(
        (summary.corruptions, summary.torn_tails),
        (0, 0),
        "{summary:?}"
    );
    assert!(summary.clean_close, "{summary:?}");
}

/// After the batch that ends at `end` (of a `len`-byte event), the end
/// marker's zeros run to the `boundary` after `end + 32`, and the file's
/// stale bytes follow.
fn check_marker(bytes: &[u8], end: usize, boundary: usize, len: usize) {
    let to = (end + 32).next_multiple_of(boundary).min(bytes.len());
    assert!(
        bytes[end..to].iter().all(|b| *b == 0),
        "after a {len}-byte event the bytes {end}..{to} are zeros"
    );
    assert!(
        bytes[to..].iter().any(|b| *b != 0),
        "stale bytes lie past the boundary {to}"
    );
}

#[test]
fn writes_into_a_recycled_segment_end_on_a_page_boundary() {
    const PAGE: usize = 4096;
    let tmp = tempfile::tempdir().unwrap();
    let (store, mut live) = store_with_free_files(tmp.path());
    let before = store.stats();
    // Into the first recycled segment.
    while store.stats().segments_recycled == before.segments_recycled {
        append_synced(&store, "live", live, 700);
        live += 1;
    }
    let segment = store.durable_pos().segment();
    let path = tmp.path().join(format!("{:010}.tseg", segment.0));
    let mut checked = 0;
    // Batches of several lengths, so their ends fall all over a page.
    for len in [1usize, 33, 500, 4000, 4064, 4070, 9000, 123] {
        append_synced(&store, "live", live, len);
        live += 1;
        let pos = store.durable_pos();
        if pos.segment() != segment {
            break;
        }
        let end = pos.offset() as usize;
        let bytes = std::fs::read(&path).unwrap();
        assert!(turnstone::frame::header_is_recycled(&bytes));
        check_marker(&bytes, end, PAGE, len);
        checked += 1;
    }
    assert!(
        checked >= 6,
        "{checked} batches landed in segment {segment:?}"
    );
    drop(store);
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    assert!(store.recovery_report().problems.is_empty());
    assert_eq!(store.session_len("live"), Some(live));
}

#[test]
fn direct_writes_into_a_recycled_segment_end_on_a_sector_and_skip_the_cache() {
    use turnstone::vfs::{OsVfs, Vfs};
    const SECTOR: usize = 512;
    let tmp = tempfile::tempdir().unwrap();
    if !direct_io_here(tmp.path()) {
        eprintln!("direct writes refused here: skipped");
        return;
    }
    let (store, mut live) = store_with_free_files(tmp.path());
    drop(store);
    let direct = || Options {
        direct_writes: true,
        ..opts()
    };
    let store = Store::open_with(tmp.path(), direct()).unwrap();
    // Every event's length, to read them all back.
    let mut lens = vec![700; live as usize];
    let before = store.stats();
    while store.stats().segments_recycled == before.segments_recycled {
        append_synced(&store, "live", live, 700);
        lens.push(700);
        live += 1;
    }
    let segment = store.durable_pos().segment();
    let path = tmp.path().join(format!("{:010}.tseg", segment.0));
    let mut checked = 0;
    for len in [1usize, 33, 500, 4000, 4064, 4070, 9000, 123, 470] {
        let direct_before = store.stats().direct_batches;
        append_synced(&store, "live", live, len);
        lens.push(len);
        live += 1;
        let pos = store.durable_pos();
        if pos.segment() != segment {
            break;
        }
        // The batch after the segment's first goes around the page cache:
        // the page its write ended in is not cached.
        assert_eq!(store.stats().direct_batches, direct_before + 1);
        let end = pos.offset() as usize;
        let page = (end as u64 - 1) / 4096 * 4096;
        let file = OsVfs.open(&path, false).unwrap();
        assert!(!file.is_cached(page, 4096), "after a {len}-byte event");
        check_marker(&std::fs::read(&path).unwrap(), end, SECTOR, len);
        checked += 1;
    }
    assert!(
        checked >= 6,
        "{checked} batches landed in segment {segment:?}"
    );
    let check = |store: &Store| {
        let events = store.read_range("live", 0..live).unwrap();
        assert_eq!(events.len(), lens.len());
        for (seq, (e, len)) in events.iter().zip(&lens).enumerate() {
            assert_eq!(
                e.payload,
                payload_for("live", seq as u64, *len),
                "seq {seq}"
            );
        }
    };
    check(&store);
    drop(store);
    let store = Store::open_with(tmp.path(), direct()).unwrap();
    assert!(store.recovery_report().problems.is_empty());
    check(&store);
    drop(store);
    walk_finds_a_clean_close(tmp.path());
}

#[test]
fn a_torn_batch_in_a_recycled_segment_is_repaired_and_writing_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, mut live) = store_with_free_files(tmp.path());
    let before = store.stats().segments_recycled;
    while store.stats().segments_recycled == before {
        append_synced(&store, "live", live, 700);
        live += 1;
    }
    append_synced(&store, "live", live, 700);
    live += 1;
    drop(store);
    let end = Store::open_with(
        tmp.path(),
        Options {
            read_only: true,
            ..opts()
        },
    )
    .unwrap()
    .durable_pos();

    // A torn batch: a header sector that is neither zero nor valid where the
    // next batch goes (what a power cut mid-write leaves).
    let path = tmp.path().join(format!("{:010}.tseg", end.segment().0));
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(turnstone::frame::header_is_recycled(&bytes));
    let at = end.offset() as usize;
    bytes[at..at + 32].copy_from_slice(&[0x5a; 32]);
    std::fs::write(&path, &bytes).unwrap();

    let store = Store::open_with(tmp.path(), opts()).unwrap();
    let r = store.recovery_report().clone();
    assert_eq!(r.problems.len(), 1, "{r:?}");
    let p = &r.problems[0];
    assert_eq!(p.kind, ProblemKind::TornTail, "{r:?}");
    assert_eq!((p.offset, p.bytes), (at as u64, 32), "{r:?}");
    check_live(&store, live);
    for _ in 0..5 {
        append_synced(&store, "live", live, 700);
        live += 1;
    }
    store.close().unwrap();
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    let r = store.recovery_report();
    assert!(r.clean_shutdown && r.problems.is_empty(), "{r:?}");
    check_live(&store, live);
}

#[test]
fn recycling_off_removes_collected_files() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        tmp.path(),
        Options {
            recycle_segments: 0,
            ..opts()
        },
    )
    .unwrap();
    for i in 0..400u64 {
        append_synced(&store, "dead", i, 2000);
    }
    append_synced(&store, "live", 0, 700);
    let r = store
        .collect(&CollectOptions::default(), &|c| c.name == "dead")
        .unwrap();
    assert!(r.ranges_rewritten > 0, "{r:?}");
    assert!(names_with(tmp.path(), ".free").is_empty());
}

#[test]
fn free_files_a_cut_would_reuse_ids_of_are_removed_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = store_with_free_files(tmp.path());
    let active = store.durable_pos().segment().0;
    store.close().unwrap();
    // A free file named with an id the log has not reached (only a
    // point-in-time cut leaves one): its stale bytes could carry the salt
    // of a segment still to come.
    let kept = names_with(tmp.path(), ".tseg.free");
    let ahead = tmp.path().join(format!("{:010}.tseg.free", active + 1));
    std::fs::copy(tmp.path().join(&kept[0]), &ahead).unwrap();
    let store = Store::open_with(tmp.path(), opts()).unwrap();
    assert!(!ahead.exists(), "removed at open");
    assert_eq!(names_with(tmp.path(), ".tseg.free"), kept);
    drop(store);
}
