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
    /// restored from the log, claimed (on the embedded store the claim is
    /// taken first; another log claims a session that exists, so after the
    /// fork that defines it).
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
        if let LogHandle::Embedded(_) = &log {
            s.claim()?;
        }
        let reg = registry.clone();
        make_through_staging(&log, &id, items, limit, |staging, len, chunk| {
            // Checked above: written as they are, blocks out of line on
            // the embedded store, text indexed on another log.
            let text = |i: usize| {
                let e: &EncodedEvent = &chunk[i];
                envelope::decode(len + i as u64, e.kind, e.flags, &e.payload, &reg)
                    .ok()
                    .and_then(|ev| searchable_text(&ev))
            };
            let (first, _) = log.append_group(staging, &mut None, len, &chunk, text)?;
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
    let limit = store.group_bytes_max();
    let bytes: usize = define_frame_padded_len(id.len(), false)
        + events
            .iter()
            .map(|e| frame_padded_len(e.2.len()))
            .sum::<usize>();
    if events.is_empty() {
        store.create_session(id)?;
        return store.sync_session(id);
    }
    if bytes <= limit {
        store.append_group(id, events, |_| {})?;
        return store.sync_session(id);
    }
    let log = LogHandle::Embedded(store.clone());
    let items = events
        .iter()
        .map(|&(kind, flags, payload)| EncodedEvent {
            kind,
            flags,
            payload: payload.to_vec(),
        })
        .collect();
    make_through_staging(&log, id, items, limit, |staging, _, chunk| {
        let group: Vec<(u16, u16, &[u8])> = chunk
            .iter()
            .map(|e| (e.kind, e.flags, e.payload.as_slice()))
            .collect();
        store.append_group(staging, &group, |_| {})?;
        Ok(())
    })
}

/// Write `items` to a new staging session in batches of at most `limit`
/// bytes with `append` (given the staging name, the events it holds and
/// the batch), wait until all are durable, define
/// `id` as a fork holding them all and make that durable, then delete the
/// staging session. On a failure before the fork, the staging session is
/// deleted and `id` does not exist.
fn make_through_staging(
    log: &LogHandle,
    id: &str,
    items: Vec<EncodedEvent>,
    limit: usize,
    mut append: impl FnMut(&str, u64, Vec<EncodedEvent>) -> Result<()>,
) -> Result<()> {
    delete_leftovers(log);
    let staging = staging_name();
    let n = items.len() as u64;
    if let LogHandle::Other(l) = log {
        // Another log claims a session that exists.
        l.create_session(&staging)?;
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
        let mut room = limit.saturating_sub(define_frame_padded_len(staging.len(), false));
        let mut chunk = Vec::new();
        let mut used = 0;
        let mut len = 0;
        for e in items {
            let need = frame_padded_len(e.payload.len());
            if used + need > room && !chunk.is_empty() {
                let k = chunk.len() as u64;
                append(&staging, len, std::mem::take(&mut chunk))?;
                len += k;
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
            chunk.push(e);
        }
        if !chunk.is_empty() {
            append(&staging, len, chunk)?;
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
    let Ok(names) = log.as_log().sessions() else {
        return;
    };
    for name in names.iter().filter(|n| n.starts_with(STAGING_PREFIX)) {
        if matches!(deleted_at(log, name), Ok(None)) {
            let _ = delete(log, name);
        }
    }
}
