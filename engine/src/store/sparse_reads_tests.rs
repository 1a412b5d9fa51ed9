//! Sparse reads (issue 21): a session whose frames are scattered among other
//! sessions' frames is fetched frame group by frame group instead of through
//! a segment's map. These tests read the same runs both ways on the real
//! file system (direct I/O where it is allowed) and check that the events,
//! and the errors on a damaged frame, are the same.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::*;

/// Payload of event `seq` of session `s`: sizes from a few bytes to several
/// device sectors, and now and then longer than a sparse read's first fetch.
fn payload(s: usize, seq: u64) -> Vec<u8> {
    let len = match (s as u64 * 7 + seq) % 11 {
        0 => 3000,
        1 => 700,
        2 => 513,
        3 => 9000,
        n => 20 + 37 * n as usize,
    };
    let mut v = format!("{s}:{seq}:").into_bytes();
    v.resize(len, b'a' + (seq % 26) as u8);
    v
}

fn opts() -> Options {
    Options {
        // Small segments: every session's events cross many of them.
        segment_bytes: 256 << 10,
        ..Options::default()
    }
}

const SESSIONS: usize = 6;

/// Sessions appended in turn, plus a fork of session 2 taken half way that
/// goes on appending; returns the expected payloads by session name.
fn fill(store: &Store) -> HashMap<String, Vec<Vec<u8>>> {
    let mut model: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    for seq in 0..120u64 {
        for s in 0..SESSIONS {
            let p = payload(s, seq);
            store.append(&format!("s{s}"), 1, 0, &p).unwrap();
            model.entry(format!("s{s}")).or_default().push(p);
        }
        if seq == 60 {
            store.fork("s2", 50, "fork").unwrap();
            model.insert("fork".into(), model["s2"][..50].to_vec());
        }
        if seq > 60 {
            let p = payload(9, seq);
            store.append("fork", 2, 0, &p).unwrap();
            model.get_mut("fork").unwrap().push(p);
        }
    }
    store.sync().unwrap();
    model
}

/// Every session whole, a few sub-ranges and single events, read with
/// sparse reads on or off.
fn read_all(store: &Store, sparse: bool) -> Vec<(String, Vec<Event>)> {
    let reader = &store.shared.reader;
    reader.sparse_enabled.store(sparse, Ordering::Relaxed);
    let mut out = Vec::new();
    let mut names: Vec<String> = store.sessions().into_iter().map(|s| s.name).collect();
    names.sort();
    for name in names {
        let len = store.session_len(&name).unwrap();
        for range in [0..len, 1..len, len / 3..len / 3 + 17, 45..55, len - 1..len] {
            let events = store.read_range(&name, range.clone()).unwrap();
            assert_eq!(
                events.len() as u64,
                range.end - range.start,
                "{name} {range:?}"
            );
            out.push((format!("{name} {range:?}"), events));
        }
    }
    reader.sparse_enabled.store(true, Ordering::Relaxed);
    out
}

fn check_model(reads: &[(String, Vec<Event>)], model: &HashMap<String, Vec<Vec<u8>>>) {
    for (what, events) in reads {
        let name = what.split(' ').next().unwrap();
        for e in events {
            assert_eq!(
                e.payload, model[name][e.seq.0 as usize],
                "{what} seq {}",
                e.seq.0
            );
        }
    }
}

/// Drop every segment of the store from the page cache.
fn evict(store: &Store) {
    let dir = store.dir();
    for seg in crate::log::list_segments(store.vfs().as_ref(), dir).unwrap() {
        crate::vfs::evict_cached(&crate::log::segment_path(dir, seg)).unwrap();
    }
}

