//! Byte layouts of the log: segment header, commit-batch header, frame header
//! and the `session-define` payload. Pure functions, no I/O: the same code
//! serves the engine, `verify`, `dump` and the fuzz targets.
//!
//! The normative description is `format-spec/FORMAT.md`; section numbers
//! below refer to it. All integers are little-endian.

use crate::types::{SegmentId, SessionId};

/// Format version written and read by this build (§1).
pub const FORMAT_VERSION: u32 = 1;
/// The version a compacted segment's header carries (FORMAT.md §14.3, §8):
/// a build that predates collection then refuses it as an unsupported
/// version (H1) in every mode, instead of calling it corruption that its
/// `point-in-time` mode would cut. Compacted headers of version 1 (written
/// before this rule) are still read.
pub const COMPACTED_SEGMENT_VERSION: u32 = 2;

/// §2 segment header.
pub const SEGMENT_MAGIC: [u8; 8] = *b"TSTNSEG\0";
/// §2: size of the segment header, in bytes.
pub const SEGMENT_HEADER_BYTES: usize = 64;

/// §3 commit batch header.
pub const BATCH_MAGIC: u32 = u32::from_le_bytes(*b"TSB1");
/// §3: size of the batch header, in bytes.
pub const BATCH_HEADER_BYTES: usize = 32;
/// Largest batch body (all frames of one commit), §3.
pub const BATCH_BODY_BYTES_MAX: usize = 32 << 20;
/// Batch flag: this empty batch marks a clean close (§3, §6).
pub const BATCH_FLAG_CLEAN_CLOSE: u32 = 1;

/// §4 frame header.
pub const FRAME_HEADER_BYTES: usize = 24;
/// Largest payload of one frame.
pub const PAYLOAD_BYTES_MAX: usize = 16 << 20;
/// Frames and batches start at multiples of this.
pub const ALIGN: usize = 8;

pub use crate::types::FLAG_IGNORABLE;
/// Number of the first segment of every store (§1).
pub const FIRST_SEGMENT_ID: u32 = 1;
/// Largest segment file: offsets are 32-bit (§1).
pub const SEGMENT_BYTES_MAX: u64 = u32::MAX as u64;
/// Kind reserved for the engine's `session-define` frame (§5).
pub const KIND_SESSION_DEFINE: u16 = 0;
/// Longest session id in bytes.
pub const SESSION_NAME_BYTES_MAX: usize = 1024;

const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(ALIGN));
const _: () = assert!(BATCH_HEADER_BYTES.is_multiple_of(ALIGN));
const _: () = assert!(FRAME_HEADER_BYTES.is_multiple_of(ALIGN));
const _: () = assert!(PAYLOAD_BYTES_MAX + FRAME_HEADER_BYTES + ALIGN <= BATCH_BODY_BYTES_MAX);

/// Round `n` up to the next multiple of [`ALIGN`].
pub const fn align_up(n: usize) -> usize {
    (n + ALIGN - 1) & !(ALIGN - 1)
}

/// The salt that batch and frame checksums start with: the store identity
/// and the segment number (§3; the segment header's own checksum is not
/// salted). Bytes from another store, another segment, or
/// a zeroed/preallocated region can never validate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Salt {
    /// §2: the store identity, fed to the hasher first.
    pub store_id: [u8; 16],
    /// §3: the segment the checksummed bytes are in, fed second.
    pub segment: SegmentId,
}

impl Salt {
    /// A CRC-32 hasher already fed the salt (§3 `salted_crc`); feed it the
    /// checksummed bytes next.
    pub fn hasher(&self) -> crc32fast::Hasher {
        let mut h = crc32fast::Hasher::new();
        h.update(&self.store_id);
        h.update(&self.segment.0.to_le_bytes());
        h
    }
    /// §3 `salted_crc(bytes)`.
    pub fn crc(&self, bytes: &[u8]) -> u32 {
        let mut h = self.hasher();
        h.update(bytes);
        h.finalize()
    }
}

/// Little-endian integers at a byte offset (the caller checked the length).
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// §2: the 64-byte header at offset 0 of every segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// §2: format version (1; 2 in a compacted segment, §14.3).
    pub version: u32,
    /// §2: the store identity, the same in every segment.
    pub store_id: [u8; 16],
    /// §2: the segment id, as in the file name.
    pub segment: SegmentId,
    /// Sequence number of the first batch this segment holds.
    pub first_batch_seq: u64,
    /// Offset in the previous segment where its last batch ended (0 for the first).
    pub prev_segment_end: u32,
}

