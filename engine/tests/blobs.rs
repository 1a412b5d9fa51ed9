//! Large content blocks out of line (issue 17 §3, FORMAT.md §15): stored
//! once in content-addressed blob files, resolved on every read, and a
//! missing or damaged blob is corruption named by its hash.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};
use turnstone::blobs::{hex, BLOB_THRESHOLD_DEFAULT};
use turnstone::session::{
    internals::{has_refs, session_blobs},
    referenced_blobs,
};
use turnstone::session::{
    AssistantMessage, ContentBlock, Provider, Registry, Session, SurfaceOp, UserMessage,
};
use turnstone::{Error, Store};

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        n += if m.is_dir() {
            dir_bytes(&e.path())
        } else {
            m.len()
        };
    }
    n
}

/// Base64-looking text of `n` bytes, different for each `seed`.
fn b64(n: usize, seed: u8) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..n)
        .map(|i| A[(i.wrapping_mul(31) + seed as usize * 7 + i / 97) % 64] as char)
        .collect()
}

fn blocks_json(s: &mut Session) -> Vec<Vec<Value>> {
    s.derive_messages()
        .iter()
        .map(|m| m.content.iter().map(|b| b.to_json()).collect())
        .collect()
}

/// A session of `requests` requests, each re-sending one screenshot above
/// the blob threshold (or with blobs off); returns the store's bytes on
/// disk (segments unpreallocated, so a file's length is what it holds),
/// the screenshot's size and the messages derived live.
fn resend_one_screenshot(
    dir: &Path,
    requests: usize,
    blobs_on: bool,
) -> (Arc<Store>, u64, usize, Vec<Vec<Value>>, Value) {
    let opts = turnstone::Options {
        preallocate: false,
        ..Default::default()
    };
    let store = Arc::new(Store::open_with(dir, opts).unwrap());
    if !blobs_on {
        store.blobs().set_threshold(usize::MAX);
    }
    let shot = b64(BLOB_THRESHOLD_DEFAULT + 40_000, 1);
    let image = ContentBlock::image_base64("image/png", shot.clone());
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    for i in 0..requests {
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(format!("step {i}")), image.clone()],
            },
            SurfaceOp::Append,
        )
        .unwrap();
        s.append(
            AssistantMessage {
                content: vec![ContentBlock::text(format!("ok {i}"))],
                usage: None,
                stop_reason: None,
                extra: Default::default(),
            },
            SurfaceOp::Append,
        )
        .unwrap();
    }
    s.flush().unwrap();
    let msgs = blocks_json(&mut s);
    drop(s);
    (store, dir_bytes(dir), shot.len(), msgs, image.to_json())
}

#[test]
fn a_screenshot_resent_in_every_request_is_stored_once() {
    let tmp = tempfile::tempdir().unwrap();
    let requests = 200;
    let (store, total, shot, expect, image) =
        resend_one_screenshot(&tmp.path().join("blobs"), requests, true);
    assert_eq!(expect.len(), 2 * requests);
    assert_eq!(expect[0][1], image);
    // One blob, and the store is about one screenshot, not 200; the same
    // session with blobs off, in the same run, holds every copy.
    assert_eq!(store.blobs().list().unwrap().len(), 1);
    let (inline_store, inline, _, inline_msgs, _) =
        resend_one_screenshot(&tmp.path().join("inline"), requests, false);
    assert!(inline_store.blobs().list().unwrap().is_empty());
    assert_eq!(inline_msgs, expect);
    drop(inline_store);
    eprintln!("{requests} requests re-sending a {shot} byte screenshot: {total} bytes on disk with blobs, {inline} without");
    assert!(inline > (requests * shot) as u64, "{inline}");
    assert!(
        total < 2 * shot as u64,
        "store holds {total} bytes for a {shot} byte screenshot sent {requests} times ({inline} with blobs off)"
    );
    // Every read resolves: a reopened session derives the same messages.
    let mut again = Session::open(store.clone(), "s", reg()).unwrap();
    assert_eq!(blocks_json(&mut again), expect);
    let body = again.request_body(Provider::Anthropic);
    assert_eq!(body["messages"][0]["content"][1], image);
    // The log holds references (v 1 envelopes), the raw read shows them.
    let raw = store.read("s", 0).unwrap();
    assert!(has_refs(&raw.payload));
    assert!(raw.payload.len() < 1000, "{}", raw.payload.len());
    let events = again.events(0..2).unwrap();
    assert_eq!(events[0].data["content"][1], image);
    let refs = session_blobs(&store, "s").unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(referenced_blobs(&store).unwrap(), refs);
    drop(again);
    // A deleted session references nothing live.
    turnstone::session::delete(&store, "s").unwrap();
    assert!(referenced_blobs(&store).unwrap().is_empty());
}

