//! Index checkpoints (`format-spec/FORMAT.md` §7): a derived file holding the
//! whole index up to a durable log position, so that open rescans only the
//! frames after it. Invariant 5: written only after the position it covers is
//! durable, atomically (temp file, fsync, rename, fsync directory), and
//! discarded (the log is rescanned) whenever it does not match.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::derived::{checked_body, write_atomic, DerivedKind};
use crate::error::{Error, Result};
use crate::frame::FORMAT_VERSION;
use crate::index::{Index, SessionEntry};
use crate::types::{LogPos, SessionId};
use crate::vfs::Vfs;

/// §7: name of the checkpoint file in the store directory.
pub const CHECKPOINT_FILE: &str = "index.ckpt";
/// §7: the temporary file a checkpoint is written to before the rename.
pub const CHECKPOINT_TMP_FILE: &str = "index.ckpt.tmp";
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"TSTNIDX\0";
pub const CHECKPOINT_HEADER_BYTES: usize = 64;
/// Index checkpoint deltas (FORMAT.md §7.1): `index.delta.NNNNNNNNNN`,
/// written through `index.delta.tmp`.
pub const DELTA_PREFIX: &str = "index.delta.";
/// §7.1: the temporary file a delta is written to before the rename.
pub const DELTA_TMP_FILE: &str = "index.delta.tmp";
pub const DELTA_MAGIC: [u8; 8] = *b"TSTNIDD\0";
pub const DELTA_HEADER_BYTES: usize = 72;

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// §7: the store identity of the segments it covers.
    pub store_id: [u8; 16],
    /// Scanning resumes here: the end of the last covered batch.
    pub covered: LogPos,
    /// Sequence number of the next batch after `covered`.
    pub next_batch_seq: u64,
    /// Where the header of the last covered batch is.
    pub last_batch: LogPos,
    /// §7: flags of the last covered batch (stand in for the last batch's
    /// flags when no batch follows).
    pub last_batch_flags: u32,
    /// The session index up to `covered`.
    pub index: Index,
}

/// A decoded checkpoint delta (FORMAT.md §7.1): the index positions from
/// `from` (the `covered` of the checkpoint it extends) up to `covered`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// §7.1: the store identity of the segments it covers.
    pub store_id: [u8; 16],
    /// §7.1: the `covered` of the checkpoint or delta it extends.
    pub from: LogPos,
    /// §7.1: as in §7, the end of the last covered batch.
    pub covered: LogPos,
    /// §7.1: sequence number of the next batch after `covered`.
    pub next_batch_seq: u64,
    /// §7.1: where the header of the last covered batch is.
    pub last_batch: LogPos,
    /// §7.1: flags of the last covered batch.
    pub last_batch_flags: u32,
    /// In increasing session id: sessions that gained positions, and
    /// sessions defined in the range (`define`).
    pub records: Vec<DeltaRecord>,
}

/// A session a [`Delta`] defines: its name, fork parent (and the count
/// it inherits) and define position.
pub type DeltaDefine = (Arc<str>, Option<(SessionId, u64)>, LogPos);

/// One session's part of a [`Delta`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaRecord {
    /// §7.1: the session's compact id.
    pub session: SessionId,
    /// The session was defined in the delta's range: its name, parent and
    /// define position.
    pub define: Option<DeltaDefine>,
    /// Its own positions in the range, in seq order, after the ones it had.
    pub positions: Vec<u64>,
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

/// A session's definition as checkpoints and deltas both store it
/// (FORMAT.md §7, §7.1): name length and bytes, parent flag (and parent
/// id, inherited count), define position.
fn put_define(out: &mut Vec<u8>, name: &str, parent: Option<(SessionId, u64)>, define_pos: LogPos) {
    put_u16(out, name.len() as u16);
    out.extend_from_slice(name.as_bytes());
    match parent {
        None => out.push(0),
        Some((p, n)) => {
            out.push(1);
            put_u32(out, p.0);
            put_u64(out, n);
        }
    }
    put_u64(out, define_pos.0);
}

/// Bytes [`put_define`] writes.
fn define_len(name: &str, parent: Option<(SessionId, u64)>) -> usize {
    2 + name.len() + 1 + if parent.is_some() { 12 } else { 0 } + 8
}

