//! The format-spec test vectors (`format-spec/vectors/`, FORMAT.md §11).
//!
//! 1. Every vector opens (or is refused) exactly as its `expected.json` says,
//!    in every recovery mode, read-only and writable; read-only changes no
//!    byte, a refused open changes no byte, and a writable open repairs.
//! 2. The ok vectors decode by hand, following FORMAT.md with nothing but
//!    `crc32fast`, to the same batches and events, and the engine's `frame`
//!    decoders agree field by field: the spec is checkable.
//! 3. The committed vectors are byte-identical to what the generator
//!    (`engine/examples/gen_vectors.rs`) builds: a format change must
//!    regenerate them.

#[allow(dead_code)]
#[path = "../examples/gen_vectors.rs"]
mod gen_vectors;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use turnstone::frame::{self, Salt};
use turnstone::{Error, Options, ProblemKind, RecoveryMode, SegmentId, SessionId, Store};

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../format-spec/vectors")
}

fn expected(name: &str) -> Value {
    let path = vectors_dir().join(name).join("expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).expect("expected.json parses")
}

/// The store files of a vector (everything but `expected.json`).
fn store_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("read vector dir") {
        let entry = entry.expect("dir entry");
        let name = entry.file_name().into_string().expect("utf-8 name");
        if name != "expected.json" && name != "LOCK" {
            out.insert(name, std::fs::read(entry.path()).expect("read file"));
        }
    }
    out
}

fn copy_to_temp(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (file, bytes) in store_files(&vectors_dir().join(name)) {
        std::fs::write(tmp.path().join(file), bytes).expect("copy");
    }
    tmp
}

