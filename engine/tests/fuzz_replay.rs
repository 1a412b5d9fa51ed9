//! Regression tests for what the fuzz targets (`fuzz/`) found, each reduced
//! to the smallest store image or event sequence that shows it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use turnstone::sim::SimVfs;
use turnstone::vfs::Vfs;
use turnstone::{Error, Options, RecoveryMode, Store};

const DIR: &str = "/store";

fn opts(sim: &SimVfs, checkpoints: bool) -> Options {
    Options {
        vfs: Arc::new(sim.clone()),
        segment_bytes: 65_536,
        checkpoints,
        ..Default::default()
    }
}

fn seg(n: u32) -> PathBuf {
    Path::new(DIR).join(format!("{n:010}.tseg"))
}

/// Write a whole file, durably.
fn put(sim: &SimVfs, path: &Path, bytes: &[u8]) {
    let f = sim.create_truncate(path).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_data().unwrap();
    sim.sync_dir(Path::new(DIR)).unwrap();
}

/// fuzz target `recovery_image`: a torn creation of segment 2 (a 1-byte
/// file) is removed at open and segment 1 becomes the last segment again,
/// but a stray non-zero byte after segment 1's end of data was neither
/// reported nor zeroed. The next append went before it, and the reopen
/// after a clean close found a torn tail. Fixed in `recovery::recover`: the
/// segment that becomes the last gets the last segment's tail checks.
#[test]
fn segment_that_becomes_last_gets_its_tail_checked() {
    let sim = SimVfs::new();
    Store::open_with(DIR, opts(&sim, true))
        .unwrap()
        .close()
        .unwrap();
    sim.poke(&seg(1), 30_000, &[0x4d]).unwrap();
    put(&sim, &seg(2), b".");

    let store = Store::open_with(DIR, opts(&sim, true)).unwrap();
    let r = store.recovery_report();
    assert_eq!(r.problems.len(), 2, "{r:?}");
    store.append("s", 3, 0, b"after recovery").unwrap();
    store.close().unwrap();

    let store = Store::open_with(DIR, opts(&sim, true)).unwrap();
    let r = store.recovery_report();
    assert!(r.problems.is_empty() && r.clean_shutdown, "{r:?}");
    assert_eq!(store.read("s", 0).unwrap().payload, b"after recovery");
    drop(store);
    assert!(sim.read_file(&seg(1)).unwrap()[30_000..]
        .iter()
        .all(|b| *b == 0));

    // Absolute consistency refuses that tail instead.
    let sim = SimVfs::new();
    Store::open_with(DIR, opts(&sim, false))
        .unwrap()
        .close()
        .unwrap();
    sim.poke(&seg(1), 30_000, &[0x4d]).unwrap();
    put(&sim, &seg(2), b".");
    let abs = Store::open_with(
        DIR,
        Options {
            recovery_mode: RecoveryMode::AbsoluteConsistency,
            ..opts(&sim, false)
        },
    );
    assert!(matches!(abs, Err(Error::TornTailRefused { .. })), "{abs:?}");
}

/// fuzz target `recovery_image`: a stray `0000000000.tseg` (here a copy of
/// the index checkpoint) was ignored by an open that started from the
/// checkpoint, while a full scan refuses the store: the verdict depended on
/// a derived file. Fixed in `recovery::validate_checkpoint`: a checkpoint
/// is only used when the segment files start at segment 1.
#[test]
fn checkpoint_does_not_hide_a_segment_before_the_first() {
    let sim = SimVfs::new();
    let store = Store::open_with(DIR, opts(&sim, true)).unwrap();
    store.append("s", 3, 0, b"x").unwrap();
    store.close().unwrap();
    let ckpt = sim.read_file(&Path::new(DIR).join("index.ckpt")).unwrap();
    put(&sim, &seg(0), &ckpt);

    let with = Store::open_with(DIR, opts(&sim, true));
    let without = Store::open_with(
        DIR,
        Options {
            read_only: true,
            ..opts(&sim, false)
        },
    );
    assert!(without.is_err(), "a full scan refuses the stray segment");
    assert!(
        matches!((&with, &without), (Err(a), Err(b)) if std::mem::discriminant(a) == std::mem::discriminant(b)),
        "checkpointed open {with:?} vs full scan {without:?}"
    );
}

/// fuzz target `recovery_image` (differential check against the store): the
/// inspector behind `turnstone verify`/`dump` took a last segment whose
/// header is unreadable for an interrupted creation (H2) even when bytes
/// after offset 64 are not zero, reporting a torn tail where the store
/// (FORMAT.md §6.3 H2/H4) refuses with corruption. Fixed in `inspect` by its
/// owner (commit "inspect: agree with recovery on bad segment headers").
#[test]
fn inspector_agrees_on_a_bad_last_segment_header() {
    let sim = SimVfs::new();
    let store = Store::open_with(DIR, opts(&sim, true)).unwrap();
    store.append("s", 3, 0, b"x").unwrap();
    store.close().unwrap();
    let mut junk = b"TSTNIDX\0".to_vec();
    junk.resize(200, 7);
    put(&sim, &seg(2), &junk);
    let opened = Store::open_with(DIR, opts(&sim, false));
    assert!(matches!(opened, Err(Error::Corrupt { .. })), "{opened:?}");
    let summary =
        turnstone::inspect::walk_with(
            &sim,
            Path::new(DIR),
            |_| std::ops::ControlFlow::Continue(()),
        )
        .unwrap();
    assert!(summary.is_corrupt(), "{summary:?}");
}

