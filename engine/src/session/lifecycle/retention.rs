//! Retention (issue 17 §2): a store's policy, kept in `retention.json` in the
//! store directory (FORMAT.md §18), says when sessions expire:
//!
//! - `expire_after_ms`: this long after the session's last event (TTL);
//! - `max_age_ms`: this long after its first own event (keep at most N days);
//! - `max_bytes`: at most this many bytes of live frames in sealed segments;
//!   a collection expires the sessions whose last event is oldest first
//!   until the rest fit (never one a writable handle holds);
//! - `sessions`: per-session entries overriding the first two (or `keep`:
//!   never expires).
//!
//! Times are the `ts` the session layer writes into every envelope
//! (FORMAT.md §10); a session whose events carry none (raw engine appends,
//! the server's records) expires only by `max_bytes`.
//!
//! An expired session vanishes at once, like a deleted one: loads refuse it
//! ([`Error::SessionExpired`], a "not found"), lists and the catalog leave
//! it out. Its bytes are freed by the next collection (`turnstone gc`, or
//! the background collector), which reclaims it, unless a writable handle
//! holds it: such a handle keeps working, and an append through it makes
//! the session fresh again.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::derived::{write_atomic, DerivedKind};
use crate::error::{Error, Result};
use crate::session::log::LogRef;
use crate::store::Store;
use crate::vfs::Vfs;

/// The policy file in a store directory.
pub const RETENTION_FILE: &str = "retention.json";
/// It being replaced.
pub const RETENTION_TMP_FILE: &str = "retention.json.tmp";
/// Largest policy file read (a policy with per-session entries for many
/// sessions is still far smaller).
pub const RETENTION_FILE_BYTES_MAX: u64 = 64 << 20;

/// Store-wide retention rules given to one collection, over the store's
/// policy (`retention.json`, [`Policy`]): each set field replaces the
/// policy's. `None`: the policy's (no limit if it has none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Expire a session this long after its last event (TTL).
    pub expire_after_ms: Option<u64>,
    /// Expire a session this long after its first own event (maximum age).
    pub max_age_ms: Option<u64>,
    /// Keep at most this many bytes of live frames in sealed segments,
    /// evicting the sessions whose last event is oldest first.
    pub max_bytes: Option<u64>,
    /// "Now", milliseconds since the Unix epoch (`None`: the clock).
    pub now_ms: Option<u64>,
}

/// A store's retention policy. The default keeps everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Expire a session this long after its last event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after_ms: Option<u64>,
    /// Expire a session this long after its first own event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_ms: Option<u64>,
    /// Keep at most this many bytes of live frames in sealed segments
    /// (applied by collections, oldest inactive sessions first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Per-session rules, by session id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sessions: BTreeMap<String, SessionPolicy>,
}

/// One session's rules: each set field replaces the store's; `keep` exempts
/// the session from expiry (and from `max_bytes`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionPolicy {
    /// See [`Policy::expire_after_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after_ms: Option<u64>,
    /// See [`Policy::max_age_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_ms: Option<u64>,
    /// Never expires.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep: bool,
}

impl Policy {
    /// Whether the policy expires nothing.
    pub fn is_empty(&self) -> bool {
        self.expire_after_ms.is_none()
            && self.max_age_ms.is_none()
            && self.max_bytes.is_none()
            && self
                .sessions
                .values()
                .all(|p| p.expire_after_ms.is_none() && p.max_age_ms.is_none())
    }

    /// The policy of the store in `dir` (the default if it has no
    /// `retention.json`). A file that does not parse is an error naming it.
    pub fn load(vfs: &dyn Vfs, dir: &Path) -> Result<Policy> {
        let path = dir.join(RETENTION_FILE);
        if !vfs.exists(&path) {
            return Ok(Policy::default());
        }
        let f = vfs
            .open(&path, false)
            .map_err(|e| Error::io("open retention policy", &path, e))?;
        let len = f
            .len()
            .map_err(|e| Error::io("stat retention policy", &path, e))?;
        if len > RETENTION_FILE_BYTES_MAX {
            return Err(Error::corrupt(
                &path,
                0,
                format!("retention policy of {len} bytes (at most {RETENTION_FILE_BYTES_MAX})"),
            ));
        }
        let mut buf = vec![0u8; len as usize];
        let n = f
            .read_at(&mut buf, 0)
            .map_err(|e| Error::io("read retention policy", &path, e))?;
        buf.truncate(n);
        serde_json::from_slice(&buf).map_err(|e| {
            Error::corrupt(
                &path,
                e.column() as u64,
                format!("retention policy: {e} (line {})", e.line()),
            )
        })
    }

