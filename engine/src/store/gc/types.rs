//! The public face of a collection (FORMAT.md §14): what a caller passes
//! in ([`CollectOptions`]), what the liveness rule is asked about
//! ([`CollectCandidate`]) and what comes back ([`CollectReport`]).
//!
//! Plain data, no I/O. The rule's answer is the only thing the collector
//! takes from outside about which sessions are dead (§14.1: the engine
//! treats payloads as opaque); everything else it decides from the log.

use std::sync::Arc;

use serde::Serialize;

use crate::types::LogPos;
use crate::vfs::{OsVfs, Vfs};

/// How a collection runs.
#[derive(Debug, Clone)]
pub struct CollectOptions {
    /// The file layer (the simulated one in crash tests).
    pub vfs: Arc<dyn Vfs>,
    /// A sealed segment is rewritten when its live bytes are below this
    /// fraction of its data (0.0 rewrites only segments with no live
    /// frame; 1.0 every segment holding garbage). Default 0.5.
    pub threshold: f64,
    /// Live bytes at most in one compacted file: a longer run of selected
    /// segments is split into several ranges. Default 256 MiB.
    pub max_range_bytes: u64,
    /// Decide and report, change nothing (no repair either).
    pub dry_run: bool,
    /// Also rewrite sealed segments that hold no garbage (every ordinary
    /// sealed segment is selected), so that each session's frames sit
    /// together in the compacted files (FORMAT.md §14.3: frames grouped by
    /// session): the locality a cold read of one session wants (issue 21).
    /// Already compacted files without garbage are left alone.
    pub regroup: bool,
    /// An online collection ([`crate::Store::collect`]) reads and writes at
    /// most this many bytes per second on average (`None`: no limit; the
    /// on-demand collection ignores it).
    pub rate_bytes_per_sec: Option<u64>,
    /// Keep at most this many bytes of live frames in the sealed segments
    /// (retention by size): when over, sessions are evicted (declared
    /// dead) oldest last event first, those the rule allows
    /// ([`CollectCandidate::evicting`]). Counted from the sealed segments
    /// only; the active segment is not.
    pub max_live_bytes: Option<u64>,
}

impl Default for CollectOptions {
    fn default() -> Self {
        CollectOptions {
            vfs: Arc::new(OsVfs),
            threshold: 0.5,
            max_range_bytes: 256 << 20,
            dry_run: false,
            regroup: false,
            rate_bytes_per_sec: None,
            max_live_bytes: None,
        }
    }
}

/// One session, as the liveness rule sees it.
#[derive(Debug)]
pub struct CollectCandidate<'a> {
    /// The session's string id.
    pub name: &'a str,
    /// Events, inherited ones included.
    pub len: u64,
    /// Kind and payload of its first own event (a fork's first event after
    /// its fork point; `None` if it has none).
    pub first: Option<(u16, &'a [u8])>,
    /// Kind and payload of its last event (`None` if it has none).
    pub last: Option<(u16, &'a [u8])>,
    /// A writable handle holds the session in this process (an online
    /// collection; always false on demand, where the store is closed).
    /// Retention never expires a held session.
    pub held: bool,
    /// The question is not "is it dead?" but "may it be evicted to bring
    /// the live bytes under `CollectOptions::max_live_bytes`?" (asked of
    /// sessions not dead, oldest last event first).
    pub evicting: bool,
}

/// What a collection did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CollectReport {
    /// Nothing was changed: the report says what would have been done.
    pub dry_run: bool,
    /// Sealed segment files looked at (the last segment is never touched).
    pub segments_examined: u32,
    /// Compacted files written (one per range).
    pub ranges_rewritten: u32,
    /// Segment files removed (the other files of each range).
    pub segment_files_removed: u32,
    /// Sessions dead at this collection that were not reclaimed before.
    pub sessions_reclaimed: u64,
    /// Of those, the ones evicted by `max_live_bytes`.
    pub sessions_evicted: u64,
    /// Bytes of the sealed segment files before.
    pub bytes_before: u64,
    /// Bytes of live frames in them (FORMAT.md §14.1), padding included.
    pub bytes_live: u64,
    /// Bytes of the sealed segment files after.
    pub bytes_after: u64,
    /// `bytes_before - bytes_after` (0 if a rewrite grew the files: one
    /// batch header per session in a compacted file can outweigh a little
    /// garbage).
    pub bytes_reclaimed: u64,
    /// Blob files looked at (FORMAT.md §15; filled by the session layer's
    /// collection, [`crate::session::gc`], after the segments).
    pub blobs_examined: u64,
    /// Blob files no live event references, removed (or, dry, that would be).
    pub blobs_removed: u64,
    /// Their bytes.
    pub blob_bytes_reclaimed: u64,
    /// Wall-clock time of the collection, in microseconds.
    pub duration_us: u64,
    /// Bytes of segment files read and written by this collection (an
    /// online collection reads only segments sealed since its last run,
    /// and the ones it rewrites).
    pub bytes_io: u64,
    /// Define frames a rewrite moved (session, old position, new
    /// position): derived files keyed by a session's define position (its
    /// snapshots, FORMAT.md §12 and §17) can follow them
    /// (the session layer's `rebase_defines`).
    #[serde(skip)]
    pub moved_defines: Vec<(String, LogPos, LogPos)>,
    /// An online collection found a session it had decided was dead
    /// written to (or forked) before it could reclaim it, and changed
    /// nothing; the next collection decides again.
    pub retry: bool,
}
