//! `import` and `restore` of a session larger than one 32 MiB commit batch
//! (issue 39 §10): it succeeds, it stays atomic when the process is killed
//! mid-import, and an image re-sent 40 times is kept once.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::*;
use serde_json::{json, Value};

/// Write a JSONL import file of `n` user messages, each `text` bytes of
/// text (`image`: also one base64 image block, the same in every line).
fn write_jsonl(path: &Path, n: usize, text: usize, image: Option<&str>) {
    let mut out = String::new();
    for i in 0..n {
        let mut content =
            vec![json!({"type": "text", "text": format!("{i:06} {}", "t".repeat(text))})];
        if let Some(data) = image {
            content.push(json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}));
        }
        let line = json!({"seq": i, "kind": "user/message", "data": {"content": content}, "surface": {"op": "append"}, "ts": 1_000 + i});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// The events `export` prints for `session`, or `None` if it does not exist.
fn export(dir: &Path, session: &str) -> Option<Vec<Value>> {
    let out = turnstone(&["export", p(dir), "--session", session]);
    if code(&out) != 0 {
        assert!(
            stderr(&out).contains("not found") || stderr(&out).contains("no session"),
            "{}",
            stderr(&out)
        );
        return None;
    }
    Some(json_lines(&out))
}

fn listed(dir: &Path) -> Vec<String> {
    let out = turnstone(&["sessions", p(dir), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    json_lines(&out)
        .iter()
        .map(|v| v["id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn an_image_resent_40_times_is_imported_and_kept_once() {
    let tmp = tempfile::tempdir().unwrap();
    let image: String = (0..(1 << 20))
        .map(|i| (b'A' + (i % 26) as u8) as char)
        .collect();
    let jsonl = tmp.path().join("s.jsonl");
    write_jsonl(&jsonl, 40, 100, Some(&image));
    assert!(std::fs::metadata(&jsonl).unwrap().len() > 40 << 20);
    let dir = tmp.path().join("store");
    let out = turnstone(&["import", p(&dir), p(&jsonl)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let events = export(&dir, "s").expect("imported");
    assert_eq!(events.len(), 41, "40 messages and session/end-seed");
    assert_eq!(
        events[39]["data"]["content"][1]["source"]["data"],
        json!(image)
    );
    assert_eq!(events[39]["ts"], json!(1_039));
    // The image is one blob file; the log holds references.
    let blobs: Vec<_> = walk(&dir.join("blobs"));
    assert_eq!(blobs.len(), 1, "{blobs:?}");
    let log_bytes: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(log_bytes < 4 << 20, "{log_bytes} bytes of segments");
    assert_eq!(listed(&dir), vec!["s".to_string()]);
    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));

    // An archive of it restores whole into another store.
    let arc = tmp.path().join("s.tsarc");
    let out = turnstone(&["archive", p(&dir), "--session", "s", "--out", p(&arc)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let other = tmp.path().join("other");
    let out = turnstone(&["restore", p(&other), p(&arc)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(export(&other, "s"), Some(events));
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

#[test]
fn an_import_over_one_batch_killed_at_any_moment_is_whole_or_absent() {
    let tmp = tempfile::tempdir().unwrap();
    // 36,000 messages of ~1 KiB: over 32 MiB of frames, none out of line.
    let n = 36_000;
    let jsonl = tmp.path().join("big.jsonl");
    write_jsonl(&jsonl, n, 1_000, None);
    let dir = tmp.path().join("store");
    // One import to completion, timed: the kills below spread over it.
    let t = Instant::now();
    let out = turnstone(&["import", p(&dir), p(&jsonl), "--session", "whole"]);
    let took = t.elapsed();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let whole = export(&dir, "whole").expect("imported");
    assert_eq!(whole.len(), n + 1);
    let mut seen_absent = 0;
    for k in 1..=6u32 {
        let id = format!("killed-{k}");
        let mut child = Command::new(BIN)
            .args(["import", p(&dir), p(&jsonl), "--session", &id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(took * k / 7);
        child.kill().unwrap();
        child.wait().unwrap();
        match export(&dir, &id) {
            None => seen_absent += 1,
            Some(events) => {
                assert_eq!(events.len(), n + 1, "{id} is whole");
                // The marker's ts is the time of each import.
                assert!(events[..n] == whole[..n], "{id} differs");
            }
        }
    }
    assert!(seen_absent > 0, "no kill landed inside an import");
    // The next import deletes what the killed ones staged: every listed
    // session is whole.
    let out = turnstone(&["import", p(&dir), p(&jsonl), "--session", "after"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for id in listed(&dir) {
        assert!(!id.starts_with(".staging/"), "{id} left listed");
        assert_eq!(export(&dir, &id).map(|e| e.len()), Some(n + 1), "{id}");
    }
    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

/// A staging session an interrupted import left (a crash between its
/// batches) is deleted by `turnstone recover`, which says so; the store's
/// other sessions are untouched.
#[test]
fn recover_deletes_a_staging_session_an_interrupted_import_left() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let file = tmp.path().join("small.jsonl");
    write_jsonl(&file, 3, 10, None);
    let out = turnstone(&["import", p(&dir), p(&file), "--session", "kept"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // What a crash after the first batch of a staged import leaves.
    let leftover = format!("{}1-2-3", turnstone::session::STAGING_PREFIX);
    {
        use turnstone::session::{ContentBlock, Registry, Session, SurfaceOp, UserMessage};
        let store = std::sync::Arc::new(turnstone::Store::open(&dir).unwrap());
        let mut s = Session::create(
            store.clone(),
            &leftover,
            std::sync::Arc::new(Registry::new()),
        )
        .unwrap();
        s.append(
            UserMessage {
                content: vec![ContentBlock::text("half an import")],
            },
            SurfaceOp::Append,
        )
        .unwrap();
        s.flush().unwrap();
        drop(s);
        std::sync::Arc::try_unwrap(store).unwrap().close().unwrap();
    }
    assert!(
        listed(&dir).contains(&leftover),
        "listed before: {:?}",
        listed(&dir)
    );
    let out = turnstone(&["recover", p(&dir), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json_one(&out);
    assert_eq!(report["staging_deleted"], json!([leftover]), "{report}");
    assert_eq!(listed(&dir), ["kept"]);
    let out = turnstone(&["recover", p(&dir)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !stdout(&out).contains("staging"),
        "nothing left to say: {}",
        stdout(&out)
    );
}
