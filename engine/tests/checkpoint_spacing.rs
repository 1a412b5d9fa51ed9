//! Index checkpoints at segment rolls (FORMAT.md §7, §7.1) cost about the
//! index's size over the run, not the whole index at every roll: a roll
//! writes a delta of the positions added since the last one, and a whole
//! checkpoint only once the deltas add up to one. An open after a power
//! cut reads the checkpoint and its deltas and scans only what follows.

mod common;

use common::{cut_power_and_drop, dir, payload_for, sim_opts};
use turnstone::sim::SimVfs;
use turnstone::vfs::Vfs;
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
fn roll_checkpoints_are_deltas_and_a_cut_recovers_from_the_chain() {
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
    // Every roll wrote one, most of them deltas.
    assert!(st.checkpoints_written + 1 >= st.segments_created, "{st:?}");
    assert!(st.checkpoint_deltas * 2 > st.checkpoints_written, "{st:?}");
    assert!(st.checkpoints_written > st.checkpoint_deltas, "{st:?}");
    // Deltas about once the index, whole checkpoints about twice its final
    // size (each rewrite when the deltas reach the last one's size): at one
    // whole checkpoint per roll this run would write ~6.9 MB.
    let index = 40_000u64 * 8 + SESSIONS * 64;
    assert!(
        st.checkpoint_bytes <= 4 * index,
        "{} checkpoint bytes for an index of {index}: {st:?}",
        st.checkpoint_bytes
    );
    let deltas = sim
        .list(&dir())
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(turnstone::internals::DELTA_PREFIX))
        .count();
    assert!(deltas >= 1, "no delta file");
    // A power cut: the open starts from the checkpoint and its deltas, which
    // reach the last roll, and scans the active segment; every synced event
    // is there.
    cut_power_and_drop(&sim, store);
    sim.crash(7);
    let store = Store::open_with(dir(), opts(&sim)).unwrap();
    let report = store.recovery_report();
    assert!(report.checkpoint_used, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(report.segments_scanned <= 2, "{report:?}");
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
