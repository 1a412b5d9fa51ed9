//! Opening a store the way each command needs it.

use std::path::Path;
use std::sync::Arc;

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
