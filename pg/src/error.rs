//! Typed errors of the PostgreSQL log.

/// What can go wrong, naming the session and the operation.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The database refused or could not be reached; nothing of the
    /// operation is acknowledged.
    #[error("PostgreSQL, {op}: {source}")]
    Database {
        op: &'static str,
        #[source]
        source: postgres::Error,
    },
    /// This writer's lease on the session was taken over (or the session
    /// was deleted): its pending events were not written, and it can write
    /// nothing more until it acquires the session again.
    #[error("session {session:?}: fenced (this writer holds epoch {held}; the session is at epoch {current})")]
    Fenced {
        session: String,
        held: i64,
        current: i64,
    },
    /// Another writer holds a live lease on the session.
    #[error("session {session:?}: leased by {owner:?} for {remaining_ms} ms more")]
    LeaseHeld {
        session: String,
        owner: String,
        remaining_ms: i64,
    },
    #[error("session {0:?} does not exist")]
    UnknownSession(String),
    #[error("session {0:?} was deleted")]
    SessionDeleted(String),
    #[error("session {0:?} already exists")]
    SessionExists(String),
    #[error("session {session:?}: seq {seq} is past its end ({len})")]
    SeqOutOfRange { session: String, seq: u64, len: u64 },
    /// The schema in the database is newer than this code knows.
    #[error("the database's turnstone schema is version {found}; this build knows up to {known}")]
    SchemaTooNew { found: i32, known: i32 },
    /// An earlier commit of this writer failed; the outcome of its events
    /// is unknown to it, so it must acquire the session again (which reads
    /// what the database holds) before writing more.
    #[error("session {session:?}: an earlier commit failed ({detail}); acquire the session again")]
    WriterBroken { session: String, detail: String },
    /// A live follower stopped: its log's listening connection failed (a
    /// notification may have been missed). Subscribe again from the seq
    /// it reached.
    #[error("a follower stopped: {0}")]
    FollowerLost(String),
    /// The log was shut down.
    #[error("the log is closed")]
    Closed,
}

pub type Result<T> = std::result::Result<T, PgError>;

pub(crate) fn db(op: &'static str) -> impl FnOnce(postgres::Error) -> PgError {
    move |source| PgError::Database { op, source }
}