#[test]
fn sparse_reads_return_what_mapped_reads_return() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    let model = fill(&store);
    store.close().unwrap();
    // Reopened (the index from its checkpoint, every segment but the last
    // sealed) with nothing of the segments cached: sparse runs fetch their
    // frames from the device (direct I/O where the file system allows it).
    let store = Store::open_with(dir.path(), opts()).unwrap();
    let counts = &store.shared.reader.counts;
    evict(&store);
    let sparse = read_all(&store, true);
    let sparse_runs = counts.sparse_runs.load(Ordering::Relaxed);
    assert!(sparse_runs > 0, "no run was read sparsely");
    // A sparse read fetches frame groups (one read each, plus the rest of
    // a frame longer than the first fetch), never one per segment.
    assert!(counts.sparse_reads.load(Ordering::Relaxed) >= sparse_runs);
    check_model(&sparse, &model);
    // The same runs through the maps.
    let mapped = read_all(&store, false);
    assert_eq!(counts.sparse_runs.load(Ordering::Relaxed), sparse_runs);
    assert!(counts.mapped_runs.load(Ordering::Relaxed) > 0);
    assert_eq!(sparse, mapped);
    // Across segments, and through the fork's inherited prefix.
    let segments: std::collections::BTreeSet<_> = sparse
        .iter()
        .flat_map(|(_, es)| es.iter().map(|e| e.pos.segment()))
        .collect();
    assert!(segments.len() > 3, "{segments:?}");
    assert!(sparse.iter().any(|(what, es)| what.starts_with("fork ")
        && es.first().is_some_and(|e| e.seq.0 < 50)
        && es.last().is_some_and(|e| e.seq.0 >= 50)));
    // Hot now (the maps hold the pages): sparse runs are read from the maps.
    assert_eq!(read_all(&store, true), mapped);
    assert_eq!(counts.sparse_runs.load(Ordering::Relaxed), sparse_runs);

    // Written to again, and read back whole.
    store.append("s0", 1, 0, b"one more").unwrap();
    store.sync().unwrap();
    let len = store.session_len("s0").unwrap();
    let last = store.read_range("s0", 0..len).unwrap();
    assert_eq!(last.last().unwrap().payload, b"one more");
    let before = &mapped.iter().find(|(w, _)| w == "s0 0..120").unwrap().1;
    assert!(last[..len as usize - 1] == before[..], "s0 changed");
}

#[test]
fn a_damaged_frame_gives_the_same_error_sparse_or_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    fill(&store);
    // A frame of s3 in a sealed segment, and one longer than a sparse
    // read's first fetch (its checksum covers bytes fetched by a second read).
    let events = store.read_range("s3", 0..120).unwrap();
    let last_seg = events.last().unwrap().pos.segment();
    let victims: Vec<&Event> = events
        .iter()
        .filter(|e| e.pos.segment() < last_seg)
        .filter(|e| e.payload.len() == 9000 || e.payload.len() < 200)
        .take(2)
        .collect();
    assert_eq!(victims.len(), 2);
    let damage: Vec<(LogPos, u64, usize)> = victims
        .iter()
        .map(|e| (e.pos, e.seq.0, e.payload.len()))
        .collect();
    store.close().unwrap();
    for (pos, seq, len) in damage {
        let path = crate::log::segment_path(dir.path(), pos.segment());
        let mut bytes = std::fs::read(&path).unwrap();
        // The payload's last byte: the frame check fails on its checksum.
        let at = pos.offset() as usize + crate::frame::FRAME_HEADER_BYTES + len - 1;
        bytes[at] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        let store = Store::open_with(dir.path(), opts()).unwrap();
        let mut errors = Vec::new();
        for sparse in [true, false] {
            store
                .shared
                .reader
                .sparse_enabled
                .store(sparse, Ordering::Relaxed);
            evict(&store);
            for range in [0..120, seq..seq + 1, seq.saturating_sub(3)..seq + 3] {
                match store.read_range("s3", range) {
                    Err(Error::Corrupt {
                        file,
                        offset,
                        detail,
                    }) => {
                        assert_eq!(file, path);
                        assert_eq!(offset, pos.offset() as u64);
                        errors.push(detail);
                    }
                    other => panic!("sparse {sparse}: {other:?}"),
                }
            }
        }
        assert!(errors.windows(2).all(|w| w[0] == w[1]), "{errors:?}");
        assert!(
            store
                .shared
                .reader
                .counts
                .sparse_runs
                .load(Ordering::Relaxed)
                > 0
        );
        // Repair the byte for the next victim.
        drop(store);
        bytes[at] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
    }
}