impl Checkpoint {
    /// §7: the file's bytes, header through trailing CRC.
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
            put_define(&mut out, &s.name, s.parent, s.define_pos);
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
        let (mut r, body, store_id) =
            Reader::open(b, "checkpoint", &CHECKPOINT_MAGIC, CHECKPOINT_HEADER_BYTES)?;
        let covered = LogPos(r.u64()?);
        let next_batch_seq = r.u64()?;
        let last_batch = LogPos(r.u64()?);
        let last_batch_flags = r.u32()?;
        let count = r.u32()?;
        let mut index = Index::default();
        for i in 0..count {
            let (name, parent, define_pos) = r.define("checkpoint")?;
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

impl Delta {
    /// The delta of `index` from `from` up to `covered` (every position of
    /// `index` before `covered` is durable).
    pub fn of(
        index: &Index,
        store_id: [u8; 16],
        from: LogPos,
        covered: LogPos,
        next_batch_seq: u64,
        last_batch: (LogPos, u32),
    ) -> Delta {
        let mut records = Vec::new();
        for (i, s) in index.sessions.iter().enumerate() {
            if s.define_pos >= covered {
                break; // defines are in log order
            }
            let lo = s.positions.partition_point(|p| *p < from.0);
            let hi = s.positions.partition_point(|p| *p < covered.0);
            let define = (s.define_pos >= from).then(|| (s.name.clone(), s.parent, s.define_pos));
            if define.is_none() && lo == hi {
                continue;
            }
            records.push(DeltaRecord {
                session: SessionId(i as u32),
                define,
                positions: s.positions[lo..hi].to_vec(),
            });
        }
        Delta {
            store_id,
            from,
            covered,
            next_batch_seq,
            last_batch: last_batch.0,
            last_batch_flags: last_batch.1,
            records,
        }
    }

    /// Bytes [`Delta::encode`] gives.
    pub fn encoded_len(&self) -> usize {
        DELTA_HEADER_BYTES
            + 4
            + self
                .records
                .iter()
                .map(|r| {
                    13 + r.positions.len() * 8
                        + r.define.as_ref().map_or(0, |(n, p, _)| define_len(n, *p))
                })
                .sum::<usize>()
    }

    /// §7.1: the file's bytes, header through trailing CRC.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&DELTA_MAGIC);
        put_u32(&mut out, FORMAT_VERSION);
        put_u32(&mut out, DELTA_HEADER_BYTES as u32);
        out.extend_from_slice(&self.store_id);
        put_u64(&mut out, self.from.0);
        put_u64(&mut out, self.covered.0);
        put_u64(&mut out, self.next_batch_seq);
        put_u64(&mut out, self.last_batch.0);
        put_u32(&mut out, self.last_batch_flags);
        put_u32(&mut out, self.records.len() as u32);
        debug_assert_eq!(out.len(), DELTA_HEADER_BYTES);
        for r in &self.records {
            put_u32(&mut out, r.session.0);
            match &r.define {
                None => out.push(0),
                Some((name, parent, define_pos)) => {
                    out.push(1);
                    put_define(&mut out, name, *parent, *define_pos);
                }
            }
            put_u64(&mut out, r.positions.len() as u64);
            for p in &r.positions {
                put_u64(&mut out, *p);
            }
        }
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        debug_assert_eq!(out.len(), self.encoded_len());
        out
    }

    /// Decode; any mismatch is an `Err(reason)` (the delta is not used).
    pub fn decode(b: &[u8]) -> std::result::Result<Self, String> {
        let (mut r, body, store_id) =
            Reader::open(b, "checkpoint delta", &DELTA_MAGIC, DELTA_HEADER_BYTES)?;
        let from = LogPos(r.u64()?);
        let covered = LogPos(r.u64()?);
        let next_batch_seq = r.u64()?;
        let last_batch = LogPos(r.u64()?);
        let last_batch_flags = r.u32()?;
        let count = r.u32()?;
        if from > covered {
            return Err("checkpoint delta ends before it starts".into());
        }
        let mut records: Vec<DeltaRecord> = Vec::new();
        for _ in 0..count {
            let session = SessionId(r.u32()?);
            if records.last().is_some_and(|l| l.session >= session) {
                return Err("checkpoint delta sessions out of order".into());
            }
            let define = match r.take(1)?[0] {
                0 => None,
                1 => {
                    let (name, parent, define_pos) = r.define("checkpoint delta")?;
                    if define_pos < from || define_pos >= covered {
                        return Err("checkpoint delta define outside its range".into());
                    }
                    Some((name, parent, define_pos))
                }
                _ => return Err("checkpoint delta define flag malformed".into()),
            };
            let n = r.u64()?;
            if n > (body.len() as u64) / 8 {
                return Err("checkpoint delta position count too large".into());
            }
            let mut positions = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let p = r.u64()?;
                if p < from.0 || p >= covered.0 || positions.last().is_some_and(|l| *l >= p) {
                    return Err(
                        "checkpoint delta position outside its range or out of order".into(),
                    );
                }
                positions.push(p);
            }
            records.push(DeltaRecord {
                session,
                define,
                positions,
            });
        }
        if r.at != body.len() {
            return Err("checkpoint delta has trailing bytes".into());
        }
        Ok(Delta {
            store_id,
            from,
            covered,
            next_batch_seq,
            last_batch,
            last_batch_flags,
            records,
        })
    }

