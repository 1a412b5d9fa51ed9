//! `NativeSubscription`: a live follower of one session, read now or as
//! a Promise that borrows it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;
use parking_lot::Mutex;
use turnstone::session::SessionSubscription;

use crate::convert::{err, event_json, usage};

/// A live follower of one session.
#[napi]
pub struct NativeSubscription {
    /// `None` once it ended, or while a `next()` holds it.
    pub(crate) sub: Arc<Mutex<Option<SessionSubscription>>>,
    /// A `next()` future holds the subscription.
    pub(crate) lent: Arc<AtomicBool>,
}

/// A subscription lent to a `next()` future: given back to its handle when
/// the future ends or is dropped, unless it ended.
struct Lent {
    slot: Arc<Mutex<Option<SessionSubscription>>>,
    lent: Arc<AtomicBool>,
    sub: Option<SessionSubscription>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(s) = self.sub.take() {
            *self.slot.lock() = Some(s);
        }
        self.lent.store(false, Ordering::Release);
    }
}

#[napi]
impl NativeSubscription {
    /// Resolves to the next durable event (JSON), or null when the store
    /// closes. The wait is the engine's future, woken by the flusher when
    /// a batch holding an event of this session is durable: it holds no
    /// thread, so any number of idle followers leave libuv's pool free.
    /// One `next()` at a time per subscription.
    #[napi(catch_unwind, ts_return_type = "Promise<string | null>")]
    pub fn next(&self, env: Env) -> napi::Result<AsyncBlock<Option<String>>> {
        if self.lent.swap(true, Ordering::AcqRel) {
            return Err(usage(
                "a next() of this subscription is still waiting; await it first",
            ));
        }
        let mut lent = Lent {
            slot: self.sub.clone(),
            lent: self.lent.clone(),
            sub: None,
        };
        lent.sub = self.sub.lock().take();
        AsyncBlockBuilder::new(async move {
            let mut lent = lent;
            let Some(s) = lent.sub.as_mut() else {
                return Ok(None); // it had ended
            };
            match s.next_async().await {
                Some(Ok(e)) => Ok(Some(event_json(&e).to_string())),
                Some(Err(e)) => Err(err(e)),
                None => {
                    lent.sub = None; // ended: not given back
                    Ok(None)
                }
            }
        })
        .build(&env)
    }

    /// The next durable event now, if there is one (JSON or null).
    #[napi(catch_unwind)]
    pub fn try_next(&self) -> napi::Result<Option<String>> {
        if self.lent.load(Ordering::Acquire) {
            return Err(usage(
                "a next() of this subscription is still waiting; await it first",
            ));
        }
        let mut g = self.sub.lock();
        let Some(s) = g.as_mut() else { return Ok(None) };
        Ok(s.try_next()
            .map_err(err)?
            .map(|e| event_json(&e).to_string()))
    }
}