#[test]
fn sparse_reads_keep_a_bounded_number_of_segments_open() {
    use crate::log::SEALED_FILES_OPEN_MAX;
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options {
        segment_bytes: 64 << 10,
        ..Options::default()
    };
    let store = Store::open_with(dir.path(), opts()).unwrap();
    // Two sessions in turn, far more segments than are kept open (about
    // 20 pairs of events fill a segment).
    let big = vec![7u8; 3000];
    let n = 1000u64;
    for i in 0..n {
        store.append("a", 1, 0, &i.to_le_bytes()).unwrap();
        store.append("b", 1, 0, &big).unwrap();
    }
    store.sync().unwrap();
    let segments = crate::log::list_segments(store.vfs().as_ref(), dir.path()).unwrap();
    assert!(
        segments.len() > SEALED_FILES_OPEN_MAX + 8,
        "{}",
        segments.len()
    );
    store.close().unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    evict(&store);
    let events = store.read_range("a", 0..n).unwrap();
    assert_eq!(events.len() as u64, n);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.payload, (i as u64).to_le_bytes());
    }
    let reader = &store.shared.reader;
    assert!(reader.counts.sparse_runs.load(Ordering::Relaxed) > SEALED_FILES_OPEN_MAX as u64);
    assert!(reader.sealed_files.read().len() <= SEALED_FILES_OPEN_MAX);
}

/// Every session of a cold store read back (an export, a replay of
/// everything): a sealed segment whose exact reads have cost as much as
/// reading it whole is read whole once, through the page cache, and the
/// other sessions' runs of it are read from its map; one session's few
/// events read from a cold store read no segment whole.
#[test]
fn a_segment_many_sessions_read_is_read_whole_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    let sessions = 48usize;
    let mut model: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    for seq in 0..60u64 {
        for s in 0..sessions {
            let mut p = payload(s, seq);
            p.truncate(400);
            store.append(&format!("s{s}"), 1, 0, &p).unwrap();
            model.entry(format!("s{s}")).or_default().push(p);
        }
    }
    store.close().unwrap();
    let store = Store::open_with(dir.path(), opts()).unwrap();
    let reader = &store.shared.reader;
    let counts = &reader.counts;
    let sealed = crate::log::list_segments(store.vfs().as_ref(), dir.path())
        .unwrap()
        .len() as u64
        - 1;
    assert!(sealed >= 3, "{sealed} sealed segments");
    let read_every_session = || {
        let mut out = Vec::new();
        for s in 0..sessions {
            let name = format!("s{s}");
            let events = store.read_range(&name, 0..60).unwrap();
            for e in &events {
                assert_eq!(
                    e.payload, model[&name][e.seq.0 as usize],
                    "{name} {}",
                    e.seq.0
                );
            }
            out.push(events);
        }
        out
    };

    // One event of one session, cold: exact reads only.
    evict(&store);
    let one = store.read_range("s5", 30..31).unwrap();
    assert_eq!(one[0].payload, model["s5"][30]);
    assert_eq!(counts.scans.load(Ordering::Relaxed), 0);

    // Every session, cold, without reading segments whole: the reads to
    // compare with.
    evict(&store);
    reader.scan_enabled.store(false, Ordering::Relaxed);
    let reads_before = counts.sparse_reads.load(Ordering::Relaxed);
    let exact = read_every_session();
    let exact_reads = counts.sparse_reads.load(Ordering::Relaxed) - reads_before;
    assert_eq!(counts.scans.load(Ordering::Relaxed), 0);

    // Again, cold, with segments read whole when due: each once (its pages
    // stay cached), the same events, far fewer exact reads.
    evict(&store);
    reader.scan_enabled.store(true, Ordering::Relaxed);
    let reads_before = counts.sparse_reads.load(Ordering::Relaxed);
    let mapped_before = counts.mapped_runs.load(Ordering::Relaxed);
    let scanned = read_every_session();
    let scanned_reads = counts.sparse_reads.load(Ordering::Relaxed) - reads_before;
    assert_eq!(scanned, exact);
    // Each sealed segment once; the active one (256 KiB at most) in steps
    // of 64 KiB at most, its durable bytes below the run read.
    let scans = counts.scans.load(Ordering::Relaxed);
    assert!(
        (sealed..=sealed + 4).contains(&scans),
        "{scans} scans, {sealed} sealed segments"
    );
    assert!(
        scanned_reads * 4 < exact_reads,
        "{scanned_reads} exact reads with segments read whole, {exact_reads} without"
    );
    assert!(counts.mapped_runs.load(Ordering::Relaxed) > mapped_before);
}
