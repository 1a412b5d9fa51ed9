//! A session created from prior history larger than one commit batch.
//!
//! A batch is all or nothing, and at most [`LogHandle::group_bytes_max`]
//! bytes. Longer history is written to a *staging* session (named
//! [`STAGING_PREFIX`]…) in as many batches as it takes, made durable, and
//! the session is then defined as a fork of it holding all of its events
//! (FORMAT.md §5): that one define frame is what makes the session exist,
//! so after a crash the session is wholly there or absent. The staging
//! session is then deleted (its frames stay, read through the fork). A
//! staging session left by a crash is deleted by the next staged creation
//! in the store; until then it is listed like any other session.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::frame::{define_frame_padded_len, frame_padded_len};
use crate::session::codec::envelope::{self, EncodedEvent};
use crate::session::handle::Session;
use crate::session::lifecycle::delete::{delete, deleted_at};
use crate::session::log::LogHandle;
use crate::session::views::query::searchable_text;
use crate::store::Store;

/// Names of staging sessions start with this.
pub const STAGING_PREFIX: &str = ".staging/";

impl Session {
    /// Write `items` as the first events of `s`'s session (empty, not yet
    /// defined, not claimed) through a staging session; return the session
    /// restored from the log, claimed (first where the log claims names,
    /// [`crate::backend::EventLog::claims_names`]; otherwise after the fork
    /// that defines it).
    pub(in crate::session) fn create_staged(
        mut s: Session,
        items: Vec<EncodedEvent>,
        limit: usize,
    ) -> Result<Session> {
        let log = s.log.clone();
        let registry = s.registry.clone();
        let id = s.id.to_string();
        // Every check an append makes, against the session's own name,
        // before anything is written.
        s.fold_unwritten(&items)?;
        if log.as_log().claims_names() {
            s.claim()?;
        }
        let reg = registry.clone();
        let lens: Vec<usize> = items.iter().map(|e| e.payload.len()).collect();
        make_through_staging(&log, &id, &lens, limit, |staging, range| {
            let (len, chunk) = (range.start as u64, &items[range]);
            // Checked above: written as they are, blocks out of line on
            // the embedded store, text indexed on another log.
            let text = |i: usize| {
                let e = &chunk[i];
                envelope::decode(len + i as u64, e.kind, e.flags, &e.payload, &reg)
                    .ok()
                    .and_then(|ev| searchable_text(&ev))
            };
            let (first, _) = log.append_group(staging, &mut None, len, chunk, text)?;
            debug_assert!(first.is_none_or(|f| f == len));
            Ok(())
        })?;
        let mut out = Self::restore(log, &id, registry, false)?;
        match s.live_handle.take() {
            Some(h) => {
                out.live_handle = Some(h);
                out.took_over = s.took_over;
            }
            None => out.claim()?,
        }
        Ok(out)
    }
}

/// A staging name no other process or thread uses now.
fn staging_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{STAGING_PREFIX}{}-{}-{}",
        crate::types::now_ms(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Create the session `id` from `events` (kind, flags, payload: bytes
/// as stored, blobs already in place) all or nothing, through a staging
/// session when they do not fit one batch; nothing checks them (a restore
/// of an archive, whose file is checksummed).
pub fn create_from_raw(store: &Arc<Store>, id: &str, events: &[(u16, u16, &[u8])]) -> Result<()> {
    if events.is_empty() {
        store.create_session(id)?;
        return store.sync_session(id);
    }
    let limit = store.group_bytes_max();
    let lens: Vec<usize> = events.iter().map(|e| e.2.len()).collect();
    if group_bytes(id, lens.iter().copied()) <= limit {
        store.append_group(id, events, |_| {})?;
        return store.sync_session(id);
    }
    let log = LogHandle::from(store.clone());
    make_through_staging(&log, id, &lens, limit, |staging, range| {
        store.append_group(staging, &events[range], |_| {})?;
        Ok(())
    })
}

/// The bytes of one group holding a session's define frame (for `id`)
/// and events with payloads of `lens` bytes.
pub(in crate::session) fn group_bytes(id: &str, lens: impl Iterator<Item = usize>) -> usize {
    define_frame_padded_len(id.len(), false) + lens.map(frame_padded_len).sum::<usize>()
}

/// Write events whose payloads are `lens` bytes long to a new staging
/// session, in batches of at most `limit` bytes with `append` (given the
/// staging name and the range of events of the batch, which starts at the
/// staging session's length), wait until all are durable, define `id` as
/// a fork holding them all and make that durable, then delete the staging
/// session. On a failure before the fork, the staging session is deleted
/// and `id` does not exist.
fn make_through_staging(
    log: &LogHandle,
    id: &str,
    lens: &[usize],
    limit: usize,
    mut append: impl FnMut(&str, Range<usize>) -> Result<()>,
) -> Result<()> {
    delete_leftovers(log);
    let staging = staging_name();
    let n = lens.len() as u64;
    if !log.as_log().claims_names() {
        // This log claims a session that exists.
        log.as_log().create_session(&staging)?;
    }
    // Held while it is written: another creation's `delete_leftovers`
    // skips it (a tombstone inside it would be inherited by `id`).
    let claim = match log.claim(&staging) {
        Ok(c) => c,
        Err(e) => {
            let _ = delete(log, &staging);
            return Err(e);
        }
    };
    let written = (|| {
        let mut room = limit.saturating_sub(group_bytes(&staging, std::iter::empty()));
        let mut start = 0;
        let mut used = 0;
        for (i, &len) in lens.iter().enumerate() {
            let need = frame_padded_len(len);
            if used + need > room && start < i {
                append(&staging, start..i)?;
                start = i;
                used = 0;
                room = limit;
            }
            if need > room {
                return Err(Error::TooLarge {
                    what: "event",
                    len: need as u64,
                    max: room as u64,
                });
            }
            used += need;
        }
        if start < lens.len() {
            append(&staging, start..lens.len())?;
        }
        log.as_log().sync_session(&staging)
    })();
    log.release(&staging, claim.id);
    if let Err(e) = written {
        let _ = delete(log, &staging);
        return Err(e);
    }
    let made = log
        .as_log()
        .fork(&staging, n, id)
        .and_then(|()| log.as_log().sync_session(id));
    // The session exists (or not) from here: the staging session's
    // tombstone only makes it collectable.
    let _ = delete(log, &staging);
    made
}

/// Delete staging sessions a crash left (best effort: one another
/// process or thread is writing is claimed, refused and skipped).
fn delete_leftovers(log: &LogHandle) {
    let _ = delete_staging_leftovers(log);
}

/// Delete the staging sessions (`.staging/…`) that interrupted creations
/// from history left, and return their names; one that another process or
/// thread is writing now is claimed, so it is refused and skipped
/// (`turnstone recover` runs this).
pub fn delete_staging_leftovers(log: impl Into<LogHandle>) -> Result<Vec<String>> {
    let log = log.into();
    let mut deleted = Vec::new();
    for name in log.as_log().sessions()? {
        if name.starts_with(STAGING_PREFIX)
            && matches!(deleted_at(&log, &name), Ok(None))
            && delete(&log, &name).is_ok()
        {
            deleted.push(name);
        }
    }
    Ok(deleted)
}
