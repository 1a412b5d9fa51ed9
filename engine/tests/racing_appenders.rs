//! Racing appenders, to one shared session and to their own, single events
//! and groups, across segment rolls: whatever the interleaving (seqs are
//! assigned under the commit lock, then the index lock), every session's
//! seqs stay dense, no event is lost or doubled, and all read back after a
//! reopen (invariants 1 and 2). A guard for any change to the append path
//! (issue 16, part 3).

use std::collections::BTreeSet;
use std::sync::Arc;

use turnstone::{Options, Store};

#[test]
fn racing_appenders_to_one_session_across_rolls_keep_seqs_dense() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options {
        segment_bytes: 16 * 1024,
        preallocate: false,
        ..Options::default()
    };
    let store = Arc::new(Store::open_with(dir.path(), opts()).unwrap());
    let threads: Vec<_> = (0..6u32)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..300u32 {
                    // Half the threads share one session; groups too.
                    let session = if t % 2 == 0 {
                        "shared".to_string()
                    } else {
                        format!("own-{t}")
                    };
                    let p1 = format!("{t}:{i}:a").repeat(1 + (i as usize % 7));
                    let p2 = format!("{t}:{i}:b");
                    if i % 5 == 0 {
                        store
                            .append_group(
                                &session,
                                &[(1, 0, p1.as_bytes()), (1, 0, p2.as_bytes())],
                                |_| {},
                            )
                            .unwrap();
                    } else {
                        store.append(&session, 1, 0, p1.as_bytes()).unwrap();
                    }
                    if i % 17 == 0 {
                        store.sync().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let expect: Vec<(String, u64)> = store
        .sessions()
        .into_iter()
        .map(|s| (s.name, s.len))
        .collect();
    let live: Vec<Vec<Vec<u8>>> = expect
        .iter()
        .map(|(n, len)| {
            store
                .read_range(n, 0..*len)
                .unwrap()
                .into_iter()
                .map(|e| e.payload)
                .collect()
        })
        .collect();
    Arc::try_unwrap(store).unwrap().close().unwrap();
    assert!(
        std::fs::read_dir(dir.path()).unwrap().count() > 4,
        "segments rolled"
    );

    let store = Store::open_with(dir.path(), opts()).unwrap();
    let mut total = 0;
    for ((name, len), payloads) in expect.iter().zip(&live) {
        let events = store.read_range(name, 0..*len).unwrap();
        assert_eq!(events.len() as u64, *len, "{name}");
        for (seq, e) in events.iter().enumerate() {
            assert_eq!(e.seq.0, seq as u64);
            assert_eq!(&e.payload, &payloads[seq], "{name} seq {seq}");
        }
        let distinct: BTreeSet<&Vec<u8>> = payloads.iter().collect();
        assert_eq!(distinct.len(), payloads.len(), "{name}: no event twice");
        total += len;
    }
    // 6 threads × 300 appends, every fifth a group of two.
    assert_eq!(total, 6 * (300 + 60));
    store.close().unwrap();
}
