//! turnstone: an embedded, event-sourced storage engine for AI-agent sessions.
//!
//! Layers, bottom to top (lower layers never import higher ones):
//!
//! | module | owns |
//! |---|---|
//! | [`vfs`], `sim` | file access (real, or simulated with crashes and faults: `sim`, hidden, for the crash tests, the fuzz targets and `torture`); `derived` writes derived files atomically |
//! | `frame` | byte layouts: segment header, batch header, frame (`format-spec/FORMAT.md`; hidden: the CLI's `dump` and the fuzz targets use it, users read [`inspect`]) |
//! | `log/` | segment files (create, name, list, zero a torn tail) and the one segment reader |
//! | `commit/` | group commit: batches, the commit queue, the flusher (poisons on panic), durable position |
//! | `index/` | seq-dense per-session index (its own lock) and its checkpoint file |
//! | `recovery/` | one scanner, one classification of FORMAT.md §6.3 rows, the plan; salvage |
//! | [`inspect`] | the same scanner and classification for `verify`/`dump`: resync and carry on |
//! | `store` | [`Store`], the façade: lock, open (plan + apply), append, sync, read, fork, close; [`gc`], segment collection (FORMAT.md §14) |
//! | [`session`] | the session layer: typed events, surface, derive_messages, request headers |
//! | [`share`] | several processes on one store: the lock holder hosts it on a Unix socket, the others are its clients |
//!
//! Lower-layer modules are private; their public types are re-exported here.
//! `frame`, `sim` and `internals` are `#[doc(hidden)]`: the
//! CLI, the fuzz targets and the tests drive them, and they are not a
//! stable API.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let store = turnstone::Store::open(dir.path()).unwrap();
//! let a = store.append("session-1", 5, 0, b"hello").unwrap();
//! store.wait_durable(a.end).unwrap(); // one fdatasync, shared with other appenders
//! assert_eq!(store.read("session-1", 0).unwrap().payload, b"hello");
//! store.close().unwrap();
//! ```
#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
mod commit;
mod derived;
mod error;
#[doc(hidden)]
pub mod frame;
mod index;
pub mod inspect;
pub mod live;
mod log;
mod recovery;
pub mod session;
pub mod share;
#[doc(hidden)]
pub mod sim;
mod store;
mod types;
#[allow(unsafe_code)]
pub mod vfs;

pub use commit::Stats;
pub use error::{Difference, Error, RangeError, Result};
pub use recovery::{Problem, ProblemKind, RecoveryMode, RecoveryReport, Row};
pub use store::gc;
pub use store::{archive, blobs};
pub use store::{
    DurableWait, NextEvent, Options, ReadyWait, SessionInfo, SessionMeta, Store, Subscription,
    FIRST_SEGMENT, FOLLOW_POLL, LOCK_FILE,
};
pub use types::{Appended, Event, EventRef, LogPos, SegmentId, Seq, SessionId};

/// Byte-level internals that the fuzz targets, the vector generator and the
/// format tests drive directly. Not a stable API: use [`Store`] and
/// [`inspect`].
#[doc(hidden)]
pub mod internals {
    pub use crate::index::checkpoint::{
        Checkpoint, Delta, DeltaRecord, CHECKPOINT_FILE, CHECKPOINT_TMP_FILE, DELTA_PREFIX,
        DELTA_TMP_FILE,
    };
    pub use crate::index::{Index, SessionEntry};
    pub use crate::recovery::{
        check_batch, classify_bad_header, classify_stop, probe_after, scan_batches, HeaderFacts,
        ScanFailure, ScannedFrame, SegmentScan, StopFacts,
    };
}
