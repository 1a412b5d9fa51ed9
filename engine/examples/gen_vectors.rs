//! Builds the test vectors of `format-spec/vectors/` (FORMAT.md §11) with the
//! engine's own encoders and a fixed store id, never by running a store, so
//! every byte is deterministic:
//!
//! ```text
//! cargo run -p turnstone --example gen_vectors -- format-spec/vectors
//! ```
//!
//! Each vector is a tiny store directory plus `expected.json`, written from
//! this generator's own model of what it encoded (not from decoding it).
//! `engine/tests/vectors.rs` includes this file and checks that the committed
//! vectors are byte-identical to what [`build`] returns: a format change must
//! regenerate them, and update FORMAT.md, in the same commit.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use turnstone::frame::{
    encode_frame, segment_file_name, BatchHeader, Salt, SegmentHeader, SessionDefine,
    BATCH_FLAG_CLEAN_CLOSE, BATCH_HEADER_BYTES, FLAG_IGNORABLE, FORMAT_VERSION,
    KIND_SESSION_DEFINE,
};
use turnstone::internals::Index;
use turnstone::internals::{Checkpoint, Delta, CHECKPOINT_FILE, DELTA_PREFIX};
use turnstone::{LogPos, SegmentId, SessionId};

/// The store id of every vector: 16 readable bytes.
pub const STORE_ID: [u8; 16] = *b"turnstone-vector";

/// One vector: the files of a tiny store directory and its expected decode.
pub struct Vector {
    pub name: &'static str,
    pub files: Vec<(String, Vec<u8>)>,
    pub expected: Value,
}

/// Every vector, in a fixed order.
pub fn build() -> Vec<Vector> {
    vec![
        valid(),
        torn_tail(),
        mid_log_corruption(),
        sealed_segment_corruption(),
        preallocated_zeros(),
        wrong_version(),
        not_a_segment(),
        torn_segment_header(),
        checkpoint(),
        clean_close(),
        checkpoint_proves_durable(),
        clean_close_then_torn(),
        nonzero_padding(),
        recycled_segment(),
        checkpoint_delta(),
    ]
}

/// Every output file as `vector/file` → bytes, `expected.json` included.
pub fn files() -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for v in build() {
        for (name, bytes) in v.files {
            out.insert(format!("{}/{name}", v.name), bytes);
        }
        let mut json = serde_json::to_string_pretty(&v.expected).expect("json");
        json.push('\n');
        out.insert(format!("{}/expected.json", v.name), json.into_bytes());
    }
    out
}

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "format-spec/vectors".into());
    let out = Path::new(&out);
    for v in build() {
        let dir = out.join(v.name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("remove old vector");
        }
    }
    for (rel, bytes) in files() {
        let path = out.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, bytes).expect("write vector file");
    }
    println!("wrote {} vectors to {}", build().len(), out.display());
}

// ---------------------------------------------------------------------------
// A model log: encodes batches and remembers what they mean.

#[derive(Clone)]
struct ModelEvent {
    seq: u64,
    kind: u16,
    flags: u16,
    payload: Vec<u8>,
}

#[derive(Clone)]
struct ModelSession {
    name: String,
    parent: Option<(String, u64)>,
    /// All events as read through this session (inherited ones included).
    events: Vec<ModelEvent>,
}

enum Op<'a> {
    Define(&'a str),
    /// child, parent, upto
    Fork(&'a str, &'a str, u64),
    /// session, kind, flags, payload
    Event(&'a str, u16, u16, &'a [u8]),
}

#[derive(Clone, Copy)]
struct BatchInfo {
    segment: u32,
    offset: u32,
    batch_seq: u64,
    body_len: u32,
    frame_count: u32,
    flags: u32,
}

impl BatchInfo {
    fn end(&self) -> u32 {
        self.offset + BATCH_HEADER_BYTES as u32 + self.body_len
    }
    fn body_offset(&self) -> usize {
        self.offset as usize + BATCH_HEADER_BYTES
    }
}

