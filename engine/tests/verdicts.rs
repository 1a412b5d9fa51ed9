//! The open and the inspection walk (`verify`, `dump`) reach the same
//! verdict on every store (FORMAT.md §6.5: one scanner, one classification,
//! different policy only in how far they read). Each case is a store that an
//! independent reader written from FORMAT.md found them to disagree on
//! (issue 41 §3); the verdict each must reach is the spec's.

mod common;

use std::ops::ControlFlow;
use std::sync::Arc;

use common::gc_fleet::append_synced;
use common::{dir, seg, sim_opts};
use turnstone::frame::{BatchHeader, Salt, SegmentHeader, SEGMENT_HEADER_BYTES};
use turnstone::gc::CollectOptions;
use turnstone::sim::SimVfs;
use turnstone::vfs::Vfs;
use turnstone::{Error, Options, Store};

const SEGMENT: u32 = 8192;

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Ok,
    Corrupt,
    UnsupportedVersion,
    NotTurnstone,
    Other(String),
}

fn of_error(e: &Error) -> Verdict {
    match e {
        Error::Corrupt { .. } => Verdict::Corrupt,
        Error::UnsupportedVersion { .. } => Verdict::UnsupportedVersion,
        Error::NotTurnstone { .. } => Verdict::NotTurnstone,
        other => Verdict::Other(other.to_string()),
    }
}

/// What a read-only open says (it changes no byte).
fn open_verdict(sim: &SimVfs) -> Verdict {
    let opts = Options {
        read_only: true,
        ..sim_opts(sim, SEGMENT)
    };
    match Store::open_with(dir(), opts) {
        Ok(s) => {
            drop(s);
            Verdict::Ok
        }
        Err(e) => of_error(&e),
    }
}

/// What the inspection walk (`verify`) says, with the problems it reports.
fn walk_verdict(sim: &SimVfs) -> (Verdict, Vec<String>) {
    let mut problems = Vec::new();
    let r = turnstone::inspect::walk_with(sim, &dir(), |item| {
        if let turnstone::inspect::Item::Problem(p) = item {
            problems.push(format!(
                "{:?} {} @{}: {}",
                p.kind,
                p.segment.display(),
                p.offset,
                p.detail
            ));
        }
        ControlFlow::Continue(())
    });
    let v = match r {
        Ok(s) if s.is_corrupt() => Verdict::Corrupt,
        Ok(_) => Verdict::Ok,
        Err(e) => of_error(&e),
    };
    (v, problems)
}

/// Both readers reach `want`.
fn assert_verdicts(sim: &SimVfs, want: Verdict) {
    let open = open_verdict(sim);
    let (walk, problems) = walk_verdict(sim);
    assert_eq!(open, want, "the open's verdict");
    assert_eq!(
        walk, want,
        "the walk's verdict; its problems: {problems:#?}"
    );
}

