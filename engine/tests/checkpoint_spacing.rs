//! Index checkpoints at segment rolls (FORMAT.md §7) cost at most a quarter
//! of the log bytes written: a checkpoint holds the whole index, so writing
//! one at every roll would cost more with every segment. An open after a
//! power cut starts from the last one written and scans the rest.

mod common;

use common::{cut_power_and_drop, dir, payload_for, sim_opts};
use turnstone::sim::SimVfs;
use turnstone::{Options, Store};

/// Small segments and small events: 8 index bytes per 72-byte frame, so the
/// index outgrows a quarter of a segment after a few rolls.
const SEGMENT: u32 = 64 << 10;
const SESSIONS: u64 = 16;

fn opts(sim: &SimVfs) -> Options {
    Options {
        checkpoints: true,
        ..sim_opts(sim, SEGMENT)
    }
}

fn name(s: u64) -> String {
    format!("s{s}")
}

#[test]
fn roll_checkpoints_cost_at_most_a_quarter_of_the_log_and_a_cut_recovers_from_the_last() {
    let sim = SimVfs::new();
    let store = Store::open_with(dir(), opts(&sim)).unwrap();
    let mut counts = vec![0u64; SESSIONS as usize];
    for i in 0..40_000u64 {
        let s = i % SESSIONS;
        let seq = counts[s as usize];
        store
            .append(&name(s), 1, 0, &payload_for(&name(s), seq, 48))
            .unwrap();
        counts[s as usize] += 1;
        if i % 200 == 199 {
            store.sync().unwrap();
        }
    }
    store.sync().unwrap();
    let st = store.stats();
    assert!(st.segments_created >= 15, "{st:?}");
    assert!(st.checkpoints_written >= 2, "{st:?}");
    assert!(st.checkpoints_skipped > 0, "{st:?}");
    // Each roll's checkpoint is at most a quarter of the log written since
    // the one before; the first has none before it (one segment's index).
    let first = SEGMENT as u64 / 72 * 8 + 4096;
    assert!(
        st.checkpoint_bytes <= st.bytes_written / 4 + first,
        "{} checkpoint bytes for {} log bytes: {st:?}",
        st.checkpoint_bytes,
        st.bytes_written
    );
    // A power cut: the open starts from the last checkpoint and scans the
    // segments after it; every synced event is there.
    cut_power_and_drop(&sim, store);
    sim.crash(7);
    let store = Store::open_with(dir(), opts(&sim)).unwrap();
    let report = store.recovery_report();
    assert!(report.checkpoint_used, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(report.segments_scanned >= 2, "{report:?}");
    for s in 0..SESSIONS {
        let n = counts[s as usize];
        assert_eq!(store.session_len(&name(s)), Some(n));
        let events = store.read_range(&name(s), 0..n).unwrap();
        for (seq, e) in events.iter().enumerate() {
            assert_eq!(e.payload, payload_for(&name(s), seq as u64, 48));
        }
    }
    // A clean close writes one whatever its size: the next open scans
    // nothing.
    store.close().unwrap();
    let store = Store::open_with(dir(), opts(&sim)).unwrap();
    let report = store.recovery_report();
    assert!(report.checkpoint_used, "{report:?}");
    assert!(report.segments_scanned <= 1, "{report:?}");
    store.close().unwrap();
}
