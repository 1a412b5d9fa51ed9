//! Segment collection with the session layer's liveness rule: a session
//! whose last event is its `session/delete` tombstone (FORMAT.md §10) is
//! dead, and its frames past every live fork point are reclaimed
//! ([`crate::gc::collect`], FORMAT.md §14). Retention (expiring sessions by
//! age or size) is not built: only deleted sessions are collected.

use std::path::Path;

use crate::error::Result;
use crate::gc::{CollectOptions, CollectReport};
use crate::session::event::CoreKind;

/// Collect the store in `dir`: every deleted session's garbage.
pub fn collect(dir: impl AsRef<Path>, opts: &CollectOptions) -> Result<CollectReport> {
    let tombstone = CoreKind::SessionDelete.code();
    crate::gc::collect(dir.as_ref(), opts, &|c| {
        c.last.is_some_and(|(kind, _)| kind == tombstone)
    })
}
