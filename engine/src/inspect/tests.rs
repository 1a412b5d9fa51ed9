//! Tests of the inspector: clean walks, damage in place (per frame too),
//! agreement with recovery on headers, the format vectors, never a panic.

use super::*;
use std::collections::HashMap;

use crate::frame::{BATCH_HEADER_BYTES, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::index::checkpoint;
use crate::recovery::ProblemKind;
use crate::types::SegmentId;
use crate::{Options, Store};
use rand::{Rng, RngCore, SeedableRng};

fn collect(path: &Path) -> Result<(Summary, Vec<String>)> {
    let mut lines = Vec::new();
    let s = walk(path, |item| {
        lines.push(match item {
            Item::Segment(s) => format!("segment {}", s.file.display()),
            Item::Batch(b) => format!("batch {} at {}", b.header.batch_seq, b.offset),
            Item::Frame(f) => format!(
                "frame {:?} {} {} at {} len {}",
                f.session_name, f.seq, f.kind, f.offset, f.len
            ),
            Item::Problem(p) => format!("problem {:?} at {} {}", p.kind, p.offset, p.detail),
        });
        ControlFlow::Continue(())
    })?;
    Ok((s, lines))
}

fn make_store(dir: &Path, events: u32) {
    let store = Store::open_with(
        dir,
        Options {
            segment_bytes: 16 * 1024,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..events {
        let s = format!("s{}", i % 5);
        let payload = vec![b'a' + (i % 26) as u8; (i as usize * 31) % 700];
        let a = store.append(&s, 1 + (i % 9) as u16, 0, &payload).unwrap();
        if i % 7 == 0 {
            store.wait_durable(a.end).unwrap();
        }
    }
    store.close().unwrap();
}

#[test]
fn clean_store_walks_every_frame_in_order() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 400);
    let mut next: HashMap<String, u64> = HashMap::new();
    let s = walk(dir.path(), |item| {
        if let Item::Frame(f) = item {
            if !f.is_define() {
                let name = f.session_name.expect("name known").to_string();
                let n = next.entry(name).or_default();
                assert_eq!(f.seq, *n);
                *n += 1;
            }
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(s.events, 400, "{s:?}");
    assert_eq!(s.sessions, 5);
    assert_eq!((s.torn_tails, s.corruptions), (0, 0), "{s:?}");
    assert!(s.clean_close);
    assert!(s.segments > 3, "{s:?}");
    // A lone segment from the middle resolves names through earlier ones.
    let seg3 = dir.path().join(frame::segment_file_name(SegmentId(3)));
    let (s3, lines) = collect(&seg3).unwrap();
    assert_eq!(s3.segments, 1);
    assert_eq!(s3.corruptions, 0, "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("Some(\"s")), "{lines:?}");
}

#[test]
fn flipped_byte_in_sealed_segment_is_corruption_and_walk_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 400);
    let clean = collect(dir.path()).unwrap().0;
    let seg = dir.path().join(frame::segment_file_name(SegmentId(2)));
    let mut b = std::fs::read(&seg).unwrap();
    b[SEGMENT_HEADER_BYTES + BATCH_HEADER_BYTES + 30] ^= 0x40;
    std::fs::write(&seg, &b).unwrap();
    let (s, lines) = collect(dir.path()).unwrap();
    assert!(s.corruptions >= 1, "{lines:?}");
    assert_eq!(s.torn_tails, 0);
    assert!(
        s.events < clean.events && s.events > clean.events / 2,
        "{s:?}"
    );
    assert!(s.clean_close, "walk reached the end");
}

#[test]
fn truncated_last_segment_is_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 400);
    let (clean, _) = collect(dir.path()).unwrap();
    let last = *list_segments(&OsVfs, dir.path()).unwrap().last().unwrap();
    let path = dir.path().join(frame::segment_file_name(last));
    // Cut in the middle of the last batch holding frames.
    let mut last_frame = 0;
    walk(dir.path(), |item| {
        if let Item::Frame(f) = item {
            if f.segment == path {
                last_frame = f.offset + f.len as u64 / 2;
            }
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(last_frame).unwrap();
    // The checkpoint written at close covers the cut bytes: they were
    // durable, so no power cut explains this (FORMAT.md §6.3 C4).
    let (s, lines) = collect(dir.path()).unwrap();
    assert_eq!((s.torn_tails, s.corruptions), (0, 1), "{lines:?}");
    assert!(lines.last().unwrap().contains("checkpoint covers"));
    // Without it, the same bytes are a torn tail.
    std::fs::remove_file(dir.path().join(checkpoint::CHECKPOINT_FILE)).unwrap();
    let (s, lines) = collect(dir.path()).unwrap();
    assert_eq!((s.torn_tails, s.corruptions), (1, 0), "{lines:?}");
    assert!(s.events < clean.events);
}

#[test]
fn raw_bytes_span_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 400);
    let mut spans: Vec<(FrameSpan, u64)> = Vec::new();
    let s = walk(dir.path(), |item| {
        match item {
            Item::Segment(s) => {
                assert_eq!(s.raw_header.len(), SEGMENT_HEADER_BYTES);
                assert_eq!(&s.raw_header[..8], b"TSTNSEG\0");
                spans.push((s.span.expect("header decodes"), 0));
            }
            Item::Batch(b) => {
                assert_eq!(b.raw_header.len(), BATCH_HEADER_BYTES);
                assert_eq!(b.raw_header[..4], frame::BATCH_MAGIC.to_le_bytes());
            }
            Item::Frame(f) => {
                assert_eq!(f.raw.len(), f.len as usize);
                assert_eq!(&f.raw[..4], &f.len.to_le_bytes());
                assert_eq!(&f.raw[FRAME_HEADER_BYTES..], f.payload);
                let (span, n) = spans.last_mut().unwrap();
                if *n == 0 {
                    assert_eq!(span.first, Some(f.offset));
                }
                *n += 1;
                if *n == span.frames {
                    assert_eq!(span.last, Some(f.offset));
                }
            }
            Item::Problem(p) => panic!("{p:?}"),
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    for (span, n) in &spans {
        assert_eq!(span.frames, *n);
    }
    let tail = s.tail.expect("tail of a clean store");
    let last = *list_segments(&OsVfs, dir.path()).unwrap().last().unwrap();
    assert_eq!(tail.segment_id, last);
    assert_eq!(tail.next_batch_seq, s.batches);
}

#[test]
fn follower_sees_appends_and_segment_rolls() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 50);
    let store = Store::open_with(
        dir.path(),
        Options {
            segment_bytes: 16 * 1024,
            ..Default::default()
        },
    )
    .unwrap();
    let mut names = HashMap::new();
    let s = walk(dir.path(), |item| {
        if let Item::Frame(f) = item {
            if let Some(d) = f.define {
                names.insert(f.session.0, d.name.clone());
            }
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    let mut fl = Follower::new(&OsVfs, dir.path(), s.tail.unwrap(), names);
    let mut seen: Vec<(String, u64)> = Vec::new();
    let mut segments = 0;
    let mut poll = |fl: &mut Follower<'_>, seen: &mut Vec<(String, u64)>| {
        fl.poll(&mut |item| {
            match item {
                Item::Frame(f) if !f.is_define() => {
                    seen.push((f.session_name.unwrap().to_string(), f.seq))
                }
                Item::Segment(_) => segments += 1,
                _ => {}
            }
            ControlFlow::Continue(())
        })
        .unwrap()
    };
    assert_eq!(poll(&mut fl, &mut seen), 0);
    let mut want = Vec::new();
    for i in 0..300u64 {
        let name = format!("s{}", i % 7);
        let a = store.append(&name, 1, 0, &vec![b'x'; 300]).unwrap();
        want.push((name, a.seq.0));
        if i % 10 == 9 {
            store.wait_durable(a.end).unwrap();
            poll(&mut fl, &mut seen);
        }
    }
    store.sync().unwrap();
    poll(&mut fl, &mut seen);
    assert_eq!(seen, want);
    assert!(segments >= 3, "{segments}");
    store.close().unwrap();
}

#[test]
fn checksum_mismatch_is_reported() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../format-spec/vectors/mid-log-corruption");
    let mut probs = Vec::new();
    walk(&dir, |item| {
        if let Item::Problem(p) = item {
            probs.push(p);
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    let c = probs[0].checksum.expect("a body checksum failed");
    assert_ne!(c.stored, c.computed);
    assert!(probs[0].detail.contains(&format!("{:#010x}", c.stored)));
}

/// FORMAT.md §6.3: only a header torn over zeros (H2) is a torn tail; a
/// bad last header with data after it, or a log that does not start at
/// segment 1, is corruption (H4), as the store says.
#[test]
fn bad_headers_agree_with_recovery() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 200);
    std::fs::remove_file(dir.path().join(checkpoint::CHECKPOINT_FILE)).unwrap();
    let ids = list_segments(&OsVfs, dir.path()).unwrap();
    let last = dir
        .path()
        .join(frame::segment_file_name(*ids.last().unwrap()));
    let orig = std::fs::read(&last).unwrap();
    // Half a header over zeros: an interrupted creation.
    let mut b = vec![0u8; orig.len()];
    b[..32].copy_from_slice(&orig[..32]);
    std::fs::write(&last, &b).unwrap();
    let (s, lines) = collect(dir.path()).unwrap();
    assert_eq!((s.torn_tails, s.corruptions), (1, 0), "{lines:?}");
    // The same with bytes after the header: corruption.
    b[200] = 7;
    std::fs::write(&last, &b).unwrap();
    let (s, lines) = collect(dir.path()).unwrap();
    assert_eq!((s.torn_tails, s.corruptions), (0, 1), "{lines:?}");
    std::fs::write(&last, &orig).unwrap();
    // A store whose first segment is gone.
    let first = dir.path().join(frame::segment_file_name(ids[0]));
    let seg1 = std::fs::read(&first).unwrap();
    std::fs::remove_file(&first).unwrap();
    let (s, lines) = collect(dir.path()).unwrap();
    assert!(s.corruptions >= 1, "{lines:?}");
    assert!(lines
        .iter()
        .any(|l| l.contains("earlier segment files are missing")));
    // A lone copy of a later segment is no store: no such problem.
    let lone = tempfile::tempdir().unwrap();
    let copy = lone.path().join(frame::segment_file_name(ids[1]));
    std::fs::copy(dir.path().join(frame::segment_file_name(ids[1])), &copy).unwrap();
    let (s, lines) = collect(&copy).unwrap();
    assert_eq!(s.corruptions, 0, "{lines:?}");
    std::fs::write(&first, &seg1).unwrap();
    assert_eq!(collect(dir.path()).unwrap().0.corruptions, 0);
}

#[test]
fn missing_and_not_a_store_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        walk(&dir.path().join("nope"), |_| ControlFlow::Continue(())),
        Err(Error::NoStore { .. })
    ));
    assert!(matches!(
        walk(dir.path(), |_| ControlFlow::Continue(())),
        Err(Error::NoStore { .. })
    ));
    let f = dir.path().join("0000000001.tseg");
    std::fs::write(
        &f,
        b"hello, not a segment at all; hello, not a segment at all!!!!!!!!!",
    )
    .unwrap();
    assert!(matches!(
        walk(&f, |_| ControlFlow::Continue(())),
        Err(Error::NotTurnstone { .. })
    ));
    assert!(matches!(
        walk(dir.path(), |_| ControlFlow::Continue(())),
        Err(Error::NotTurnstone { .. })
    ));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every vector of `format-spec/vectors` walks to the verdict, problems,
/// batches and events its `expected.json` states (FORMAT.md §6.3).
#[test]
fn format_spec_vectors() {
    use serde_json::{json, Value};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../format-spec/vectors");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("format-spec/vectors")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.json").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 10, "{dirs:?}");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
        let exp: Value = serde_json::from_str(&text).unwrap();
        let outcome = exp["outcome"].as_str().unwrap();
        let (mut batches, mut problems) = (Vec::new(), Vec::new());
        let mut events: HashMap<String, Vec<Value>> = HashMap::new();
        let file = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
        let r = walk(&dir, |item| {
            match item {
                Item::Batch(b) => batches.push(json!({
                    "batch_seq": b.header.batch_seq, "body_len": b.header.body_len,
                    "file": file(b.segment), "flags": b.header.flags,
                    "frame_count": b.header.frame_count, "offset": b.offset,
                })),
                Item::Frame(f) if !f.is_define() => events
                    .entry(f.session_name.unwrap_or("?").to_string())
                    .or_default()
                    .push(json!({
                        "flags": f.flags, "kind": f.kind,
                        "payload": hex(f.payload), "seq": f.seq,
                    })),
                Item::Problem(p) => problems.push(json!({
                    "kind": match p.kind {
                        ProblemKind::TornTail => "torn-tail",
                        ProblemKind::Corruption => "corruption",
                    },
                    "file": file(&p.segment), "offset": p.offset,
                })),
                _ => {}
            }
            ControlFlow::Continue(())
        });
        match outcome {
            "not-turnstone" => {
                assert!(
                    matches!(r, Err(Error::NotTurnstone { .. })),
                    "{name}: {r:?}"
                );
                continue;
            }
            "unsupported-version" => {
                assert!(
                    matches!(r, Err(Error::UnsupportedVersion { .. })),
                    "{name}: {r:?}"
                );
                continue;
            }
            _ => {}
        }
        let s = r.unwrap_or_else(|e| panic!("{name}: {e}"));
        let pit = &exp["modes"]["point-in-time"];
        // The first problem is the one recovery reports (it stops there).
        let want: Vec<Value> = pit["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| json!({"kind": p["kind"], "file": p["file"], "offset": p["offset"]}))
            .collect();
        assert_eq!(problems.first(), want.first(), "{name}: {problems:?}");
        let verdict = if s.corruptions > 0 {
            "corruption"
        } else if s.torn_tails > 0 {
            "torn-tail"
        } else {
            "ok"
        };
        assert_eq!(verdict, outcome, "{name}");
        // Every batch found is one that was written, at its place.
        let written = exp["batches"].as_array().unwrap();
        for b in &batches {
            assert!(written.contains(b), "{name}: unexpected batch {b}");
        }
        if outcome == "ok" {
            assert_eq!(&batches, written, "{name}");
        }
        if outcome != "corruption" {
            assert_eq!(s.clean_close, pit["clean_shutdown"] == true, "{name}");
            // Each session's own events (a fork inherits the rest).
            for sess in pit["sessions"].as_array().unwrap() {
                let upto = sess["parent"]["upto"].as_u64().unwrap_or(0);
                let own: Vec<&Value> = sess["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|e| e["seq"].as_u64().unwrap() >= upto)
                    .collect();
                let got = events
                    .remove(sess["name"].as_str().unwrap())
                    .unwrap_or_default();
                assert_eq!(got.iter().collect::<Vec<_>>(), own, "{name}: {sess}");
            }
        }
    }
}

