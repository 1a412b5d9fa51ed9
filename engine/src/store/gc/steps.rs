//! The store-wide file steps around the range rewrites of FORMAT.md §14.4:
//! the removal of the index checkpoint before any range changes (step 3,
//! [`remove_checkpoints`]) and the removal of the temp files an
//! interrupted collection left ([`remove_stale_temps`]).
//!
//! Invariant: each step is durable (directory fsync) before the collection
//! goes on, and neither removes a file recovery needs: a checkpoint is
//! derived (§7), and `gc.manifest.tmp` and `*.tseg.tmp` are names recovery
//! never reads (§14).

use std::path::Path;

use crate::error::{Error, Result};
use crate::index::checkpoint;
use crate::index::reclaimed::MANIFEST_TMP_FILE;
use crate::vfs::Vfs;

/// Step 3 of §14.4: remove `index.ckpt`, its deltas and their temporary
/// files, durably.
pub(super) fn remove_checkpoints(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    checkpoint::remove(vfs, dir)?;
    for tmp in [checkpoint::CHECKPOINT_TMP_FILE, checkpoint::DELTA_TMP_FILE] {
        let tmp = dir.join(tmp);
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)
                .map_err(|e| Error::io("remove stale checkpoint", &tmp, e))?;
        }
    }
    vfs.sync_dir(dir)
        .map_err(|e| Error::io("fsync directory", dir, e))
}

/// Remove what an interrupted collection left: `gc.manifest.tmp` and
/// `*.tseg.tmp` (never names recovery reads, FORMAT.md §14).
pub(super) fn remove_stale_temps(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    let names = vfs
        .list(dir)
        .map_err(|e| Error::io("list store directory", dir, e))?;
    let mut removed = false;
    for n in names {
        if n == MANIFEST_TMP_FILE || n.ends_with(".tseg.tmp") {
            let p = dir.join(&n);
            vfs.remove(&p)
                .map_err(|e| Error::io("remove stale collection file", &p, e))?;
            removed = true;
        }
    }
    if removed {
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(())
}
