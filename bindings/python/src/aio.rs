//! asyncio without threads: the engine's own futures (a durability wait, a
//! subscription's next event), polled on the event loop's thread and woken
//! by the engine (the flusher, after the fdatasync that covers them).
//!
//! A waker must not take the GIL on the thread that wakes it (the flusher
//! would then wait for a busy event loop, and every wake would cost a GIL
//! hand-over of up to the switch interval). So each event loop has one
//! [`NativeWaker`]: a queue of woken task ids and a pipe whose read end the
//! loop watches (`loop.add_reader`). A wake pushes the task's id and, when
//! the queue was empty, writes one byte; the loop, woken by its selector,
//! takes the ids and polls those tasks. No wait holds a thread and no wake
//! takes the GIL: 1,000 idle subscriptions are 1,000 wakers in the
//! engine's lists.

use std::future::Future;
use std::io::{PipeReader, PipeWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;
use pyo3::prelude::*;
use turnstone::Error;

/// What an awaited native future yields: JSON text, or nothing.
pub(crate) type BoxFut = Pin<Box<dyn Future<Output = Result<Option<String>, Error>> + Send>>;

struct Shared {
    woken: Mutex<Vec<u64>>,
    writer: Mutex<PipeWriter>,
}

/// The waker of one task of one loop.
struct TaskWake {
    shared: Arc<Shared>,
    id: u64,
}

impl Wake for TaskWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let first = {
            let mut q = self.shared.woken.lock();
            q.push(self.id);
            q.len() == 1
        };
        if first {
            // One byte per empty-to-woken change: the loop reads them all
            // before it takes the queue, so the pipe never fills. A closed
            // loop (read end gone) gives EPIPE, ignored: its tasks are gone.
            let _ = self.shared.writer.lock().write(&[1]);
        }
    }
}

/// The wake-up channel of one asyncio event loop.
#[pyclass(frozen, module = "turnstone._native")]
pub(crate) struct NativeWaker {
    shared: Arc<Shared>,
    reader: Mutex<PipeReader>,
}

#[pymethods]
impl NativeWaker {
    #[new]
    fn new() -> PyResult<NativeWaker> {
        let (reader, writer) = std::io::pipe()
            .map_err(|e| crate::usage(format!("cannot make the asyncio wake pipe: {e}")))?;
        Ok(NativeWaker {
            shared: Arc::new(Shared {
                woken: Mutex::new(Vec::new()),
                writer: Mutex::new(writer),
            }),
            reader: Mutex::new(reader),
        })
    }

    /// The read end, for `loop.add_reader` (set non-blocking by the caller).
    fn fileno(&self) -> i32 {
        self.reader.lock().as_raw_fd()
    }

    /// The ids woken since the last call (the pipe's bytes read first).
    fn take(&self) -> Vec<u64> {
        let mut buf = [0u8; 4096];
        let mut r = self.reader.lock();
        // Non-blocking: stops at WouldBlock (or a short read).
        while let Ok(n) = r.read(&mut buf) {
            if n < buf.len() {
                break;
            }
        }
        std::mem::take(&mut *self.shared.woken.lock())
    }
}

/// An engine future awaited from asyncio (`turnstone._await_native`).
#[pyclass(frozen, module = "turnstone._native")]
pub(crate) struct NativeWait {
    fut: Mutex<Option<BoxFut>>,
}

impl NativeWait {
    pub(crate) fn new(fut: BoxFut) -> NativeWait {
        NativeWait {
            fut: Mutex::new(Some(fut)),
        }
    }
}

#[pymethods]
impl NativeWait {
    /// Poll once, on the event loop's thread: `(True, value)` when done,
    /// `(False, None)` while pending; `id` is then given back by
    /// `waker.take()` when it should be polled again.
    fn poll(
        &self,
        py: Python<'_>,
        waker: PyRef<'_, NativeWaker>,
        id: u64,
    ) -> PyResult<(bool, Option<String>)> {
        let waker = Waker::from(Arc::new(TaskWake {
            shared: waker.shared.clone(),
            id,
        }));
        py.detach(|| {
            let mut g = self.fut.lock();
            let Some(f) = g.as_mut() else {
                return Ok((true, None));
            };
            match f.as_mut().poll(&mut Context::from_waker(&waker)) {
                Poll::Pending => Ok((false, None)),
                Poll::Ready(r) => {
                    *g = None;
                    r.map(|v| (true, v))
                }
            }
        })
        .map_err(crate::err)
    }

    /// Drop the future (its task was cancelled): what it holds is given
    /// back (a subscription goes back to its handle).
    fn cancel(&self) {
        let f = self.fut.lock().take();
        drop(f);
    }
}