/// Why a segment header does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than 64 bytes.
    Short(usize),
    /// Wrong magic: not a turnstone segment (or a torn header).
    BadMagic([u8; 8]),
    /// Checksum mismatch.
    BadChecksum {
        /// Checksum computed over bytes 0..60.
        expected: u32,
        /// Checksum stored in the header.
        found: u32,
    },
    /// Valid checksum, unknown version.
    Version(u32),
    /// Valid checksum, impossible field.
    Invalid(&'static str),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Short(n) => write!(
                f,
                "file has {n} bytes, a segment header needs {SEGMENT_HEADER_BYTES}"
            ),
            HeaderError::BadMagic(m) => write!(f, "bad magic {m:02x?}, expected \"TSTNSEG\\0\""),
            HeaderError::BadChecksum { expected, found } => {
                write!(
                    f,
                    "header checksum mismatch: stored {found:#010x}, computed {expected:#010x}"
                )
            }
            HeaderError::Version(v) => {
                write!(f, "format version {v}, this build reads {FORMAT_VERSION}")
            }
            HeaderError::Invalid(what) => write!(f, "invalid header field: {what}"),
        }
    }
}

impl SegmentHeader {
    /// §2: the 64 header bytes of an ordinary segment (flags zero), with
    /// its checksum.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut b = [0u8; SEGMENT_HEADER_BYTES];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(SEGMENT_HEADER_BYTES as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.store_id);
        b[32..36].copy_from_slice(&self.segment.0.to_le_bytes());
        // 36..40 reserved, zero
        b[40..48].copy_from_slice(&self.first_batch_seq.to_le_bytes());
        b[48..52].copy_from_slice(&self.prev_segment_end.to_le_bytes());
        // 52..60 reserved, zero
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// §2: decode and check the first 64 bytes of `b`, in the reader's
    /// order (length, magic, checksum, version, size, reserved bytes).
    /// Accepts compacted headers (§14.3) too; see [`Compaction::of_header`].
    pub fn decode(b: &[u8]) -> Result<Self, HeaderError> {
        if b.len() < SEGMENT_HEADER_BYTES {
            return Err(HeaderError::Short(b.len()));
        }
        let magic: [u8; 8] = b[0..8].try_into().expect("8");
        if magic != SEGMENT_MAGIC {
            return Err(HeaderError::BadMagic(magic));
        }
        let expected = crc32fast::hash(&b[0..60]);
        let found = u32_at(b, 60);
        if expected != found {
            return Err(HeaderError::BadChecksum { expected, found });
        }
        let version = u32_at(b, 8);
        let compacted = u32_at(b, 36) != 0;
        if version != FORMAT_VERSION && !(version == COMPACTED_SEGMENT_VERSION && compacted) {
            return Err(HeaderError::Version(version));
        }
        if u32_at(b, 12) as usize != SEGMENT_HEADER_BYTES {
            return Err(HeaderError::Invalid("header_bytes is not 64"));
        }
        // §14.3: bytes 36..40 are zero in an ordinary segment, whose bytes
        // 52..60 are its flags (§2: only `SEGMENT_FLAG_RECYCLED`); a
        // compacted one names the last id it stands for and the batch that
        // follows its range.
        let last_segment = u32_at(b, 36);
        let next_batch_seq = u64_at(b, 52);
        if last_segment == 0 && next_batch_seq & !SEGMENT_FLAG_RECYCLED != 0 {
            return Err(HeaderError::Invalid(
                "unknown segment flags or reserved bytes not zero",
            ));
        }
        if last_segment != 0 && (last_segment < u32_at(b, 32) || next_batch_seq < u64_at(b, 40)) {
            return Err(HeaderError::Invalid(
                "compacted segment: last_segment below segment or next_batch_seq below first_batch_seq",
            ));
        }
        Ok(SegmentHeader {
            version,
            store_id: b[16..32].try_into().expect("16"),
            segment: SegmentId(u32_at(b, 32)),
            first_batch_seq: u64_at(b, 40),
            prev_segment_end: u32_at(b, 48),
        })
    }
}

