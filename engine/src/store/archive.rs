//! Archive files (FORMAT.md §16): one session, with the history it
//! inherits from its fork parents and the blobs its events reference, in
//! one self-contained, checksummed file outside any store.
//!
//! Layout: a 32-byte header, the session name (padded to 8), records (each
//! a 24-byte record header, a body, zero padding to 8), and a 32-byte
//! trailer holding the record counts and a checksum of every byte before
//! it. Blob records come before the events that reference them, so a
//! reader restoring the file in one pass has every blob when it meets an
//! event. A file is complete only with its trailer: a cut file, a flipped
//! bit or a record out of order is a typed error naming the file and the
//! offset.
//!
//! [`write_file`] writes `FILE.partial`, fsyncs it, renames it to `FILE`
//! and fsyncs the directory: `FILE` exists only once it is whole and
//! durable (crash argument in §16).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::frame::{align_up, u16_at, u32_at, u64_at, PAYLOAD_BYTES_MAX, SESSION_NAME_BYTES_MAX};

/// First 8 bytes of an archive file.
pub const ARCHIVE_MAGIC: [u8; 8] = *b"TSTNARC\0";
/// First 8 bytes of its trailer.
pub const ARCHIVE_END_MAGIC: [u8; 8] = *b"TSTNEND\0";
/// The archive format version this build writes and reads.
pub const ARCHIVE_VERSION: u32 = 1;
/// Bytes of the file header.
pub const ARCHIVE_HEADER_BYTES: usize = 32;
/// Bytes of a record header.
pub const RECORD_HEADER_BYTES: usize = 24;
/// Bytes of the trailer.
pub const TRAILER_BYTES: usize = 32;
/// Record type of an event.
pub const RECORD_EVENT: u8 = 1;
/// Record type of a blob.
pub const RECORD_BLOB: u8 = 2;
/// Largest blob an archive holds (a record body length is a u32).
pub const BLOB_BYTES_MAX: usize = u32::MAX as usize - 32;

/// One event as stored: its seq, kind code, flags and payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedEvent {
    /// The event's seq in the session.
    pub seq: u64,
    /// The event kind.
    pub kind: u16,
    /// Event flags (bit 0: ignorable).
    pub flags: u16,
    /// The event's payload bytes.
    pub payload: Vec<u8>,
}

/// One record of an archive, as [`visit`] hands it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A content-addressed blob: its sha256 and its bytes.
    Blob {
        /// SHA-256 of `bytes`.
        sha256: [u8; 32],
        /// The blob's content.
        bytes: Vec<u8>,
    },
    /// An event of the session.
    Event(ArchivedEvent),
}

/// The file header's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveHeader {
    /// The archived session's id.
    pub session: String,
    /// When the archive was written, ms since the Unix epoch.
    pub created_ms: u64,
}

/// What a whole archive holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    /// What the file header says.
    pub header: ArchiveHeader,
    /// The blobs, in file order.
    pub blobs: Vec<([u8; 32], Vec<u8>)>,
    /// The events, seqs `0..n` in order.
    pub events: Vec<ArchivedEvent>,
}

/// Whether `path` starts with the archive magic (false for a directory or
/// an unreadable file).
pub fn is_archive(path: &Path) -> bool {
    let mut b = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
        && b == ARCHIVE_MAGIC
}

fn record_header(kind: u8, ekind: u16, flags: u16, seq: u64, body_len: usize) -> [u8; 24] {
    let mut h = [0u8; RECORD_HEADER_BYTES];
    h[0] = kind;
    h[2..4].copy_from_slice(&ekind.to_le_bytes());
    h[4..6].copy_from_slice(&flags.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..20].copy_from_slice(&(body_len as u32).to_le_bytes());
    h
}

/// A writer that checksums every byte it passes on.
struct Summed<W> {
    inner: W,
    all: crc32fast::Hasher,
    at: u64,
}

