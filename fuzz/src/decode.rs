//! Target `decode`: every byte-level decoder over arbitrary bytes.
//!
//! Input: either raw bytes, or a structure (segment header, batch of frames,
//! frame, session-define, index checkpoint or delta) encoded by the engine and then
//! damaged (bytes flipped, cut short), so that the fuzzer reaches the code
//! behind the checksums. Every decoder runs on every byte string.
//!
//! Properties: no decoder panics; whatever decodes re-encodes to exactly the
//! same bytes (segment header, batch header, frame, session-define,
//! checkpoint, checkpoint delta); a scan never reports positions outside the bytes; a probe
//! only reports a later batch that validates.

use arbitrary::{Arbitrary, Unstructured};
use turnstone::frame::{
    self, decode_frame, encode_frame, BatchHeader, Salt, SegmentHeader, SessionDefine,
    BATCH_HEADER_BYTES, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use turnstone::internals::Index;
use turnstone::internals::{check_batch, probe_after, scan_batches};
use turnstone::internals::{Checkpoint, Delta};
use turnstone::session::internals as event;
use turnstone::session::Registry;
use turnstone::{LogPos, SegmentId, SessionId};

#[derive(Arbitrary, Debug)]
struct FrameSpec {
    session: u8,
    kind: u16,
    flags: u16,
    seq: u8,
    payload: Vec<u8>,
}

/// A checkpoint session: name, fork parent and inherited count, own positions.
type CheckpointSession = (String, Option<(u8, u8)>, Vec<u32>);

#[derive(Arbitrary, Debug)]
enum Shape {
    Raw(Vec<u8>),
    SegmentHeader {
        version_ok: bool,
        first_batch_seq: u64,
        prev_segment_end: u32,
        /// With the recycled flag (FORMAT.md §6.2 rule 7).
        recycled: bool,
    },
    /// A segment header followed by batches of frames.
    Segment {
        batches: Vec<(u64, u32, Vec<FrameSpec>)>,
    },
    Frame(FrameSpec),
    Define {
        name: String,
        parent: Option<(u32, u64)>,
    },
    Checkpoint {
        sessions: Vec<CheckpointSession>,
        covered: u64,
        next_batch_seq: u64,
        last_batch: u64,
        flags: u32,
        /// Encode the checkpoint delta (FORMAT.md §7.1) of the index from
        /// this position instead.
        delta_from: Option<u64>,
    },
    /// A session event payload (JSON envelope) as stored in a frame.
    Envelope {
        code: u16,
        flags: u16,
        json: String,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    store_id: [u8; 16],
    segment: u8,
    /// (offset, xor) pairs applied after encoding.
    flips: Vec<(u16, u8)>,
    cut: Option<u16>,
    scan_from: u16,
    probe_from: u16,
    shape: Shape,
}

/// The structured input `data` decodes to (for failure reports).
pub fn describe(data: &[u8]) -> String {
    format!("{:#?}", Input::arbitrary_take_rest(Unstructured::new(data)))
}

pub fn run(data: &[u8]) {
    let u = Unstructured::new(data);
    let Ok(input) = Input::arbitrary_take_rest(u) else {
        return;
    };
    let salt = Salt {
        store_id: input.store_id,
        segment: SegmentId(input.segment as u32),
    };
    let mut bytes = build(&input.shape, &salt);
    for (off, x) in input.flips.iter().take(8) {
        if !bytes.is_empty() {
            let i = *off as usize % bytes.len();
            bytes[i] ^= x;
        }
    }
    if let Some(c) = input.cut {
        bytes.truncate(c as usize);
    }
    check_all(&bytes, &salt, input.scan_from, input.probe_from);
    if let Shape::Envelope { code, flags, .. } = &input.shape {
        check_envelope(&bytes, *code, *flags);
    }
}

fn encode_frames(out: &mut Vec<u8>, salt: &Salt, frames: &[FrameSpec]) {
    for f in frames.iter().take(8) {
        let p = &f.payload[..f.payload.len().min(600)];
        encode_frame(
            out,
            salt,
            SessionId(f.session as u32 % 4),
            f.kind,
            f.flags,
            f.seq as u64,
            p,
        );
    }
}

fn build(shape: &Shape, salt: &Salt) -> Vec<u8> {
    match shape {
        Shape::Raw(b) => b.clone(),
        Shape::SegmentHeader {
            version_ok,
            first_batch_seq,
            prev_segment_end,
            recycled,
        } => {
            let h = SegmentHeader {
                version: if *version_ok {
                    frame::FORMAT_VERSION
                } else {
                    frame::FORMAT_VERSION + 1
                },
                store_id: salt.store_id,
                segment: salt.segment,
                first_batch_seq: *first_batch_seq,
                prev_segment_end: *prev_segment_end,
            };
            if *recycled {
                h.encode_recycled().to_vec()
            } else {
                h.encode().to_vec()
            }
        }
        Shape::Segment { batches } => {
            let mut out = SegmentHeader {
                version: frame::FORMAT_VERSION,
                store_id: salt.store_id,
                segment: salt.segment,
                first_batch_seq: 0,
                prev_segment_end: 0,
            }
            .encode()
            .to_vec();
            for (seq, flags, frames) in batches.iter().take(6) {
                let start = out.len();
                out.resize(start + BATCH_HEADER_BYTES, 0);
                let mut body = Vec::new();
                encode_frames(&mut body, salt, frames);
                let h = BatchHeader {
                    body_len: body.len() as u32,
                    batch_seq: *seq % 8,
                    frame_count: frames.len().min(8) as u32,
                    body_crc: salt.crc(&body),
                    flags: *flags % 2,
                };
                out[start..].copy_from_slice(&h.encode(salt));
                out.extend_from_slice(&body);
            }
            out
        }
        Shape::Frame(f) => {
            let mut out = Vec::new();
            encode_frames(&mut out, salt, std::slice::from_ref(f));
            out
        }
        Shape::Define { name, parent } => SessionDefine {
            name: name.clone(),
            parent: parent.map(|(p, n)| (SessionId(p), n)),
        }
        .encode(),
        Shape::Checkpoint {
            sessions,
            covered,
            next_batch_seq,
            last_batch,
            flags,
            delta_from,
        } => {
            let mut index = Index::default();
            for (i, (name, parent, own)) in sessions.iter().take(6).enumerate() {
                // A valid fork parent is an earlier session with enough events.
                let parent = parent.and_then(|(p, upto)| {
                    let p = p as usize % (i + 1);
                    let plen = index.sessions.get(p).map(|s| s.len())?;
                    Some((SessionId(p as u32), upto as u64 % (plen + 1)))
                });
                let def = SessionDefine {
                    name: name.clone(),
                    parent,
                };
                let pos = LogPos::new(SegmentId(1), 64 + 8 * i as u32);
                if index.apply_define(SessionId(i as u32), &def, pos).is_err() {
                    break;
                }
                let have = index.sessions[i].len();
                for (k, p) in own.iter().take(16).enumerate() {
                    let _ =
                        index.apply_frame(SessionId(i as u32), have + k as u64, LogPos(*p as u64));
                }
            }
            match delta_from {
                Some(from) => Delta::of(
                    &index,
                    salt.store_id,
                    LogPos(*from),
                    LogPos(*covered),
                    *next_batch_seq,
                    (LogPos(*last_batch), *flags),
                )
                .encode(),
                None => Checkpoint {
                    store_id: salt.store_id,
                    covered: LogPos(*covered),
                    next_batch_seq: *next_batch_seq,
                    last_batch: LogPos(*last_batch),
                    last_batch_flags: *flags,
                    index,
                }
                .encode(),
            }
        }
        Shape::Envelope { json, .. } => json.as_bytes().to_vec(),
    }
}

/// Run every decoder over `b` and check what decodes.
fn check_all(b: &[u8], salt: &Salt, scan_from: u16, probe_from: u16) {
    if let Ok(h) = SegmentHeader::decode(b) {
        // A compacted segment's header (FORMAT.md §14.3) carries two more
        // fields in bytes an ordinary header keeps zero.
        // A recycled one (§6.2 rule 7) sets bit 0 of the flags there.
        let encoded = match frame::Compaction::of_header(b) {
            Some(c) => c.encode_header(&h),
            None if frame::header_is_recycled(b) => h.encode_recycled(),
            None => h.encode(),
        };
        assert_eq!(
            &encoded[..],
            &b[..SEGMENT_HEADER_BYTES],
            "segment header re-encodes differently"
        );
    }
    if let Ok(h) = BatchHeader::decode(b, salt) {
        assert_eq!(
            &h.encode(salt)[..],
            &b[..BATCH_HEADER_BYTES],
            "batch header re-encodes differently"
        );
        assert_eq!(h.body_len as usize % frame::ALIGN, 0);
    }
    if let Ok(h) = decode_frame(b, salt) {
        let len = h.frame_len as usize;
        assert!((FRAME_HEADER_BYTES..=b.len()).contains(&len));
        assert_eq!(h.payload_len(), len - FRAME_HEADER_BYTES);
        let mut again = Vec::new();
        encode_frame(
            &mut again,
            salt,
            h.session,
            h.kind,
            h.flags,
            h.seq,
            &b[FRAME_HEADER_BYTES..len],
        );
        assert_eq!(again.len(), h.padded_len());
        assert_eq!(&again[..len], &b[..len], "frame re-encodes differently");
    }
    if let Ok(d) = SessionDefine::decode(b) {
        assert_eq!(d.encode(), b, "session-define re-encodes differently");
    }
    if let Ok(ck) = Checkpoint::decode(b) {
        assert_eq!(ck.encode(), b, "checkpoint re-encodes differently");
    }
    if let Ok(d) = Delta::decode(b) {
        assert_eq!(d.encoded_len(), b.len());
        assert_eq!(d.encode(), b, "checkpoint delta re-encodes differently");
    }
    if let Ok(name) = std::str::from_utf8(b) {
        if let Some(id) = frame::parse_segment_file_name(name) {
            assert_eq!(frame::segment_file_name(id), name);
        }
    }
    // Batch-level checks work on aligned offsets inside the bytes.
    if b.len() >= BATCH_HEADER_BYTES {
        if let Ok((h, frames)) = check_batch(b, salt, 0, None) {
            assert_eq!(frames.len(), h.frame_count as usize);
            let end = BATCH_HEADER_BYTES + h.body_len as usize;
            assert!(end <= b.len());
            let mut at = BATCH_HEADER_BYTES;
            for f in &frames {
                assert_eq!(f.pos.offset() as usize, at, "frames are back to back");
                assert_eq!(f.payload.len(), f.header.payload_len());
                at += f.header.padded_len();
            }
            assert_eq!(at, end, "frames fill the batch body exactly");
        }
    }
    let from = frame::align_up((scan_from as usize).min(b.len())) as u32;
    let from = from.min(b.len() as u32 & !(frame::ALIGN as u32 - 1));
    let mut visited = 0u64;
    let scan = scan_batches(b, salt, from, 0, |f| {
        let off = f.pos.offset() as usize;
        assert!(off + f.header.frame_len as usize <= b.len());
        visited += 1;
        Ok(())
    });
    assert!(scan.end >= from && scan.end as usize <= b.len());
    assert_eq!(
        scan.frames, visited,
        "every frame of a valid batch is visited"
    );
    if let Some(f) = &scan.failure {
        assert_eq!(f.offset, scan.end, "a scan stops where the valid part ends");
    }
    let pfrom = (probe_from as usize).min(b.len()) as u32;
    let (later, nonzero_end) = probe_after(b, salt, pfrom, 0);
    if let Some(l) = later {
        assert!(l > pfrom);
        assert!(check_batch(b, salt, l as usize, None).is_ok());
    }
    if let Some(nz) = nonzero_end {
        assert!(nz > pfrom && nz as usize <= b.len());
        assert_ne!(b[nz as usize - 1], 0);
    }
}

fn check_envelope(b: &[u8], code: u16, flags: u16) {
    let mut reg = Registry::new();
    let _ = reg.register("fuzz/plugin", false);
    for r in [&Registry::new(), &reg] {
        if let Ok(ev) = event::decode(7, code, flags, b, r) {
            assert_eq!(ev.seq, 7);
            assert_eq!(ev.ignorable, flags & frame::FLAG_IGNORABLE != 0);
        }
    }
}
