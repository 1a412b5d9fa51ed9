//! `dump` in detail: filters, --raw, colours, a lone segment file, and
//! --follow on a store a live fleet process is writing.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

#[test]
fn filters_raw_colours_and_lone_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 2500, &[]);
    let (all_lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 0);
    let all = frames(&all_lines);
    let of =
        |s: &str| -> Vec<&Value> { all.iter().filter(|f| f["session"] == s).copied().collect() };

    // --session, --from-seq/--to-seq (both ends included).
    let (lines, _) = dump_json(
        &dir,
        &[
            "--session",
            "sess-000005",
            "--from-seq",
            "10",
            "--to-seq",
            "20",
        ],
    );
    let got: Vec<u64> = frames(&lines)
        .iter()
        .map(|f| f["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(got, (10..=20).collect::<Vec<u64>>());
    assert!(frames(&lines).iter().all(|f| f["session"] == "sess-000005"));
    let want: Vec<&Value> = of("sess-000005")[10..=20].to_vec();
    assert_eq!(frames(&lines), want);
    let (lines, _) = dump_json(&dir, &["--from-seq", "30"]);
    assert!(frames(&lines)
        .iter()
        .all(|f| f["seq"].as_u64().unwrap() >= 30));
    assert_eq!(
        frames(&lines).len(),
        all.iter()
            .filter(|f| f["seq"].as_u64().unwrap() >= 30)
            .count()
    );

    // --kind: names, codes, plugin kinds; session/define only when asked.
    let (lines, _) = dump_json(&dir, &["--kind", "tool/call,9,fleet/usage"]);
    let fr = frames(&lines);
    assert!(!fr.is_empty());
    assert!(fr.iter().all(|f| matches!(
        f["kind"].as_str().unwrap(),
        "tool/call" | "tool/result" | "fleet/usage"
    )));
    assert_eq!(
        fr.len(),
        all.iter()
            .filter(|f| matches!(
                f["kind"].as_str().unwrap(),
                "tool/call" | "tool/result" | "fleet/usage"
            ))
            .count()
    );
    assert!(fr
        .iter()
        .any(|f| f["kind"] == "fleet/usage" && f["ignorable"] == true));
    let (lines, _) = dump_json(&dir, &["--kind", "session/define"]);
    let defs = frames(&lines);
    assert_eq!(defs.len(), 16);
    for d in &defs {
        assert_eq!(d["data"]["name"], d["session"]);
        assert!(d["data"]["parent"].is_null());
    }
    assert!(all.iter().all(|f| f["kind"] != "session/define"));
    // Message events carry their content blocks; empty = empty message.
    for f in all.iter().filter(|f| f["kind"] == "assistant/message") {
        let c = f["data"]["content"].as_array().unwrap();
        if let Some(tu) = c.iter().find(|b| b["type"] == "tool_use") {
            assert_eq!(tu["name"], "shell");
            assert!(tu["id"].as_str().unwrap().starts_with("call-"));
        }
    }

    // Text: one line per frame plus defines and segment headers; no colour
    // when piped, colour when forced.
    let out = turnstone(&["dump", p(&dir), "--session", "sess-000005"]);
    let text = stdout(&out);
    assert!(!text.contains('\x1b'));
    let frame_lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("== ")).collect();
    assert_eq!(frame_lines.len(), of("sess-000005").len() + 1);
    assert!(frame_lines[0].contains("session/define"));
    assert!(frame_lines[1].contains("seq 0") && frame_lines[1].contains("turn/start"));
    let seg_line = text.lines().find(|l| l.starts_with("== segment")).unwrap();
    for part in ["format 1", "65536 bytes", "frames 1:", "first batch 0"] {
        assert!(seg_line.contains(part), "{seg_line}");
    }
    let out = turnstone(&["dump", p(&dir), "--color", "always", "--kind", "tool/call"]);
    assert!(stdout(&out).contains("\x1b[33mtool/call"));

    // --raw: header fields and hex that match the bytes in the file.
    let segs = segment_files(&dir);
    let out = turnstone(&["dump", p(&segs[0]), "--raw"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(text.contains("segment header: magic \"TSTNSEG.\" version 1 header_bytes 64"));
    assert!(text.contains("batch header @64: body_len "));
    assert!(text.contains("frame header: frame_len "));
    let bytes = std::fs::read(&segs[0]).unwrap();
    let mut checked = 0;
    for l in text.lines().map(str::trim_start) {
        let Some((addr, rest)) = l.split_once(": ") else {
            continue;
        };
        let Ok(addr) = usize::from_str_radix(addr, 16) else {
            continue;
        };
        if addr % 16 != 0 || rest.len() < 40 {
            continue;
        }
        let hex: String = rest[..40].split_whitespace().collect();
        let want: String = bytes[addr..(addr + hex.len() / 2)]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, want, "hex line {l}");
        checked += 1;
    }
    assert!(checked > 100, "{checked}");

    // A lone segment copied elsewhere: sessions defined in earlier segments
    // are shown by compact id; frames are the same.
    let lone = tmp.path().join("lone");
    std::fs::create_dir(&lone).unwrap();
    let copy = lone.join(segs[2].file_name().unwrap());
    std::fs::copy(&segs[2], &copy).unwrap();
    let (lines, rc) = dump_json(&copy, &[]);
    assert_eq!(rc, 0, "{lines:?}");
    let in_store: Vec<&Value> = all
        .iter()
        .filter(|f| f["segment"].as_str() == segs[2].to_str())
        .copied()
        .collect();
    let lone_fr = frames(&lines);
    assert_eq!(lone_fr.len(), in_store.len());
    // A session created late (the fleet's threads race) may be defined in
    // this very segment: that one keeps its name.
    let (define_lines, rc) = dump_json(&dir, &["--kind", "session/define"]);
    assert_eq!(rc, 0);
    assert!(
        define_lines
            .iter()
            .any(|f| f["kind"] == "session/define" && f["segment"].is_string()),
        "{define_lines:?}"
    );
    let defined_here: Vec<&Value> = define_lines
        .iter()
        .filter(|f| f["kind"] == "session/define" && f["segment"].as_str() == segs[2].to_str())
        .map(|f| &f["session"])
        .collect();
    let mut by_id = 0;
    for (a, b) in lone_fr.iter().zip(&in_store) {
        assert_eq!(
            (&a["seq"], &a["kind"], &a["offset"], &a["data"]),
            (&b["seq"], &b["kind"], &b["offset"], &b["data"])
        );
        if defined_here.contains(&&b["session"]) {
            assert_eq!(a["session"], b["session"]);
        } else {
            assert!(a["session"].as_str().unwrap().starts_with('#'), "{a}");
            by_id += 1;
        }
    }
    assert!(by_id > 0, "the segment holds frames of earlier sessions");
}

#[test]
fn follow_prints_what_a_live_fleet_appends() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 100, &[]);
    let mut follow = Command::new(BIN)
        .args(["dump", p(&dir), "--follow", "--json", "--interval-ms", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        let out = follow.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                lines.lock().unwrap().push(l.unwrap());
            }
        })
    };
    // A live writer (another process holding the lock) appends.
    let writer = Command::new(BIN)
        .args(["fleet", p(&dir), "--sessions", "16", "--threads", "4"])
        .args(["--events", "2000", "--segment-bytes", "65536"])
        .output()
        .unwrap();
    assert_eq!(code(&writer), 0, "{}", stderr(&writer));
    let (want, _) = dump_json(&dir, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while lines.lock().unwrap().len() < want.len() {
        assert!(Instant::now() < deadline, "follow fell behind");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Stop it like a person would: Ctrl-C.
    unsafe {
        libc::kill(follow.id() as i32, libc::SIGINT);
    }
    let status = follow.wait().unwrap();
    reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "stopped cleanly on SIGINT");
    let got: Vec<Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got, want, "followed frames equal a dump afterwards");
    assert!(segment_files(&dir).len() > 3, "the writer rolled segments");
}

/// A recycled segment (FORMAT.md §6.2 rule 7) is named as one, its flags are
/// shown in `--raw`, and the stale bytes after its end of data are neither
/// frames nor damage.
#[test]
fn a_recycled_segment_is_shown_as_one() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../format-spec/vectors/recycled-segment");
    let out = turnstone(&["dump", p(&dir), "--raw"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("segment 2, first batch 1, previous segment ended at 160, recycled"),
        "{text}"
    );
    assert!(
        text.contains(
            "segment 2 last_segment 0 first_batch_seq 1 prev_segment_end 160 segment_flags 0x1"
        ),
        "{text}"
    );
    assert!(text.contains("segment_flags 0x0"), "{text}");
    assert!(
        !text.contains("torn") && !text.contains("corrupt"),
        "{text}"
    );
    let out = turnstone(&["verify", p(&dir), "--json"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert!(
        stdout(&out).contains("\"recycled\":true"),
        "{}",
        stdout(&out)
    );
}
