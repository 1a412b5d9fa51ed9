//! Views: reading a session or a store without writing to it. Replay and
//! fork, query and search, the catalog, projections and their snapshot
//! caches.

pub mod catalog;
pub mod projection;
pub mod query;
pub mod replay;
pub mod snapshot;
