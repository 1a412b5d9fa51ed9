//! turnstone's event log on PostgreSQL (issue 18, first part).
//!
//! The same log the embedded store keeps in segment files, in three tables
//! (see [`schema`]): every session has dense seqs from 0, events are
//! appended in groups that commit atomically, a session can be forked by
//! reference (the child reads its parent's events below the fork seq), and
//! deletion is a flag that also fences the session's writer. What this
//! backend adds is what one machine cannot give:
//!
//! - **Leases with fencing epochs.** A writer holds a session through a
//!   lease ([`PgLog::acquire`]); every acquisition increments the session's
//!   epoch, and every commit checks the writer's epoch in the same statement
//!   that writes its events. A writer whose lease was taken over (paused,
//!   partitioned, presumed dead) gets [`PgError::Fenced`] and writes
//!   nothing: two writers can never both append to one session.
//! - **Group commit.** Appends are buffered in this process; a committer
//!   thread writes every pending event of its sessions in one transaction
//!   (an `UPDATE` that checks and advances every session, a binary `COPY`
//!   of the events, the notifications, `COMMIT`: one WAL flush for all of
//!   them), like the embedded store's commit batch. Sessions are spread
//!   over a few such commit lanes ([`PgOptions::lanes`]), each with its own
//!   connection, so commits overlap; a session always uses the same lane,
//!   so its events commit in order. `synchronous_commit` is left on: a
//!   commit returns once PostgreSQL has flushed its WAL.
//! - **Live follow by LISTEN/NOTIFY**: each commit notifies channel
//!   `turnstone_events` with `"<session> <len>"`; a log's followers
//!   ([`Subscription`]) share one listening connection and one reader
//!   thread (`follow.rs`), and each reads its session's row after the log
//!   listens, so no commit is missed.
//!
//! The session layer runs on this log through [`PgEventLog`] (the engine's
//! `EventLog` trait; docs/BACKENDS.md), and so do the CLI's commands on a
//! URL (`tools/src/copy.rs`, `tools/src/pg_views.rs`, `tools/src/place.rs`)
//! the Python and Node packages, and `turnstone serve` on a connection URL
//! (several instances over one database; its path table is in `streams.rs`).

mod collect;
mod commit;
mod error;
mod event_log;
mod follow;
mod lease;
mod pool;
mod read;
mod schema;
mod search;
mod sessions;
mod streams;
mod url;

use std::sync::Arc;
use std::time::Duration;

pub use collect::PgCollectReport;
pub use error::{PgError, Result};
pub use event_log::{engine_error, PgEventLog};
pub use follow::Subscription;
pub use lease::{Acquired, Writer};
pub use schema::SCHEMA_VERSION;
pub use streams::{LeaseRow, SessionLock, StreamExpiry, StreamRow};
pub use url::{is_url, redact};

use pool::{Inner, Owner};

/// One event read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub seq: u64,
    pub kind: u16,
    pub flags: u16,
    pub payload: Vec<u8>,
}

/// One search hit: the session it is reported under, the event's seq, the
/// matching text with the match in brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub session: String,
    pub seq: u64,
    pub snippet: String,
}

/// One session, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: String,
    /// Committed events, inherited ones included (the next seq).
    pub len: u64,
    /// `(parent, fork seq)` of a fork.
    pub parent: Option<(String, u64)>,
    pub created_ms: i64,
}

/// Options of [`PgLog::connect`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// How long a lease lasts after it is acquired or after the writer's
    /// last commit (each commit renews it).
    pub lease_ttl: Duration,
    /// Idle read connections kept for reuse.
    pub read_pool: usize,
    /// Commit lanes: committer threads, each with its connection, writing
    /// side by side (a session always uses the same one).
    pub lanes: usize,
    /// Renew the leases of this process's writers every third of
    /// `lease_ttl` (a thread), so a session waiting longer than the TTL
    /// between appends (a slow model call) keeps its writer. A process
    /// that stops (crash, SIGSTOP, a long pause) stops renewing, and its
    /// sessions can be taken over once their leases run out.
    pub renew_leases: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            lease_ttl: Duration::from_secs(30),
            read_pool: 4,
            lanes: 2,
            renew_leases: true,
        }
    }
}

/// Counters of the committer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgStats {
    /// Statements that committed events (one transaction each).
    pub commits: u64,
    /// Events committed.
    pub events: u64,
}

/// A connection to turnstone's tables in one PostgreSQL database. Cheap to
/// clone; [`PgLog::close`] stops the committer once its queue is written,
/// and so does dropping the last clone (a [`Writer`] holds one).
#[derive(Clone)]
pub struct PgLog {
    inner: Arc<Inner>,
    owner: Arc<Owner>,
}
