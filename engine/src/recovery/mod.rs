//! Recovery: decide, from the bytes alone, where the durable log ends and
//! whether damage is a *torn tail* (a power cut explains it: lose only
//! unacknowledged events) or *corruption* (no power cut explains it: refuse,
//! naming file and offset). Invariants 1 and 3 of ARCHITECTURE.md; the rule
//! is `format-spec/FORMAT.md` §6.
//!
//! Three steps, each its own file: [`scan`] reads the bytes (headers,
//! batches, frames; the one scanner, also used by [`crate::inspect`]);
//! [`classify`] turns what a scan saw where it stopped into a row of §6.3
//! (pure functions, also used by [`crate::inspect`]); `plan` runs the pass on
//! open and returns what to zero, remove and index (`layout` lists the
//! segment files, compacted ones included), which `apply` applies before
//! the store's first append. `checkpoint_check` decides whether an index
//! checkpoint may stand in for the scan of what it covers; `salvage` is the
//! read-only mode that keeps every frame whose own checksum holds.
//!
//! Why the bytes say where the durable region ends: the engine writes at most
//! one batch between two completed fdatasyncs, and a new segment is created only
//! after the previous one's last batch was synced. So at a power cut only the
//! last batch of the last segment can be in flight. A failing batch is a torn
//! tail iff it is in the last segment and no valid batch with a later sequence
//! number follows it (and no index checkpoint claims it was durable).

mod apply;
mod checkpoint_check;
mod classify;
mod layout;
mod plan;
mod recovered;
mod salvage;
mod scan;

use std::path::PathBuf;

use serde::Serialize;

pub(crate) use apply::apply;
pub use classify::{classify_bad_header, classify_stop, HeaderFacts, Row, StopFacts};
pub(crate) use plan::recover;
pub use scan::{
    batch_salt, check_batch, evidence_after, probe_after, scan_batches, ScanFailure, ScannedFrame,
    SegmentScan,
};

/// What to do with damage found on open, modelled on RocksDB's WAL recovery
/// modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryMode {
    /// Any torn tail or corruption refuses the open.
    AbsoluteConsistency,
    /// Truncate a torn tail (default); refuse corruption.
    #[default]
    TolerateTornTail,
    /// Stop at the first damage of any kind and discard everything after it
    /// (torn or corrupt): the store opens at the last consistent point.
    PointInTime,
    /// Read-only: keep every frame whose own checksum holds, past any damage
    /// (RocksDB's skip-any-corrupted-records), as far as each session's seqs
    /// stay dense; report every frame dropped. Changes no byte.
    Salvage,
}

/// What kind of damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    /// An incomplete write at the end of the log, explained by a power cut
    /// (FORMAT.md §6.3).
    TornTail,
    /// Damage no power cut explains.
    Corruption,
}

/// One piece of damage found by the recovery pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Torn tail or corruption.
    pub kind: ProblemKind,
    /// The segment file with the damage.
    pub file: PathBuf,
    /// Where the damage starts in `file`, in bytes.
    pub offset: u64,
    /// Bytes affected (torn bytes zeroed, or bytes discarded/skipped).
    pub bytes: u64,
    /// What is wrong, for a human.
    pub detail: String,
    /// What recovery did about it.
    pub action: String,
}

/// What the recovery pass did; returned by [`crate::Store::open`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoveryReport {
    /// The recovery mode the pass ran in.
    pub mode: RecoveryMode,
    /// Segment files in the store.
    pub segments: u32,
    /// Segment files read (those before a usable checkpoint are skipped).
    pub segments_scanned: u32,
    /// Batches validated.
    pub batches_scanned: u64,
    /// Frames in the batches validated.
    pub frames_scanned: u64,
    /// Segment data read and checked, in bytes.
    pub bytes_scanned: u64,
    /// The pass started from the index checkpoint instead of the first
    /// segment.
    pub checkpoint_used: bool,
    /// Why an index checkpoint was present but not used.
    pub checkpoint_discarded: Option<String>,
    /// The last run ended with a clean close.
    pub clean_shutdown: bool,
    /// Torn-tail bytes cut off the log (zeroed in place), in bytes.
    pub torn_bytes_truncated: u64,
    /// Sessions in the recovered index.
    pub sessions: u64,
    /// Events over all sessions (inherited ones counted per fork).
    pub events: u64,
    /// Every piece of damage found, in log order.
    pub problems: Vec<Problem>,
    /// Wall-clock time of the pass, in microseconds.
    pub duration_us: u64,
}