    /// The policy of `store`.
    pub fn of(store: &Store) -> Result<Policy> {
        Policy::load(store.vfs().as_ref(), store.dir())
    }

    /// The policy of the log's directory ([`crate::backend::EventLog::files`]);
    /// a log without one has none (nothing expires).
    pub fn of_log(log: LogRef<'_>) -> Result<Policy> {
        match log.as_log().files() {
            Some((dir, vfs)) => Policy::load(vfs.as_ref(), dir),
            None => Ok(Policy::default()),
        }
    }

    /// Replace the policy of the store in `dir` atomically (temp file,
    /// fdatasync, rename, directory fsync). Takes effect for every reader
    /// and collection that loads it afterwards.
    pub fn save(&self, vfs: &dyn Vfs, dir: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::InvalidArgument(format!("retention policy: {e}")))?;
        write_atomic(
            vfs,
            DerivedKind::Retention,
            &dir.join(RETENTION_TMP_FILE),
            &dir.join(RETENTION_FILE),
            &bytes,
        )
    }

    /// This policy with `r`'s store-wide fields where `r` sets them.
    pub fn overridden_by(&self, r: &Retention) -> Policy {
        let mut p = self.clone();
        if r.expire_after_ms.is_some() {
            p.expire_after_ms = r.expire_after_ms;
        }
        if r.max_age_ms.is_some() {
            p.max_age_ms = r.max_age_ms;
        }
        if r.max_bytes.is_some() {
            p.max_bytes = r.max_bytes;
        }
        p
    }

    /// Whether session `id`, whose first own event and last event carry
    /// the times `created_ms` and `updated_ms`, is expired at `now` (ms
    /// since the epoch) by age or TTL (`max_bytes` is a collection's
    /// decision).
    pub fn expired(
        &self,
        id: &str,
        created_ms: Option<u64>,
        updated_ms: Option<u64>,
        now: u64,
    ) -> bool {
        let own = self.sessions.get(id);
        if own.is_some_and(|p| p.keep) {
            return false;
        }
        let ttl = own.and_then(|p| p.expire_after_ms).or(self.expire_after_ms);
        let age = own.and_then(|p| p.max_age_ms).or(self.max_age_ms);
        let older = |t: Option<u64>, limit: Option<u64>| match (t, limit) {
            (Some(t), Some(limit)) => now.saturating_sub(t) > limit,
            _ => false,
        };
        older(updated_ms, ttl) || older(created_ms, age)
    }

    /// Whether `id` is exempt from expiry (`keep`).
    pub fn keeps(&self, id: &str) -> bool {
        self.sessions.get(id).is_some_and(|p| p.keep)
    }
}

/// The `ts` of an envelope payload, if it is one that has it.
pub(crate) fn ts_of_payload(payload: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Ts {
        ts: Option<u64>,
    }
    serde_json::from_slice::<Ts>(payload).ok()?.ts
}

/// The times of session `id`'s first own durable event and last durable
/// event (two reads).
pub fn session_times<'a>(
    log: impl Into<LogRef<'a>>,
    id: &str,
) -> Result<(Option<u64>, Option<u64>)> {
    let log = log.into();
    let missing = || Error::UnknownSession(id.to_string());
    let end = log.durable_len(id)?.ok_or_else(missing)?;
    let first_own = log.as_log().parent(id)?.map_or(0, |(_, n)| n);
    let at = |seq: u64| -> Result<Option<u64>> {
        Ok(ts_of_payload(&log.stored_event(id, seq)?.payload))
    };
    let created = if end > first_own {
        at(first_own)?
    } else {
        None
    };
    let updated = match end.checked_sub(1) {
        Some(last) => at(last)?,
        None => None,
    };
    Ok((created, updated))
}

/// `Ok(())` unless the store's policy expires session `id` now
/// ([`Error::SessionExpired`]). (A writable handle already open keeps
/// working, and a collection does not reclaim a session one holds; loads
/// and lists hide it all the same.)
pub fn check_not_expired<'a>(log: impl Into<LogRef<'a>>, id: &str) -> Result<()> {
    let log = log.into();
    let policy = Policy::of_log(log)?;
    check_with(log, &policy, id, crate::session::codec::envelope::now_ms())
}

/// [`check_not_expired`] under `policy` at `now`.
pub fn check_with<'a>(
    log: impl Into<LogRef<'a>>,
    policy: &Policy,
    id: &str,
    now: u64,
) -> Result<()> {
    if policy.is_empty() || policy.keeps(id) {
        return Ok(());
    }
    let (created, updated) = session_times(log, id)?;
    if policy.expired(id, created, updated, now) {
        return Err(Error::SessionExpired {
            session: id.to_string(),
        });
    }
    Ok(())
}
