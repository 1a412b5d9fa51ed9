//! turnstone: an embedded, event-sourced storage engine for AI-agent sessions.
//!
//! Layers, bottom to top (lower layers never import higher ones):
//!
//! | module | owns |
//! |---|---|
//! | [`vfs`], [`sim`] | file access (real, or simulated with crashes and faults) |
//! | [`frame`] | byte layouts: segment header, batch header, frame (`format-spec/FORMAT.md`) |
//! | [`recovery`] | the recovery pass: torn tail vs corruption |
//! | [`commit`] | group commit: write-behind batches, flusher, durable position |
//! | [`index`], [`checkpoint`] | seq-dense per-session index and its checkpoint file |
//! | [`store`] | [`Store`]: lock, open, append, sync, read, fork, close |
//! | [`session`] | the session layer: typed events, surface, derive_messages, request headers |
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

pub mod checkpoint;
pub mod commit;
mod derived;
pub mod error;
pub mod frame;
pub mod index;
pub mod inspect;
mod log;
pub mod recovery;
pub mod session;
pub mod sim;
pub mod store;
pub mod types;
#[allow(unsafe_code)]
pub mod vfs;

pub use commit::Stats;
pub use error::{Error, Result};
pub use recovery::{Problem, ProblemKind, RecoveryMode, RecoveryReport};
pub use store::{Options, SessionInfo, SessionMeta, Store};
pub use types::{Appended, Event, EventRef, LogPos, SegmentId, Seq, SessionId};
