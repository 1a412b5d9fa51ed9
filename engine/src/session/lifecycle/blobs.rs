//! Which blobs are live: the blobs referenced by the events of a session,
//! and by every session not deleted (FORMAT.md §15). Collection frees the
//! others.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::session::codec::blob_refs::{has_refs, payload_blobs};
use crate::session::lifecycle::delete::deleted_at;
use crate::store::Store;

/// Every blob an event of `session` (its inherited events included)
/// references.
pub fn session_blobs(store: &Store, session: &str) -> Result<BTreeSet<[u8; 32]>> {
    let len = store
        .session_len(session)
        .ok_or_else(|| Error::UnknownSession(session.to_string()))?;
    let mut out = BTreeSet::new();
    let mut failed = None;
    store.visit_range(session, 0..len, |e| {
        if has_refs(e.payload) {
            match payload_blobs(store.blobs(), e.payload) {
                Ok(s) => out.extend(s),
                Err(err) => {
                    failed = Some(err);
                    return std::ops::ControlFlow::Break(());
                }
            }
        }
        std::ops::ControlFlow::Continue(())
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Every blob a live event references: the events of every session that
/// is not deleted, inherited ones included (so a fork keeps the blobs of
/// its deleted parent's prefix). A collector frees the blobs of
/// [`crate::blobs::BlobDir::list`] not in this set (`session::gc`; online,
/// under a [`crate::blobs::BlobSweep`]). Checks every referenced blob on
/// the way.
pub fn referenced_blobs(store: &Store) -> Result<BTreeSet<[u8; 32]>> {
    let mut out = BTreeSet::new();
    for info in store.sessions() {
        if deleted_at(store, &info.name)?.is_some() {
            continue;
        }
        out.extend(session_blobs(store, &info.name)?);
    }
    Ok(out)
}