impl<W: Write> Summed<W> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.all.update(b);
        self.at += b.len() as u64;
        self.inner.write_all(b)
    }
    fn pad(&mut self) -> io::Result<()> {
        let n = align_up(self.at as usize) - self.at as usize;
        self.put(&[0u8; 8][..n])
    }
    fn record(&mut self, mut header: [u8; 24], parts: &[&[u8]]) -> io::Result<()> {
        let mut h = crc32fast::Hasher::new();
        h.update(&header[..20]);
        for p in parts {
            h.update(p);
        }
        header[20..24].copy_from_slice(&h.finalize().to_le_bytes());
        self.put(&header)?;
        for p in parts {
            self.put(p)?;
        }
        self.pad()
    }
}

/// Write an archive of `session` to `out`: header, name, blobs, events,
/// trailer. Events must be seqs `0..n` in order.
pub fn write<W: Write>(
    out: W,
    session: &str,
    created_ms: u64,
    blobs: &[([u8; 32], &[u8])],
    events: &[ArchivedEvent],
) -> io::Result<u64> {
    if session.is_empty() || session.len() > SESSION_NAME_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "session id must be 1 to 1024 bytes",
        ));
    }
    let mut w = Summed {
        inner: out,
        all: crc32fast::Hasher::new(),
        at: 0,
    };
    let mut h = [0u8; ARCHIVE_HEADER_BYTES];
    h[0..8].copy_from_slice(&ARCHIVE_MAGIC);
    h[8..12].copy_from_slice(&ARCHIVE_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&created_ms.to_le_bytes());
    h[24..26].copy_from_slice(&(session.len() as u16).to_le_bytes());
    let crc = header_crc(&h, session.as_bytes());
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    w.put(&h)?;
    w.put(session.as_bytes())?;
    w.pad()?;
    for (sha, bytes) in blobs {
        if bytes.len() > BLOB_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "blob too large",
            ));
        }
        w.record(
            record_header(RECORD_BLOB, 0, 0, 0, 32 + bytes.len()),
            &[sha, bytes],
        )?;
    }
    for (i, e) in events.iter().enumerate() {
        if e.seq != i as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("event seq {} where {i} was expected", e.seq),
            ));
        }
        w.record(
            record_header(RECORD_EVENT, e.kind, e.flags, e.seq, e.payload.len()),
            &[&e.payload],
        )?;
    }
    let file_crc = w.all.clone().finalize();
    let mut t = [0u8; TRAILER_BYTES];
    t[0..8].copy_from_slice(&ARCHIVE_END_MAGIC);
    t[8..16].copy_from_slice(&(events.len() as u64).to_le_bytes());
    t[16..24].copy_from_slice(&(blobs.len() as u64).to_le_bytes());
    t[24..28].copy_from_slice(&file_crc.to_le_bytes());
    let crc = crc32fast::hash(&t[..28]);
    t[28..32].copy_from_slice(&crc.to_le_bytes());
    w.put(&t)?;
    w.inner.flush()?;
    Ok(w.at)
}

