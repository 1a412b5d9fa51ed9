//! turnstone's benchmark suite: the fleet workload, the peer stores it is
//! compared with, and what the operating system reports about a run.
//!
//! - `cargo bench -p turnstone-benches`: criterion micro-benchmarks
//!   (`benches/engine.rs`).
//! - `cargo run --release -p turnstone-benches --bin compare -- [--quick]`:
//!   the fleet workload against turnstone, the peers and the disk's limits in
//!   one run (`src/bin/compare.rs`).
//! - `cargo run --release -p turnstone-benches --bin cold_reads`: one
//!   session of a fleet store loaded with the page cache dropped, against
//!   SQLite (issue 21, `src/bin/cold_reads.rs`).

pub mod fleet;
pub mod pg_stores;
pub mod stores;
pub mod sys;
pub mod typed;
pub mod workload;

#[cfg(test)]
mod smoke {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::fleet::{self, FleetConfig};
    use crate::stores::{PreallocFile, StoreKind};

    /// Every store survives a short fleet run and reads back every event.
    #[test]
    fn every_store_reads_back_everything() {
        let base = tempfile::tempdir().unwrap();
        let prealloc =
            Arc::new(PreallocFile::create(base.path().join("prealloc"), 8 << 20).unwrap());
        let cfg = FleetConfig {
            sessions: 6,
            threads: 2,
            duration: Duration::from_millis(150),
            seed: 3,
        };
        let named = [StoreKind::TurnstoneLeader, StoreKind::TurnstoneSession];
        for kind in StoreKind::ALL.into_iter().chain(named) {
            let r = fleet::run(kind, &cfg, base.path(), Some(prealloc.clone()), None).unwrap();
            assert!(r.events > 0, "{}", kind.name());
            assert!(
                r.readback.ok(),
                "{}: {:?}",
                kind.name(),
                r.readback.problems
            );
            assert_eq!(r.readback.events, r.events, "{}", kind.name());
        }
    }

    /// The session-layer store's read-back compares what was logged with
    /// the workload's typed events: a changed event fails it.
    #[test]
    fn the_session_store_check_catches_a_changed_event() {
        let wl = crate::workload::Workload::new(3, 2);
        let expected = [2u64, 0];
        let mut ck = crate::stores::Checker::new(&wl, &expected);
        let (kind, good) = crate::typed::typed_event(&wl, 0, 0).encode();
        ck.typed_event(0, 0, kind, &good);
        let (kind, other) = crate::typed::typed_event(&wl, 0, 2).encode();
        ck.typed_event(0, 1, kind, &other);
        let rb = ck.finish(Default::default(), Default::default());
        assert_eq!(rb.events, 2);
        assert_eq!(rb.problem_count, 1, "{:?}", rb.problems);
        assert!(rb.problems[0].contains("seq 1"), "{:?}", rb.problems);
    }
}