/// §2: bit 0 of an ordinary segment's flags (bytes 52..60): the file was
/// recycled, so bytes after the end of data are stale (§6.3).
pub const SEGMENT_FLAG_RECYCLED: u64 = 1;

/// Whether the header in `b` (one [`SegmentHeader::decode`] accepts) is an
/// ordinary segment's with the recycled flag (§2, §6.3).
pub fn header_is_recycled(b: &[u8]) -> bool {
    SegmentHeader::decode(b).is_ok()
        && u32_at(b, 36) == 0
        && u64_at(b, 52) & SEGMENT_FLAG_RECYCLED != 0
}

impl SegmentHeader {
    /// Encode as a recycled segment's header (§2 flags, bit 0).
    pub fn encode_recycled(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut b = self.encode();
        b[52..60].copy_from_slice(&SEGMENT_FLAG_RECYCLED.to_le_bytes());
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// §14.3: what a compacted segment's header adds: the range of segment ids
/// the file stands for ends at `last_segment`, and the batch after the
/// range has sequence `next_batch_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// §14.3: the last segment id the file stands for (header bytes 36..40).
    pub last_segment: SegmentId,
    /// §14.3: `batch_seq` of the batch after the range (header bytes 52..60).
    pub next_batch_seq: u64,
}

impl Compaction {
    /// The compaction fields of a header that [`SegmentHeader::decode`]
    /// accepted; `None` for an ordinary segment (or bytes that do not hold a
    /// valid header).
    pub fn of_header(b: &[u8]) -> Option<Compaction> {
        SegmentHeader::decode(b).ok()?;
        let last = u32_at(b, 36);
        (last != 0).then(|| Compaction {
            last_segment: SegmentId(last),
            next_batch_seq: u64_at(b, 52),
        })
    }

    /// Encode `header` as the header of a compacted segment (§14.3).
    pub fn encode_header(&self, header: &SegmentHeader) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut b = header.encode();
        b[8..12].copy_from_slice(&COMPACTED_SEGMENT_VERSION.to_le_bytes());
        b[36..40].copy_from_slice(&self.last_segment.0.to_le_bytes());
        b[52..60].copy_from_slice(&self.next_batch_seq.to_le_bytes());
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// §3: the 32-byte header in front of every commit batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Bytes of frames that follow (a multiple of 8).
    pub body_len: u32,
    /// §3: sequence of this batch in the log: the previous batch's + 1.
    pub batch_seq: u64,
    /// §3: number of frames in the body.
    pub frame_count: u32,
    /// §3: salted checksum of the whole body, padding included.
    pub body_crc: u32,
    /// §3: bit 0 [`BATCH_FLAG_CLEAN_CLOSE`]; other bits zero.
    pub flags: u32,
}

/// Why a batch header does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer than 32 bytes remain in the file.
    Short(usize),
    /// All 32 bytes are zero: the end of written data.
    Zero,
    /// The first 4 bytes are not `"TSB1"` (holds what was found).
    BadMagic(u32),
    /// The header checksum does not match.
    BadHeaderChecksum {
        /// Salted checksum computed over bytes 0..28.
        expected: u32,
        /// Checksum stored in the header.
        found: u32,
    },
    /// Body length not a multiple of 8 or over the maximum.
    BadLength(u32),
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::Short(n) => write!(
                f,
                "only {n} bytes where a 32-byte batch header was expected"
            ),
            BatchError::Zero => write!(f, "zero bytes where a batch header was expected"),
            BatchError::BadMagic(m) => {
                write!(f, "bad batch magic {m:#010x}, expected {BATCH_MAGIC:#010x}")
            }
            BatchError::BadHeaderChecksum { expected, found } => write!(
                f,
                "batch header checksum mismatch: stored {found:#010x}, computed {expected:#010x}"
            ),
            BatchError::BadLength(n) => write!(f, "impossible batch body length {n}"),
        }
    }
}