#[test]
fn provider_native_blocks_round_trip_through_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let big = b64(BLOB_THRESHOLD_DEFAULT + 1, 2);
    // An opaque block of a type nobody knows, with odd fields; a document;
    // a block spelt like a reference (it must come back as content); a
    // tool result holding a large image (the image goes out, the result
    // stays); and a small block that stays inline.
    let opaque = json!({"type": "hologram", "frames": [1, 2.5, null], "blob": big, "z": {"a": []}});
    let doc = json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": big}, "title": "t", "cache_control": {"type": "ephemeral"}});
    let fake = json!({"type": "turnstone/blob", "sha256": "00", "bytes": 3});
    let small = json!({"type": "text", "text": "hi", "citations": null});
    let blocks: Vec<Value> = vec![opaque.clone(), doc.clone(), fake.clone(), small.clone()];
    let mut s = Session::create(store.clone(), "p", reg()).unwrap();
    s.append(
        UserMessage {
            content: blocks
                .iter()
                .cloned()
                .map(ContentBlock::from_json)
                .collect(),
        },
        SurfaceOp::Append,
    )
    .unwrap();
    let tool_result = json!({"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "text", "text": "screenshot:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": big}}
    ]});
    s.append(
        AssistantMessage {
            content: vec![ContentBlock::tool_use("t1", "shot", json!({}))],
            usage: None,
            stop_reason: None,
            extra: Default::default(),
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.append(
        UserMessage {
            content: vec![ContentBlock::from_json(tool_result.clone())],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.flush().unwrap();
    let live = blocks_json(&mut s);
    let live_body = s.request_body(Provider::Anthropic);
    drop(s);
    let mut back = Session::open(store.clone(), "p", reg()).unwrap();
    let got = blocks_json(&mut back);
    assert_eq!(got, live);
    assert_eq!(got[0], blocks);
    assert_eq!(got[2], vec![tool_result.clone()]);
    assert_eq!(back.request_body(Provider::Anthropic), live_body);
    for p in [Provider::OpenAiResponses, Provider::OpenAiChat] {
        let _ = back.request_body(p); // resolves without error
    }
    // Out of line: the opaque block, the document, the escaped reference
    // and the tool result's image (4 blobs); the small text stays inline.
    assert_eq!(store.blobs().list().unwrap().len(), 4);
    let raw: Value = serde_json::from_slice(&store.read("p", 0).unwrap().payload).unwrap();
    assert_eq!(raw["v"], 1);
    assert_eq!(raw["data"]["content"][3], small);
    assert_eq!(raw["data"]["content"][0]["type"], "turnstone/blob");
    let raw: Value = serde_json::from_slice(&store.read("p", 2).unwrap().payload).unwrap();
    let inner = &raw["data"]["content"][0];
    assert_eq!(inner["type"], "tool_result", "{raw}");
    assert_eq!(inner["content"][1]["type"], "turnstone/blob");
    assert_eq!(session_blobs(&store, "p").unwrap().len(), 4);
}

#[test]
fn a_missing_or_damaged_blob_is_corruption_named_by_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let shot = b64(BLOB_THRESHOLD_DEFAULT * 2, 3);
    let mut s = Session::create(store.clone(), "d", reg()).unwrap();
    s.append(
        UserMessage {
            content: vec![ContentBlock::image_base64("image/png", shot)],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.flush().unwrap();
    drop(s);
    let h = store.blobs().list().unwrap()[0];
    let path = store.blobs().path(&h);
    let good = std::fs::read(&path).unwrap();
    let check = |why: &str| {
        let e = Session::open(store.clone(), "d", reg()).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{why}: {e}");
        assert!(e.to_string().contains(&hex(&h)), "{why}: {e}");
        let e = referenced_blobs(&store).unwrap_err();
        assert!(e.to_string().contains(&hex(&h)), "{why}: {e}");
    };
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 10] ^= 0x20;
    std::fs::write(&path, &bad).unwrap();
    check("damaged");
    std::fs::write(&path, &good[..n - 1]).unwrap();
    check("cut");
    std::fs::remove_file(&path).unwrap();
    check("missing");
    std::fs::write(&path, &good).unwrap();
    Session::open(store.clone(), "d", reg()).unwrap();
}

#[test]
fn a_block_over_the_payload_limit_is_stored_as_a_blob() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let huge = ContentBlock::text("x".repeat(17 << 20)); // over the 16 MiB payload limit
    let mut s = Session::create(store.clone(), "h", reg()).unwrap();
    s.append(
        UserMessage {
            content: vec![huge.clone()],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.flush().unwrap();
    drop(s);
    let mut s = Session::open(store.clone(), "h", reg()).unwrap();
    assert_eq!(s.derive_messages()[0].content[0], huge);
    // With blobs off the same event is refused as too large.
    store.blobs().set_threshold(usize::MAX);
    let e = s
        .append(
            UserMessage {
                content: vec![huge],
            },
            SurfaceOp::Append,
        )
        .unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
}

/// A session whose messages hold blob-backed blocks, opened from a state
/// snapshot (FORMAT.md §17): the messages the open reads back from the log
/// resolve their references like every other read, so the request is the
/// same as the one derived live and after a fold from seq 0.
#[test]
fn messages_restored_from_a_state_snapshot_resolve_their_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let big = b64(BLOB_THRESHOLD_DEFAULT + 1000, 7);
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    s.append(
        UserMessage {
            content: vec![
                ContentBlock::from_json(json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": big}}))
                ,
                ContentBlock::text("what is in it?"),
            ],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.append(
        AssistantMessage {
            content: vec![ContentBlock::text("a cat")],
            usage: None,
            stop_reason: None,
            extra: Default::default(),
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.flush().unwrap();
    assert!(
        !referenced_blobs(&store).unwrap().is_empty(),
        "the image went out of line"
    );
    let live = blocks_json(&mut s);
    let live_req = s.request_body(Provider::Anthropic);
    assert!(s.save_state_snapshot().unwrap());
    drop(s);
    let mut again = Session::open(store.clone(), "s", reg()).unwrap();
    assert_eq!(blocks_json(&mut again), live);
    assert_eq!(again.request_body(Provider::Anthropic), live_req);
}

/// `session::gc::collect` removes the blob files no live event references
/// (after the segments): a deleted session's own blobs go, a blob its live
/// fork inherits stays, a blob a live session shares stays; a dry run
/// reports the same and removes nothing; what is left reads back.
#[test]
fn collection_removes_the_blobs_no_live_event_references() {
    use turnstone::session::gc;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let image = |seed: u8| {
        ContentBlock::from_json(json!({"type": "image", "source": {"type": "base64",
            "media_type": "image/png", "data": b64(BLOB_THRESHOLD_DEFAULT + 100, seed)}}))
    };
    let user = |blocks| UserMessage { content: blocks };
    // a: an inherited image (1), then its own (2); b: its own (3) and a
    // shared one (4); c (live): the shared one (4).
    let mut a = Session::create(store.clone(), "a", reg()).unwrap();
    a.append(user(vec![image(1)]), SurfaceOp::Append).unwrap();
    a.flush().unwrap();
    let at = a.len();
    a.append(user(vec![image(2)]), SurfaceOp::Append).unwrap();
    a.flush().unwrap();
    let mut b = Session::create(store.clone(), "b", reg()).unwrap();
    b.append(user(vec![image(3), image(4)]), SurfaceOp::Append)
        .unwrap();
    b.flush().unwrap();
    let mut c = Session::create(store.clone(), "c", reg()).unwrap();
    c.append(user(vec![image(4)]), SurfaceOp::Append).unwrap();
    c.flush().unwrap();
    store.fork("a", at, "kid").unwrap();
    drop((a, b, c));
    let kid_before = blocks_json(&mut Session::open(store.clone(), "kid", reg()).unwrap());
    turnstone::session::delete(&store, "a").unwrap();
    turnstone::session::delete(&store, "b").unwrap();
    assert_eq!(store.blobs().list().unwrap().len(), 4);
    let live_expected = referenced_blobs(&store).unwrap();
    assert_eq!(
        live_expected.len(),
        2,
        "kid's inherited image and c's shared one"
    );
    Arc::try_unwrap(store).ok().unwrap().close().unwrap();

    let dry = gc::collect(
        dir.path(),
        &turnstone::gc::CollectOptions {
            dry_run: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((dry.blobs_examined, dry.blobs_removed), (4, 2));
    assert!(dry.blob_bytes_reclaimed > 2 * BLOB_THRESHOLD_DEFAULT as u64);
    let report = gc::collect(dir.path(), &Default::default()).unwrap();
    assert_eq!((report.blobs_examined, report.blobs_removed), (4, 2));
    assert_eq!(report.blob_bytes_reclaimed, dry.blob_bytes_reclaimed);

    let store = Arc::new(Store::open(dir.path()).unwrap());
    let left: std::collections::BTreeSet<[u8; 32]> =
        store.blobs().list().unwrap().into_iter().collect();
    assert_eq!(left, live_expected);
    assert_eq!(
        blocks_json(&mut Session::open(store.clone(), "kid", reg()).unwrap()),
        kid_before
    );
    let c_blocks = blocks_json(&mut Session::open(store.clone(), "c", reg()).unwrap());
    assert_eq!(c_blocks.len(), 1);
    // A second collection finds nothing more to remove.
    Arc::try_unwrap(store).ok().unwrap().close().unwrap();
    let again = gc::collect(dir.path(), &Default::default()).unwrap();
    assert_eq!((again.blobs_examined, again.blobs_removed), (2, 0));
}

fn big_image(seed: u8) -> ContentBlock {
    ContentBlock::from_json(json!({"type": "image", "source": {"type": "base64",
        "media_type": "image/png", "data": b64(BLOB_THRESHOLD_DEFAULT + 100, seed)}}))
}

#[test]
fn an_online_collection_removes_the_blobs_no_live_event_references() {
    use turnstone::session::gc;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let user = |blocks| UserMessage { content: blocks };
    // a (deleted): its own image (1) and a shared one (2); b (live): the
    // shared one; kid: a fork of a that inherits image 3.
    let mut a = Session::create(store.clone(), "a", reg()).unwrap();
    a.append(user(vec![big_image(3)]), SurfaceOp::Append)
        .unwrap();
    a.flush().unwrap();
    let at = a.len();
    a.append(user(vec![big_image(1), big_image(2)]), SurfaceOp::Append)
        .unwrap();
    a.flush().unwrap();
    let mut b = Session::create(store.clone(), "b", reg()).unwrap();
    b.append(user(vec![big_image(2)]), SurfaceOp::Append)
        .unwrap();
    b.flush().unwrap();
    store.fork("a", at, "kid").unwrap();
    drop(a);
    turnstone::session::delete(&store, "a").unwrap();
    assert_eq!(store.blobs().list().unwrap().len(), 3);
    let live = referenced_blobs(&store).unwrap();
    let report = gc::collect_live(&store, &Default::default(), &Default::default()).unwrap();
    assert_eq!((report.blobs_examined, report.blobs_removed), (3, 1));
    let left: std::collections::BTreeSet<[u8; 32]> =
        store.blobs().list().unwrap().into_iter().collect();
    assert_eq!(left, live);
    // The store stays open and usable: b appends image 1 again (its file
    // was removed: written again), and everything reads back.
    b.append(user(vec![big_image(1)]), SurfaceOp::Append)
        .unwrap();
    b.flush().unwrap();
    assert_eq!(store.blobs().list().unwrap().len(), 3);
    let blocks = blocks_json(&mut b);
    assert_eq!(blocks[1][0], big_image(1).to_json());
    drop(b);
    assert_eq!(
        blocks_json(&mut Session::open(store.clone(), "kid", reg()).unwrap())[0][0],
        big_image(3).to_json()
    );
    let again = gc::collect_live(&store, &Default::default(), &Default::default()).unwrap();
    assert_eq!((again.blobs_examined, again.blobs_removed), (3, 0));
}

/// Writers keep appending messages that re-send one of a few images (a
/// blob file reused by many events) while sessions are deleted and a
/// collector sweeps blobs as fast as it can: no event ever loses its blob,
/// and the sweeps do remove the blobs that stop being referenced.
#[test]
fn writers_reusing_blobs_while_a_collector_sweeps_never_lose_one() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use turnstone::session::gc;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let collector = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut removed = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = gc::collect_live(&store, &Default::default(), &Default::default())
                    .expect("an online collection");
                removed += r.blobs_removed;
            }
            removed
        })
    };
    let writers: Vec<_> = (0..3u8)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..40u32 {
                    let id = format!("w{w}-{i}");
                    let mut s = Session::create(store.clone(), &id, reg()).unwrap();
                    // Four images in all, each re-sent by many sessions.
                    let img = ((i as u8).wrapping_mul(7) + w) % 4;
                    s.append(
                        UserMessage {
                            content: vec![ContentBlock::text(id.clone()), big_image(img)],
                        },
                        SurfaceOp::Append,
                    )
                    .unwrap();
                    s.flush().unwrap();
                    drop(s);
                    live.push((id, img));
                    // Most sessions go again soon: their images stop being
                    // referenced unless another session re-sends them.
                    if i % 4 != 0 {
                        let (gone, _) = live.remove(0);
                        turnstone::session::delete(&store, &gone).unwrap();
                    }
                }
                live
            })
        })
        .collect();
    let live: Vec<(String, u8)> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    let removed = collector.join().unwrap();
    for (id, img) in &live {
        let blocks = blocks_json(&mut Session::open(store.clone(), id, reg()).unwrap());
        assert_eq!(blocks[0][1], big_image(*img).to_json(), "{id}");
    }
    // Deleting the last sessions and collecting frees every blob.
    for (id, _) in &live {
        turnstone::session::delete(&store, id).unwrap();
    }
    let last = gc::collect_live(&store, &Default::default(), &Default::default()).unwrap();
    assert!(store.blobs().list().unwrap().is_empty());
    eprintln!(
        "{} live sessions checked; the concurrent sweeps removed {removed} blob files, the last one {}",
        live.len(),
        last.blobs_removed
    );
}

/// Blob files go through the store's file system, so the power-cut
/// simulator covers them like segments: at every crash point of a session
/// that appends events holding out-of-line images and waits for each,
/// every acknowledged event is there after the reboot with its image read
/// back whole, and whatever else survived reads back too (an event is
/// appended only after its blob is durable) or is gone. Before blobs used
/// the store's `Vfs` they went to the real disk behind the simulator's
/// back (and this test wrote `/store/blobs` there).
#[test]
fn every_power_cut_keeps_the_blobs_of_acknowledged_events() {
    use turnstone::sim::{FaultPlan, SimVfs};
    use turnstone::vfs::Vfs;
    let dir = Path::new("/store");
    let opts = |sim: &SimVfs| turnstone::Options {
        vfs: Arc::new(sim.clone()),
        segment_bytes: 1 << 20,
        ..Default::default()
    };
    const IMAGES: u8 = 3;
    // `acked`: the images whose event's durability wait returned.
    let script = |s: &mut Session, acked: &mut usize| -> turnstone::Result<()> {
        for k in 0..IMAGES {
            s.append(
                UserMessage {
                    content: vec![ContentBlock::text(format!("image {k}")), big_image(k)],
                },
                SurfaceOp::Append,
            )?;
            s.flush()?;
            *acked += 1;
        }
        Ok(())
    };
    // The operations one run takes, without faults.
    let sim = SimVfs::new();
    let store = Arc::new(Store::open_with(dir, opts(&sim)).unwrap());
    let mut s = Session::create(store.clone(), "s", reg()).unwrap();
    s.flush().unwrap();
    let start = sim.ops();
    script(&mut s, &mut 0).unwrap();
    let total = sim.ops() - start;
    drop(s);
    drop(store);
    assert!(total > 10, "{total} operations");
    assert!(
        sim.list(&dir.join("blobs")).unwrap().len() >= IMAGES as usize,
        "the blobs are files of the simulated store"
    );

    let mut full_runs = 0;
    for cut in 0..=total {
        let sim = SimVfs::new();
        let store = Arc::new(Store::open_with(dir, opts(&sim)).unwrap());
        let mut s = Session::create(store.clone(), "s", reg()).unwrap();
        s.flush().unwrap();
        sim.set_faults(FaultPlan {
            power_cut_after_ops: Some(sim.ops() + cut),
            ..Default::default()
        });
        let mut acked = 0;
        if script(&mut s, &mut acked).is_ok() {
            full_runs += 1;
        }
        drop(s);
        drop(store);
        sim.crash(cut);
        let store = Arc::new(Store::open_with(dir, opts(&sim)).unwrap());
        let mut s = match Session::open(store.clone(), "s", reg()) {
            Ok(s) => s,
            // Nothing of it was durable (a session is written with its
            // first event).
            Err(Error::UnknownSession(_)) if acked == 0 => continue,
            Err(e) => panic!("cut {cut}: the session opens: {e}"),
        };
        let got = blocks_json(&mut s);
        assert!(got.len() >= acked, "cut {cut}: acknowledged images lost");
        for (k, m) in got.iter().enumerate() {
            assert_eq!(m[0], json!({"type": "text", "text": format!("image {k}")}));
            assert_eq!(m[1], big_image(k as u8).to_json(), "cut {cut}: image {k}");
        }
    }
    assert!(full_runs > 0, "the last cut lets the script finish");
    assert!(
        !Path::new("/store").exists(),
        "nothing written to the real disk"
    );
}
