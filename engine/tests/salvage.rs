//! Salvage (issue 16, part 2): a read-only open that keeps every frame whose
//! own checksum holds, past the damage, as far as each session's seqs stay
//! dense, and reports what it dropped. The default open refuses the same
//! store.

use turnstone::{Error, Options, ProblemKind, RecoveryMode, Store};

fn payload(session: &str, seq: u64) -> Vec<u8> {
    format!("{session}:{seq}:").repeat(40).into_bytes()
}

#[test]
fn salvage_keeps_every_frame_that_checks_and_says_what_it_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for seq in 0..3 {
        store.append("a", 1, 0, &payload("a", seq)).unwrap();
        store.append("b", 1, 0, &payload("b", seq)).unwrap();
    }
    store.sync().unwrap();
    // One large batch of "a" (seqs 3..53), and "b" in the same batch.
    let big: Vec<Vec<u8>> = (3..53).map(|s| payload("a", s)).collect();
    let group: Vec<(u16, u16, &[u8])> = big.iter().map(|p| (1, 0, &p[..])).collect();
    let mut pos = Vec::new();
    store
        .append_group("a", &group, |a| pos.push(a.pos))
        .unwrap();
    store.append("b", 1, 0, &payload("b", 3)).unwrap();
    store.sync().unwrap();
    // Later batches of both.
    for seq in 4..8 {
        store.append("b", 1, 0, &payload("b", seq)).unwrap();
        store.sync().unwrap();
    }
    store.append("a", 1, 0, &payload("a", 53)).unwrap();
    store.close().unwrap();

    // Flip a payload byte of "a"'s seq 20 (inside the big batch).
    let victim = pos[20 - 3];
    let seg = dir.path().join(format!("{:010}.tseg", victim.segment().0));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[victim.offset() as usize + 24 + 5] ^= 0x10;
    std::fs::write(&seg, &bytes).unwrap();
    std::fs::remove_file(dir.path().join("index.ckpt")).ok();

    assert!(matches!(
        Store::open(dir.path()),
        Err(Error::Corrupt { .. })
    ));
    let writable = Options {
        recovery_mode: RecoveryMode::Salvage,
        ..Options::default()
    };
    assert!(matches!(
        Store::open_with(dir.path(), writable),
        Err(Error::InvalidArgument(_))
    ));

    let opts = Options {
        recovery_mode: RecoveryMode::Salvage,
        read_only: true,
        ..Options::default()
    };
    let store = Store::open_with(dir.path(), opts).unwrap();
    // "a" keeps its dense prefix up to the damaged frame; "b" keeps all,
    // including its event in the damaged batch and the later ones.
    assert_eq!(store.session_len("a"), Some(20));
    assert_eq!(store.session_len("b"), Some(8));
    for (s, n) in [("a", 20), ("b", 8)] {
        let events = store.read_range(s, 0..n).unwrap();
        for (seq, e) in events.iter().enumerate() {
            assert_eq!(e.payload, payload(s, seq as u64), "{s} {seq}");
        }
    }
    let report = store.recovery_report();
    assert_eq!(report.mode, RecoveryMode::Salvage);
    let damaged = report
        .problems
        .iter()
        .find(|p| p.offset == victim.offset() as u64)
        .expect("the damaged frame is reported where it is");
    assert_eq!(damaged.kind, ProblemKind::Corruption);
    assert!(damaged.detail.contains("checksum"), "{}", damaged.detail);
    // Every later frame of "a" (seqs 21..=53) is reported dropped.
    let dropped_later = report
        .problems
        .iter()
        .filter(|p| p.action.starts_with("dropped the frame: it checks"))
        .count();
    assert_eq!(dropped_later, 53 - 20, "{:#?}", report.problems);
    // The batch holding the damage is reported once, with what was kept.
    assert!(report
        .problems
        .iter()
        .any(|p| p.action.starts_with("salvaged: kept")));
}

fn salvage_open(dir: &std::path::Path) -> Store {
    let opts = Options {
        recovery_mode: RecoveryMode::Salvage,
        read_only: true,
        ..Options::default()
    };
    Store::open_with(dir, opts).unwrap()
}

fn assert_events(store: &Store, session: &str, n: u64) {
    assert_eq!(store.session_len(session), Some(n), "{session}");
    let events = store.read_range(session, 0..n).unwrap();
    for (seq, e) in events.iter().enumerate() {
        assert_eq!(e.payload, payload(session, seq as u64), "{session} {seq}");
    }
}

