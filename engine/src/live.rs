//! Which sessions of a store have a writable handle in this process.
//!
//! "Active" is a property of the store, not of one [`crate::session::Host`]:
//! whoever opens a session for writing claims it here, and a second writable
//! open of the same session (from another host or handle) is refused,
//! naming the session and since when it is live, instead of "repairing" a
//! session whose turn is still running. Read-only views claim nothing. The
//! claim ends when the handle is dropped.

use std::collections::HashMap;

use parking_lot::Mutex;

/// The live sessions of one store.
#[derive(Debug, Default)]
pub struct LiveSet {
    sessions: Mutex<HashMap<String, Claim>>,
    next_handle: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Claim {
    handle: u64,
    since_ms: u64,
}

impl LiveSet {
    /// Claim `session` for a new writable handle. `Err(since_ms)` when it is
    /// live already (since that time, ms since the epoch).
    pub fn claim(&self, session: &str, now_ms: u64) -> Result<u64, u64> {
        let mut m = self.sessions.lock();
        if let Some(c) = m.get(session) {
            return Err(c.since_ms);
        }
        let handle = self
            .next_handle
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        m.insert(
            session.to_string(),
            Claim {
                handle,
                since_ms: now_ms,
            },
        );
        Ok(handle)
    }

    /// End the claim `handle` holds on `session` (nothing if it holds none).
    pub fn release(&self, session: &str, handle: u64) {
        let mut m = self.sessions.lock();
        if m.get(session).is_some_and(|c| c.handle == handle) {
            m.remove(session);
        }
    }

    /// Since when `session` is live (ms since the epoch), if it is.
    pub fn live_since(&self, session: &str) -> Option<u64> {
        self.sessions.lock().get(session).map(|c| c.since_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_per_session_until_released() {
        let l = LiveSet::default();
        let h = l.claim("a", 5).unwrap();
        assert_eq!(l.claim("a", 6), Err(5));
        assert!(l.claim("b", 6).is_ok());
        l.release("a", h + 100); // not its handle: nothing
        assert_eq!(l.live_since("a"), Some(5));
        l.release("a", h);
        assert_eq!(l.live_since("a"), None);
        assert!(l.claim("a", 7).is_ok());
    }
}
