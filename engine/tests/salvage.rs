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
