//! Opening a store the way each command needs it.

use std::path::Path;
use std::sync::Arc;

use turnstone::session::LogHandle;
use turnstone::{Options, RecoveryMode, Store};

use crate::failure::{existing_dir, Failure};

/// Open read-only: no lock, no byte changed (a torn tail is seen, not cut).
pub fn read_only(dir: &Path) -> Result<Arc<Store>, Failure> {
    existing_dir(dir)?;
    let opts = Options {
        read_only: true,
        ..Default::default()
    };
    Store::open_with(dir, opts)
        .map(Arc::new)
        .map_err(Failure::from)
}

/// Open read-only in salvage mode (FORMAT.md §6.4): every frame whose own
/// checksum holds, past any damage; what was dropped goes to standard error.
pub fn salvage(dir: &Path) -> Result<Arc<Store>, Failure> {
    existing_dir(dir)?;
    let opts = Options {
        read_only: true,
        recovery_mode: RecoveryMode::Salvage,
        ..Default::default()
    };
    let store = Store::open_with(dir, opts).map_err(Failure::from)?;
    for p in &store.recovery_report().problems {
        eprintln!(
            "salvage: {} at {} offset {} ({} bytes): {}; {}",
            crate::verify::kind_str(p.kind),
            p.file.display(),
            p.offset,
            p.bytes,
            p.detail,
            p.action
        );
    }
    Ok(Arc::new(store))
}

/// Close a store shared with sessions: every other handle must be gone.
pub fn close(store: Arc<Store>, dir: &Path) -> Result<(), Failure> {
    match Arc::try_unwrap(store) {
        Ok(s) => s
            .close()
            .map_err(|e| Failure::from(e).context(format!("closing store {}", dir.display()))),
        // Still shared: dropping the last handle closes it.
        Err(_) => Ok(()),
    }
}

/// Open to write sessions as one process among several
/// (docs/MULTIPROCESS.md): take the lock and host the store, or, when
/// another process hosts it (a Python or Node worker, a Rust service),
/// run as its client instead of meeting `locked`. A process that holds the
/// lock without hosting (`turnstone serve`, another command) is `locked`,
/// at once. A missing directory is created, the owner's only.
pub fn shared(dir: &Path) -> Result<LogHandle, Failure> {
    turnstone::share::open_if_hosted(dir, Options::default()).map_err(Failure::from)
}

/// Close what [`shared`] opened: the store when this process hosted it
/// (its clients, if any came meanwhile, take it over), else the
/// connection.
pub fn close_shared(log: LogHandle, dir: &Path) -> Result<(), Failure> {
    match log.store() {
        Some(store) => close(store.clone(), dir),
        None => Ok(()),
    }
}