/// fuzz target `recovery_image`: zeros where a batch header belongs were
/// taken for the end of data. Salvage stopped reading the segment there,
/// reported nothing, and lost every later batch that checks (here all of
/// "b"). Fixed in `salvage_segment`: non-zero bytes after zeros are looked
/// at, reported where they are, and read from the next valid batch on.
#[test]
fn salvage_reads_past_a_zeroed_batch_header_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for seq in 0..3 {
        store.append("a", 1, 0, &payload("a", seq)).unwrap();
        store.sync().unwrap();
    }
    let victim = store.append("a", 1, 0, &payload("a", 3)).unwrap();
    store.sync().unwrap();
    for seq in 0..4 {
        store.append("b", 1, 0, &payload("b", seq)).unwrap();
        store.sync().unwrap();
    }
    store.close().unwrap();
    // "a" seq 3 is alone in its batch: zero that batch's header.
    let header_at = victim.pos.offset() as usize - turnstone::frame::BATCH_HEADER_BYTES;
    let seg = dir
        .path()
        .join(format!("{:010}.tseg", victim.pos.segment().0));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[header_at..victim.pos.offset() as usize].fill(0);
    std::fs::write(&seg, &bytes).unwrap();

    let store = salvage_open(dir.path());
    assert_events(&store, "a", 3);
    assert_events(&store, "b", 4);
    let report = store.recovery_report();
    let p = report
        .problems
        .iter()
        .find(|p| p.offset == header_at as u64)
        .unwrap_or_else(|| panic!("the zeroed header is not reported: {report:#?}"));
    assert_eq!(p.kind, ProblemKind::Corruption);
    assert!(p.action.starts_with("resumed at the valid batch"), "{p:?}");
}

/// fuzz target `recovery_image`: bytes after the end of data too few for a
/// batch header (a cut header at the end of the file) were not looked at,
/// so salvage reported no problem where every other mode sees a torn tail.
#[test]
fn salvage_reports_a_cut_batch_header_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        dir.path(),
        Options {
            preallocate: false,
            ..Options::default()
        },
    )
    .unwrap();
    for seq in 0..3 {
        store.append("a", 1, 0, &payload("a", seq)).unwrap();
        store.sync().unwrap();
    }
    store.close().unwrap();
    let seg = dir.path().join("0000000001.tseg");
    let mut bytes = std::fs::read(&seg).unwrap();
    // Without preallocation the file ends where its data ends.
    let end = bytes.len();
    assert_ne!(bytes[end - 8..], [0; 8]);
    bytes.extend_from_slice(b"TSB1\x07");
    std::fs::write(&seg, &bytes).unwrap();

    let store = salvage_open(dir.path());
    assert_events(&store, "a", 3);
    let report = store.recovery_report();
    assert_eq!(report.problems.len(), 1, "{report:#?}");
    let p = &report.problems[0];
    assert_eq!(
        (p.kind, p.offset, p.bytes),
        (ProblemKind::TornTail, end as u64, 5),
        "{p:?}"
    );
}

/// fuzz target `recovery_image`: a segment file whose header names another
/// segment (here a copy of segment 1 under the next name) was read without
/// a word; the normal open refuses it as corruption. Salvage now reports it
/// and keeps nothing from it (its frames do not check under its name).
#[test]
fn salvage_reports_a_segment_header_that_names_another_segment() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for seq in 0..3 {
        store.append("a", 1, 0, &payload("a", seq)).unwrap();
    }
    store.close().unwrap();
    let one = dir.path().join("0000000001.tseg");
    let two = dir.path().join("0000000002.tseg");
    std::fs::copy(&one, &two).unwrap();

    let store = salvage_open(dir.path());
    assert_events(&store, "a", 3);
    let report = store.recovery_report();
    assert!(
        report.problems.iter().any(|p| p.file == two
            && p.offset == 0
            && p.kind == ProblemKind::Corruption
            && p.detail == "header names segment 1, file name 2"),
        "{report:#?}"
    );
}

/// The last batch of a sealed segment zeroed (or the segment cut at a batch
/// boundary) reads as a shorter segment; the next segment's header says
/// where the previous one ended and which batch comes next, so the loss is
/// reported even when no later frame of the lost session shows it.
#[test]
fn salvage_reports_batches_lost_at_the_end_of_a_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        segment_bytes: 8_192,
        ..Options::default()
    };
    let store = Store::open_with(dir.path(), opts.clone()).unwrap();
    let mut seq = 0;
    let mut victim = None;
    loop {
        let a = store.append("a", 1, 0, &payload("a", seq)).unwrap();
        store.sync().unwrap();
        if a.pos.segment().0 > 1 {
            break;
        }
        victim = Some(store.append("c", 1, 0, &payload("c", seq)).unwrap());
        store.sync().unwrap();
        seq += 1;
    }
    store.close().unwrap();
    // "c"'s last event is the last batch of segment 1: zero that batch.
    let victim = victim.unwrap();
    assert_eq!(victim.pos.segment().0, 1);
    let seg = dir.path().join("0000000001.tseg");
    let mut bytes = std::fs::read(&seg).unwrap();
    let from = victim.pos.offset() as usize - turnstone::frame::BATCH_HEADER_BYTES;
    bytes[from..victim.end.offset() as usize].fill(0);
    assert!(bytes[from..].iter().all(|b| *b == 0));
    std::fs::write(&seg, &bytes).unwrap();

    let store = Store::open_with(
        dir.path(),
        Options {
            recovery_mode: RecoveryMode::Salvage,
            read_only: true,
            ..opts
        },
    )
    .unwrap();
    assert_events(&store, "a", seq + 1);
    assert_events(&store, "c", seq - 1);
    let report = store.recovery_report();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::Corruption
                && p.file == dir.path().join("0000000002.tseg")
                && p.offset == 0),
        "{report:#?}"
    );
}