/// Write an archive to `path` durably: `path.partial` is written and
/// fsynced, renamed to `path`, and the directory fsynced. An existing
/// `path` is refused (nothing is overwritten). Returns the file's size.
pub fn write_file(
    path: &Path,
    session: &str,
    created_ms: u64,
    blobs: &[([u8; 32], &[u8])],
    events: &[ArchivedEvent],
) -> Result<u64> {
    if path.exists() {
        return Err(Error::InvalidArgument(format!(
            "{} exists; an archive never overwrites a file",
            path.display()
        )));
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let f = std::fs::File::create(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
    let mut bw = io::BufWriter::with_capacity(1 << 20, f);
    let n = write(&mut bw, session, created_ms, blobs, events)
        .map_err(|e| Error::io("write", &tmp, e))?;
    let f = bw
        .into_inner()
        .map_err(|e| Error::io("write", &tmp, e.into_error()))?;
    f.sync_all().map_err(|e| Error::io("fsync", &tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| Error::io("rename", path, e))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync directory", &dir, e))?;
    Ok(n)
}

/// The header's checksum: its first 28 bytes, then the session name.
fn header_crc(h: &[u8], name: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(&h[..28]);
    c.update(name);
    c.finalize()
}

/// `Err(offset)` of the first nonzero byte in `b[from..to]`.
fn check_zero(b: &[u8], from: usize, to: usize) -> std::result::Result<(), usize> {
    match b[from..to].iter().position(|&x| x != 0) {
        Some(i) => Err(from + i),
        None => Ok(()),
    }
}

/// Read the archive at `path` whole, handing each record to `visit` in
/// file order once its checksum holds. Checks: magic, version, header and
/// record checksums, record types, dense event seqs, blob hashes (sha256
/// of the bytes), the trailer's counts and its checksum of the whole file.
/// The first failure is the error: [`Error::Corrupt`] with the file and
/// offset, [`Error::NotTurnstone`] for another kind of file,
/// [`Error::UnsupportedVersion`] for a newer format. Records before it
/// were handed out.
pub fn visit(path: &Path, mut visit: impl FnMut(u64, &Record)) -> Result<ArchiveHeader> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("read", path, e))?;
    let mut r = Reader {
        path,
        bytes: &bytes,
        at: 0,
        events: 0,
        blobs: 0,
    };
    let header = r.header()?;
    while let Some((offset, rec)) = r.record()? {
        visit(offset, &rec);
    }
    r.trailer()?;
    Ok(header)
}

/// One pass of [`visit`] over a file's bytes: where it is, and the records
/// counted so far (the trailer's counts must match them).
struct Reader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    /// Offset of the next record (or of the trailer).
    at: usize,
    events: u64,
    blobs: u64,
}

