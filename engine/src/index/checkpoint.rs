//! Index checkpoints (`format-spec/FORMAT.md` §7): a derived file holding the
//! whole index up to a durable log position, so that open rescans only the
//! frames after it. Invariant 5: written only after the position it covers is
//! durable, atomically (temp file, fsync, rename, fsync directory), and
//! discarded (the log is rescanned) whenever it does not match.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::derived::{write_atomic, DerivedKind};
use crate::error::{Error, Result};
use crate::frame::FORMAT_VERSION;
use crate::index::{Index, SessionEntry};
use crate::types::{LogPos, SessionId};
use crate::vfs::Vfs;

pub const CHECKPOINT_FILE: &str = "index.ckpt";
pub const CHECKPOINT_TMP_FILE: &str = "index.ckpt.tmp";
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"TSTNIDX\0";
pub const CHECKPOINT_HEADER_BYTES: usize = 64;

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub store_id: [u8; 16],
    /// Scanning resumes here: the end of the last covered batch.
    pub covered: LogPos,
    /// Sequence number of the next batch after `covered`.
    pub next_batch_seq: u64,
    /// Where the header of the last covered batch is.
    pub last_batch: LogPos,
    pub last_batch_flags: u32,
    pub index: Index,
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            CHECKPOINT_HEADER_BYTES
                + self.index.sessions.len() * 64
                + self.index.own_event_count() as usize * 8,
        );
        out.extend_from_slice(&CHECKPOINT_MAGIC);
        put_u32(&mut out, FORMAT_VERSION);
        put_u32(&mut out, CHECKPOINT_HEADER_BYTES as u32);
        out.extend_from_slice(&self.store_id);
        put_u64(&mut out, self.covered.0);
        put_u64(&mut out, self.next_batch_seq);
        put_u64(&mut out, self.last_batch.0);
        put_u32(&mut out, self.last_batch_flags);
        put_u32(&mut out, self.index.sessions.len() as u32);
        debug_assert_eq!(out.len(), CHECKPOINT_HEADER_BYTES);
        for s in &self.index.sessions {
            put_u16(&mut out, s.name.len() as u16);
            out.extend_from_slice(s.name.as_bytes());
            match s.parent {
                None => out.push(0),
                Some((p, n)) => {
                    out.push(1);
                    put_u32(&mut out, p.0);
                    put_u64(&mut out, n);
                }
            }
            put_u64(&mut out, s.define_pos.0);
            let own = &s.positions;
            put_u64(&mut out, own.len() as u64);
            for p in own {
                put_u64(&mut out, *p);
            }
        }
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out
    }

    /// Decode; any mismatch is an `Err(reason)` and the caller rescans.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, String> {
        if b.len() < CHECKPOINT_HEADER_BYTES + 4 {
            return Err(format!("checkpoint has only {} bytes", b.len()));
        }
        let (body, tail) = b.split_at(b.len() - 4);
        let stored = u32::from_le_bytes(tail.try_into().expect("4"));
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(format!(
                "checkpoint checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ));
        }
        if body[0..8] != CHECKPOINT_MAGIC {
            return Err("checkpoint has a bad magic".into());
        }
        let mut r = Reader { b: body, at: 8 };
        let version = r.u32()?;
        if version != FORMAT_VERSION {
            return Err(format!(
                "checkpoint version {version}, this build writes {FORMAT_VERSION}"
            ));
        }
        if r.u32()? as usize != CHECKPOINT_HEADER_BYTES {
            return Err("checkpoint header size is not 64".into());
        }
        let store_id: [u8; 16] = r.take(16)?.try_into().expect("16");
        let covered = LogPos(r.u64()?);
        let next_batch_seq = r.u64()?;
        let last_batch = LogPos(r.u64()?);
        let last_batch_flags = r.u32()?;
        let count = r.u32()?;
        let mut index = Index::default();
        for i in 0..count {
            let n = r.u16()? as usize;
            let name = std::str::from_utf8(r.take(n)?)
                .map_err(|_| "checkpoint session name is not UTF-8".to_string())?;
            let parent = match r.take(1)?[0] {
                0 => None,
                1 => Some((SessionId(r.u32()?), r.u64()?)),
                _ => return Err("checkpoint parent flag malformed".into()),
            };
            let define_pos = LogPos(r.u64()?);
            let own = r.u64()?;
            if own > (body.len() as u64) / 8 {
                return Err("checkpoint position count too large".into());
            }
            if let Some((p, upto)) = parent {
                let parent = index
                    .sessions
                    .get(p.0 as usize)
                    .filter(|_| p.0 < i)
                    .ok_or_else(|| "checkpoint fork parent missing".to_string())?;
                if upto > parent.len() {
                    return Err("checkpoint fork inherits more than the parent has".into());
                }
            }
            let mut positions = Vec::with_capacity(own as usize);
            for _ in 0..own {
                positions.push(r.u64()?);
            }
            let name: Arc<str> = Arc::from(name);
            if index.by_name.insert(name.clone(), SessionId(i)).is_some() {
                return Err("checkpoint names a session twice".into());
            }
            index.sessions.push(SessionEntry {
                name,
                parent,
                define_pos,
                positions,
            });
        }
        if r.at != body.len() {
            return Err("checkpoint has trailing bytes".into());
        }
        Ok(Checkpoint {
            store_id,
            covered,
            next_batch_seq,
            last_batch,
            last_batch_flags,
            index,
        })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}
impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if self.at + n > self.b.len() {
            return Err("checkpoint is truncated".into());
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

/// Read the checkpoint if there is one. `Ok(None)` when absent;
/// `Err(reason)` inside `Ok` when present but unusable.
pub fn load(vfs: &dyn Vfs, dir: &Path) -> Result<Option<std::result::Result<Checkpoint, String>>> {
    let path = dir.join(CHECKPOINT_FILE);
    if !vfs.exists(&path) {
        return Ok(None);
    }
    let buf =
        crate::vfs::read_whole(vfs, &path).map_err(|e| Error::io("read checkpoint", &path, e))?;
    Ok(Some(Checkpoint::decode(&buf)))
}

/// Write atomically: temp file, fsync, rename, fsync directory.
/// Returns the bytes written.
pub fn write(vfs: &dyn Vfs, dir: &Path, ck: &Checkpoint) -> Result<u64> {
    let tmp: PathBuf = dir.join(CHECKPOINT_TMP_FILE);
    let dst: PathBuf = dir.join(CHECKPOINT_FILE);
    let bytes = ck.encode();
    write_atomic(vfs, DerivedKind::Checkpoint, &tmp, &dst, &bytes)?;
    Ok(bytes.len() as u64)
}

/// Remove a checkpoint that no longer matches (durably).
pub fn remove(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    let path = dir.join(CHECKPOINT_FILE);
    if vfs.exists(&path) {
        vfs.remove(&path)
            .map_err(|e| Error::io("remove checkpoint", &path, e))?;
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::SessionDefine;
    use crate::types::SegmentId;

    #[test]
    fn roundtrip_and_reject_damage() {
        let mut index = Index::default();
        let p = |o| LogPos::new(SegmentId(0), o);
        index
            .apply_define(
                SessionId(0),
                &SessionDefine {
                    name: "a".into(),
                    parent: None,
                },
                p(64),
            )
            .unwrap();
        index.apply_frame(SessionId(0), 0, p(100)).unwrap();
        index
            .apply_define(
                SessionId(1),
                &SessionDefine {
                    name: "b".into(),
                    parent: Some((SessionId(0), 1)),
                },
                p(200),
            )
            .unwrap();
        index.apply_frame(SessionId(1), 1, p(300)).unwrap();
        let ck = Checkpoint {
            store_id: [3; 16],
            covered: p(400),
            next_batch_seq: 5,
            last_batch: p(300),
            last_batch_flags: 0,
            index,
        };
        let bytes = ck.encode();
        assert_eq!(Checkpoint::decode(&bytes).unwrap(), ck);
        // The estimate a roll decides by is not below the size, nor far
        // above it (12 bytes per session at most).
        let estimate = ck.index.checkpoint_bytes_estimate();
        assert!(
            estimate >= bytes.len() as u64,
            "{estimate} < {}",
            bytes.len()
        );
        assert!(estimate <= bytes.len() as u64 + 2 * 12, "{estimate}");
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(Checkpoint::decode(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(Checkpoint::decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