impl BatchHeader {
    /// §3: the 32 header bytes, with the salted header checksum.
    pub fn encode(&self, salt: &Salt) -> [u8; BATCH_HEADER_BYTES] {
        let mut b = [0u8; BATCH_HEADER_BYTES];
        b[0..4].copy_from_slice(&BATCH_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.body_len.to_le_bytes());
        b[8..16].copy_from_slice(&self.batch_seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.frame_count.to_le_bytes());
        b[20..24].copy_from_slice(&self.body_crc.to_le_bytes());
        b[24..28].copy_from_slice(&self.flags.to_le_bytes());
        let crc = salt.crc(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and check the header's own checksum (not the body).
    pub fn decode(b: &[u8], salt: &Salt) -> Result<Self, BatchError> {
        if b.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::Short(b.len()));
        }
        let b = &b[..BATCH_HEADER_BYTES];
        if b.iter().all(|x| *x == 0) {
            return Err(BatchError::Zero);
        }
        let magic = u32_at(b, 0);
        if magic != BATCH_MAGIC {
            return Err(BatchError::BadMagic(magic));
        }
        let expected = salt.crc(&b[0..28]);
        let found = u32_at(b, 28);
        if expected != found {
            return Err(BatchError::BadHeaderChecksum { expected, found });
        }
        let body_len = u32_at(b, 4);
        if !(body_len as usize).is_multiple_of(ALIGN) || body_len as usize > BATCH_BODY_BYTES_MAX {
            return Err(BatchError::BadLength(body_len));
        }
        Ok(BatchHeader {
            body_len,
            batch_seq: u64_at(b, 8),
            frame_count: u32_at(b, 16),
            body_crc: u32_at(b, 20),
            flags: u32_at(b, 24),
        })
    }
}

/// §4: a frame header as decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Header plus payload, without padding.
    pub frame_len: u32,
    /// §4: salted checksum of frame bytes 8..frame_len.
    pub crc: u32,
    /// §4: compact id of the session the frame belongs to.
    pub session: SessionId,
    /// §4: 0 for session-define (§5), else the event kind.
    pub kind: u16,
    /// §4: bit 0 [`FLAG_IGNORABLE`]; other bits zero.
    pub flags: u16,
    /// §4: the event's seq in its session; 0 for a define frame.
    pub seq: u64,
}

impl FrameHeader {
    /// Payload length, in bytes.
    pub fn payload_len(&self) -> usize {
        self.frame_len as usize - FRAME_HEADER_BYTES
    }
    /// Bytes the frame occupies in the batch body, padding included.
    pub fn padded_len(&self) -> usize {
        align_up(self.frame_len as usize)
    }
}

/// Why a frame does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes remain than the header or its `frame_len` needs.
    Short {
        /// Bytes remaining.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// `frame_len` below the header size or above the payload maximum
    /// (holds the value read).
    BadLength(u32),
    /// The frame checksum does not match.
    BadChecksum {
        /// Salted checksum computed over frame bytes 8..frame_len.
        expected: u32,
        /// Checksum stored in the frame.
        found: u32,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Short { have, need } => {
                write!(f, "frame needs {need} bytes, only {have} remain")
            }
            FrameError::BadLength(n) => write!(f, "impossible frame length {n}"),
            FrameError::BadChecksum { expected, found } => {
                write!(
                    f,
                    "frame checksum mismatch: stored {found:#010x}, computed {expected:#010x}"
                )
            }
        }
    }
}

/// Bytes a frame with `payload_len` bytes of payload takes, padding included.
pub const fn frame_padded_len(payload_len: usize) -> usize {
    align_up(FRAME_HEADER_BYTES + payload_len)
}

/// Bytes the `session-define` frame of a session id of `name_len` bytes
/// takes in a batch, padding included (§4, §5): what an event group that
/// creates its session needs on top of its events.
pub const fn define_frame_padded_len(name_len: usize, fork: bool) -> usize {
    // version, name_len, name, has_parent; then parent and upto for a fork.
    frame_padded_len(1 + 2 + name_len + 1 + if fork { 4 + 8 } else { 0 })
}