impl Reader<'_> {
    /// Every check names the file and the offset it failed at.
    fn corrupt(&self, offset: usize, detail: String) -> Error {
        Error::corrupt(self.path, offset as u64, detail)
    }

    /// The file header and the session name after it. The magic comes first
    /// (another kind of file is not corruption), the checksum before the
    /// version (a flipped bit must not pass for a newer format). Leaves `at`
    /// at the first record.
    fn header(&mut self) -> Result<ArchiveHeader> {
        let bytes = self.bytes;
        if bytes.len() < 8 || bytes[..8] != ARCHIVE_MAGIC {
            return Err(Error::NotTurnstone {
                file: self.path.to_path_buf(),
                what: "archive",
                detail: "no archive magic at offset 0".into(),
            });
        }
        if bytes.len() < ARCHIVE_HEADER_BYTES {
            return Err(self.corrupt(
                0,
                format!("file of {} bytes is cut inside its header", bytes.len()),
            ));
        }
        let h = &bytes[..ARCHIVE_HEADER_BYTES];
        let name_len = (u16_at(h, 24) as usize).min(SESSION_NAME_BYTES_MAX);
        let name_end = ARCHIVE_HEADER_BYTES + name_len;
        if bytes.len() < align_up(name_end) {
            return Err(self.corrupt(
                24,
                format!(
                    "session name of {} bytes runs past the end of the file (damaged header or cut file)",
                    u16_at(h, 24)
                ),
            ));
        }
        let (stored, computed) = (
            u32_at(h, 28),
            header_crc(h, &bytes[ARCHIVE_HEADER_BYTES..name_end]),
        );
        if stored != computed {
            return Err(self.corrupt(
                0,
                format!("header checksum: stored {stored:08x}, computed {computed:08x}"),
            ));
        }
        let version = u32_at(h, 8);
        if version != ARCHIVE_VERSION {
            return Err(Error::UnsupportedVersion {
                file: self.path.to_path_buf(),
                found: version,
                supported: ARCHIVE_VERSION,
            });
        }
        if name_len == 0 || u16_at(h, 24) as usize > SESSION_NAME_BYTES_MAX {
            return Err(self.corrupt(24, format!("session name length {}", u16_at(h, 24))));
        }
        check_zero(bytes, name_end, align_up(name_end))
            .map_err(|o| self.corrupt(o, "padding after the session name is not zero".into()))?;
        let session = std::str::from_utf8(&bytes[ARCHIVE_HEADER_BYTES..name_end])
            .map_err(|_| self.corrupt(ARCHIVE_HEADER_BYTES, "session name is not UTF-8".into()))?
            .to_string();
        self.at = align_up(name_end);
        Ok(ArchiveHeader {
            session,
            created_ms: u64_at(h, 16),
        })
    }

    /// The record at `at` and its offset, once its checksum, its type's
    /// rules and its padding hold; `None` at the trailer's magic. A record
    /// is handed out only whole, so a reader never acts on a cut one.
    fn record(&mut self) -> Result<Option<(u64, Record)>> {
        let (bytes, at) = (self.bytes, self.at);
        if bytes.len() - at >= 8 && bytes[at..at + 8] == ARCHIVE_END_MAGIC {
            return Ok(None);
        }
        if bytes.len() - at < RECORD_HEADER_BYTES {
            return Err(self.corrupt(
                at,
                format!(
                    "file ends without its trailer ({} bytes after the last record; cut short?)",
                    bytes.len() - at
                ),
            ));
        }
        let rh = &bytes[at..at + RECORD_HEADER_BYTES];
        let len = u32_at(rh, 16) as usize;
        let body_at = at + RECORD_HEADER_BYTES;
        if bytes.len() - body_at < len {
            return Err(self.corrupt(
                at,
                format!("record of {len} bytes runs past the end of the file (cut short?)"),
            ));
        }
        let body = &bytes[body_at..body_at + len];
        let mut c = crc32fast::Hasher::new();
        c.update(&rh[..20]);
        c.update(body);
        let (stored, computed) = (u32_at(rh, 20), c.finalize());
        if stored != computed {
            return Err(self.corrupt(
                at,
                format!("record checksum: stored {stored:08x}, computed {computed:08x}"),
            ));
        }
        let rec = match rh[0] {
            RECORD_BLOB => self.blob(body)?,
            RECORD_EVENT => self.event(rh, body)?,
            t => return Err(self.corrupt(at, format!("unknown record type {t}"))),
        };
        let end = body_at + len;
        self.at = align_up(end);
        if self.at > bytes.len() {
            return Err(self.corrupt(end, "file is cut inside a record's padding".into()));
        }
        check_zero(bytes, end, self.at)
            .map_err(|o| self.corrupt(o, "padding after a record is not zero".into()))?;
        Ok(Some(((end - len - RECORD_HEADER_BYTES) as u64, rec)))
    }

    /// A blob record at `at` with a checked `body`: blobs come before every
    /// event (a one-pass restore has each blob when an event needs it), and
    /// the bytes must hash to the sha256 the record names.
    fn blob(&mut self, body: &[u8]) -> Result<Record> {
        let (at, len) = (self.at, body.len());
        if self.events > 0 {
            return Err(self.corrupt(at, "blob record after an event record".into()));
        }
        if len < 32 {
            return Err(self.corrupt(at, format!("blob record of {len} bytes")));
        }
        let sha: [u8; 32] = body[..32].try_into().expect("32 bytes");
        let got = crate::store::blobs::sha256(&body[32..]);
        if got != sha {
            return Err(self.corrupt(
                at,
                format!(
                    "blob {} holds bytes whose sha256 is {}",
                    crate::store::blobs::hex(&sha),
                    crate::store::blobs::hex(&got)
                ),
            ));
        }
        self.blobs += 1;
        Ok(Record::Blob {
            sha256: sha,
            bytes: body[32..].to_vec(),
        })
    }

    /// An event record at `at` with record header `rh` and a checked
    /// `body`: seqs are dense from 0 (nothing skipped, nothing repeated) and
    /// a payload fits in a store's frame.
    fn event(&mut self, rh: &[u8], body: &[u8]) -> Result<Record> {
        let (at, len, events) = (self.at, body.len(), self.events);
        let seq = u64_at(rh, 8);
        if seq != events {
            return Err(self.corrupt(at, format!("event seq {seq} where {events} was expected")));
        }
        if len > PAYLOAD_BYTES_MAX {
            return Err(self.corrupt(at, format!("event payload of {len} bytes")));
        }
        self.events += 1;
        Ok(Record::Event(ArchivedEvent {
            seq,
            kind: u16_at(rh, 2),
            flags: u16_at(rh, 4),
            payload: body.to_vec(),
        }))
    }

    /// The trailer at `at`: exactly its size, its own checksum, the checksum
    /// of every byte before it, and counts that match the records read (a
    /// file is complete only with it).
    fn trailer(&self) -> Result<()> {
        let (bytes, at) = (self.bytes, self.at);
        let (events, blobs) = (self.events, self.blobs);
        if bytes.len() - at != TRAILER_BYTES {
            return Err(self.corrupt(
                at,
                format!(
                    "trailer of {} bytes where {TRAILER_BYTES} were expected",
                    bytes.len() - at
                ),
            ));
        }
        let t = &bytes[at..];
        let (stored, computed) = (u32_at(t, 28), crc32fast::hash(&t[..28]));
        if stored != computed {
            return Err(self.corrupt(
                at,
                format!("trailer checksum: stored {stored:08x}, computed {computed:08x}"),
            ));
        }
        let (stored, computed) = (u32_at(t, 24), crc32fast::hash(&bytes[..at]));
        if stored != computed {
            return Err(self.corrupt(
                at,
                format!("file checksum: stored {stored:08x}, computed {computed:08x}"),
            ));
        }
        if u64_at(t, 8) != events || u64_at(t, 16) != blobs {
            return Err(self.corrupt(
                at,
                format!(
                    "trailer counts {} events and {} blobs, the file holds {events} and {blobs}",
                    u64_at(t, 8),
                    u64_at(t, 16)
                ),
            ));
        }
        Ok(())
    }
}

