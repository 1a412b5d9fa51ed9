//! Deleting a session: the `session/delete` tombstone (FORMAT.md §10).
//!
//! The log is append-only, so a delete is an event: a durable tombstone,
//! always the session's last event (the session layer appends nothing after
//! it). From the moment it is durable, loads refuse the session with
//! [`Error::SessionDeleted`] (a "not found"), and lists and search leave it
//! out. Fork children keep working: they hold the events they inherit by
//! reference, and the tombstone lies past every fork point (a deleted
//! session cannot be forked). The deleted session's own frames become
//! reclaimable; reclaiming them is the storage-lifecycle work, not done here.

use crate::error::{Error, Result};
use crate::session::event::{self, CoreKind};
use crate::store::Store;

/// Seq of the session's tombstone, if it is deleted: one read of its last
/// durable event (the tombstone is always last, and a delete returns only
/// once it is durable). Like every view it reads only durable events and
/// causes no sync. `Error::UnknownSession` if the store has no such session.
pub fn deleted_at(store: &Store, id: &str) -> Result<Option<u64>> {
    let len = store
        .session_meta(id)
        .ok_or_else(|| Error::UnknownSession(id.to_string()))?
        .durable_len;
    let Some(last) = len.checked_sub(1) else {
        return Ok(None);
    };
    let e = store.read(id, last)?;
    Ok((e.kind == CoreKind::SessionDelete.code()).then_some(last))
}

/// `Ok(())` if `id` exists, is not deleted and is not expired by the
/// store's retention policy; else the typed not-found error
/// ([`Error::UnknownSession`], [`Error::SessionDeleted`] or
/// [`Error::SessionExpired`]).
pub fn check_not_deleted(store: &Store, id: &str) -> Result<()> {
    match deleted_at(store, id)? {
        Some(seq) => Err(Error::SessionDeleted {
            session: id.to_string(),
            seq,
        }),
        None => crate::session::retention::check_not_expired(store, id),
    }
}

/// Delete session `id`: append its `session/delete` tombstone and wait
/// until it is durable. Refused while a writable handle holds the session
/// ([`Error::SessionLive`]: delete through that handle with
/// [`crate::session::Session::delete`]); a session already deleted, or
/// unknown, is not found. Returns the tombstone's seq.
///
/// ```
/// # use std::sync::Arc;
/// # use turnstone::session::*;
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
/// let mut s = Session::create(store.clone(), "s1", Arc::new(Registry::new())).unwrap();
/// s.append(UserMessage { content: vec![ContentBlock::text("hi")] }, SurfaceOp::Append).unwrap();
/// drop(s);
/// delete(&store, "s1").unwrap();
/// assert!(Session::open_read_only(store.clone(), "s1", Arc::new(Registry::new()))
///     .unwrap_err()
///     .is_not_found());
/// assert!(query::list_sessions(&store, &Registry::new()).unwrap().is_empty());
/// ```
pub fn delete(store: &Store, id: &str) -> Result<u64> {
    check_not_deleted(store, id)?;
    let handle = store
        .live_sessions()
        .claim(id, event::now_ms())
        .map_err(|since_ms| Error::SessionLive {
            session: id.to_string(),
            since_ms,
        })?;
    let result = (|| {
        let len = store
            .session_len(id)
            .ok_or_else(|| Error::UnknownSession(id.to_string()))?;
        let payload = event::encode_core(&event::SessionDelete {}, None);
        let a = store.append(id, CoreKind::SessionDelete.code(), 0, &payload)?;
        if a.seq.0 != len {
            return Err(Error::Refused(format!(
                "session {id:?} was appended to while it was being deleted"
            )));
        }
        store.wait_durable(a.end)?;
        Ok(a.seq.0)
    })();
    store.live_sessions().release(id, handle);
    result
}