/// Three sessions over several sealed segments, then a regroup (nothing
/// dead: an empty gc.manifest and compacted segments).
fn regrouped() -> SimVfs {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    for i in 0..40u64 {
        for s in ["a", "b", "c"] {
            append_synced(&store, s, i, 250);
        }
    }
    store.close().unwrap();
    let r = turnstone::session::gc::collect(
        dir(),
        &CollectOptions {
            regroup: true,
            vfs: Arc::new(sim.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(r.ranges_rewritten >= 1, "{r:?}");
    assert_verdicts(&sim, Verdict::Ok);
    sim
}

fn segment_files(sim: &SimVfs) -> Vec<(u32, Vec<u8>)> {
    let mut names = sim.list(&dir()).unwrap();
    names.sort();
    names
        .iter()
        .filter_map(|n| turnstone::frame::parse_segment_file_name(n))
        .map(|id| (id.0, sim.read_file(&seg(&dir(), id.0)).unwrap()))
        .collect()
}

/// The first compacted segment: its id and bytes.
fn first_compacted(sim: &SimVfs) -> (u32, Vec<u8>) {
    segment_files(sim)
        .into_iter()
        .find(|(_, b)| turnstone::frame::Compaction::of_header(b).is_some())
        .expect("a compacted segment")
}

fn rewrite_header_crc(b: &mut [u8]) {
    let crc = crc32fast::hash(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn a_regrouped_store_without_its_manifest_is_corrupt_for_both() {
    let sim = regrouped();
    sim.remove(&dir().join("gc.manifest")).unwrap();
    assert_verdicts(&sim, Verdict::Corrupt);
}

#[test]
fn a_compacted_last_segment_is_corrupt_for_both() {
    let sim = regrouped();
    let (id, _) = first_compacted(&sim);
    for (later, _) in segment_files(&sim) {
        if later > id {
            sim.remove(&seg(&dir(), later)).unwrap();
        }
    }
    assert_verdicts(&sim, Verdict::Corrupt);
}

#[test]
fn a_compacted_batch_with_flags_is_corrupt_for_both() {
    let sim = regrouped();
    let (id, bytes) = first_compacted(&sim);
    let header = SegmentHeader::decode(&bytes).unwrap();
    let salt = Salt {
        store_id: header.store_id,
        segment: header.segment,
    };
    let at = SEGMENT_HEADER_BYTES;
    let mut batch = BatchHeader::decode(&bytes[at..at + 32], &salt).unwrap();
    batch.flags = 1;
    sim.poke(&seg(&dir(), id), at as u64, &batch.encode(&salt))
        .unwrap();
    assert_verdicts(&sim, Verdict::Corrupt);
}

#[test]
fn zero_fill_inside_a_compacted_segment_is_corrupt_for_both() {
    let sim = regrouped();
    let (id, bytes) = first_compacted(&sim);
    sim.poke(&seg(&dir(), id), bytes.len() as u64, &[0u8; 64])
        .unwrap();
    assert_verdicts(&sim, Verdict::Corrupt);
}

fn plain_store(sim: &SimVfs) {
    let store = Store::open_with(dir(), sim_opts(sim, SEGMENT)).unwrap();
    for i in 0..40u64 {
        for s in ["a", "b"] {
            append_synced(&store, s, i, 250);
        }
    }
    store.close().unwrap();
    assert!(segment_files(sim).len() >= 3);
    assert_verdicts(sim, Verdict::Ok);
}

#[test]
fn a_later_segment_of_another_version_is_unsupported_for_both() {
    let sim = SimVfs::new();
    plain_store(&sim);
    let path = seg(&dir(), 2);
    let mut h = sim.read_file(&path).unwrap()[..64].to_vec();
    h[8..12].copy_from_slice(&3u32.to_le_bytes());
    rewrite_header_crc(&mut h);
    sim.poke(&path, 0, &h).unwrap();
    assert_verdicts(&sim, Verdict::UnsupportedVersion);
}

/// Segment 1's header with a valid checksum over an impossible field
/// (header_bytes 65); `store_id` replaces the header's store id.
fn impossible_first_header(sim: &SimVfs, store_id: Option<[u8; 16]>) {
    let path = seg(&dir(), 1);
    let mut h = sim.read_file(&path).unwrap()[..64].to_vec();
    h[12..16].copy_from_slice(&65u32.to_le_bytes());
    if let Some(id) = store_id {
        h[16..32].copy_from_slice(&id);
    }
    rewrite_header_crc(&mut h);
    sim.poke(&path, 0, &h).unwrap();
}

fn remove_checkpoint(sim: &SimVfs) {
    for name in sim.list(&dir()).unwrap() {
        if name.starts_with("index.") {
            sim.remove(&dir().join(name)).unwrap();
        }
    }
}

/// Batches that validate with the store id the header still holds show a
/// damaged store (H4), not something else (H3); the index checkpoint, a
/// derived file, changes nothing.
#[test]
fn segment_one_with_an_impossible_header_size_is_corrupt_for_both() {
    let sim = SimVfs::new();
    plain_store(&sim);
    assert!(sim.exists(&dir().join("index.ckpt")));
    impossible_first_header(&sim, None);
    assert_verdicts(&sim, Verdict::Corrupt);
}

/// The same without a checkpoint.
#[test]
fn segment_one_with_an_impossible_header_size_and_its_batches_is_corrupt_for_both() {
    let sim = SimVfs::new();
    plain_store(&sim);
    remove_checkpoint(&sim);
    impossible_first_header(&sim, None);
    assert_verdicts(&sim, Verdict::Corrupt);
}

/// Nothing says the directory held a store: H3 for both.
#[test]
fn segment_one_with_an_unreadable_header_and_no_evidence_is_not_a_store_for_both() {
    let sim = SimVfs::new();
    plain_store(&sim);
    remove_checkpoint(&sim);
    impossible_first_header(&sim, Some([0x5a; 16]));
    assert_verdicts(&sim, Verdict::NotTurnstone);
}

#[test]
fn a_sealed_recycled_segment_is_ok_for_both() {
    let sim = SimVfs::new();
    let opts = Options {
        recycle_segments: 3,
        prepare_segments: false,
        ..sim_opts(&sim, 64 * 1024)
    };
    let store = Store::open_with(dir(), opts.clone()).unwrap();
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
    // Two recycled segments sealed, a third the last.
    let before = store.stats();
    while store.stats().segments_created - before.segments_created < 3 {
        append_synced(&store, "live", live, 700);
        live += 1;
    }
    assert!(store.stats().segments_recycled - before.segments_recycled >= 2);
    store.close().unwrap();
    let files = segment_files(&sim);
    let last = files.last().unwrap().0;
    let sealed_recycled = files
        .iter()
        .filter(|(id, b)| *id != last && turnstone::frame::header_is_recycled(b))
        .count();
    assert!(sealed_recycled >= 1, "no sealed recycled segment was made");
    assert_verdicts(&sim, Verdict::Ok);
}

/// Salvage checks the chain between two ordinary segments of a collected
/// store too (it used to skip it whenever any compacted segment existed):
/// batches lost from the end of a sealed segment are reported.
#[test]
fn salvage_of_a_collected_store_reports_batches_lost_between_ordinary_segments() {
    let sim = regrouped();
    let store = Store::open_with(dir(), sim_opts(&sim, SEGMENT)).unwrap();
    let first_new = segment_files(&sim).last().unwrap().0 + 1;
    for i in 40..120u64 {
        for s in ["a", "b", "c"] {
            append_synced(&store, s, i, 250);
        }
    }
    store.close().unwrap();
    assert!(segment_files(&sim).last().unwrap().0 > first_new + 1);
    // The last batch of an ordinary sealed segment, zeroed.
    let victim = seg(&dir(), first_new);
    let mut last_batch = None;
    turnstone::inspect::walk_with(&sim, &victim, |item| {
        if let turnstone::inspect::Item::Batch(b) = item {
            last_batch = Some((b.offset, b.len()));
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    let (at, len) = last_batch.unwrap();
    sim.poke(&victim, at, &vec![0u8; len as usize]).unwrap();
    // (An open from a checkpoint past it does not read the segment: what a
    // checkpoint covers is trusted, FORMAT.md §7.)
    remove_checkpoint(&sim);
    assert_verdicts(&sim, Verdict::Corrupt);
    let salvaged = Store::open_with(
        dir(),
        Options {
            recovery_mode: turnstone::RecoveryMode::Salvage,
            read_only: true,
            ..sim_opts(&sim, SEGMENT)
        },
    )
    .unwrap();
    let problems = &salvaged.recovery_report().problems;
    assert!(
        problems.iter().any(|p| p.detail.contains(&format!(
            "batches at the end of segment {first_new} are missing"
        ))),
        "{problems:#?}"
    );
}
