//! Helpers shared by the targets: simulated stores and deterministic payloads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::vfs::Vfs;
use turnstone::{Options, RecoveryMode, Store};

/// Directory of every simulated store.
pub const DIR: &str = "/store";

pub fn dir() -> PathBuf {
    PathBuf::from(DIR)
}

/// The three recovery modes.
pub const MODES: [RecoveryMode; 3] = [
    RecoveryMode::AbsoluteConsistency,
    RecoveryMode::TolerateTornTail,
    RecoveryMode::PointInTime,
];

/// Options on the simulator. `flush_bytes` is unbounded so that the flusher
/// writes only when someone waits: with one appending thread the sequence of
/// file operations (and so every power-cut point) is deterministic.
pub fn sim_opts(sim: &SimVfs, segment_bytes: u32) -> Options {
    Options {
        vfs: Arc::new(sim.clone()),
        segment_bytes,
        flush_bytes: usize::MAX,
        // Free files (FORMAT.md §6.2 rule 7) planted by a build step or
        // copied in as damage become segments.
        recycle_segments: 3,
        ..Default::default()
    }
}

/// Segment sizes the targets choose from (the engine's minimum is 4192).
pub fn segment_bytes(sel: u8) -> u32 {
    [4_608, 8_192, 16_384, 65_536][sel as usize % 4]
}

/// Stop a store the way a power cut does: nothing written after this point
/// reaches the simulated disk (the caller then calls `sim.crash(seed)`).
pub fn cut_power_and_drop(sim: &SimVfs, store: Store) {
    sim.set_faults(FaultPlan {
        power_cut_after_ops: Some(sim.ops()),
        ..Default::default()
    });
    drop(store);
}

/// A payload that is a deterministic function of its inputs, so that any
/// mix-up of bytes between events shows.
pub fn payload(tag: u64, len: usize) -> Vec<u8> {
    let mut h = tag ^ 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|i| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            (h as u8) ^ (i as u8)
        })
        .collect()
}

/// Every file of the store directory with its live bytes, sorted by name.
pub fn snapshot(sim: &SimVfs, dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names = sim.list(dir).unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .filter_map(|n| sim.read_file(&dir.join(&n)).map(|b| (n, b)))
        .collect()
}

/// A fresh simulator holding exactly `files` in `dir`, all durable.
pub fn materialize(dir: &Path, files: &[(String, Vec<u8>)]) -> SimVfs {
    let sim = SimVfs::new();
    sim.create_dir_all(dir).expect("sim mkdir");
    for (name, bytes) in files {
        let f = sim.create_truncate(&dir.join(name)).expect("sim create");
        if !bytes.is_empty() {
            f.write_all_at(bytes, 0).expect("sim write");
        }
        f.sync_data().expect("sim sync");
    }
    sim.sync_dir(dir).expect("sim sync dir");
    sim
}

/// Session name → event count, as a store sees it.
pub fn lengths(store: &Store) -> Vec<(String, u64)> {
    store
        .sessions()
        .into_iter()
        .map(|s| (s.name, s.len))
        .collect()
}

/// One stored event: (session, seq, kind, flags, payload).
pub type StoredEvent = (String, u64, u16, u16, Vec<u8>);

/// Every event of every session.
pub fn all_events(store: &Store) -> turnstone::Result<Vec<StoredEvent>> {
    let mut out = Vec::new();
    for s in store.sessions() {
        if s.len == 0 {
            continue;
        }
        for e in store.read_range(&s.name, 0..s.len)? {
            out.push((s.name.clone(), e.seq.0, e.kind, e.flags, e.payload));
        }
    }
    Ok(out)
}
