//! Opening a store the way each command needs it.

use std::path::Path;
use std::sync::Arc;

use turnstone::{Options, Store};

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
