//! Background collection of a server's store (issue 17 §2; FORMAT.md §14):
//! a hard-deleted stream (its last record is a `delete` tombstone in `hard`
//! mode, written by `DELETE`, by expiry after `Stream-TTL` or
//! `Stream-Expires-At`, or when a soft-deleted source's last fork goes) is
//! dead, and the engine's online collection frees its frames past what live
//! forks still read. A soft-deleted stream (forks still read through it) is
//! not dead. Sessions that are not the server's follow the session layer's
//! rule.

use std::sync::Arc;

use turnstone::gc::CollectCandidate;
use turnstone::session::gc::{Background, BackgroundOptions};
use turnstone::session::retention::Policy;
use turnstone::Store;

use crate::record::{self, DeleteMode, DeleteRecord, KIND_DELETE};

/// Whether the collection may reclaim `c`: a server session by the
/// server's rule (the store's retention policy does not apply to streams:
/// they expire by their own `Stream-TTL`/`Stream-Expires-At`, and are
/// never evicted for `max_bytes`), any other by the session layer's under
/// `policy` at `now`.
pub fn is_dead_with(c: &CollectCandidate<'_>, policy: &Policy, now: u64) -> bool {
    if record::parse_session_name(c.name).is_none() {
        return turnstone::session::gc::is_dead(c, policy, now);
    }
    if c.evicting {
        return false;
    }
    let Some((kind, payload)) = c.last else {
        return false;
    };
    kind == KIND_DELETE
        && record::decode(payload)
            .and_then(|d| serde_json::from_slice::<DeleteRecord>(d.body).ok())
            .is_some_and(|d| d.mode == DeleteMode::Hard)
}

/// Start the collector of a server's store.
pub fn start(store: Arc<Store>, opts: BackgroundOptions) -> Result<Background, String> {
    Background::start_with_rule(store, opts, Arc::new(is_dead_with))
        .map_err(|e| format!("cannot start the collector: {e}"))
}
