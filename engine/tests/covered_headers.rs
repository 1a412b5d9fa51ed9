//! Segments an index checkpoint covers are not scanned at open, but their
//! headers are checked (FORMAT.md §7, §8): a segment of another format
//! version, a copy of another segment, or a garbage header no longer opens
//! under a checkpoint (it used to, and failed only at a read). The verdict is
//! the one a full scan reaches (issue 16, part 2).

use std::path::Path;

use turnstone::frame::{SegmentHeader, SEGMENT_HEADER_BYTES};
use turnstone::{Error, Options, Store};

fn seg(dir: &Path, n: u32) -> std::path::PathBuf {
    dir.join(format!("{n:010}.tseg"))
}

/// A closed store of at least three segments, with a checkpoint.
fn make_store(dir: &Path) {
    let opts = Options {
        segment_bytes: 64 * 1024,
        preallocate: false,
        ..Options::default()
    };
    let store = Store::open_with(dir, opts).unwrap();
    for i in 0..400u32 {
        store
            .append(&format!("s{}", i % 4), 1, 0, &[i as u8; 700])
            .unwrap();
    }
    store.close().unwrap();
    assert!(seg(dir, 3).exists());
    assert!(dir.join("index.ckpt").exists());
    // The checkpoint is used on a clean reopen.
    let store = Store::open(dir).unwrap();
    assert!(store.recovery_report().checkpoint_used);
    store.close().unwrap();
}

fn header(dir: &Path, n: u32) -> SegmentHeader {
    let b = std::fs::read(seg(dir, n)).unwrap();
    SegmentHeader::decode(&b).unwrap()
}

fn put_header(dir: &Path, n: u32, bytes: &[u8]) {
    let mut b = std::fs::read(seg(dir, n)).unwrap();
    b[..bytes.len()].copy_from_slice(bytes);
    std::fs::write(seg(dir, n), b).unwrap();
}

#[test]
fn another_version_under_a_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    let mut h = header(dir.path(), 1);
    h.version = 2;
    put_header(dir.path(), 1, &h.encode());
    for read_only in [false, true] {
        let opts = Options {
            read_only,
            ..Options::default()
        };
        match Store::open_with(dir.path(), opts) {
            Err(Error::UnsupportedVersion { found: 2, .. }) => {}
            other => panic!("expected unsupported version, got {other:?}"),
        }
    }
}

#[test]
fn a_copy_of_another_segment_under_a_checkpoint_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    std::fs::copy(seg(dir.path(), 1), seg(dir.path(), 2)).unwrap();
    match Store::open(dir.path()) {
        Err(Error::Corrupt {
            file, offset: 0, ..
        }) => assert_eq!(file, seg(dir.path(), 2)),
        other => panic!("expected corruption in segment 2, got {other:?}"),
    }
}

#[test]
fn a_garbage_first_header_under_a_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    put_header(dir.path(), 1, &[0xAB; SEGMENT_HEADER_BYTES]);
    assert!(Store::open(dir.path()).is_err());
    // Another store's header on a middle segment: corruption there.
    let dir2 = tempfile::tempdir().unwrap();
    make_store(dir2.path());
    let foreign = header(dir2.path(), 2);
    let other = tempfile::tempdir().unwrap();
    make_store(other.path());
    let mut h = header(other.path(), 2);
    h.first_batch_seq = foreign.first_batch_seq;
    h.prev_segment_end = foreign.prev_segment_end;
    put_header(dir2.path(), 2, &h.encode());
    match Store::open(dir2.path()) {
        Err(Error::Corrupt {
            file, offset: 0, ..
        }) => assert_eq!(file, seg(dir2.path(), 2)),
        other => panic!("expected corruption in segment 2, got {other:?}"),
    }
}
