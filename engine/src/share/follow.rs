//! A follower in a client process: the host pushes a session's events to
//! it over the connection; when the host changes (a takeover), it follows
//! again on the new host, or on this process's own store, from where it was.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::backend::{Follow, LogEvent};
use crate::error::{Error, Result};
use crate::share::wire::{Op, Request};

use super::client::{Client, Mode};
use super::conn::{lost, Conn, Queue};

/// A follower in a client: the host pushes its events; when the host
/// changes, it follows again on the new one from where it was.
pub(super) struct ClientFollow {
    client: Arc<Client>,
    session: String,
    next: u64,
    current: Option<Following>,
}

enum Following {
    Remote {
        conn: Arc<Conn>,
        id: u64,
        queue: Arc<Queue>,
    },
    Local(crate::store::Subscription),
}

impl Drop for ClientFollow {
    fn drop(&mut self) {
        if let Some(Following::Remote { conn, id, .. }) = self.current.take() {
            conn.follows.lock().remove(&id);
            // No answer comes to an unfollow.
            let _ = conn.writer.lock().send(&Request {
                id: 0,
                op: Op::Unfollow { follow: id },
            });
        }
    }
}

impl ClientFollow {
    /// Follow `session` of `client` from event `from`.
    pub(super) fn start(client: Arc<Client>, session: &str, from: u64) -> Result<ClientFollow> {
        let mut f = ClientFollow {
            client,
            session: session.to_string(),
            next: from,
            current: None,
        };
        f.follow()?;
        Ok(f)
    }

    /// Follow on the current host (or this process's store), from `next`.
    fn follow(&mut self) -> Result<()> {
        for _ in 0..8 {
            match self.client.current()? {
                Mode::Local(s) => {
                    self.current = Some(Following::Local(s.subscribe(&self.session, self.next)?));
                    return Ok(());
                }
                Mode::Remote(conn) => {
                    let queue = Arc::new(Queue::default());
                    let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
                    conn.follows.lock().insert(id, queue.clone());
                    let sent = conn.writer.lock().send(&Request {
                        id,
                        op: Op::Follow {
                            session: self.session.clone(),
                            from: self.next,
                        },
                    });
                    if sent.is_err() {
                        conn.kill();
                        continue;
                    }
                    self.current = Some(Following::Remote { conn, id, queue });
                    return Ok(());
                }
                _ => continue,
            }
        }
        Err(lost("the host went away repeatedly"))
    }

    /// Take one event (or the end) if there is one; `Ok(None)`: wait.
    fn take(&mut self) -> Result<Option<LogEvent>> {
        loop {
            match &mut self.current {
                None => self.follow()?,
                Some(Following::Local(sub)) => {
                    return Ok(sub.try_next()?.map(|e| LogEvent {
                        seq: e.seq.0,
                        kind: e.kind,
                        flags: e.flags,
                        payload: e.payload,
                    }))
                }
                Some(Following::Remote { queue, .. }) => {
                    let mut st = queue.state.lock();
                    if let Some(e) = st.0.pop_front() {
                        return Ok(Some(e));
                    }
                    match st.1.take() {
                        None => return Ok(None),
                        // The host changed: follow on the next one.
                        Some(Error::HostLost { .. }) => {
                            drop(st);
                            self.current = None;
                        }
                        Some(e) => return Err(e),
                    }
                }
            }
        }
    }
}

impl Follow for ClientFollow {
    fn next_timeout(&mut self, timeout: Duration) -> Result<Option<LogEvent>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.take()? {
                self.next = e.seq + 1;
                return Ok(Some(e));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            match &self.current {
                Some(Following::Remote { queue, .. }) => {
                    let mut st = queue.state.lock();
                    if st.0.is_empty() && st.1.is_none() {
                        queue.cv.wait_for(&mut st, deadline - now);
                    }
                }
                _ => std::thread::sleep(Duration::from_millis(1).min(deadline - now)),
            }
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<LogEvent>> {
        loop {
            match self.take() {
                Err(e) => return Poll::Ready(Err(e)),
                Ok(Some(e)) => {
                    self.next = e.seq + 1;
                    return Poll::Ready(Ok(e));
                }
                Ok(None) => {}
            }
            match &self.current {
                Some(Following::Remote { queue, .. }) => {
                    *queue.waker.lock() = Some(cx.waker().clone());
                    let st = queue.state.lock();
                    if st.0.is_empty() && st.1.is_none() {
                        return Poll::Pending;
                    }
                }
                _ => {
                    // This process hosts now: wait on its store.
                    return match self.next_timeout(Duration::from_secs(1)) {
                        Ok(Some(e)) => Poll::Ready(Ok(e)),
                        Ok(None) => {
                            cx.waker().wake_by_ref();
                            Poll::Pending
                        }
                        Err(e) => Poll::Ready(Err(e)),
                    };
                }
            }
        }
    }
}
