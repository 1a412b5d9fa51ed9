//! The engine's one error type. Every variant says what happened and where, so
//! an operator can act on the message alone (invariant 10 of ARCHITECTURE.md).

use std::io;
use std::path::PathBuf;

/// Result alias for the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine, split by cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    #[error("I/O error during {op} on {path}: {source}")]
    Io {
        /// What the engine was doing, e.g. `"create segment"`.
        op: &'static str,
        /// The file or directory the call was made on.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Bytes that a completed fdatasync had made durable (or that a reader
    /// expected to be valid) fail validation: no power cut explains this.
    #[error("corruption in {file} at offset {offset}: {detail}")]
    Corrupt {
        /// The file holding the bad bytes.
        file: PathBuf,
        /// Where in `file` the bad bytes start, in bytes.
        offset: u64,
        /// Which check failed.
        detail: String,
    },
    /// The recovery mode forbids truncating a torn tail.
    #[error("torn tail in {file} at offset {offset} ({detail}); refused by recovery mode absolute-consistency")]
    TornTailRefused {
        /// The segment with the torn tail.
        file: PathBuf,
        /// Where the torn tail starts in `file`, in bytes.
        offset: u64,
        /// Why the tail is judged torn.
        detail: String,
    },
    /// A file that is not a turnstone file (bad magic, impossible header).
    #[error("{file} is not a turnstone {what}: {detail}")]
    NotTurnstone {
        /// The file that was read.
        file: PathBuf,
        /// The kind of file expected, e.g. `"segment"` or `"archive"`.
        what: &'static str,
        /// What about the file is wrong.
        detail: String,
    },
    /// A file written by a newer (or unknown) format version.
    #[error("{file} has format version {found}; this build reads version {supported}")]
    UnsupportedVersion {
        /// The file that was read.
        file: PathBuf,
        /// The format version the file declares.
        found: u32,
        /// The format version this build reads.
        supported: u32,
    },
    /// Another writer holds the store lock.
    #[error("store {dir} is locked by another writer (in this or another process): {detail}")]
    Locked {
        /// The store directory.
        dir: PathBuf,
        /// Why the lock could not be taken.
        detail: String,
    },
    /// The store directory does not exist (read-only open) or is not a directory.
    #[error("{dir} is not a turnstone store: {detail}")]
    NoStore {
        /// The path given as the store directory.
        dir: PathBuf,
        /// What is missing or wrong there.
        detail: String,
    },
    /// A write or fsync failed earlier; nothing after it is acknowledged.
    #[error("store is poisoned after a failed {op}: {detail}; reopen the store to recover from the durable log")]
    Poisoned {
        /// The operation that failed first, e.g. a write or an fsync.
        op: &'static str,
        /// The failure, as reported when it happened.
        detail: String,
    },
    /// A background write failed; the batch is kept in order and retried on the
    /// next explicit sync or close, which returns this error if it fails again.
    #[error("write of the pending batch failed and was kept for retry: {detail}")]
    WriteFailed {
        /// The failure of the last attempt.
        detail: String,
    },
    /// The store was closed.
    #[error("store is closed")]
    Closed,
    /// The store was opened read-only.
    #[error("store is open read-only")]
    ReadOnly,
    /// No session with that id.
    #[error("unknown session {0:?}")]
    UnknownSession(String),
    /// The session was deleted (a durable `session/delete` tombstone): it is
    /// not found, as an unknown session is not.
    #[error("session {session:?} not found: it was deleted (tombstone at seq {seq})")]
    SessionDeleted {
        /// The session id.
        session: String,
        /// The seq of the delete tombstone within the session.
        seq: u64,
    },
    /// The store's retention policy expired the session (`retention.json`,
    /// FORMAT.md §18): it is not found, like a deleted one.
    #[error("session {session:?} not found: it expired under the store's retention policy")]
    SessionExpired {
        /// The session id.
        session: String,
    },
    /// A session with that id already exists.
    #[error("session {0:?} already exists")]
    SessionExists(String),
    /// A seq outside `0..len`.
    #[error("seq {seq} out of range for session {session:?} (it has {len} events)")]
    SeqOutOfRange {
        /// The session id.
        session: String,
        /// The seq asked for.
        seq: u64,
        /// How many events the session has.
        len: u64,
    },
    /// A payload (or a group of events) larger than the format allows.
    #[error("{what} of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// What was too large, e.g. `"event payload"` or `"event group"`.
        what: &'static str,
        /// Its size, in bytes.
        len: u64,
        /// The largest size allowed, in bytes.
        max: u64,
    },
    /// A caller passed something invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Restore met an event kind that is neither known nor marked ignorable.
    #[error("session {session:?}: event at seq {seq} has unknown kind {kind:?} and is not marked ignorable; refusing to restore")]
    UnknownKind {
        /// The session id.
        session: String,
        /// The seq of the event within the session.
        seq: u64,
        /// The event's kind string.
        kind: String,
    },
    /// A stored session event does not decode or breaks a session rule.
    #[error("session {session:?}: event at seq {seq}: {detail}")]
    BadEvent {
        /// The session id.
        session: String,
        /// The seq of the event within the session.
        seq: u64,
        /// What does not decode or which rule it breaks.
        detail: String,
    },
    /// A session format version this build does not read.
    #[error("session {session:?}: event at seq {seq} has session format version {found}; this build reads version {supported}")]
    SessionFormat {
        /// The session id.
        session: String,
        /// The seq of the event within the session.
        seq: u64,
        /// The session format version the event declares.
        found: u32,
        /// The session format version this build reads.
        supported: u32,
    },
    /// A surface replace range outside the current surface.
    #[error(transparent)]
    SurfaceRange(#[from] RangeError),
    /// The session layer refused an operation (the reason says which rule).
    #[error("refused: {0}")]
    Refused(String),

    /// A writable handle already holds the session (it is live): a second
    /// writable load is refused; read-only views are allowed.
    #[error("session {session:?} is live (a writable handle holds it since {since_ms} ms after the epoch); a second writable load is refused, read-only views (messages, replay) are allowed")]
    SessionLive {
        /// The session id.
        session: String,
        /// When the holding handle took the session, ms since the epoch.
        since_ms: u64,
    },
    /// The full-text search index failed.
    #[error("search index {path}: {detail}")]
    Search {
        /// The index file (SQLite database).
        path: PathBuf,
        /// The SQLite error.
        detail: String,
    },
    /// A request differs from the one rebuildable from the log.
    #[error(transparent)]
    RequestMismatch(#[from] Difference),

    /// Another writer took the session over (a backend with leases, such
    /// as PostgreSQL): this writer's pending events were not written.
    #[error("session {session:?}: fenced: {detail}")]
    Fenced {
        /// The session id.
        session: String,
        /// The backend's account of the takeover.
        detail: String,
    },

    /// The process that hosts the store for this one (docs/MULTIPROCESS.md)
    /// went away before it answered: the request may or may not have taken
    /// effect (an append may be in the log, unacknowledged). Retry after
    /// loading the session again; another process hosts the store by then.
    #[error("the store's host process went away: {detail}")]
    HostLost {
        /// How the connection to the host was lost.
        detail: String,
    },

    /// A backend other than the embedded store failed (its database is
    /// down, refused a statement, ...): the operation is not acknowledged.
    #[error("{backend} backend, {op}: {detail}")]
    Backend {
        /// The backend's name, e.g. `"host"`.
        backend: &'static str,
        /// The operation that failed.
        op: String,
        /// The backend's error.
        detail: String,
    },
}

impl Error {
    /// A stable, snake_case name of the variant (`"unknown_session"`,
    /// `"too_large"`, `"corrupt"`, ...): what bindings and tools report as
    /// the error's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::Corrupt { .. } => "corrupt",
            Error::TornTailRefused { .. } => "torn_tail_refused",
            Error::NotTurnstone { .. } => "not_turnstone",
            Error::UnsupportedVersion { .. } => "unsupported_version",
            Error::Locked { .. } => "locked",
            Error::NoStore { .. } => "no_store",
            Error::Poisoned { .. } => "poisoned",
            Error::WriteFailed { .. } => "write_failed",
            Error::Closed => "closed",
            Error::ReadOnly => "read_only",
            Error::UnknownSession(_) => "unknown_session",
            Error::SessionDeleted { .. } => "session_deleted",
            Error::SessionExpired { .. } => "session_expired",
            Error::SessionExists(_) => "session_exists",
            Error::SeqOutOfRange { .. } => "seq_out_of_range",
            Error::TooLarge { .. } => "too_large",
            Error::InvalidArgument(_) => "invalid_argument",
            Error::UnknownKind { .. } => "unknown_kind",
            Error::BadEvent { .. } => "bad_event",
            Error::SessionFormat { .. } => "session_format",
            Error::SurfaceRange(_) => "surface_range",
            Error::Refused(_) => "refused",
            Error::SessionLive { .. } => "session_live",
            Error::Search { .. } => "search",
            Error::RequestMismatch(_) => "request_mismatch",
            Error::Fenced { .. } => "fenced",
            Error::Backend { .. } => "backend",
            Error::HostLost { .. } => "host_lost",
        }
    }

    /// The file (or directory) and byte offset the error is about, where it
    /// has them.
    pub fn location(&self) -> (Option<&std::path::Path>, Option<u64>) {
        match self {
            Error::Io { path, .. } => (Some(path), None),
            Error::Corrupt { file, offset, .. } | Error::TornTailRefused { file, offset, .. } => {
                (Some(file), Some(*offset))
            }
            Error::NotTurnstone { file, .. } | Error::UnsupportedVersion { file, .. } => {
                (Some(file), None)
            }
            Error::Locked { dir, .. } | Error::NoStore { dir, .. } => (Some(dir), None),
            Error::Search { path, .. } => (Some(path), None),
            _ => (None, None),
        }
    }

    /// Whether this is "no such session": unknown, or deleted.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Error::UnknownSession(_) | Error::SessionDeleted { .. } | Error::SessionExpired { .. }
        )
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(
        file: impl Into<PathBuf>,
        offset: u64,
        detail: impl Into<String>,
    ) -> Self {
        Error::Corrupt {
            file: file.into(),
            offset,
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_locations() {
        let e = Error::Corrupt {
            file: PathBuf::from("/s/0000000001.tseg"),
            offset: 4096,
            detail: "frame checksum".into(),
        };
        assert_eq!(e.kind(), "corrupt");
        let (p, o) = e.location();
        assert_eq!(
            (p.unwrap().to_str().unwrap(), o),
            ("/s/0000000001.tseg", Some(4096))
        );
        assert_eq!(Error::UnknownSession("x".into()).kind(), "unknown_session");
        assert_eq!(Error::UnknownSession("x".into()).location(), (None, None));
        let kinds = [
            Error::Closed.kind(),
            Error::ReadOnly.kind(),
            Error::InvalidArgument(String::new()).kind(),
            Error::Refused(String::new()).kind(),
            Error::SessionExists(String::new()).kind(),
        ];
        let distinct: std::collections::BTreeSet<_> = kinds.iter().collect();
        assert_eq!(distinct.len(), kinds.len());
    }
}

/// An invalid replace range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("replace range {start}..{end} is invalid for a surface of {len} nodes (need start <= end <= len)")]
pub struct RangeError {
    /// Start of the range asked for.
    pub start: u64,
    /// End of the range asked for.
    pub end: u64,
    /// Length of the surface.
    pub len: u64,
}

/// The first place where two requests differ.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("request differs from the log at {path}: log has {expected}, request has {actual}")]
pub struct Difference {
    /// JSON-pointer-like path (`/messages/3/content/0/text`).
    pub path: String,
    /// What the log rebuilds.
    pub expected: String,
    /// What the caller has.
    pub actual: String,
}