struct Log {
    /// `segments[i]` holds segment `i + 1`.
    segments: Vec<Vec<u8>>,
    next_batch_seq: u64,
    sessions: Vec<ModelSession>,
    index: Index,
    batches: Vec<BatchInfo>,
}

fn header(segment: u32, first_batch_seq: u64, prev_segment_end: u32) -> SegmentHeader {
    SegmentHeader {
        version: FORMAT_VERSION,
        store_id: STORE_ID,
        segment: SegmentId(segment),
        first_batch_seq,
        prev_segment_end,
    }
}

fn seg_name(segment: u32) -> String {
    segment_file_name(SegmentId(segment))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Log {
    fn new() -> Log {
        Log {
            segments: vec![header(1, 0, 0).encode().to_vec()],
            next_batch_seq: 0,
            sessions: Vec::new(),
            index: Index::default(),
            batches: Vec::new(),
        }
    }

    fn segment(&self) -> u32 {
        self.segments.len() as u32
    }

    fn salt(&self) -> Salt {
        Salt {
            store_id: STORE_ID,
            segment: SegmentId(self.segment()),
        }
    }

    /// Start the next segment, chained to the end of the current one.
    fn roll(&mut self) {
        let prev_end = self.segments.last().expect("segment").len() as u32;
        let id = self.segment() + 1;
        let h = header(id, self.next_batch_seq, prev_end);
        self.segments.push(h.encode().to_vec());
    }

    fn session_id(&self, name: &str) -> usize {
        self.sessions
            .iter()
            .position(|s| s.name == name)
            .expect("session defined")
    }

    fn batch(&mut self, ops: &[Op]) -> BatchInfo {
        self.batch_with_flags(ops, 0)
    }

    fn batch_with_flags(&mut self, ops: &[Op], flags: u32) -> BatchInfo {
        let salt = self.salt();
        let segment = self.segment();
        let offset = self.segments.last().expect("segment").len() as u32;
        let body_start = offset + BATCH_HEADER_BYTES as u32;
        let mut body = Vec::new();
        for op in ops {
            let pos = LogPos::new(SegmentId(segment), body_start + body.len() as u32);
            match *op {
                Op::Define(name) => self.define(&salt, &mut body, pos, name, None),
                Op::Fork(child, parent, upto) => {
                    self.define(&salt, &mut body, pos, child, Some((parent, upto)))
                }
                Op::Event(name, kind, eflags, payload) => {
                    let sid = self.session_id(name);
                    let seq = self.sessions[sid].events.len() as u64;
                    encode_frame(
                        &mut body,
                        &salt,
                        SessionId(sid as u32),
                        kind,
                        eflags,
                        seq,
                        payload,
                    );
                    self.index
                        .apply_frame(SessionId(sid as u32), seq, pos)
                        .expect("model index");
                    self.sessions[sid].events.push(ModelEvent {
                        seq,
                        kind,
                        flags: eflags,
                        payload: payload.to_vec(),
                    });
                }
            }
        }
        let info = BatchInfo {
            segment,
            offset,
            batch_seq: self.next_batch_seq,
            body_len: body.len() as u32,
            frame_count: ops.len() as u32,
            flags,
        };
        let h = BatchHeader {
            body_len: info.body_len,
            batch_seq: info.batch_seq,
            frame_count: info.frame_count,
            body_crc: salt.crc(&body),
            flags,
        };
        let seg = self.segments.last_mut().expect("segment");
        seg.extend_from_slice(&h.encode(&salt));
        seg.extend_from_slice(&body);
        self.next_batch_seq += 1;
        self.batches.push(info);
        info
    }

    fn define(
        &mut self,
        salt: &Salt,
        body: &mut Vec<u8>,
        pos: LogPos,
        name: &str,
        parent: Option<(&str, u64)>,
    ) {
        let sid = self.sessions.len() as u32;
        let parent_id = parent.map(|(p, upto)| (SessionId(self.session_id(p) as u32), upto));
        let def = SessionDefine {
            name: name.into(),
            parent: parent_id,
        };
        encode_frame(
            body,
            salt,
            SessionId(sid),
            KIND_SESSION_DEFINE,
            0,
            0,
            &def.encode(),
        );
        self.index
            .apply_define(SessionId(sid), &def, pos)
            .expect("model index");
        let events = match parent {
            None => Vec::new(),
            Some((p, upto)) => self.sessions[self.session_id(p)].events[..upto as usize].to_vec(),
        };
        self.sessions.push(ModelSession {
            name: name.into(),
            parent: parent.map(|(p, upto)| (p.to_string(), upto)),
            events,
        });
    }

    fn clean_close(&mut self) -> BatchInfo {
        self.batch_with_flags(&[], BATCH_FLAG_CLEAN_CLOSE)
    }

    /// An index checkpoint covering every batch written so far.
    fn checkpoint(&self) -> Vec<u8> {
        let last = *self.batches.last().expect("a batch");
        let seg = SegmentId(last.segment);
        Checkpoint {
            store_id: STORE_ID,
            covered: LogPos::new(seg, last.end()),
            next_batch_seq: self.next_batch_seq,
            last_batch: LogPos::new(seg, last.offset),
            last_batch_flags: last.flags,
            index: self.index.clone(),
        }
        .encode()
    }

    /// The checkpoint delta (FORMAT.md §7.1) from `from` up to the end of
    /// every batch written so far.
    fn delta(&self, from: LogPos) -> Vec<u8> {
        let last = *self.batches.last().expect("a batch");
        let seg = SegmentId(last.segment);
        Delta::of(
            &self.index,
            STORE_ID,
            from,
            LogPos::new(seg, last.end()),
            self.next_batch_seq,
            (LogPos::new(seg, last.offset), last.flags),
        )
        .encode()
    }

    /// Where the last batch written so far ends.
    fn end(&self) -> LogPos {
        let last = *self.batches.last().expect("a batch");
        LogPos::new(SegmentId(last.segment), last.end())
    }

    fn sessions_json(&self) -> Value {
        Value::Array(
            self.sessions
                .iter()
                .map(|s| {
                    json!({
                        "name": s.name,
                        "parent": s.parent.as_ref().map(|(p, upto)| json!({"name": p, "upto": upto})),
                        "events": s.events.iter().map(|e| json!({
                            "seq": e.seq,
                            "kind": e.kind,
                            "flags": e.flags,
                            "payload": hex(&e.payload),
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect(),
        )
    }

    fn batches_json(&self) -> Value {
        Value::Array(
            self.batches
                .iter()
                .map(|b| {
                    json!({
                        "file": seg_name(b.segment),
                        "offset": b.offset,
                        "batch_seq": b.batch_seq,
                        "body_len": b.body_len,
                        "frame_count": b.frame_count,
                        "flags": b.flags,
                    })
                })
                .collect(),
        )
    }

    fn files(&self) -> Vec<(String, Vec<u8>)> {
        self.segments
            .iter()
            .enumerate()
            .map(|(i, b)| (seg_name(i as u32 + 1), b.clone()))
            .collect()
    }

    /// Flip one bit of segment `segment` at `offset`.
    fn flip(&mut self, segment: u32, offset: usize) {
        self.segments[segment as usize - 1][offset] ^= 0x10;
    }

    /// Set byte `offset` of segment `segment` (inside batch `b`'s body) and
    /// re-seal the batch: its body checksum (and header checksum) hold again.
    fn set_and_reseal(&mut self, b: &BatchInfo, offset: usize, value: u8) {
        let salt = Salt {
            store_id: STORE_ID,
            segment: SegmentId(b.segment),
        };
        let seg = &mut self.segments[b.segment as usize - 1];
        seg[offset] = value;
        let start = b.body_offset();
        let h = BatchHeader {
            body_len: b.body_len,
            batch_seq: b.batch_seq,
            frame_count: b.frame_count,
            body_crc: salt.crc(&seg[start..start + b.body_len as usize]),
            flags: b.flags,
        };
        seg[b.offset as usize..start].copy_from_slice(&h.encode(&salt));
    }
}

// ---------------------------------------------------------------------------
// Expected outcomes (FORMAT.md §6), one per recovery mode.

const TOLERATE: &str = "tolerate-torn-tail";
const ABSOLUTE: &str = "absolute-consistency";
const POINT_IN_TIME: &str = "point-in-time";

struct Opened {
    sessions: Value,
    problems: Vec<Value>,
    clean_shutdown: bool,
    checkpoint_used: bool,
    /// Batches the open scans after the checkpoint (only where a vector
    /// says: it shows how far the checkpoint reached).
    batches_scanned: Option<u64>,
}

impl Opened {
    fn new(sessions: Value) -> Opened {
        Opened {
            sessions,
            problems: Vec::new(),
            clean_shutdown: false,
            checkpoint_used: false,
            batches_scanned: None,
        }
    }
    fn problem(mut self, p: Value) -> Opened {
        self.problems.push(p);
        self
    }
    fn json(&self) -> Value {
        let mut v = json!({
            "opens": true,
            "problems": self.problems,
            "clean_shutdown": self.clean_shutdown,
            "checkpoint_used": self.checkpoint_used,
            "sessions": self.sessions,
        });
        if let Some(n) = self.batches_scanned {
            v["batches_scanned"] = json!(n);
        }
        v
    }
}

/// The non-zero extent of a torn tail starting at `offset`.
fn torn(file: &str, bytes: &[u8], offset: usize) -> Value {
    let end = bytes.iter().rposition(|b| *b != 0).expect("torn bytes") + 1;
    json!({"kind": "torn-tail", "file": file, "offset": offset, "bytes": end - offset})
}

fn corruption_problem(file: &str, offset: usize) -> Value {
    json!({"kind": "corruption", "file": file, "offset": offset})
}

fn refused(error: &str, file: &str, offset: Option<usize>) -> Value {
    let mut v = json!({"opens": false, "error": error, "file": file});
    if let Some(o) = offset {
        v["offset"] = json!(o);
    }
    v
}

#[allow(clippy::too_many_arguments)]
fn vector(
    name: &'static str,
    description: &str,
    outcome: &str,
    log: Option<&Log>,
    files: Vec<(String, Vec<u8>)>,
    tolerate: Value,
    absolute: Value,
    point_in_time: Value,
) -> Vector {
    let mut expected = json!({
        "vector": name,
        "description": description,
        "format_version": FORMAT_VERSION,
        "store_id": hex(&STORE_ID),
        "files": files.iter().map(|(n, b)| json!({"name": n, "bytes": b.len()})).collect::<Vec<_>>(),
        "outcome": outcome,
        "modes": {
            TOLERATE: tolerate,
            ABSOLUTE: absolute,
            POINT_IN_TIME: point_in_time,
        },
    });
    if let Some(log) = log {
        expected["batches"] = log.batches_json();
    }
    Vector {
        name,
        files,
        expected,
    }
}

/// The same outcome in every mode.
fn same(
    name: &'static str,
    description: &str,
    outcome: &str,
    log: Option<&Log>,
    files: Vec<(String, Vec<u8>)>,
    result: Value,
) -> Vector {
    vector(
        name,
        description,
        outcome,
        log,
        files,
        result.clone(),
        result.clone(),
        result,
    )
}

// ---------------------------------------------------------------------------
// The vectors.

fn valid() -> Vector {
    let mut log = Log::new();
    log.batch(&[
        Op::Define("alpha"),
        Op::Event("alpha", 1, 0, b"hello"),
        Op::Event("alpha", 2, FLAG_IGNORABLE, b"an ignorable note"),
    ]);
    log.batch(&[
        Op::Define("beta"),
        Op::Event("beta", 1, 0, b"b"),
        Op::Event("alpha", 3, 0, b""),
    ]);
    log.roll();
    log.batch(&[
        Op::Fork("alpha-fork", "alpha", 2),
        Op::Event("alpha-fork", 1, 0, b"forked here"),
        Op::Event("beta", 4, 0, b"12345678"),
    ]);
    let ok = Opened::new(log.sessions_json()).json();
    same(
        "valid",
        "Two sessions and a fork of the first (inheriting seqs 0..2), three batches over two \
         segments; payloads of 0, 1, 5, 8, 11 and 17 bytes exercise the padding.",
        "ok",
        Some(&log),
        log.files(),
        ok,
    )
}

fn torn_tail() -> Vector {
    let mut log = Log::new();
    log.batch(&[
        Op::Define("s"),
        Op::Event("s", 1, 0, b"durable event 0"),
        Op::Event("s", 1, 0, b"durable event 1"),
    ]);
    let durable = log.sessions_json();
    let b = log.batch(&[
        Op::Event("s", 1, 0, b"in-flight event 2, never acknowledged"),
        Op::Event("s", 1, 0, b"in-flight event 3, never acknowledged"),
    ]);
    // The power cut kept the header and the first 40 bytes of the body.
    let cut = b.body_offset() + 40;
    log.segments[0].truncate(cut);
    let f = seg_name(1);
    let problem = torn(&f, &log.segments[0], b.offset as usize);
    let opened = Opened::new(durable).problem(problem).json();
    vector(
        "torn-tail",
        "The last batch of the last segment is cut in the middle of its body (the file ends \
         there): a torn tail. Its two events were never acknowledged and are dropped.",
        "torn-tail",
        Some(&log),
        log.files(),
        opened.clone(),
        refused("torn-tail-refused", &f, Some(b.offset as usize)),
        opened,
    )
}

fn mid_log_corruption() -> Vector {
    let mut log = Log::new();
    log.batch(&[Op::Define("s"), Op::Event("s", 1, 0, b"event 0")]);
    let before = log.sessions_json();
    let b = log.batch(&[
        Op::Event("s", 1, 0, b"event 1"),
        Op::Event("s", 1, 0, b"event 2"),
    ]);
    log.batch(&[Op::Event("s", 1, 0, b"event 3")]);
    // A payload byte of the first frame of batch 1.
    log.flip(1, b.body_offset() + 24 + 2);
    let f = seg_name(1);
    vector(
        "mid-log-corruption",
        "One bit flipped in the body of batch 1, followed by the valid batch 2: no power cut \
         explains a bad batch followed by a good one, so this is corruption.",
        "corruption",
        Some(&log),
        log.files(),
        refused("corruption", &f, Some(b.offset as usize)),
        refused("corruption", &f, Some(b.offset as usize)),
        Opened::new(before)
            .problem(corruption_problem(&f, b.offset as usize))
            .json(),
    )
}

fn sealed_segment_corruption() -> Vector {
    let mut log = Log::new();
    log.batch(&[Op::Define("s"), Op::Event("s", 1, 0, b"event 0")]);
    let before = log.sessions_json();
    let b = log.batch(&[Op::Event("s", 1, 0, b"event 1")]);
    log.roll();
    log.batch(&[Op::Event("s", 1, 0, b"event 2")]);
    // A payload byte of the last batch of segment 1: in the last segment this
    // would be a torn tail; in a sealed segment it is corruption.
    log.flip(1, b.body_offset() + 24);
    let f = seg_name(1);
    vector(
        "sealed-segment-corruption",
        "One bit flipped in the last batch of segment 1 while segment 2 exists: a sealed \
         segment was entirely durable before the next one was created, so this is corruption \
         (the same damage in the last segment would be a torn tail).",
        "corruption",
        Some(&log),
        log.files(),
        refused("corruption", &f, Some(b.offset as usize)),
        refused("corruption", &f, Some(b.offset as usize)),
        Opened::new(before)
            .problem(corruption_problem(&f, b.offset as usize))
            .json(),
    )
}

fn preallocated_zeros() -> Vector {
    let mut log = Log::new();
    log.batch(&[
        Op::Define("s"),
        Op::Event("s", 1, 0, b"event 0"),
        Op::Event("s", 2, 0, b"event 1"),
    ]);
    log.batch(&[Op::Define("t"), Op::Event("t", 1, 0, b"t0")]);
    log.segments[0].resize(4096, 0);
    let ok = Opened::new(log.sessions_json()).json();
    same(
        "preallocated-zeros",
        "Valid batches followed by the zero fill of a preallocated segment (4096 bytes in \
         all): a clean end of data, not a torn tail.",
        "ok",
        Some(&log),
        log.files(),
        ok,
    )
}

fn recycled_segment() -> Vector {
    let mut log = Log::new();
    log.batch(&[Op::Define("s"), Op::Event("s", 1, 0, b"event 0")]);
    // What a free file holds: batches of this store salted with another
    // segment's id (here segment 1's own bytes).
    let stale = log.segments[0][64..].to_vec();
    log.roll();
    let h = header(2, log.next_batch_seq, log.segments[0].len() as u32);
    log.segments[1] = h.encode_recycled().to_vec();
    log.batch(&[Op::Event("s", 1, 0, b"event 1")]);
    log.batch(&[Op::Event("s", 1, 0, b"event 2")]);
    // The 32 zero bytes the writer keeps after the last batch, then stale
    // bytes to the end of the file.
    log.segments[1].extend_from_slice(&[0u8; BATCH_HEADER_BYTES]);
    log.segments[1].extend_from_slice(&stale);
    log.segments[1].extend_from_slice(&stale);
    let ok = Opened::new(log.sessions_json()).json();
    same(
        "recycled-segment",
        "Segment 2 was made from a free file (segment_flags bit 0, RECYCLED): after its last \
         batch come 32 zero bytes, then stale batches salted with segment 1's id. A clean end \
         of data, not a torn tail: a recycled segment's bytes after the end of data are not \
         evidence, and the stale batches fail segment 2's salt.",
        "ok",
        Some(&log),
        log.files(),
        ok,
    )
}

fn wrong_version() -> Vector {
    let mut log = Log::new();
    let mut h = header(1, 0, 0);
    h.version = FORMAT_VERSION + 1;
    log.segments[0] = h.encode().to_vec();
    log.batch(&[Op::Define("s"), Op::Event("s", 1, 0, b"event 0")]);
    let f = seg_name(1);
    same(
        "wrong-version",
        "A segment header with version 2 and a valid checksum: refused as an unsupported \
         version in every mode, no byte changed.",
        "unsupported-version",
        Some(&log),
        log.files(),
        {
            let mut r = refused("unsupported-version", &f, None);
            r["found"] = json!(FORMAT_VERSION + 1);
            r
        },
    )
}

fn not_a_segment() -> Vector {
    // xorshift64: deterministic noise.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..256)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let f = seg_name(1);
    same(
        "not-a-segment",
        "The only segment file holds 256 random bytes: not a turnstone store, in every mode.",
        "not-turnstone",
        None,
        vec![(f.clone(), bytes)],
        refused("not-turnstone", &f, None),
    )
}

fn torn_segment_header() -> Vector {
    let mut log = Log::new();
    log.batch(&[Op::Define("s"), Op::Event("s", 1, 0, b"event 0")]);
    log.batch(&[Op::Event("s", 1, 0, b"event 1")]);
    let durable = log.sessions_json();
    log.roll();
    // Only the first half of the new header reached the disk.
    log.segments[1][32..].fill(0);
    let f2 = seg_name(2);
    // The whole file goes: bytes is its length.
    let removed =
        json!({"kind": "torn-tail", "file": f2, "offset": 0, "bytes": log.segments[1].len()});
    let opened = Opened::new(durable).problem(removed).json();
    vector(
        "torn-segment-header",
        "Segment 2's creation was interrupted: only the first 32 bytes of its header were \
         written and no batch follows. A torn tail: the file is removed on a writable open.",
        "torn-tail",
        Some(&log),
        log.files(),
        opened.clone(),
        refused("torn-tail-refused", &f2, Some(0)),
        opened,
    )
}

fn checkpoint() -> Vector {
    let mut log = Log::new();
    log.batch(&[
        Op::Define("a"),
        Op::Event("a", 1, 0, b"a0"),
        Op::Event("a", 1, 0, b"a1"),
        Op::Define("b"),
        Op::Event("b", 1, 0, b"b0"),
    ]);
    log.batch(&[
        Op::Fork("c", "a", 1),
        Op::Event("c", 1, 0, b"c1"),
        Op::Event("a", 1, 0, b"a2"),
    ]);
    let ck = log.checkpoint();
    log.batch(&[Op::Event("b", 1, 0, b"b1"), Op::Event("c", 1, 0, b"c2")]);
    let mut files = log.files();
    files.push((CHECKPOINT_FILE.to_string(), ck));
    let mut opened = Opened::new(log.sessions_json());
    opened.checkpoint_used = true;
    same(
        "checkpoint",
        "An index checkpoint covering batches 0 and 1 (three sessions, one a fork of `a` \
         inheriting seq 0), and the log with batch 2 after it: recovery starts at the \
         checkpoint's covered position and scans only batch 2.",
        "ok",
        Some(&log),
        files,
        opened.json(),
    )
}

fn checkpoint_delta() -> Vector {
    let mut log = Log::new();
    log.batch(&[
        Op::Define("a"),
        Op::Event("a", 1, 0, b"a0"),
        Op::Event("a", 1, 0, b"a1"),
        Op::Define("b"),
        Op::Event("b", 1, 0, b"b0"),
    ]);
    let ck = log.checkpoint();
    let first = log.end();
    log.batch(&[
        Op::Fork("c", "a", 1),
        Op::Event("c", 1, 0, b"c1"),
        Op::Event("a", 1, 0, b"a2"),
    ]);
    // A stale delta (one a power cut left from before the checkpoint: it
    // starts at the first batch) and the one that chains.
    let stale = log.delta(LogPos::new(SegmentId(1), 64));
    let delta = log.delta(first);
    log.batch(&[Op::Event("b", 1, 0, b"b1"), Op::Event("c", 1, 0, b"c2")]);
    let mut files = log.files();
    files.push((CHECKPOINT_FILE.to_string(), ck));
    files.push((format!("{DELTA_PREFIX}0000000001"), stale));
    files.push((format!("{DELTA_PREFIX}0000000002"), delta));
    let mut opened = Opened::new(log.sessions_json());
    opened.checkpoint_used = true;
    opened.batches_scanned = Some(1);
    same(
        "checkpoint-delta",
        "An index checkpoint covering batch 0 (sessions `a` and `b`), then two deltas: \
         `index.delta.0000000001` starts before the checkpoint's end (a stale one) and is \
         passed over; `index.delta.0000000002` starts at it and adds batch 1 (the fork `c` \
         of `a` inheriting seq 0, and `a`'s seq 2). Recovery starts where the delta ends and \
         scans only batch 2.",
        "ok",
        Some(&log),
        files,
        opened.json(),
    )
}

fn clean_close() -> Vector {
    let mut log = Log::new();
    log.batch(&[Op::Define("demo"), Op::Event("demo", 1, 0, b"hi")]);
    log.clean_close();
    let mut opened = Opened::new(log.sessions_json());
    opened.clean_shutdown = true;
    same(
        "clean-close",
        "One batch, then the clean-close marker (an empty batch with flag 1): the previous \
         run shut down cleanly. This is the worked example of FORMAT.md §11.",
        "ok",
        Some(&log),
        log.files(),
        opened.json(),
    )
}

fn checkpoint_proves_durable() -> Vector {
    let mut log = Log::new();
    log.batch(&[Op::Define("s"), Op::Event("s", 1, 0, b"event 0")]);
    let b = log.batch(&[Op::Event("s", 1, 0, b"event 1")]);
    let ck = log.checkpoint();
    // Flip a bit of batch 1's body_crc field: its header checksum now fails.
    log.flip(1, b.offset as usize + 20);
    let mut files = log.files();
    files.push((CHECKPOINT_FILE.to_string(), ck));
    let f = seg_name(1);
    let mut pit = Opened::new(json!([{
        "name": "s", "parent": null,
        "events": [{"seq": 0, "kind": 1, "flags": 0, "payload": hex(b"event 0")}],
    }]))
    .problem(corruption_problem(&f, b.offset as usize));
    pit.checkpoint_used = false;
    vector(
        "checkpoint-proves-durable",
        "Batch 1 is the last batch of the last segment and its header is damaged, but an \
         intact checkpoint of this store covers it: the checkpoint was written only after \
         batch 1 was durable, so no power cut explains the damage. Corruption, not a torn \
         tail (FORMAT.md §6.3, row C4).",
        "corruption",
        Some(&log),
        files,
        refused("corruption", &f, Some(b.offset as usize)),
        refused("corruption", &f, Some(b.offset as usize)),
        pit.json(),
    )
}

fn clean_close_then_torn() -> Vector {
    let mut log = Log::new();
    log.batch(&[Op::Define("s"), Op::Event("s", 1, 0, b"event 0")]);
    log.clean_close();
    let durable = log.sessions_json();
    // The store was reopened and one batch written; it crosses the 512-byte
    // sector boundary. At the power cut only its second sector was persisted,
    // so its header reads as zeros while bytes of its body are present.
    let payload = vec![b'x'; 600];
    let b = log.batch(&[Op::Event("s", 1, 0, &payload)]);
    assert!(b.offset < 512 && b.end() > 512);
    log.segments[0][b.offset as usize..512].fill(0);
    let f = seg_name(1);
    let opened = Opened::new(durable)
        .problem(torn(&f, &log.segments[0], b.offset as usize))
        .json();
    vector(
        "clean-close-then-torn",
        "A clean-close marker, then a batch of a later run torn so that its header sector was \
         not persisted but a later sector of its body was. The non-zero bytes after the last \
         valid batch are a torn tail even though that batch is a clean-close marker; the last \
         run did not shut down cleanly.",
        "torn-tail",
        Some(&log),
        log.files(),
        opened.clone(),
        refused("torn-tail-refused", &f, Some(b.offset as usize)),
        opened,
    )
}

fn nonzero_padding() -> Vector {
    let mut log = Log::new();
    log.batch(&[Op::Define("s"), Op::Event("s", 1, 0, b"event 0")]);
    let before = log.sessions_json();
    // "event 1": frame_len 31, so one padding byte follows the frame.
    let b = log.batch(&[Op::Event("s", 1, 0, b"event 1")]);
    log.set_and_reseal(&b, b.body_offset() + 31, 0x01);
    let f = seg_name(1);
    vector(
        "nonzero-padding",
        "The last batch's checksums hold, but the padding byte after its frame is not zero \
         (FORMAT.md §4, §3 (9)): no torn write explains a checksum-valid body that breaks a \
         rule, so this is corruption (C2) even in the last segment.",
        "corruption",
        Some(&log),
        log.files(),
        refused("corruption", &f, Some(b.offset as usize)),
        refused("corruption", &f, Some(b.offset as usize)),
        Opened::new(before)
            .problem(corruption_problem(&f, b.offset as usize))
            .json(),
    )
}
