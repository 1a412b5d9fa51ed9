//! `NativeSubscription`: a live follower of one session, read blocking
//! (GIL released), now, or as an asyncio future that borrows it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use turnstone::session::SessionSubscription;

use crate::aio;
use crate::convert::{err, event_json, usage};

/// A live follower of one session.
#[pyclass(frozen, module = "turnstone._native")]
pub(crate) struct NativeSubscription {
    /// `None` once it ended, or while an awaited `next_wait` holds it.
    pub(crate) sub: Arc<Mutex<Option<SessionSubscription>>>,
    /// The seq it yields next, while `sub` is `None`.
    pub(crate) ended_at: Arc<AtomicU64>,
    /// A `next_wait` future holds the subscription.
    pub(crate) lent: Arc<AtomicBool>,
}

/// A subscription lent to a `next_wait` future: given back to its handle
/// when the future ends or is dropped (a cancelled task), unless it ended.
struct Lent {
    slot: Arc<Mutex<Option<SessionSubscription>>>,
    lent: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
    sub: Option<SessionSubscription>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(s) = self.sub.take() {
            self.ended_at.store(s.next_seq(), Ordering::Relaxed);
            *self.slot.lock() = Some(s);
        }
        self.lent.store(false, Ordering::Release);
    }
}

impl NativeSubscription {
    fn busy() -> PyErr {
        usage("an anext() of this subscription is still waiting; await it (or cancel it) first")
    }
}

#[pymethods]
impl NativeSubscription {
    /// The next durable event as JSON, waiting for it (GIL released);
    /// `None` when the store closes.
    fn next(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if self.lent.load(Ordering::Acquire) {
            return Err(Self::busy());
        }
        py.detach(|| {
            let mut g = self.sub.lock();
            let Some(sub) = g.as_mut() else {
                return Ok(None);
            };
            match sub.next() {
                Some(Ok(e)) => Ok(Some(event_json(&e).to_string())),
                Some(Err(e)) => Err(e),
                None => {
                    self.ended_at.store(sub.next_seq(), Ordering::Relaxed);
                    *g = None;
                    Ok(None)
                }
            }
        })
        .map_err(err)
    }

    /// The next durable event as a future for asyncio (`Subscription.anext`):
    /// woken by the flusher, it holds no thread while it waits.
    fn next_wait(&self) -> PyResult<aio::NativeWait> {
        if self.lent.swap(true, Ordering::AcqRel) {
            return Err(Self::busy());
        }
        let mut lent = Lent {
            slot: self.sub.clone(),
            lent: self.lent.clone(),
            ended_at: self.ended_at.clone(),
            sub: None,
        };
        lent.sub = self.sub.lock().take();
        if let Some(s) = &lent.sub {
            self.ended_at.store(s.next_seq(), Ordering::Relaxed);
        }
        Ok(aio::NativeWait::new(Box::pin(async move {
            let mut lent = lent;
            let Some(sub) = lent.sub.as_mut() else {
                return Ok(None); // it had ended
            };
            match sub.next_async().await {
                Some(Ok(e)) => Ok(Some(event_json(&e).to_string())),
                Some(Err(e)) => Err(e),
                None => {
                    let s = lent.sub.take().expect("lent");
                    lent.ended_at.store(s.next_seq(), Ordering::Relaxed);
                    Ok(None)
                }
            }
        })))
    }

    /// The next durable event if there is one now, else `None`.
    fn try_next(&self) -> PyResult<Option<String>> {
        if self.lent.load(Ordering::Acquire) {
            return Err(Self::busy());
        }
        let mut g = self.sub.lock();
        let Some(sub) = g.as_mut() else {
            return Ok(None);
        };
        Ok(sub
            .try_next()
            .map_err(err)?
            .map(|e| event_json(&e).to_string()))
    }

    /// The seq of the next event it yields.
    fn next_seq(&self) -> u64 {
        self.sub
            .lock()
            .as_ref()
            .map_or_else(|| self.ended_at.load(Ordering::Relaxed), |s| s.next_seq())
    }
}