    /// Extend `ck` by this delta: it must start where `ck` ends, of the
    /// same store; new sessions get the next ids in order, and a fork
    /// inherits no more than its parent has.
    pub fn apply(&self, ck: &mut Checkpoint) -> std::result::Result<(), String> {
        if self.store_id != ck.store_id {
            return Err("checkpoint delta of another store".into());
        }
        if self.from != ck.covered {
            return Err(format!(
                "checkpoint delta starts at {:?}, the checkpoint ends at {:?}",
                self.from, ck.covered
            ));
        }
        let ix = &mut ck.index;
        for r in &self.records {
            let i = r.session.0 as usize;
            match &r.define {
                Some((name, parent, define_pos)) => {
                    if i != ix.sessions.len() {
                        return Err("checkpoint delta defines a session out of order".into());
                    }
                    if let Some((p, upto)) = parent {
                        let pe = ix
                            .sessions
                            .get(p.0 as usize)
                            .ok_or_else(|| "checkpoint delta fork parent missing".to_string())?;
                        if *upto > pe.len() {
                            return Err(
                                "checkpoint delta fork inherits more than the parent has".into()
                            );
                        }
                    }
                    if ix.by_name.insert(name.clone(), r.session).is_some() {
                        return Err("checkpoint delta names a session twice".into());
                    }
                    ix.sessions.push(SessionEntry {
                        name: name.clone(),
                        parent: *parent,
                        define_pos: *define_pos,
                        positions: r.positions.clone(),
                    });
                }
                None => {
                    let s = ix
                        .sessions
                        .get_mut(i)
                        .ok_or_else(|| "checkpoint delta names an unknown session".to_string())?;
                    s.positions.extend_from_slice(&r.positions);
                }
            }
        }
        ck.covered = self.covered;
        ck.next_batch_seq = self.next_batch_seq;
        ck.last_batch = self.last_batch;
        ck.last_batch_flags = self.last_batch_flags;
        Ok(())
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}
impl<'a> Reader<'a> {
    /// The checks every index file starts with (FORMAT.md §7, §7.1): its
    /// length, the CRC of everything before the last 4 bytes, magic,
    /// version, header size; then the store id. Returns a reader after the
    /// store id, the checksummed body and the id. `what` names the file in
    /// errors.
    fn open(
        b: &'a [u8],
        what: &str,
        magic: &[u8; 8],
        header_bytes: usize,
    ) -> std::result::Result<(Reader<'a>, &'a [u8], [u8; 16]), String> {
        if b.len() < header_bytes + 4 {
            return Err(format!("{what} has only {} bytes", b.len()));
        }
        let body = checked_body(b, what)?;
        if body[0..8] != *magic {
            return Err(format!("{what} has a bad magic"));
        }
        let mut r = Reader { b: body, at: 8 };
        let version = r.u32()?;
        if version != FORMAT_VERSION {
            return Err(format!(
                "{what} version {version}, this build writes {FORMAT_VERSION}"
            ));
        }
        if r.u32()? as usize != header_bytes {
            return Err(format!("{what} header size is not {header_bytes}"));
        }
        let store_id: [u8; 16] = r.take(16)?.try_into().expect("16");
        Ok((r, body, store_id))
    }

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
    /// What [`put_define`] wrote; `what` names the file in errors.
    fn define(&mut self, what: &str) -> std::result::Result<DeltaDefine, String> {
        let n = self.u16()? as usize;
        let name = std::str::from_utf8(self.take(n)?)
            .map_err(|_| format!("{what} session name is not UTF-8"))?;
        let parent = match self.take(1)?[0] {
            0 => None,
            1 => Some((SessionId(self.u32()?), self.u64()?)),
            _ => return Err(format!("{what} parent flag malformed")),
        };
        Ok((Arc::from(name), parent, LogPos(self.u64()?)))
    }
}

/// Read the checkpoint if there is one, extended by the deltas that chain
/// from it (FORMAT.md §7.1: in name order, each applied when it starts
/// where the checkpoint so far ends; one that does not decode, or does
/// not chain, is passed over). `Ok(None)` when absent; `Err(reason)`
/// inside `Ok` when present but unusable.
pub fn load(vfs: &dyn Vfs, dir: &Path) -> Result<Option<std::result::Result<Checkpoint, String>>> {
    let path = dir.join(CHECKPOINT_FILE);
    if !vfs.exists(&path) {
        return Ok(None);
    }
    let buf =
        crate::vfs::read_whole(vfs, &path).map_err(|e| Error::io("read checkpoint", &path, e))?;
    let mut ck = match Checkpoint::decode(&buf) {
        Ok(ck) => ck,
        Err(e) => return Ok(Some(Err(e))),
    };
    for name in delta_names(vfs, dir)? {
        let path = dir.join(&name);
        // A delta is smaller than its checkpoint; a huge file there is not
        // one (and not read).
        let size = vfs.open(&path, false).and_then(|f| f.len());
        if !size.is_ok_and(|n| n <= (buf.len() as u64).max(1 << 20)) {
            continue;
        }
        let buf = crate::vfs::read_whole(vfs, &path)
            .map_err(|e| Error::io("read checkpoint delta", &path, e))?;
        if let Ok(delta) = Delta::decode(&buf) {
            if delta.from == ck.covered && delta.store_id == ck.store_id {
                let before = ck.clone();
                if delta.apply(&mut ck).is_err() {
                    ck = before;
                }
            }
        }
    }
    Ok(Some(Ok(ck)))
}

/// The names of the delta files in `dir`, in order (their numbers have
/// ten digits, so name order is number order).
pub fn delta_names(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = vfs
        .list(dir)
        .map_err(|e| Error::io("list directory", dir, e))?
        .into_iter()
        .filter(|n| delta_number(n).is_some())
        .collect();
    names.sort();
    Ok(names)
}

/// The number of a delta file's name (`index.delta.NNNNNNNNNN`).
fn delta_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(DELTA_PREFIX)?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Write delta number `n` atomically (temp file, fsync, rename, fsync
/// directory). Returns the bytes written.
pub fn write_delta(vfs: &dyn Vfs, dir: &Path, n: u64, delta: &Delta) -> Result<u64> {
    let tmp: PathBuf = dir.join(DELTA_TMP_FILE);
    let dst: PathBuf = dir.join(format!("{DELTA_PREFIX}{n:010}"));
    let bytes = delta.encode();
    write_atomic(vfs, DerivedKind::Checkpoint, &tmp, &dst, &bytes)?;
    Ok(bytes.len() as u64)
}

/// Remove every delta file (durably): after a new checkpoint, which covers
/// what they did, or with the checkpoint they extend.
pub fn remove_deltas(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    let names = delta_names(vfs, dir)?;
    for name in &names {
        let path = dir.join(name);
        vfs.remove(&path)
            .map_err(|e| Error::io("remove checkpoint delta", &path, e))?;
    }
    if !names.is_empty() {
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    Ok(())
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

/// Remove a checkpoint that no longer matches, and its deltas (durably).
pub fn remove(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    let path = dir.join(CHECKPOINT_FILE);
    if vfs.exists(&path) {
        vfs.remove(&path)
            .map_err(|e| Error::io("remove checkpoint", &path, e))?;
        vfs.sync_dir(dir)
            .map_err(|e| Error::io("fsync directory", dir, e))?;
    }
    remove_deltas(vfs, dir)
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
        // A checkpoint to 150 and the delta from there to 400 give the
        // checkpoint to 400.
        let mut first = Checkpoint {
            covered: p(150),
            last_batch: p(100),
            next_batch_seq: 2,
            index: ck.index.prefix_before(p(150)),
            ..ck.clone()
        };
        let delta = Delta::of(&ck.index, [3; 16], p(150), p(400), 5, (p(300), 0));
        assert_eq!(delta.records.len(), 1, "{delta:?}");
        assert!(delta.records[0].define.is_some());
        let dbytes = delta.encode();
        assert_eq!(dbytes.len(), delta.encoded_len());
        assert_eq!(Delta::decode(&dbytes).unwrap(), delta);
        for i in 0..dbytes.len() {
            let mut bad = dbytes.clone();
            bad[i] ^= 0x40;
            assert!(Delta::decode(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(Delta::decode(&dbytes[..dbytes.len() - 1]).is_err());
        // Only where the checkpoint ends.
        let mut elsewhere = first.clone();
        elsewhere.covered = p(140);
        assert!(delta.apply(&mut elsewhere).is_err());
        delta.apply(&mut first).unwrap();
        assert_eq!(first, ck);
        // Applied twice, it defines its session twice.
        let mut again = first.clone();
        again.covered = p(150);
        assert!(delta.apply(&mut again).is_err());
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(Checkpoint::decode(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(Checkpoint::decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
