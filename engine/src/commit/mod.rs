//! Group commit: the write-behind buffer, the flusher thread and the durable
//! position that waiters wait on.
//!
//! Appenders encode their frame into the *open batch* under one mutex
//! ([`queue`]) and return at once with the frame's final log position (batch
//! headers are reserved in front of the first frame, so positions never
//! move, [`batch`]). The flusher ([`flusher`]) takes the open batch whenever
//! someone waits for durability (or enough bytes are pending), writes it with
//! one `write` and makes it durable with one `fdatasync`; while it syncs, the
//! next batch fills. So one fdatasync covers every session that appended in
//! the meantime, and no timer is involved.
//!
//! Invariants kept here (ARCHITECTURE.md): 1 (durable prefix: batches are
//! written in order, one at a time, each synced before the next is written, so
//! at a crash only the last batch can be in flight), 7/8 (the durable position
//! moves only after a successful fdatasync; an fdatasync error — or a panic of
//! the flusher — poisons the store and nothing after it is acknowledged; a
//! failed *write* keeps the batch, in order, for an explicit retry that
//! rewrites it from our own buffer).

mod batch;
mod direct;
mod flusher;
mod follow_wait;
mod queue;
mod stats;

pub(crate) use flusher::{run as run_flusher, FlusherEnv, WriterFile};
pub(crate) use follow_wait::Change;
pub(crate) use queue::{CommitQueue, RetryState, State};
pub use stats::Stats;