/// Random bytes, truncations and flips of a real store: never a panic.
#[test]
fn never_panics_on_any_bytes() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let base = tempfile::tempdir().unwrap();
    make_store(base.path(), 300);
    let ids = list_segments(&OsVfs, base.path()).unwrap();
    let originals: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| std::fs::read(base.path().join(frame::segment_file_name(*id))).unwrap())
        .collect();
    let ckpt = std::fs::read(base.path().join(checkpoint::CHECKPOINT_FILE)).unwrap();
    let work = tempfile::tempdir().unwrap();
    for round in 0..300 {
        for e in std::fs::read_dir(work.path()).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        for (id, orig) in ids.iter().zip(&originals) {
            let mut b = orig.clone();
            match round % 5 {
                0 => {
                    let n = rng.gen_range(0..b.len() + 1);
                    b.truncate(n);
                }
                1 => {
                    for _ in 0..rng.gen_range(1..20) {
                        let i = rng.gen_range(0..b.len());
                        b[i] = rng.gen();
                    }
                }
                2 => {
                    let n = rng.gen_range(0..4096);
                    b = vec![0; n];
                    rng.fill_bytes(&mut b);
                }
                3 => {
                    // Random bytes behind a valid segment header.
                    rng.fill_bytes(&mut b[SEGMENT_HEADER_BYTES..]);
                }
                _ => {
                    // Plausible batch magics at random places.
                    for _ in 0..50 {
                        let i = rng.gen_range(0..b.len() / 8) * 8;
                        if i + 4 <= b.len() {
                            b[i..i + 4].copy_from_slice(&frame::BATCH_MAGIC.to_le_bytes());
                        }
                    }
                    let n = rng.gen_range(0..b.len() + 1);
                    b.truncate(n);
                }
            }
            if rng.gen_bool(0.1) {
                continue; // a missing segment
            }
            std::fs::write(work.path().join(frame::segment_file_name(*id)), &b).unwrap();
        }
        if round % 2 == 0 {
            // A damaged checkpoint whose checksum still matches.
            let mut c = ckpt.clone();
            for _ in 0..rng.gen_range(0..8) {
                let i = rng.gen_range(0..c.len());
                c[i] = rng.gen();
            }
            let n = rng.gen_range(4..c.len() + 1);
            c.truncate(n);
            let crc = crc32fast::hash(&c[..n - 4]);
            c[n - 4..].copy_from_slice(&crc.to_le_bytes());
            std::fs::write(work.path().join(checkpoint::CHECKPOINT_FILE), &c).unwrap();
        }
        let _ = collect(work.path());
        for id in &ids {
            let _ = collect(&work.path().join(frame::segment_file_name(*id)));
        }
    }
    // Short files of every small length.
    for n in 0..200usize {
        let p = work.path().join("x.tseg");
        let mut b = originals[0][..n.min(originals[0].len())].to_vec();
        if n % 2 == 1 {
            rng.fill_bytes(&mut b);
        }
        std::fs::write(&p, &b).unwrap();
        let _ = collect(&p);
    }
}

