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
use crate::session::codec::envelope;
use crate::session::codec::event::{self, CoreKind};
use crate::session::log::LogRef;

/// Seq of the session's tombstone, if it is deleted: one read of its last
/// durable event (the tombstone is always last, and a delete returns only
/// once it is durable). Like every view it reads only durable events and
/// causes no sync. `Error::UnknownSession` if the store has no such session.
pub fn deleted_at<'a>(log: impl Into<LogRef<'a>>, id: &str) -> Result<Option<u64>> {
    let log = log.into();
    let len = log
        .durable_len(id)?
        .ok_or_else(|| Error::UnknownSession(id.to_string()))?;
    let Some(last) = len.checked_sub(1) else {
        return Ok(None);
    };
    let kind = log.stored_event(id, last)?.kind;
    Ok((kind == CoreKind::SessionDelete.code()).then_some(last))
}

/// `Ok(())` if `id` exists, is not deleted and is not expired by the
/// store's retention policy; else the typed not-found error
/// ([`Error::UnknownSession`], [`Error::SessionDeleted`] or
/// [`Error::SessionExpired`]).
pub fn check_not_deleted<'a>(log: impl Into<LogRef<'a>>, id: &str) -> Result<()> {
    let log = log.into();
    match deleted_at(log, id)? {
        Some(seq) => Err(Error::SessionDeleted {
            session: id.to_string(),
            seq,
        }),
        // A log without a retention policy (retention.json) expires nothing.
        None => crate::session::lifecycle::retention::check_not_expired(log, id),
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
/// assert!(list_sessions(&store).unwrap().is_empty());
/// ```
pub fn delete<'a>(log: impl Into<LogRef<'a>>, id: &str) -> Result<u64> {
    let log = log.into();
    check_not_deleted(log, id)?;
    let l = log.as_log();
    let claim = l.claim(id)?;
    let result = (|| {
        let len = log
            .appended_len(id)?
            .ok_or_else(|| Error::UnknownSession(id.to_string()))?;
        let payload = envelope::encode_core(&event::SessionDelete {}, None);
        let seq = l.append_group(id, &[(CoreKind::SessionDelete.code(), 0, &payload)])?;
        if seq != len {
            return Err(Error::Refused(format!(
                "session {id:?} was appended to while it was being deleted"
            )));
        }
        l.sync_session(id)?;
        Ok(seq)
    })();
    l.release(id, claim.id);
    let seq = result?;
    l.mark_deleted(id)?;
    Ok(seq)
}