/// Read and check a whole archive (see [`visit`]).
pub fn read_file(path: &Path) -> Result<Archive> {
    let (mut blobs, mut events) = (Vec::new(), Vec::new());
    let header = visit(path, |_, r| match r {
        Record::Blob { sha256, bytes } => blobs.push((*sha256, bytes.clone())),
        Record::Event(e) => events.push(e.clone()),
    })?;
    Ok(Archive {
        header,
        blobs,
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, p: &[u8]) -> ArchivedEvent {
        ArchivedEvent {
            seq,
            kind: 3,
            flags: (seq % 2) as u16,
            payload: p.to_vec(),
        }
    }

    #[test]
    fn round_trip_and_every_flipped_byte_is_refused_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tsarc");
        let blob = b"a blob of bytes".to_vec();
        let sha = crate::store::blobs::sha256(&blob);
        let events = vec![ev(0, b"{\"x\":1}"), ev(1, b""), ev(2, b"hello, world")];
        let n = write_file(&path, "sess-1", 77, &[(sha, &blob)], &events).unwrap();
        assert_eq!(n, std::fs::metadata(&path).unwrap().len());
        assert!(is_archive(&path));
        let a = read_file(&path).unwrap();
        assert_eq!(a.header.session, "sess-1");
        assert_eq!(a.header.created_ms, 77);
        assert_eq!(a.events, events);
        assert_eq!(a.blobs, vec![(sha, blob.clone())]);
        // Never overwrites.
        assert!(write_file(&path, "sess-1", 77, &[], &events).is_err());
        let good = std::fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            std::fs::write(&path, &bad).unwrap();
            match read_file(&path) {
                Err(Error::Corrupt { file, offset, .. }) => {
                    assert_eq!(file, path);
                    assert!(offset <= i as u64, "byte {i}: offset {offset}");
                }
                Err(Error::NotTurnstone { .. }) if i < 8 => {}
                Err(Error::UnsupportedVersion { .. }) => panic!("byte {i}: header crc missed"),
                other => panic!("byte {i}: {other:?}"),
            }
        }
        // Every cut is refused too.
        for cut in 0..good.len() {
            std::fs::write(&path, &good[..cut]).unwrap();
            assert!(read_file(&path).is_err(), "cut at {cut}");
        }
    }
}