/// Issue 16, part 2: one flipped byte in one frame of a large batch is
/// reported at that frame (offset, length, which checksum), and the frames
/// around it that check are still shown, marked not trusted.
#[test]
fn a_flipped_byte_names_its_frame_and_the_rest_of_the_batch_is_shown_untrusted() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.append("before", 1, 0, b"first batch").unwrap();
    store.sync().unwrap();
    let payloads: Vec<Vec<u8>> = (0..200u32).map(|i| vec![i as u8; 700]).collect();
    let group: Vec<(u16, u16, &[u8])> = payloads.iter().map(|p| (2, 0, &p[..])).collect();
    let mut pos = Vec::new();
    store
        .append_group("big", &group, |a| pos.push(a.pos))
        .unwrap();
    store.sync().unwrap();
    store.append("after", 1, 0, b"a later batch").unwrap();
    store.close().unwrap();
    let victim = pos[120].offset() as usize;
    let seg = dir.path().join(frame::segment_file_name(SegmentId(1)));
    let mut b = std::fs::read(&seg).unwrap();
    b[victim + FRAME_HEADER_BYTES + 100] ^= 0x01;
    std::fs::write(&seg, &b).unwrap();

    let mut problems = Vec::new();
    let mut untrusted = Vec::new();
    let mut trusted_big = 0;
    let s = walk(dir.path(), |item| {
        match item {
            Item::Problem(p) => problems.push(p),
            Item::Frame(f) if !f.trusted => untrusted.push((f.offset, f.seq)),
            Item::Frame(f) if f.session_name == Some("big") => trusted_big += 1,
            _ => {}
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert_eq!(p.kind, ProblemKind::Corruption, "a later batch follows");
    assert_eq!(p.checksum.map(|c| c.of), Some(ChecksumOf::BatchBody));
    assert_eq!(p.damaged_frames.len(), 1, "{:?}", p.damaged_frames);
    let d = &p.damaged_frames[0];
    assert_eq!(d.offset, victim as u64);
    assert_eq!(d.len, (FRAME_HEADER_BYTES + 700) as u64);
    assert_eq!(d.checksum.map(|c| c.of), Some(ChecksumOf::Frame));
    // The define of "big" and the 199 intact events, not trusted.
    assert_eq!(p.untrusted_frames, 200);
    assert_eq!(untrusted.len(), 200);
    assert_eq!(s.untrusted_frames, 200);
    assert!(untrusted.iter().all(|(o, _)| *o != victim as u64));
    assert!(untrusted.iter().any(|(_, seq)| *seq == 199));
    assert_eq!(trusted_big, 0, "nothing of the failing batch is trusted");
    assert_eq!(
        s.events, 2,
        "the batches before and after are intact: {s:?}"
    );
}

/// FORMAT.md §6.5: a segment of another store is reported over the whole
/// file and its frames are not shown as this store's sessions.
#[test]
fn a_foreign_segment_is_not_walked_as_this_stores_sessions() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 400);
    let other = tempfile::tempdir().unwrap();
    {
        let store = Store::open_with(
            other.path(),
            Options {
                segment_bytes: 16 * 1024,
                ..Default::default()
            },
        )
        .unwrap();
        for i in 0..200u32 {
            store
                .append(&format!("foreign-{}", i % 3), 1, 0, &[7; 300])
                .unwrap();
        }
        store.close().unwrap();
    }
    let name = frame::segment_file_name(SegmentId(2));
    std::fs::copy(other.path().join(&name), dir.path().join(&name)).unwrap();
    let size = std::fs::metadata(dir.path().join(&name)).unwrap().len();
    let mut in_foreign = 0;
    let mut problems = Vec::new();
    walk(dir.path(), |item| {
        match item {
            Item::Frame(f) if f.segment_id == SegmentId(2) => in_foreign += 1,
            Item::Frame(f) => assert!(
                !f.session_name.is_some_and(|n| n.starts_with("foreign")),
                "{f:?}"
            ),
            Item::Problem(p) => problems.push(p),
            _ => {}
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(in_foreign, 0);
    let p = problems
        .iter()
        .find(|p| p.segment.ends_with(&name))
        .expect("the foreign segment is reported");
    assert_eq!(
        (p.kind, p.offset, p.bytes),
        (ProblemKind::Corruption, 0, size)
    );
    assert!(p.detail.contains("another store"), "{}", p.detail);
}
