//! The log's connections and lifetime: [`PgLog::connect`] (schema
//! migration, the commit lanes, the committer and lease-renewer threads),
//! [`PgLog::close`], and the pool of idle connections every statement
//! borrows one from ([`Inner::with_client`]).
//!
//! Invariant: the log's threads hold only [`Inner`] and its handles an
//! [`Owner`] too, so the log closes (what is queued written first, then the
//! threads joined) when the last handle goes. A statement that failed on a
//! pooled connection found dead is run once more, on a new connection.

use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use postgres::{Client, NoTls};

use crate::commit::{committer, Lane, Queue};
use crate::error::{db, PgError, Result};
use crate::lease::renewer;
use crate::{follow, schema, PgLog, PgOptions, PgStats};

pub(crate) struct Inner {
    pub(crate) url: String,
    pub(crate) opts: PgOptions,
    pub(crate) idle: Mutex<Vec<Client>>,
    pub(crate) lanes: Vec<Lane>,
    /// Set by close: the lease renewer stops.
    pub(crate) stopped: Mutex<bool>,
    /// The followers' hub, started by the first subscribe.
    pub(crate) hub: Mutex<Option<Arc<follow::Hub>>>,
    pub(crate) stop: Condvar,
}

/// What the handles share and the log's threads do not: when the last
/// handle goes, the log closes (its threads hold only [`Inner`]).
pub(crate) struct Owner {
    inner: Arc<Inner>,
    committers: Mutex<Vec<JoinHandle<()>>>,
}

impl Owner {
    fn close(&self) {
        *self.inner.stopped.lock() = true;
        self.inner.stop.notify_all();
        if let Some(hub) = self.inner.hub.lock().as_ref() {
            hub.poke();
        }
        for l in &self.inner.lanes {
            l.queue.lock().closed = true;
            l.work.notify_all();
        }
        for h in std::mem::take(&mut *self.committers.lock()) {
            let _ = h.join();
        }
        let idle = std::mem::take(&mut *self.inner.idle.lock());
        if !idle.is_empty() {
            // A client's drop runs its own small runtime, which panics on a
            // thread inside an async runtime (a server dropped in a task,
            // or with its runtime): drop them on a thread of their own.
            let _ = std::thread::spawn(move || drop(idle)).join();
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.close();
    }
}

impl PgLog {
    /// Connect, create or migrate the schema, start the committer.
    pub fn connect(url: &str, opts: PgOptions) -> Result<PgLog> {
        let mut client = Client::connect(url, NoTls).map_err(db("connect"))?;
        schema::migrate(&mut client)?;
        let opts_lanes = opts.lanes.max(1);
        let inner = Arc::new(Inner {
            url: url.to_string(),
            opts,
            idle: Mutex::new(vec![client]),
            lanes: (0..opts_lanes)
                .map(|_| Lane {
                    queue: Mutex::new(Queue::default()),
                    work: Condvar::new(),
                    done: Condvar::new(),
                })
                .collect(),
            stopped: Mutex::new(false),
            hub: Mutex::new(None),
            stop: Condvar::new(),
        });
        let mut handles: Vec<JoinHandle<()>> = (0..opts_lanes)
            .map(|lane| {
                let worker = inner.clone();
                std::thread::Builder::new()
                    .name(format!("turnstone-pg-commit-{lane}"))
                    .spawn(move || committer(worker, lane))
                    .expect("spawn a committer thread")
            })
            .collect();
        if inner.opts.renew_leases {
            let worker = inner.clone();
            handles.push(
                std::thread::Builder::new()
                    .name("turnstone-pg-leases".into())
                    .spawn(move || renewer(worker))
                    .expect("spawn the lease renewer"),
            );
        }
        Ok(PgLog {
            owner: Arc::new(Owner {
                inner: inner.clone(),
                committers: Mutex::new(handles),
            }),
            inner,
        })
    }

    /// Write what is queued, then stop the committer. Writers left get
    /// [`PgError::Closed`]; followers end; pooled connections close.
    pub fn close(&self) {
        self.owner.close();
    }

    /// The committer's counters.
    pub fn stats(&self) -> PgStats {
        let mut total = PgStats::default();
        for l in &self.inner.lanes {
            let st = l.queue.lock().stats;
            total.commits += st.commits;
            total.events += st.events;
        }
        total
    }

    pub(crate) fn with_client<T>(&self, f: impl FnMut(&mut Client) -> Result<T>) -> Result<T> {
        self.inner.with_client(f)
    }
}

impl Inner {
    /// A pooled connection (`true`), or a new one.
    pub(crate) fn take_client(&self) -> Result<(Client, bool)> {
        match self.idle.lock().pop() {
            Some(c) if !c.is_closed() => Ok((c, true)),
            _ => Ok((
                Client::connect(&self.url, NoTls).map_err(db("connect"))?,
                false,
            )),
        }
    }

    /// Give a connection back to the pool (unless it is closed or the pool
    /// is full).
    pub(crate) fn give_back(&self, client: Client) {
        if !client.is_closed() {
            let mut idle = self.idle.lock();
            if idle.len() < self.opts.read_pool {
                idle.push(client);
            }
        }
    }

    /// Run `f` on a pooled connection (or a new one).
    pub(crate) fn with_client<T>(&self, mut f: impl FnMut(&mut Client) -> Result<T>) -> Result<T> {
        let (mut client, pooled) = self.take_client()?;
        let mut out = f(&mut client);
        // A pooled connection that turns out dead (the server restarted
        // since it was last used) failed at its first write, before any
        // server saw the request: drop the whole pool and try once more on
        // a new connection.
        let dead = |r: &Result<T>| matches!(r, Err(PgError::Database { source, .. }) if source.is_closed());
        if pooled && (dead(&out) || client.is_closed()) && out.is_err() {
            self.idle.lock().clear();
            client = Client::connect(&self.url, NoTls).map_err(db("connect"))?;
            out = f(&mut client);
        }
        // A connection whose statement failed at the protocol level is
        // closed; anything else goes back for reuse.
        self.give_back(client);
        out
    }
}