/// Append an encoded, padded frame to `out`.
pub fn encode_frame(
    out: &mut Vec<u8>,
    salt: &Salt,
    session: SessionId,
    kind: u16,
    flags: u16,
    seq: u64,
    payload: &[u8],
) {
    let frame_len = FRAME_HEADER_BYTES + payload.len();
    let start = out.len();
    out.extend_from_slice(&(frame_len as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]); // crc, filled below
    out.extend_from_slice(&session.0.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = salt.crc(&out[start + 8..start + frame_len]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out.resize(start + align_up(frame_len), 0);
}

/// Decode a frame at the start of `b` and verify its checksum. Returns the
/// header; the payload is `b[FRAME_HEADER_BYTES..frame_len]`.
pub fn decode_frame(b: &[u8], salt: &Salt) -> Result<FrameHeader, FrameError> {
    if b.len() < FRAME_HEADER_BYTES {
        return Err(FrameError::Short {
            have: b.len(),
            need: FRAME_HEADER_BYTES,
        });
    }
    let frame_len = u32_at(b, 0);
    if (frame_len as usize) < FRAME_HEADER_BYTES
        || frame_len as usize > FRAME_HEADER_BYTES + PAYLOAD_BYTES_MAX
    {
        return Err(FrameError::BadLength(frame_len));
    }
    if b.len() < frame_len as usize {
        return Err(FrameError::Short {
            have: b.len(),
            need: frame_len as usize,
        });
    }
    let found = u32_at(b, 4);
    let expected = salt.crc(&b[8..frame_len as usize]);
    if expected != found {
        return Err(FrameError::BadChecksum { expected, found });
    }
    Ok(FrameHeader {
        frame_len,
        crc: found,
        session: SessionId(u32_at(b, 8)),
        kind: u16_at(b, 12),
        flags: u16_at(b, 14),
        seq: u64_at(b, 16),
    })
}

/// §5: payload of a `session-define` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDefine {
    /// §5: the session id, 1..=[`SESSION_NAME_BYTES_MAX`] bytes of UTF-8.
    pub name: String,
    /// For a fork: the parent session and how many of its events (seqs
    /// `0..upto`) the child inherits by reference.
    pub parent: Option<(SessionId, u64)>,
}

impl SessionDefine {
    /// §5: the payload bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 + self.name.len() + 12);
        out.push(1); // payload version
        out.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        out.extend_from_slice(self.name.as_bytes());
        match self.parent {
            None => out.push(0),
            Some((p, upto)) => {
                out.push(1);
                out.extend_from_slice(&p.0.to_le_bytes());
                out.extend_from_slice(&upto.to_le_bytes());
            }
        }
        out
    }

    /// §5: parse a payload; the error says which rule it breaks.
    pub fn decode(b: &[u8]) -> Result<Self, &'static str> {
        if b.len() < 4 {
            return Err("session-define payload shorter than 4 bytes");
        }
        if b[0] != 1 {
            return Err("unknown session-define payload version");
        }
        let n = u16_at(b, 1) as usize;
        if n == 0 || n > SESSION_NAME_BYTES_MAX || b.len() < 3 + n + 1 {
            return Err("session-define name length out of range");
        }
        let name = std::str::from_utf8(&b[3..3 + n])
            .map_err(|_| "session name is not UTF-8")?
            .to_string();
        let rest = &b[3 + n..];
        let parent = match rest[0] {
            0 if rest.len() == 1 => None,
            1 if rest.len() == 13 => Some((SessionId(u32_at(rest, 1)), u64_at(rest, 5))),
            _ => return Err("session-define parent field malformed"),
        };
        Ok(SessionDefine { name, parent })
    }
}

/// File name of segment `id` (§1): ten decimal digits and `.tseg`.
pub fn segment_file_name(id: SegmentId) -> String {
    format!("{:010}.tseg", id.0)
}

