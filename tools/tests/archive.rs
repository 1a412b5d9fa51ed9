//! `turnstone archive` and `restore` (issue 17 §4, FORMAT.md §16), and
//! blob-backed sessions seen through the CLI (§15).

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

fn export_text(dir: &Path, session: &str) -> String {
    let out = turnstone(&["export", p(dir), "--session", session]);
    assert_eq!(code(&out), 0, "export {session}: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn archive_delete_restore_round_trip_with_original_seqs_and_ts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 800, &[]);
    let s = "sess-000002";
    let before = export_text(&dir, s);
    let msgs = messages(&dir, s);
    let file = tmp.path().join("s2.tsarc");
    let out = turnstone(&[
        "archive",
        p(&dir),
        "--session",
        s,
        "--out",
        p(&file),
        "--delete",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(file.exists());
    assert!(!tmp.path().join("s2.tsarc.partial").exists());
    // Deleted from the store.
    let out = turnstone(&["messages", p(&dir), "--session", s, "--json"]);
    assert_ne!(code(&out), 0);
    // An archive is never overwritten.
    let out = turnstone(&[
        "archive",
        p(&dir),
        "--session",
        "sess-000003",
        "--out",
        p(&file),
    ]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert!(stderr(&out).contains("exists"), "{}", stderr(&out));
    // Readable as a lone file.
    let out = turnstone(&["verify", p(&file), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json_one(&out);
    assert_eq!(v["ok"], true);
    assert_eq!(v["events"], before.lines().count());
    let out = turnstone(&["dump", p(&file), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let recs = json_lines(&out);
    assert_eq!(recs.len(), before.lines().count());
    assert!(recs.iter().enumerate().all(|(i, r)| r["seq"] == i));
    // The name is never reused in the store it was deleted from.
    let out = turnstone(&["restore", p(&dir), p(&file)]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("already has a session") && stderr(&out).contains("deleted"),
        "{}",
        stderr(&out)
    );
    // Under another id: the same events, seqs and ts.
    let out = turnstone(&["restore", p(&dir), p(&file), "--session", "back"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(export_text(&dir, "back"), before);
    assert_eq!(messages(&dir, "back"), msgs);
    // Into another store under its own name.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let out = turnstone(&["restore", p(&other), p(&file)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(export_text(&other, s), before);
    assert_eq!(messages(&other, s), msgs);
    let out = turnstone(&["verify", p(&other)]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    // Restoring again where the name exists (not deleted) is refused too.
    let out = turnstone(&["restore", p(&other), p(&file)]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
}

#[test]
fn a_fork_is_archived_with_its_inherited_history() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 800, &[]);
    let out = turnstone(&[
        "fork",
        p(&dir),
        "--session",
        "sess-000001",
        "--child",
        "kid",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let before = export_text(&dir, "kid");
    assert!(!before.is_empty());
    let file = tmp.path().join("kid.tsarc");
    let out = turnstone(&["archive", p(&dir), "--session", "kid", "--out", p(&file)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let out = turnstone(&["restore", p(&other), p(&file)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(export_text(&other, "kid"), before);
    assert_eq!(messages(&other, "kid"), messages(&dir, "kid"));
}

#[test]
fn a_damaged_archive_is_refused_with_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 400, &[]);
    let file = tmp.path().join("a.tsarc");
    let out = turnstone(&[
        "archive",
        p(&dir),
        "--session",
        "sess-000001",
        "--out",
        p(&file),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let good = std::fs::read(&file).unwrap();
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    for (what, bytes) in [
        ("flipped", {
            let mut b = good.clone();
            let i = b.len() / 2;
            b[i] ^= 0x10;
            b
        }),
        ("cut", good[..good.len() - 40].to_vec()),
    ] {
        std::fs::write(&file, &bytes).unwrap();
        let out = turnstone(&["restore", p(&other), p(&file)]);
        assert_eq!(code(&out), 1, "{what}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(
            err.contains(p(&file)) && err.contains("offset") && err.contains("corruption"),
            "{what}: {err}"
        );
        // Nothing was restored.
        let out = turnstone(&["sessions", p(&other), "--json"]);
        assert!(json_lines(&out).is_empty(), "{what}");
        let out = turnstone(&["verify", p(&file), "--json"]);
        assert_eq!(code(&out), 1, "{what}");
        let v = json_one(&out);
        assert_eq!(v["ok"], false);
        assert!(v["problems"][0]["offset"].as_u64().is_some(), "{v}");
        assert_eq!(v["problems"][0]["file"], p(&file));
        let out = turnstone(&["dump", p(&file)]);
        assert_eq!(code(&out), 1, "{what}");
    }
}

#[test]
fn blob_backed_sessions_through_import_export_dump_and_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    std::fs::create_dir(&dir).unwrap();
    // One image of 400 KB (over the 256 KiB threshold) sent in 30 requests.
    let data: String = (0..400_000)
        .map(|i| (b'A' + (i * 7 % 26) as u8) as char)
        .collect();
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}});
    let mut lines = Vec::new();
    for i in 0..30u64 {
        lines.push(json!({"seq": 2 * i, "kind": "user/message", "data": {"content": [{"type": "text", "text": format!("shot {i}")}, image]}, "surface": {"op": "append"}, "ts": 1_700_000_000_000u64 + i}));
        lines.push(json!({"seq": 2 * i + 1, "kind": "assistant/message", "data": {"content": [{"type": "text", "text": "seen"}]}, "surface": {"op": "append"}, "ts": 1_700_000_000_000u64 + i}));
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let file = tmp.path().join("shots.jsonl");
    std::fs::write(&file, &text).unwrap();
    let out = turnstone(&["import", p(&dir), p(&file)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Stored once.
    let blobs: Vec<_> = std::fs::read_dir(dir.join("blobs")).unwrap().collect();
    assert_eq!(blobs.len(), 1);
    // Export resolves: the lines come back as imported (and the marker).
    let back = export_text(&dir, "shots");
    let back: Vec<Value> = back
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(&back[..lines.len()], &lines[..]);
    // dump shows the reference; with --blobs, the block.
    let (frames, rc) = dump_json(&dir, &["--session", "shots", "--kind", "user/message"]);
    assert_eq!(rc, 0);
    assert_eq!(frames[0]["data"]["content"][1]["type"], "turnstone/blob");
    let (frames, rc) = dump_json(
        &dir,
        &["--session", "shots", "--kind", "user/message", "--blobs"],
    );
    assert_eq!(rc, 0);
    assert_eq!(frames[0]["data"]["content"][1], image);
    // messages resolve.
    let msgs = messages(&dir, "shots");
    assert_eq!(msgs[0]["content"][1], image);
    // The archive carries the blob once; a restore elsewhere brings it.
    let arc = tmp.path().join("shots.tsarc");
    let out = turnstone(&["archive", p(&dir), "--session", "shots", "--out", p(&arc)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let size = std::fs::metadata(&arc).unwrap().len();
    assert!(size < 2 * data.len() as u64, "archive of {size} bytes");
    let v = json_one(&turnstone(&["verify", p(&arc), "--json"]));
    assert_eq!(v["blobs"], 1);
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let out = turnstone(&["restore", p(&other), p(&arc)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(messages(&other, "shots"), msgs);
    assert_eq!(std::fs::read_dir(other.join("blobs")).unwrap().count(), 1);
    // A store whose blob is gone: reads name the blob's hash.
    let blob = std::fs::read_dir(other.join("blobs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let hash = blob.file_stem().unwrap().to_str().unwrap().to_string();
    let v = json_one(&turnstone(&["verify", p(&other), "--json"]));
    assert_eq!(
        (v["ok"].clone(), v["blobs"].clone()),
        (json!(true), json!(1)),
        "{v}"
    );
    // verify checks every blob: a damaged one, then a missing one.
    let good = std::fs::read(&blob).unwrap();
    let mut bad = good.clone();
    let n = bad.len();
    bad[n / 2] ^= 1;
    std::fs::write(&blob, &bad).unwrap();
    let out = turnstone(&["verify", p(&other), "--json"]);
    assert_eq!(code(&out), 1);
    let v = json_one(&out);
    assert_eq!(v["blob_problems"][0]["blob"], hash.as_str(), "{v}");
    std::fs::remove_file(&blob).unwrap();
    let out = turnstone(&["verify", p(&other), "--json"]);
    assert_eq!(code(&out), 1);
    let v = json_one(&out);
    assert_eq!(v["blobs"], 0);
    assert_eq!(v["blob_problems"][0]["blob"], hash.as_str(), "{v}");
    assert!(
        v["blob_problems"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("missing"),
        "{v}"
    );
    let out = turnstone(&["messages", p(&other), "--session", "shots"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains(&hash), "{}", stderr(&out));
    let out = turnstone(&["export", p(&other), "--session", "shots"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains(&hash), "{}", stderr(&out));
}
