//! Apply a recovery plan ([`super::plan::Recovered`]) to the bytes before
//! the first append: remove a stale checkpoint, zero torn bytes, remove
//! segment files, each step durable (FORMAT.md §6.4).

use std::path::Path;

use crate::error::{Error, Result};
use crate::log::{segment_path, zero_range};
use crate::vfs::Vfs;

use super::recovered::Recovered;

/// Apply a plan to the bytes, before anything new is written (FORMAT.md
/// §6.4), each step durable. A checkpoint that no longer matches goes first:
/// once the log is cut it would claim durability for bytes that are gone.
pub(crate) fn apply(
    vfs: &dyn Vfs,
    dir: &Path,
    rec: &Recovered,
    had_bad_checkpoint: bool,
) -> Result<()> {
    if rec.remove_checkpoint || had_bad_checkpoint {
        crate::index::checkpoint::remove(vfs, dir)?;
    }
    for (seg, from, to) in &rec.zero_ranges {
        zero_range(vfs, &segment_path(dir, *seg), *from, *to)?;
    }
    let mut dir_dirty = false;
    for seg in &rec.remove_segments {
        let p = segment_path(dir, *seg);
        if vfs.exists(&p) {
            vfs.remove(&p)
                .map_err(|e| Error::io("remove segment", &p, e))?;
            dir_dirty = true;
        }
    }
    for tmp in [
        crate::index::checkpoint::CHECKPOINT_TMP_FILE,
        crate::index::checkpoint::DELTA_TMP_FILE,
    ] {
        let tmp = dir.join(tmp);
        if vfs.exists(&tmp) {
            vfs.remove(&tmp)
                .map_err(|e| Error::io("remove stale checkpoint", &tmp, e))?;
            dir_dirty = true;
        }
    }
    if dir_dirty {
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(())
}