/// Parse a segment file name back to its id.
pub fn parse_segment_file_name(name: &str) -> Option<SegmentId> {
    let digits = name.strip_suffix(".tseg")?;
    if digits.len() != 10 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(SegmentId)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(segment: u32) -> SegmentHeader {
        SegmentHeader {
            version: FORMAT_VERSION,
            store_id: [7; 16],
            segment: SegmentId(segment),
            first_batch_seq: 10,
            prev_segment_end: 4096,
        }
    }

    #[test]
    fn a_compacted_header_carries_version_2_and_version_1_ones_still_read() {
        let c = Compaction {
            last_segment: SegmentId(5),
            next_batch_seq: 20,
        };
        let b = c.encode_header(&header(3));
        assert_eq!(u32_at(&b, 8), COMPACTED_SEGMENT_VERSION);
        assert_eq!(Compaction::of_header(&b), Some(c));
        assert_eq!(SegmentHeader::decode(&b).unwrap().segment, SegmentId(3));
        // One written before the rule: version 1 with the same fields.
        let mut old = b;
        old[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let crc = crc32fast::hash(&old[0..60]);
        old[60..64].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Compaction::of_header(&old), Some(c));
        // Version 2 is only a compacted segment's: an ordinary header with it
        // is an unsupported version (H1), not a compacted segment.
        let mut plain = header(3).encode();
        plain[8..12].copy_from_slice(&COMPACTED_SEGMENT_VERSION.to_le_bytes());
        let crc = crc32fast::hash(&plain[0..60]);
        plain[60..64].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            SegmentHeader::decode(&plain),
            Err(HeaderError::Version(2))
        ));
    }

    #[test]
    fn define_frame_len_matches_the_encoding() {
        for name in ["a", "session-1", &"x".repeat(SESSION_NAME_BYTES_MAX)] {
            for parent in [None, Some((SessionId(3), 9))] {
                let d = SessionDefine {
                    name: name.to_string(),
                    parent,
                };
                assert_eq!(
                    define_frame_padded_len(name.len(), parent.is_some()),
                    frame_padded_len(d.encode().len())
                );
            }
        }
    }

    fn salt() -> Salt {
        Salt {
            store_id: [7; 16],
            segment: SegmentId(3),
        }
    }

    #[test]
    fn frame_roundtrip_and_padding() {
        let mut out = Vec::new();
        encode_frame(
            &mut out,
            &salt(),
            SessionId(9),
            5,
            FLAG_IGNORABLE,
            42,
            b"hello",
        );
        assert_eq!(out.len(), 32);
        let h = decode_frame(&out, &salt()).unwrap();
        assert_eq!(
            (h.session, h.kind, h.flags, h.seq),
            (SessionId(9), 5, 1, 42)
        );
        assert_eq!(&out[FRAME_HEADER_BYTES..h.frame_len as usize], b"hello");
    }

    #[test]
    fn frame_from_other_segment_or_flipped_bit_fails() {
        let mut out = Vec::new();
        encode_frame(&mut out, &salt(), SessionId(1), 1, 0, 0, b"x");
        let other = Salt {
            segment: SegmentId(4),
            ..salt()
        };
        assert!(matches!(
            decode_frame(&out, &other),
            Err(FrameError::BadChecksum { .. })
        ));
        out[FRAME_HEADER_BYTES] ^= 1;
        assert!(matches!(
            decode_frame(&out, &salt()),
            Err(FrameError::BadChecksum { .. })
        ));
    }

    #[test]
    fn short_input_is_an_error_not_a_panic() {
        assert_eq!(
            BatchHeader::decode(&[1, 2, 3], &salt()),
            Err(BatchError::Short(3))
        );
        assert!(SegmentHeader::decode(&[0u8; 10]).is_err());
        assert!(decode_frame(&[0u8; 5], &salt()).is_err());
    }

    #[test]
    fn zeros_never_decode() {
        let z = [0u8; 64];
        assert_eq!(BatchHeader::decode(&z, &salt()), Err(BatchError::Zero));
        assert!(decode_frame(&z, &salt()).is_err());
        assert!(matches!(
            SegmentHeader::decode(&z),
            Err(HeaderError::BadMagic(_))
        ));
    }

    #[test]
    fn headers_roundtrip() {
        let s = SegmentHeader {
            version: FORMAT_VERSION,
            store_id: [1; 16],
            segment: SegmentId(2),
            first_batch_seq: 77,
            prev_segment_end: 4096,
        };
        assert_eq!(SegmentHeader::decode(&s.encode()).unwrap(), s);
        let b = BatchHeader {
            body_len: 64,
            batch_seq: 5,
            frame_count: 2,
            body_crc: 0xdead,
            flags: 0,
        };
        assert_eq!(BatchHeader::decode(&b.encode(&salt()), &salt()).unwrap(), b);
    }

    #[test]
    fn session_define_roundtrip_and_rejects_garbage() {
        let d = SessionDefine {
            name: "abc".into(),
            parent: Some((SessionId(4), 10)),
        };
        assert_eq!(SessionDefine::decode(&d.encode()).unwrap(), d);
        assert!(SessionDefine::decode(&[1, 0, 0, 0]).is_err());
        assert!(SessionDefine::decode(&[]).is_err());
    }

    #[test]
    fn segment_names() {
        assert_eq!(segment_file_name(SegmentId(12)), "0000000012.tseg");
        assert_eq!(
            parse_segment_file_name("0000000012.tseg"),
            Some(SegmentId(12))
        );
        assert_eq!(parse_segment_file_name("12.tseg"), None);
    }
}
