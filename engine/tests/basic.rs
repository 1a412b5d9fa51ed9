//! Append, sync, read back, reopen: the happy path through every layer.

use std::sync::Arc;
use turnstone::{Error, Options, Store};

fn small(dir: &std::path::Path) -> Store {
    Store::open_with(
        dir,
        Options {
            segment_bytes: 64 * 1024,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn append_read_reopen_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let store = small(dir.path());
    let mut expected = Vec::new();
    for i in 0..2000u32 {
        let s = format!("s{}", i % 7);
        let payload = vec![(i % 251) as u8; (i as usize * 37) % 900];
        let a = store.append(&s, 1 + (i % 5) as u16, 0, &payload).unwrap();
        expected.push((s, a.seq.0, payload));
    }
    store.sync().unwrap();
    for (s, seq, p) in &expected {
        assert_eq!(&store.read(s, *seq).unwrap().payload, p);
    }
    assert!(store.stats().segments_created > 2, "{:?}", store.stats());
    store.close().unwrap();

    let store = small(dir.path());
    let r = store.recovery_report().clone();
    assert!(r.clean_shutdown, "{r:?}");
    assert!(r.checkpoint_used, "{r:?}");
    assert!(r.problems.is_empty(), "{r:?}");
    for (s, seq, p) in &expected {
        assert_eq!(&store.read(s, *seq).unwrap().payload, p);
    }
    // Appends continue densely.
    let a = store.append("s0", 1, 0, b"more").unwrap();
    assert_eq!(a.seq.0, store.session_len("s0").unwrap() - 1);
    drop(store);

    // Without the checkpoint, a full scan gives the same index.
    std::fs::remove_file(dir.path().join("index.ckpt")).unwrap();
    let store = small(dir.path());
    assert!(!store.recovery_report().checkpoint_used);
    for (s, seq, p) in &expected {
        assert_eq!(&store.read(s, *seq).unwrap().payload, p);
    }
    assert_eq!(
        store
            .read("s0", store.session_len("s0").unwrap() - 1)
            .unwrap()
            .payload,
        b"more"
    );
}

#[test]
fn concurrent_appenders_share_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    let a = store
                        .append(&format!("t{t}"), 2, 0, &i.to_le_bytes())
                        .unwrap();
                    assert_eq!(a.seq.0, i as u64);
                    if i % 10 == 9 {
                        store.wait_durable(a.end).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    store.sync().unwrap();
    for t in 0..8 {
        let evs = store.read_range(&format!("t{t}"), 0..1000).unwrap();
        assert_eq!(evs.len(), 200);
        for (i, e) in evs.iter().enumerate() {
            assert_eq!(e.payload, (i as u32).to_le_bytes());
        }
    }
    let st = store.stats();
    assert!(st.syncs <= 8 * 20, "{st:?}");
}

#[test]
fn second_writer_is_refused_and_read_only_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.append("a", 1, 0, b"x").unwrap();
    store.sync().unwrap();
    match Store::open(dir.path()) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
    let ro = Store::open_with(
        dir.path(),
        Options {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(ro.read("a", 0).unwrap().payload, b"x");
    assert!(matches!(ro.append("a", 1, 0, b"y"), Err(Error::ReadOnly)));
    drop(ro);
    drop(store);
    assert!(Store::open(dir.path()).is_ok());
}

#[test]
fn fork_references_parent_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for i in 0..10u8 {
        store.append("p", 1, 0, &[i]).unwrap();
    }
    store.fork("p", 4, "c").unwrap();
    store.append("c", 1, 0, b"child").unwrap();
    store.append("p", 1, 0, b"parent").unwrap();
    store.fork("c", 5, "gc").unwrap();
    store.close().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let c: Vec<_> = store
        .read_range("c", 0..100)
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect();
    assert_eq!(
        c,
        vec![vec![0], vec![1], vec![2], vec![3], b"child".to_vec()]
    );
    assert_eq!(store.read_range("gc", 0..100).unwrap().len(), 5);
    assert_eq!(store.session_len("p"), Some(11));
    assert!(matches!(
        store.fork("p", 99, "x"),
        Err(Error::SeqOutOfRange { .. })
    ));
}

/// `visit_range` lends exactly what `read_range` returns, across sealed and
/// active segments and fork chains, and stops where the visitor breaks.
#[test]
fn visit_range_lends_what_read_range_returns() {
    use std::ops::ControlFlow;
    let dir = tempfile::tempdir().unwrap();
    let store = small(dir.path());
    let mut expect: Vec<Vec<u8>> = Vec::new();
    for i in 0..400u32 {
        // 64 KiB segments: a few hundred events of ~1 KB roll several times.
        let p: Vec<u8> = (0..(i % 7) * 300 + 1).map(|b| (b ^ i) as u8).collect();
        store.append("p", (i % 5) as u16 + 1, 0, &p).unwrap();
        store.append("q", 2, 0, b"noise").unwrap();
        expect.push(p);
    }
    store.fork("p", 250, "c").unwrap();
    store.append("c", 3, 0, b"own").unwrap();
    store.fork("c", 251, "gc").unwrap();
    store.append("gc", 4, 0, b"gc-own").unwrap();
    for id in ["p", "c", "gc"] {
        for range in [0..1000, 0..0, 5..6, 100..300, 249..253, 399..400] {
            let read = store.read_range(id, range.clone()).unwrap();
            let mut seen = Vec::new();
            let n = store
                .visit_range(id, range.clone(), |e| {
                    seen.push(e.to_event());
                    ControlFlow::Continue(())
                })
                .unwrap();
            assert_eq!(n as usize, seen.len());
            assert_eq!(seen, read, "{id} {range:?}");
        }
    }
    // The reads made everything durable: the walk crossed several sealed
    // segments and the active one.
    assert!(store.stats().segments_created >= 3, "{:?}", store.stats());
    let c = store.read_range("gc", 0..1000).unwrap();
    assert_eq!(c.len(), 252);
    assert_eq!(c[100].payload, expect[100]);
    assert_eq!(c[250].payload, b"own");
    assert_eq!(c[251].payload, b"gc-own");
    // Break after three events.
    let mut seqs = Vec::new();
    let n = store
        .visit_range("p", 10..100, |e| {
            seqs.push(e.seq.0);
            if seqs.len() == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!((n, seqs), (3, vec![10, 11, 12]));
    assert!(matches!(
        store.visit_range("nope", 0..1, |_| ControlFlow::Continue(())),
        Err(Error::UnknownSession(_))
    ));
}
