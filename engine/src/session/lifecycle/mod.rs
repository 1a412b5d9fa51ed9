//! Lifecycle: the end of a session. The `session/delete` tombstone, the
//! store's retention policy, and collection with the session layer's
//! liveness rules.

pub mod blobs;
pub mod delete;
pub mod gc;
pub mod retention;
