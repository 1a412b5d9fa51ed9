//! The one writer of derived files (index checkpoints, projection
//! snapshots): write a temp file, fdatasync it, rename it over the target,
//! fsync the directory; and the one check of their trailing CRC-32.
//!
//! Invariant 5 of ARCHITECTURE.md: a derived file is replaced atomically
//! (M3 of FORMAT.md §6.1: rename within a directory is atomic and a
//! directory fsync makes it durable), so a crash leaves the old file or the
//! new one, never a mix; callers write one only after the position it
//! covers is durable.

use std::path::Path;

use crate::error::{Error, Result};
use crate::vfs::Vfs;

/// The body of a file that ends with the CRC-32 of everything before it
/// (index checkpoints and deltas, snapshots, `gc.manifest`), once that
/// checksum holds. The caller checked that `b` holds more than 4 bytes;
/// `what` names the file in the error.
pub(crate) fn checked_body<'a>(b: &'a [u8], what: &str) -> std::result::Result<&'a [u8], String> {
    let (body, tail) = b.split_at(b.len() - 4);
    let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(format!(
            "{what} checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        ));
    }
    Ok(body)
}

/// What a derived file is called in error messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DerivedKind {
    Checkpoint,
    Snapshot,
    /// `gc.manifest` (FORMAT.md §14.2): not derived, but replaced the same way.
    GcManifest,
    /// `retention.json` (FORMAT.md §18): a setting, replaced the same way.
    Retention,
}

impl DerivedKind {
    /// Operation names, for [`Error::Io`]: create, write, fsync, rename,
    /// fsync directory.
    fn ops(self) -> [&'static str; 5] {
        match self {
            DerivedKind::Checkpoint => [
                "create checkpoint",
                "write checkpoint",
                "fsync checkpoint",
                "rename checkpoint",
                "fsync directory",
            ],
            DerivedKind::Snapshot => [
                "create snapshot",
                "write snapshot",
                "fsync snapshot",
                "rename snapshot",
                "fsync snapshot directory",
            ],
            DerivedKind::Retention => [
                "create retention policy",
                "write retention policy",
                "fsync retention policy",
                "rename retention policy",
                "fsync directory",
            ],
            DerivedKind::GcManifest => [
                "create gc manifest",
                "write gc manifest",
                "fsync gc manifest",
                "rename gc manifest",
                "fsync directory",
            ],
        }
    }
}

/// Replace `dst` with `bytes` atomically, through the temp file `tmp` (in
/// the same directory as `dst`).
pub(crate) fn write_atomic(
    vfs: &dyn Vfs,
    kind: DerivedKind,
    tmp: &Path,
    dst: &Path,
    bytes: &[u8],
) -> Result<()> {
    let [create, write, fsync, rename, fsync_dir] = kind.ops();
    let dir = dst.parent().unwrap_or(Path::new("."));
    debug_assert_eq!(
        tmp.parent(),
        dst.parent(),
        "rename is atomic within one directory"
    );
    let f = vfs
        .create_truncate(tmp)
        .map_err(|e| Error::io(create, tmp, e))?;
    f.write_all_at(bytes, 0)
        .map_err(|e| Error::io(write, tmp, e))?;
    f.sync_data().map_err(|e| Error::io(fsync, tmp, e))?;
    drop(f);
    vfs.rename(tmp, dst)
        .map_err(|e| Error::io(rename, dst, e))?;
    vfs.sync_dir(dir)
        .map_err(|e| Error::io(fsync_dir, dir, e))?;
    Ok(())
}
