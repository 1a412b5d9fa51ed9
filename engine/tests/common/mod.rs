//! Small helpers shared by the crash, fault and damage tests.
#![allow(dead_code)]

pub mod gc_fleet;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Options, Store};

/// Directory of the simulated stores.
pub const DIR: &str = "/store";

pub fn dir() -> PathBuf {
    PathBuf::from(DIR)
}

/// Options for a store on the simulator with small segments.
pub fn sim_opts(sim: &SimVfs, segment_bytes: u32) -> Options {
    Options {
        vfs: Arc::new(sim.clone()),
        segment_bytes,
        ..Default::default()
    }
}

/// Path of segment `n` in `dir`.
pub fn seg(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:010}.tseg"))
}

/// Stop a store the way a power cut does: no clean close, nothing written
/// after this point reaches the simulated disk. The caller then calls
/// `sim.crash(seed)` to reboot.
pub fn cut_power_and_drop(sim: &SimVfs, store: Store) {
    sim.set_faults(FaultPlan {
        power_cut_after_ops: Some(sim.ops()),
        ..Default::default()
    });
    drop(store);
}

/// A payload that is a deterministic function of session and seq (any byte
/// mix-up shows), of length `len`.
pub fn payload_for(session: &str, seq: u64, len: usize) -> Vec<u8> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in session.bytes().chain(seq.to_le_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x1000_0000_01b3);
    }
    (0..len)
        .map(|i| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            (h as u8) ^ (i as u8)
        })
        .collect()
}

/// Whether the file system of `dir` takes `O_DIRECT` writes (tmpfs does
/// not): tests of the direct paths check them only where it does.
#[allow(dead_code)]
pub fn direct_io_here(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join("direct-io-probe");
    std::fs::write(&probe, [0u8; 4096]).expect("probe");
    let ok = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .is_ok();
    std::fs::remove_file(&probe).expect("remove probe");
    ok
}
