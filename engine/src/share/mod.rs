//! Several processes on one store (docs/MULTIPROCESS.md): the process that
//! holds the store's lock hosts it on a Unix socket in the store directory,
//! and every other process that opens the store is its client, running the
//! session layer on [`Client`], an [`crate::backend::EventLog`] whose
//! methods are requests to the host. One group commit covers every
//! process's appends; a session's writable claim is per process; when the
//! host goes away a client takes the store over.
//!
//! ```
//! use std::sync::Arc;
//! use turnstone::session::{Host, Registry, TurnStart};
//! let dir = tempfile::tempdir().unwrap();
//! // The first open hosts the store; a second one (here in the same
//! // process, as another process would) is its client.
//! let host = turnstone::share::open(dir.path(), turnstone::Options::default()).unwrap();
//! let client = turnstone::share::open(dir.path(), turnstone::Options::default()).unwrap();
//! assert!(host.store().is_some() && client.store().is_none());
//! let reg = Arc::new(Registry::new());
//! let s = Host::new(client, reg.clone()).create("s1").unwrap();
//! s.lock().append(TurnStart { turn_id: "t1".into() }, ()).unwrap();
//! s.lock().flush().unwrap();
//! // The host's process reads what the client made durable.
//! assert_eq!(host.store().unwrap().session_len("s1"), Some(1));
//! ```

mod client;
mod conn;
mod follow;
mod server;
mod wire;

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::session::LogHandle;
use crate::store::{Options, Store};

pub use client::Client;
pub use server::{Server, SOCKET_FILE};

/// Open the store at `dir` for sharing with other processes: take its lock
/// and host it (the embedded store, serving clients until it closes), or,
/// if another process holds the lock, become that process's client.
/// `opts` opens the store (now, or when this process takes it over);
/// a read-only open is not shared (it takes no lock: use `Store::open_with`).
pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<LogHandle> {
    open_inner(dir.as_ref(), opts, true)
}

/// [`open`] for a short-lived command: when the lock is held by a process
/// that does not host the store (it opened it with [`Store::open`], or is
/// still recovering it), the [`Error::Locked`] it met, at once, instead of
/// waiting up to a minute for a host.
pub fn open_if_hosted(dir: impl AsRef<Path>, opts: Options) -> Result<LogHandle> {
    open_inner(dir.as_ref(), opts, false)
}

/// Whether a process hosts the store at `dir` now: its socket takes a
/// connection.
pub fn is_hosted(dir: impl AsRef<Path>) -> bool {
    server::socket_addr(dir.as_ref())
        .and_then(|a| std::os::unix::net::UnixStream::connect(&a.path))
        .is_ok()
}

fn open_inner(dir: &Path, opts: Options, wait: bool) -> Result<LogHandle> {
    if opts.read_only {
        return Err(Error::InvalidArgument(
            "a read-only open takes no lock and is not shared: open it with Store::open_with"
                .into(),
        ));
    }
    // A store directory made here is the owner's only (its socket is).
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| Error::io("create store directory", dir, e))?;
    }
    match Store::open_with(dir, opts.clone()) {
        Ok(store) => {
            let store = Arc::new(store);
            host(&store)?;
            Ok(LogHandle::from(store))
        }
        Err(e @ Error::Locked { .. }) if !wait && !is_hosted(dir) => Err(e),
        Err(Error::Locked { .. }) => {
            let client = Client::connect(dir, opts)?;
            Ok(LogHandle::from(client))
        }
        Err(e) => Err(e),
    }
}

/// Serve `store` (open for writing in this process) to other processes
/// until it closes.
pub fn host(store: &Arc<Store>) -> Result<()> {
    let server = Server::start(store)?;
    store.attach(Box::new(server));
    Ok(())
}