/// fuzz target `repair`: a compaction (any surface replace) could take a
/// tool result off the surface while its tool use stayed. The tool is closed
/// in the log, so repair had nothing to do, and the derived messages carried
/// a tool use without a result, which a model API rejects. Fixed in the
/// session layer by its owner (commit "Session: a replace may not separate a
/// tool use from its result"): the compaction is refused.
#[test]
fn compaction_cannot_split_a_tool_use_from_its_result() {
    use turnstone::session::*;
    let sim = SimVfs::new();
    let store = Arc::new(Store::open_with(DIR, opts(&sim, false)).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    s.append(
        AssistantMessage {
            content: vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "shell".into(),
                input: serde_json::json!({}),
                extra: Default::default(),
            }],
            usage: None,
            stop_reason: None,
            extra: Default::default(),
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.append(
        ToolCall {
            call_id: "c1".into(),
            name: "shell".into(),
            input: serde_json::json!({}),
        },
        (),
    )
    .unwrap();
    s.append(
        ToolResult {
            call_id: "c1".into(),
            content: vec![ContentBlock::text("ok")],
            is_error: false,
            status: None,
        },
        SurfaceOp::Append,
    )
    .unwrap();
    // Summarise only the tool result (surface node 1).
    let compacted = s.compact("k1", 1, 2, "summary");
    let valid = validate_messages(s.derive_messages());
    assert!(
        compacted.is_err() || valid.is_ok(),
        "compaction left an unanswered tool use: {valid:?}"
    );
}

/// fuzz target `recovery_image`: segment 1 of a store with an index
/// checkpoint was replaced by an empty file. The checkpoint was discarded
/// (its segment header is unreadable) without its evidence, so the empty
/// segment passed for an interrupted creation (H2) and the store opened as a
/// new, empty store: every acknowledged event silently gone. FORMAT.md H2
/// requires that no checkpoint covers the segment. Fixed in
/// `recovery::validate_checkpoint`: an unreadable or missing covered segment
/// keeps the checkpoint's proof of durability.
#[test]
fn emptied_segment_under_a_checkpoint_is_not_a_torn_creation() {
    let sim = SimVfs::new();
    let store = Store::open_with(DIR, opts(&sim, true)).unwrap();
    store.append("s", 3, 0, b"acknowledged").unwrap();
    store.sync().unwrap();
    store.close().unwrap();
    put(&sim, &seg(1), b"");
    for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::PointInTime] {
        let opened = Store::open_with(
            DIR,
            Options {
                recovery_mode: mode,
                ..opts(&sim, true)
            },
        );
        assert!(opened.is_err(), "{mode:?}: opened {opened:?}");
    }
}

/// Same cause: the checkpoint names segment 2, which was removed. The store
/// opened with segment 1 only, losing segment 2's acknowledged events.
#[test]
fn missing_segment_under_a_checkpoint_is_corruption() {
    let sim = SimVfs::new();
    let store = Store::open_with(
        DIR,
        Options {
            segment_bytes: 8_192,
            ..opts(&sim, true)
        },
    )
    .unwrap();
    for i in 0..8u8 {
        store.append("s", 3, 0, &[i; 2000]).unwrap();
        store.sync().unwrap();
    }
    store.close().unwrap();
    assert!(sim.read_file(&seg(3)).is_some(), "three segments");
    sim.remove(&seg(3)).unwrap();
    sim.sync_dir(Path::new(DIR)).unwrap();
    let opened = Store::open_with(
        DIR,
        Options {
            segment_bytes: 8_192,
            ..opts(&sim, true)
        },
    );
    assert!(matches!(opened, Err(Error::Corrupt { .. })), "{opened:?}");
}

/// Same cause, found with a stray empty `0000000000.tseg` beside it: segment
/// 1 (the only one, covered by the checkpoint) was removed. The store took
/// the empty file for an interrupted creation and opened as a new store.
#[test]
fn removed_first_segment_under_a_checkpoint_is_refused() {
    for stray in [false, true] {
        let sim = SimVfs::new();
        let store = Store::open_with(DIR, opts(&sim, true)).unwrap();
        store.append("s", 3, 0, b"acknowledged").unwrap();
        store.close().unwrap();
        sim.remove(&seg(1)).unwrap();
        sim.sync_dir(Path::new(DIR)).unwrap();
        if stray {
            put(&sim, &seg(0), b"");
        }
        let opened = Store::open_with(DIR, opts(&sim, true));
        assert!(opened.is_err(), "stray {stray}: opened {opened:?}");
    }
}