fn mode(name: &str) -> RecoveryMode {
    match name {
        "tolerate-torn-tail" => RecoveryMode::TolerateTornTail,
        "absolute-consistency" => RecoveryMode::AbsoluteConsistency,
        "point-in-time" => RecoveryMode::PointInTime,
        other => panic!("unknown mode {other}"),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every session and event of an open store, in the expected.json shape.
fn sessions_of(store: &Store) -> Value {
    let mut out = Vec::new();
    for s in store.sessions() {
        let events = store.read_range(&s.name, 0..s.len).expect("read events");
        out.push(json!({
            "name": s.name,
            "parent": s.parent.map(|(p, upto)| json!({"name": p, "upto": upto})),
            "events": events.iter().map(|e| json!({
                "seq": e.seq.0,
                "kind": e.kind,
                "flags": e.flags,
                "payload": hex(&e.payload),
            })).collect::<Vec<_>>(),
        }));
    }
    Value::Array(out)
}

fn check_opened(store: &Store, want: &Value, ctx: &str) {
    let r = store.recovery_report();
    let problems: Vec<Value> = r
        .problems
        .iter()
        .map(|p| {
            let kind = match p.kind {
                ProblemKind::TornTail => "torn-tail",
                ProblemKind::Corruption => "corruption",
            };
            let mut v = json!({"kind": kind, "file": file_name(&p.file), "offset": p.offset});
            if p.kind == ProblemKind::TornTail {
                v["bytes"] = json!(p.bytes);
            }
            v
        })
        .collect();
    assert_eq!(Value::Array(problems), want["problems"], "{ctx}: problems");
    assert_eq!(
        json!(r.clean_shutdown),
        want["clean_shutdown"],
        "{ctx}: clean_shutdown"
    );
    assert_eq!(
        json!(r.checkpoint_used),
        want["checkpoint_used"],
        "{ctx}: checkpoint_used ({:?})",
        r.checkpoint_discarded
    );
    assert_eq!(sessions_of(store), want["sessions"], "{ctx}: sessions");
    if let Some(n) = want.get("batches_scanned") {
        assert_eq!(json!(r.batches_scanned), *n, "{ctx}: batches scanned");
    }
}

fn check_refused(err: &Error, want: &Value, ctx: &str) {
    let (kind, file, offset) = match err {
        Error::Corrupt { file, offset, .. } => ("corruption", file, Some(*offset)),
        Error::TornTailRefused { file, offset, .. } => ("torn-tail-refused", file, Some(*offset)),
        Error::UnsupportedVersion { file, found, .. } => {
            assert_eq!(json!(found), want["found"], "{ctx}: version found");
            ("unsupported-version", file, None)
        }
        Error::NotTurnstone { file, .. } => ("not-turnstone", file, None),
        other => panic!("{ctx}: unexpected error {other}"),
    };
    assert_eq!(kind, want["error"], "{ctx}: {err}");
    assert_eq!(file_name(file), want["file"], "{ctx}: {err}");
    if let Some(o) = offset {
        assert_eq!(json!(o), want["offset"], "{ctx}: {err}");
    }
}

/// Open a copy of vector `name` in every mode, read-only and writable, and
/// compare with `expected.json`.
fn check_vector(name: &str) {
    let exp = expected(name);
    let modes = exp["modes"].as_object().expect("modes");
    assert_eq!(modes.len(), 3, "{name}: one outcome per recovery mode");
    for (mode_name, want) in modes {
        for read_only in [true, false] {
            let ctx = format!("{name}, {mode_name}, read_only={read_only}");
            let dir = copy_to_temp(name);
            let before = store_files(dir.path());
            let opts = Options {
                read_only,
                recovery_mode: mode(mode_name),
                ..Default::default()
            };
            match Store::open_with(dir.path(), opts) {
                Err(e) => {
                    assert_eq!(want["opens"], json!(false), "{ctx}: refused with {e}");
                    check_refused(&e, want, &ctx);
                    assert_eq!(
                        store_files(dir.path()),
                        before,
                        "{ctx}: a refused open changed bytes"
                    );
                }
                Ok(store) => {
                    assert_eq!(want["opens"], json!(true), "{ctx}: opened");
                    check_opened(&store, want, &ctx);
                    if read_only {
                        drop(store);
                        assert_eq!(
                            store_files(dir.path()),
                            before,
                            "{ctx}: a read-only open changed bytes"
                        );
                        continue;
                    }
                    store.close().expect("close");
                    check_repaired(dir.path(), want, &ctx);
                }
            }
        }
    }
}

/// After a writable open and a close, the damage is gone: torn bytes were
/// zeroed (§6.4) or the torn segment removed, a point-in-time cut holds, and
/// the next open is clean with the same events.
fn check_repaired(dir: &Path, want: &Value, ctx: &str) {
    for p in want["problems"].as_array().expect("problems") {
        let file = p["file"].as_str().expect("file");
        if p["kind"] == "torn-tail" && p["offset"] == 0 {
            assert!(
                !dir.join(file).exists(),
                "{ctx}: torn segment {file} was not removed"
            );
        }
    }
    let store = Store::open_with(
        dir,
        Options {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{ctx}: reopen after repair: {e}"));
    let r = store.recovery_report();
    assert!(r.problems.is_empty(), "{ctx}: after repair: {r:?}");
    assert!(r.clean_shutdown, "{ctx}: closed cleanly: {r:?}");
    assert_eq!(sessions_of(&store), want["sessions"], "{ctx}: after repair");
}

#[test]
fn valid() {
    check_vector("valid");
}

#[test]
fn torn_tail() {
    check_vector("torn-tail");
}

#[test]
fn mid_log_corruption() {
    check_vector("mid-log-corruption");
}

#[test]
fn sealed_segment_corruption() {
    check_vector("sealed-segment-corruption");
}

#[test]
fn preallocated_zeros() {
    check_vector("preallocated-zeros");
}

#[test]
fn wrong_version() {
    check_vector("wrong-version");
}

#[test]
fn not_a_segment() {
    check_vector("not-a-segment");
}

#[test]
fn torn_segment_header() {
    check_vector("torn-segment-header");
}

#[test]
fn checkpoint() {
    check_vector("checkpoint");
}

#[test]
fn clean_close() {
    check_vector("clean-close");
}

#[test]
fn checkpoint_delta() {
    check_vector("checkpoint-delta");
}

#[test]
fn checkpoint_proves_durable() {
    check_vector("checkpoint-proves-durable");
}

#[test]
fn clean_close_then_torn() {
    check_vector("clean-close-then-torn");
}

#[test]
fn recycled_segment() {
    check_vector("recycled-segment");
}

// ---------------------------------------------------------------------------
// A decoder written from FORMAT.md alone (crc32fast is the only help), cross-
// checked against the engine's `frame` module.

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// §3: crc32 (IEEE) of store id ‖ le32(segment) ‖ bytes.
fn salted_crc(store_id: &[u8], segment: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(store_id);
    h.update(&segment.to_le_bytes());
    h.update(bytes);
    h.finalize()
}

struct HandSession {
    name: String,
    parent: Option<(usize, u64)>,
    /// (seq, kind, flags, payload, packed position) of every event, inherited
    /// ones included.
    events: Vec<(u64, u16, u16, Vec<u8>, u64)>,
    define_pos: u64,
}

struct HandLog {
    store_id: Vec<u8>,
    batches: Vec<Value>,
    sessions: Vec<HandSession>,
}

fn hand_decode(dir: &Path) -> HandLog {
    // §1: segment files, ten digits + ".tseg", contiguous ids.
    let mut segs: Vec<(u32, String)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            let d = n.strip_suffix(".tseg")?;
            (d.len() == 10 && d.bytes().all(|c| c.is_ascii_digit()))
                .then(|| (d.parse().unwrap(), n.clone()))
        })
        .collect();
    segs.sort();
    let mut log = HandLog {
        store_id: Vec::new(),
        batches: Vec::new(),
        sessions: Vec::new(),
    };
    let mut next_seq = 0u64;
    let mut prev_end = 0u32;
    for (i, (id, name)) in segs.iter().enumerate() {
        let b = std::fs::read(dir.join(name)).unwrap();
        // §2: segment header.
        assert!(b.len() >= 64);
        assert_eq!(&b[0..8], b"TSTNSEG\0");
        assert_eq!(
            le32(&b, 60),
            crc32fast::hash(&b[0..60]),
            "{name}: header crc"
        );
        assert_eq!(le32(&b, 8), 1, "version");
        assert_eq!(le32(&b, 12), 64, "header_bytes");
        assert_eq!(le32(&b, 36), 0);
        assert!(b[52..60].iter().all(|x| *x == 0));
        assert_eq!(le32(&b, 32), *id, "segment id = file name");
        if i == 0 {
            assert_eq!(*id, 1);
            log.store_id = b[16..32].to_vec();
            assert_eq!(le64(&b, 40), 0);
            assert_eq!(le32(&b, 48), 0);
        } else {
            assert_eq!(&b[16..32], &log.store_id[..], "same store");
            assert_eq!(le64(&b, 40), next_seq, "first_batch_seq chains");
            assert_eq!(le32(&b, 48), prev_end, "prev_segment_end chains");
        }
        let engine_h = frame::SegmentHeader::decode(&b).expect("engine decodes header");
        assert_eq!(
            (engine_h.segment.0, engine_h.first_batch_seq),
            (*id, le64(&b, 40))
        );
        let salt = Salt {
            store_id: log.store_id.clone().try_into().unwrap(),
            segment: SegmentId(*id),
        };
        // §3: batches back to back from offset 64 until 32 zero bytes or EOF.
        let mut off = 64usize;
        while off + 32 <= b.len() && b[off..off + 32].iter().any(|x| *x != 0) {
            let h = &b[off..off + 32];
            assert_eq!(&h[0..4], b"TSB1");
            assert_eq!(
                le32(h, 28),
                salted_crc(&log.store_id, *id, &h[0..28]),
                "batch header crc"
            );
            let body_len = le32(h, 4) as usize;
            assert_eq!(body_len % 8, 0);
            assert_eq!(le64(h, 8), next_seq, "batch_seq chains");
            let body = &b[off + 32..off + 32 + body_len];
            assert_eq!(
                le32(h, 20),
                salted_crc(&log.store_id, *id, body),
                "body crc"
            );
            let engine_b = frame::BatchHeader::decode(h, &salt).expect("engine decodes batch");
            assert_eq!(engine_b.body_len as usize, body_len);
            log.batches.push(json!({
                "file": name,
                "offset": off,
                "batch_seq": next_seq,
                "body_len": body_len,
                "frame_count": le32(h, 16),
                "flags": le32(h, 24),
            }));
            // §4: frames, each padded to 8.
            let mut at = 0usize;
            let mut count = 0u32;
            while at < body.len() {
                let f = &body[at..];
                let frame_len = le32(f, 0) as usize;
                assert!(frame_len >= 24 && frame_len <= f.len());
                assert_eq!(
                    le32(f, 4),
                    salted_crc(&log.store_id, *id, &f[8..frame_len]),
                    "frame crc"
                );
                let (session, kind, flags, seq) =
                    (le32(f, 8) as usize, le16(f, 12), le16(f, 14), le64(f, 16));
                let payload = &f[24..frame_len];
                let padded = (frame_len + 7) & !7;
                assert!(f[frame_len..padded].iter().all(|x| *x == 0), "zero padding");
                let engine_f = frame::decode_frame(f, &salt).expect("engine decodes frame");
                assert_eq!(
                    (
                        engine_f.session,
                        engine_f.kind,
                        engine_f.flags,
                        engine_f.seq
                    ),
                    (SessionId(session as u32), kind, flags, seq)
                );
                let pos = ((*id as u64) << 32) | (off + 32 + at) as u64;
                if kind == 0 {
                    // §5: session-define.
                    assert_eq!(session, log.sessions.len(), "dense compact ids");
                    assert_eq!((flags, seq), (0, 0));
                    assert_eq!(payload[0], 1, "define payload version");
                    let n = le16(payload, 1) as usize;
                    let name = std::str::from_utf8(&payload[3..3 + n]).unwrap().to_string();
                    let rest = &payload[3 + n..];
                    let parent = match rest[0] {
                        0 => {
                            assert_eq!(rest.len(), 1);
                            None
                        }
                        1 => {
                            assert_eq!(rest.len(), 13);
                            Some((le32(rest, 1) as usize, le64(rest, 5)))
                        }
                        x => panic!("has_parent {x}"),
                    };
                    let events = match parent {
                        None => Vec::new(),
                        Some((p, upto)) => log.sessions[p].events[..upto as usize].to_vec(),
                    };
                    assert_eq!(
                        frame::SessionDefine::decode(payload).expect("engine decodes define"),
                        frame::SessionDefine {
                            name: name.clone(),
                            parent: parent.map(|(p, u)| (SessionId(p as u32), u)),
                        }
                    );
                    log.sessions.push(HandSession {
                        name,
                        parent,
                        events,
                        define_pos: pos,
                    });
                } else {
                    let s = &mut log.sessions[session];
                    assert_eq!(seq, s.events.len() as u64, "dense seqs");
                    s.events.push((seq, kind, flags, payload.to_vec(), pos));
                }
                at += padded;
                count += 1;
            }
            assert_eq!(count, le32(h, 16), "frame_count");
            next_seq += 1;
            off += 32 + body_len;
        }
        // Zero fill to the end of the file.
        assert!(b[off..].iter().all(|x| *x == 0), "{name}: zero fill");
        prev_end = off as u32;
    }
    log
}

fn hand_sessions_json(log: &HandLog) -> Value {
    Value::Array(
        log.sessions
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "parent": s.parent.map(|(p, upto)| json!({"name": log.sessions[p].name, "upto": upto})),
                    "events": s.events.iter().map(|(seq, kind, flags, payload, _)| json!({
                        "seq": seq, "kind": kind, "flags": flags, "payload": hex(payload),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

#[test]
fn ok_vectors_decode_by_hand_as_the_spec_says() {
    for name in ["valid", "preallocated-zeros", "checkpoint", "clean-close"] {
        let exp = expected(name);
        let log = hand_decode(&vectors_dir().join(name));
        assert_eq!(log.store_id, gen_vectors::STORE_ID, "{name}");
        assert_eq!(Value::Array(log.batches.clone()), exp["batches"], "{name}");
        assert_eq!(
            hand_sessions_json(&log),
            exp["modes"]["tolerate-torn-tail"]["sessions"],
            "{name}"
        );
    }
}

/// §7 by hand: the checkpoint of `checkpoint/` holds exactly the positions the
/// log holds for the batches it covers.
#[test]
fn checkpoint_decodes_by_hand_as_the_spec_says() {
    let dir = vectors_dir().join("checkpoint");
    let log = hand_decode(&dir);
    let b = std::fs::read(dir.join("index.ckpt")).unwrap();
    let (body, crc) = b.split_at(b.len() - 4);
    assert_eq!(le32(crc, 0), crc32fast::hash(body), "checkpoint crc");
    assert_eq!(&body[0..8], b"TSTNIDX\0");
    assert_eq!((le32(body, 8), le32(body, 12)), (1, 64));
    assert_eq!(&body[16..32], &log.store_id[..]);
    let covered = le64(body, 32);
    let last = &log.batches[1]; // the checkpoint covers batches 0 and 1
    let last_off = last["offset"].as_u64().unwrap();
    let last_end = last_off + 32 + last["body_len"].as_u64().unwrap();
    assert_eq!(covered, (1 << 32) | last_end, "covered");
    assert_eq!(le64(body, 40), 2, "next_batch_seq");
    assert_eq!(le64(body, 48), (1 << 32) | last_off, "last_batch");
    assert_eq!(le32(body, 56), 0, "last_batch_flags");
    let count = le32(body, 60) as usize;
    let mut at = 64;
    let covered_sessions: Vec<&HandSession> = log
        .sessions
        .iter()
        .filter(|s| s.define_pos < covered)
        .collect();
    assert_eq!(count, covered_sessions.len());
    for s in covered_sessions {
        let n = le16(body, at) as usize;
        assert_eq!(&body[at + 2..at + 2 + n], s.name.as_bytes());
        at += 2 + n;
        let parent = match body[at] {
            0 => None,
            1 => Some((le32(body, at + 1) as usize, le64(body, at + 5))),
            x => panic!("has_parent {x}"),
        };
        at += if parent.is_some() { 13 } else { 1 };
        assert_eq!(parent, s.parent, "{}", s.name);
        assert_eq!(le64(body, at), s.define_pos, "{} define_pos", s.name);
        let own = le64(body, at + 8) as usize;
        at += 16;
        let inherited = s.parent.map_or(0, |(_, upto)| upto as usize);
        let want: Vec<u64> = s.events[inherited..]
            .iter()
            .map(|e| e.4)
            .filter(|p| *p < covered)
            .collect();
        let got: Vec<u64> = (0..own).map(|i| le64(body, at + 8 * i)).collect();
        assert_eq!(got, want, "{} positions", s.name);
        at += 8 * own;
    }
    assert_eq!(at, body.len(), "no trailing bytes");
    let engine = turnstone::internals::Checkpoint::decode(&b).expect("engine decodes");
    assert_eq!(engine.covered.0, covered);
}

// ---------------------------------------------------------------------------

/// The committed vectors are exactly what the generator builds.
#[test]
fn committed_vectors_match_the_generator() {
    let built = gen_vectors::files();
    let mut committed = BTreeMap::new();
    for entry in std::fs::read_dir(vectors_dir()).expect("format-spec/vectors") {
        let entry = entry.unwrap();
        if !entry.path().is_dir() {
            continue;
        }
        let v = entry.file_name().into_string().unwrap();
        for f in std::fs::read_dir(entry.path()).unwrap() {
            let f = f.unwrap();
            let n = f.file_name().into_string().unwrap();
            committed.insert(format!("{v}/{n}"), std::fs::read(f.path()).unwrap());
        }
    }
    let regen = "cargo run -p turnstone --example gen_vectors -- format-spec/vectors";
    assert_eq!(
        committed.keys().collect::<Vec<_>>(),
        built.keys().collect::<Vec<_>>(),
        "vector files differ; regenerate with `{regen}`"
    );
    for (path, bytes) in &built {
        let disk = &committed[path];
        if path.ends_with(".json") {
            // Compared as JSON: key order depends on serde_json features.
            let a: Value = serde_json::from_slice(disk).unwrap();
            let b: Value = serde_json::from_slice(bytes).unwrap();
            assert_eq!(a, b, "{path} differs; regenerate with `{regen}`");
        } else {
            assert!(
                disk == bytes,
                "{path} differs from the generator; regenerate with `{regen}`"
            );
        }
    }
}
