//! `gc.manifest` (FORMAT.md §14.2): the sessions a segment collection
//! reclaimed, each with how many of its first events it keeps (what live
//! fork descendants still read through it). Not derived: once a collection
//! has dropped a deleted session's tombstone, this file is the only record
//! that the session is gone, so a manifest that does not check refuses the
//! open. Replaced atomically (temp file, fdatasync, rename, directory fsync).

use std::collections::BTreeMap;
use std::path::Path;

use crate::derived::{write_atomic, DerivedKind};
use crate::error::{Error, Result};
use crate::types::SessionId;
use crate::vfs::Vfs;

pub const MANIFEST_FILE: &str = "gc.manifest";
pub const MANIFEST_TMP_FILE: &str = "gc.manifest.tmp";
pub const MANIFEST_MAGIC: [u8; 8] = *b"TSTNGCM\0";
pub const MANIFEST_VERSION: u32 = 1;
const HEADER_BYTES: usize = 64;
const ENTRY_BYTES: usize = 12;

/// Reclaimed sessions: compact id to the number of first events kept.
pub type Reclaimed = BTreeMap<SessionId, u64>;

/// Encode a manifest (§14.2).
pub fn encode(store_id: [u8; 16], reclaimed: &Reclaimed) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + reclaimed.len() * ENTRY_BYTES + 4);
    out.extend_from_slice(&MANIFEST_MAGIC);
    out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
    out.extend_from_slice(&store_id);
    out.extend_from_slice(&(reclaimed.len() as u64).to_le_bytes());
    out.resize(HEADER_BYTES, 0);
    for (id, keep) in reclaimed {
        out.extend_from_slice(&id.0.to_le_bytes());
        out.extend_from_slice(&keep.to_le_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decode a manifest; the error says what does not check.
pub fn decode(b: &[u8]) -> std::result::Result<([u8; 16], Reclaimed), String> {
    if b.len() < HEADER_BYTES + 4 {
        return Err(format!(
            "{} bytes, a manifest has at least {}",
            b.len(),
            HEADER_BYTES + 4
        ));
    }
    let body = crate::derived::checked_body(b, "manifest")?;
    if b[0..8] != MANIFEST_MAGIC {
        return Err("bad magic, expected \"TSTNGCM\\0\"".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    if u32_at(8) != MANIFEST_VERSION {
        return Err(format!(
            "manifest version {}, this build reads {MANIFEST_VERSION}",
            u32_at(8)
        ));
    }
    if u32_at(12) as usize != HEADER_BYTES {
        return Err("header_bytes is not 64".into());
    }
    if b[40..64].iter().any(|x| *x != 0) {
        return Err("reserved bytes are not zero".into());
    }
    let count = u64_at(32);
    let expected = (body.len() - HEADER_BYTES) as u64;
    if count.checked_mul(ENTRY_BYTES as u64) != Some(expected) {
        return Err(format!(
            "count {count} does not match the {expected} bytes of entries"
        ));
    }
    let mut out = Reclaimed::new();
    let mut prev: Option<u32> = None;
    for i in 0..count as usize {
        let at = HEADER_BYTES + i * ENTRY_BYTES;
        let id = u32_at(at);
        if prev.is_some_and(|p| p >= id) {
            return Err(format!(
                "entry {i} (session {id}) is not in strictly increasing order"
            ));
        }
        prev = Some(id);
        out.insert(SessionId(id), u64_at(at + 4));
    }
    Ok((b[16..32].try_into().expect("16"), out))
}

/// Load `gc.manifest`: `None` if absent; a manifest that does not check is
/// corruption (it is evidence, not a cache).
pub fn load(vfs: &dyn Vfs, dir: &Path) -> Result<Option<([u8; 16], Reclaimed)>> {
    let path = dir.join(MANIFEST_FILE);
    if !vfs.exists(&path) {
        return Ok(None);
    }
    let f = vfs
        .open(&path, false)
        .map_err(|e| Error::io("open gc manifest", &path, e))?;
    let len = f
        .len()
        .map_err(|e| Error::io("stat gc manifest", &path, e))?;
    let mut buf = vec![0u8; len as usize];
    let n = f
        .read_at(&mut buf, 0)
        .map_err(|e| Error::io("read gc manifest", &path, e))?;
    buf.truncate(n);
    decode(&buf)
        .map(Some)
        .map_err(|why| Error::corrupt(&path, 0, format!("gc manifest: {why}")))
}

/// Replace `gc.manifest` atomically (FORMAT.md §14.4 step 2).
pub fn write(vfs: &dyn Vfs, dir: &Path, store_id: [u8; 16], reclaimed: &Reclaimed) -> Result<()> {
    write_atomic(
        vfs,
        DerivedKind::GcManifest,
        &dir.join(MANIFEST_TMP_FILE),
        &dir.join(MANIFEST_FILE),
        &encode(store_id, reclaimed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_damage_is_named() {
        let mut r = Reclaimed::new();
        r.insert(SessionId(3), 0);
        r.insert(SessionId(9), 17);
        let b = encode([7; 16], &r);
        assert_eq!(b.len(), 64 + 2 * 12 + 4);
        assert_eq!(decode(&b).unwrap(), ([7; 16], r));
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert!(decode(&d).is_err(), "flipped byte {i} accepted");
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
        assert!(decode(&[]).is_err());
    }
}
