//! Async durability waits on top of the engine's group commit.
//!
//! One thread takes every pending request, calls `wait_durable` for the
//! highest position among them and answers all of them at once: a burst of
//! concurrent HTTP appends costs one fdatasync (shared with everything else
//! appended meanwhile) and one parked thread, not one thread per request.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use turnstone::{LogPos, Store};

type Reply = oneshot::Sender<Result<(), WaitError>>;

/// Why a durability wait failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitError {
    /// The store takes no more writes (poisoned by an fdatasync error, or
    /// closed): not worth retrying in this process.
    pub fatal: bool,
    pub message: String,
}

impl WaitError {
    fn stopped(message: &str) -> WaitError {
        WaitError {
            fatal: true,
            message: message.into(),
        }
    }
}

/// Handle to the waiter thread (none on a shared database: a write there
/// waits for its own commit before the answer, so every wait here is
/// answered at once).
pub struct Durability {
    store: Option<Arc<Store>>,
    tx: parking_lot::Mutex<Option<mpsc::Sender<(LogPos, Reply)>>>,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl Durability {
    pub fn start(store: Arc<Store>) -> std::io::Result<Durability> {
        let (tx, rx) = mpsc::channel::<(LogPos, Reply)>();
        let s = store.clone();
        let thread = std::thread::Builder::new()
            .name("turnstone-serve-durable".into())
            .spawn(move || waiter_loop(&s, rx))?;
        Ok(Durability {
            store: Some(store),
            tx: parking_lot::Mutex::new(Some(tx)),
            thread: parking_lot::Mutex::new(Some(thread)),
        })
    }

    /// No thread: every position is durable when written.
    pub fn none() -> Durability {
        Durability {
            store: None,
            tx: parking_lot::Mutex::new(None),
            thread: parking_lot::Mutex::new(None),
        }
    }

    /// Resolve once the log is durable up to `pos`.
    pub async fn wait(&self, pos: LogPos) -> Result<(), WaitError> {
        match &self.store {
            None => return Ok(()),
            Some(s) if s.durable_pos() >= pos => return Ok(()),
            Some(_) => {}
        }
        let (tx, rx) = oneshot::channel();
        {
            let guard = self.tx.lock();
            let Some(sender) = guard.as_ref() else {
                return Err(WaitError::stopped("server is shutting down"));
            };
            sender
                .send((pos, tx))
                .map_err(|_| WaitError::stopped("durability waiter stopped"))?;
        }
        rx.await
            .unwrap_or_else(|_| Err(WaitError::stopped("durability waiter stopped")))
    }

    /// Stop the thread (after answering what is queued).
    pub fn stop(&self) {
        self.tx.lock().take();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Drop for Durability {
    fn drop(&mut self) {
        self.stop();
    }
}

fn waiter_loop(store: &Store, rx: mpsc::Receiver<(LogPos, Reply)>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let max = batch.iter().map(|(p, _)| *p).max().expect("non-empty");
        let result = store.wait_durable(max).map_err(|e| WaitError {
            fatal: matches!(
                e,
                turnstone::Error::Poisoned { .. } | turnstone::Error::Closed
            ),
            message: e.to_string(),
        });
        for (_, reply) in batch {
            let _ = reply.send(result.clone());
        }
    }
}
