//! End-to-end tests of the `turnstone` binary: fleet, verify, dump, damage.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn turnstone(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_turnstone"))
        .args(args)
        .output()
        .expect("run turnstone");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "turnstone {args:?} panicked: {stderr}"
    );
    out
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exit code")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Run `fleet` and return its JSON line.
fn fleet(dir: &Path, events: u64, extra: &[&str]) -> Value {
    let events = events.to_string();
    let mut args = vec![
        "fleet",
        p(dir),
        "--sessions",
        "16",
        "--threads",
        "4",
        "--events",
        &events,
        "--segment-bytes",
        "65536",
    ];
    args.extend_from_slice(extra);
    let out = turnstone(&args);
    assert_eq!(code(&out), 0, "fleet failed: {}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "fleet prints one line: {text}");
    serde_json::from_str(lines[0]).expect("fleet line is JSON")
}

/// `dump --json` lines, parsed, and the exit code.
fn dump_json(target: &Path, extra: &[&str]) -> (Vec<Value>, i32) {
    let mut args = vec!["dump", p(target), "--json"];
    args.extend_from_slice(extra);
    let out = turnstone(&args);
    let lines = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect();
    (lines, code(&out))
}

fn frames(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|v| v.get("seq").is_some()).collect()
}

fn problems(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|v| v.get("problem").is_some())
        .collect()
}

/// Per session: the seqs in log order.
fn seqs_by_session(frames: &[&Value]) -> HashMap<String, Vec<u64>> {
    let mut m: HashMap<String, Vec<u64>> = HashMap::new();
    for f in frames {
        m.entry(f["session"].as_str().unwrap().to_string())
            .or_default()
            .push(f["seq"].as_u64().unwrap());
    }
    m
}

fn assert_dense(m: &HashMap<String, Vec<u64>>) {
    for (s, seqs) in m {
        let want: Vec<u64> = (0..seqs.len() as u64).collect();
        assert_eq!(seqs, &want, "session {s} seqs are not dense 0..n");
    }
}

fn check_fleet_line(v: &Value, events: u64) {
    assert_eq!(v["events"].as_u64(), Some(events), "{v}");
    let syncs = v["syncs"].as_u64().unwrap();
    assert!(syncs > 0, "{v}");
    let eps = v["events_per_sync"].as_f64().unwrap();
    let want = events as f64 / syncs as f64;
    assert!((eps - want).abs() < 1e-6 * want.max(1.0), "{v}");
    assert!(v["bytes"].as_u64().unwrap() > events * 50, "{v}");
    assert!(v["events_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["mb_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["ack_p99_us"].as_u64().unwrap() >= v["ack_p50_us"].as_u64().unwrap());
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tseg"))
        .collect();
    v.sort();
    v
}

#[test]
fn fleet_reopen_dump_verify_and_ack_ledger() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let ledger = tmp.path().join("acks.txt");
    let ledger_arg = ["--ack-ledger", p(&ledger), "--seed", "7"];

    let first = fleet(&dir, 3000, &ledger_arg);
    check_fleet_line(&first, 3000);
    let (lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 0);
    assert!(problems(&lines).is_empty());
    let before = seqs_by_session(&frames(&lines));
    assert_eq!(frames(&lines).len(), 3000);
    assert_eq!(before.len(), 16);
    assert_dense(&before);

    // Reopen: sessions continue, seqs continue densely.
    let second = fleet(&dir, 3000, &ledger_arg);
    check_fleet_line(&second, 3000);
    let (lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 0);
    let all = frames(&lines);
    assert_eq!(all.len(), 6000);
    let after = seqs_by_session(&all);
    assert_eq!(after.len(), 16);
    assert_dense(&after);
    for (s, seqs) in &before {
        assert!(after[s].len() > seqs.len(), "session {s} did not continue");
    }
    assert!(segment_files(&dir).len() > 3, "several segments");

    // verify: clean.
    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("6000 events"), "{}", stdout(&out));
    let out = turnstone(&["verify", p(&dir), "--json"]);
    assert_eq!(code(&out), 0);
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["status"], "clean");
    assert_eq!(v["events"], 6000);

    // Every frame's offset and len agree with the bytes of its segment.
    let mut files: HashMap<String, Vec<u8>> = HashMap::new();
    for f in &all {
        let seg = f["segment"].as_str().unwrap();
        let bytes = files
            .entry(seg.to_string())
            .or_insert_with(|| std::fs::read(seg).unwrap());
        let off = f["offset"].as_u64().unwrap() as usize;
        let len = f["len"].as_u64().unwrap();
        let frame_len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap());
        assert_eq!(frame_len as u64, len, "{f}");
        let seq = u64::from_le_bytes(bytes[off + 16..off + 24].try_into().unwrap());
        assert_eq!(seq, f["seq"].as_u64().unwrap(), "{f}");
        assert!(f["data"].is_object(), "payloads are JSON objects: {f}");
        assert_eq!(f["ignorable"], false);
    }
    let kinds: std::collections::HashSet<&str> =
        all.iter().map(|f| f["kind"].as_str().unwrap()).collect();
    for k in [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/chunk",
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
    ] {
        assert!(kinds.contains(k), "kind {k} missing: {kinds:?}");
    }

    // The ack ledger only names events that are in the store.
    let present: std::collections::HashSet<(String, u64)> = all
        .iter()
        .map(|f| {
            (
                f["session"].as_str().unwrap().to_string(),
                f["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    let text = std::fs::read_to_string(&ledger).unwrap();
    assert!(text.lines().count() > 20, "ledger has acks: {text}");
    for line in text.lines() {
        let (s, seq) = line.split_once(' ').expect("SESSION SEQ");
        let seq: u64 = seq.parse().expect("numeric seq");
        assert!(
            present.contains(&(s.to_string(), seq)),
            "acked {line} missing from the store"
        );
    }

    // --session filter.
    let (only, rc) = dump_json(&dir, &["--session", "sess-000003"]);
    assert_eq!(rc, 0);
    let only = frames(&only);
    assert_eq!(only.len(), after["sess-000003"].len());
    assert!(only.iter().all(|f| f["session"] == "sess-000003"));

    // Human-readable dump: a header per segment, a line per frame.
    let out = turnstone(&["dump", p(&dir)]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("== segment")).count(),
        segment_files(&dir).len()
    );
    assert!(text.lines().count() >= 6000 + 16);
    assert!(text.contains("assistant/chunk") && text.contains("sess-000003"));

    // A lone segment file dumps with its session names resolved.
    let seg2 = &segment_files(&dir)[1];
    let (lines, rc) = dump_json(seg2, &[]);
    assert_eq!(rc, 0);
    assert!(!frames(&lines).is_empty());
    assert!(frames(&lines)
        .iter()
        .all(|f| f["session"].as_str().unwrap().starts_with("sess-")));
}

#[test]
fn flipped_byte_in_sealed_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 3000, &[]);
    let (clean, _) = dump_json(&dir, &[]);
    let clean = frames(&clean);
    let segs = segment_files(&dir);
    assert!(segs.len() >= 4);
    let victim = &segs[1];
    let name = victim.file_name().unwrap().to_str().unwrap();
    // A frame in the middle of the sealed segment.
    let in_seg: Vec<&&Value> = clean
        .iter()
        .filter(|f| f["segment"].as_str().unwrap().ends_with(name))
        .collect();
    let f = in_seg[in_seg.len() / 2];
    let flip = f["offset"].as_u64().unwrap() as usize + 24 + 3;
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[flip] ^= 0x20;
    std::fs::write(victim, &bytes).unwrap();

    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("corruption in"), "{text}");
    assert!(text.contains(name) && text.contains("offset"), "{text}");

    let out = turnstone(&["verify", p(&dir), "--json"]);
    assert_eq!(code(&out), 1);
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["status"], "corrupt");
    let probs = v["problems"].as_array().unwrap();
    assert_eq!(probs.len(), 1, "{v}");
    assert_eq!(probs[0]["problem"], "corruption");
    assert!(probs[0]["segment"].as_str().unwrap().ends_with(name));
    let at = probs[0]["offset"].as_u64().unwrap() as usize;
    assert!(at <= flip && at >= 64, "{v}");

    // dump reports the corruption in place and keeps going.
    let (lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 1);
    let probs = problems(&lines);
    assert_eq!(probs.len(), 1);
    assert_eq!(probs[0]["problem"], "corruption");
    let at = lines
        .iter()
        .position(|l| l.get("problem").is_some())
        .unwrap();
    let last_seg = segs.last().unwrap().to_str().unwrap();
    assert!(lines[at + 1..]
        .iter()
        .any(|l| l["segment"].as_str() == Some(last_seg)));
    let damaged = frames(&lines).len();
    assert!(
        damaged < clean.len() && damaged > clean.len() * 3 / 4,
        "{damaged}"
    );
    let out = turnstone(&["dump", p(&dir)]);
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("!! corruption in"));
}

#[test]
fn cut_last_segment_is_torn_tail_and_reopens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 3000, &[]);
    let (lines, _) = dump_json(&dir, &[]);
    let all = frames(&lines);
    let last = segment_files(&dir).pop().unwrap();
    let last_str = last.to_str().unwrap();
    let f = all
        .iter()
        .rev()
        .find(|f| f["segment"].as_str() == Some(last_str))
        .expect("a frame in the last segment");
    let cut = f["offset"].as_u64().unwrap() + f["len"].as_u64().unwrap() / 2;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(cut)
        .unwrap();

    // The index checkpoint written at the clean close covers the cut batch, so
    // it was durable: no power cut explains the cut (FORMAT.md §6.3 C4).
    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("checkpoint covers"),
        "{}",
        stdout(&out)
    );
    // As after a crash before that checkpoint was written: a torn tail.
    std::fs::remove_file(dir.join("index.ckpt")).unwrap();
    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).contains("torn tail"), "{}", stdout(&out));
    let out = turnstone(&["verify", p(&dir), "--json"]);
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["status"], "torn-tail");
    assert_eq!(v["problems"][0]["problem"], "torn-tail");
    let (lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 0);
    assert_eq!(problems(&lines)[0]["problem"], "torn-tail");
    let kept = frames(&lines).len();
    assert!(kept < 3000);

    // The store opens, drops the torn batch, and sessions continue densely.
    fleet(&dir, 200, &[]);
    let out = turnstone(&["verify", p(&dir), "--json"]);
    assert_eq!(code(&out), 0);
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["status"], "clean", "{v}");
    let (lines, _) = dump_json(&dir, &[]);
    assert_eq!(frames(&lines).len(), kept + 200);
    assert_dense(&seqs_by_session(&frames(&lines)));
}

#[test]
fn random_files_and_missing_paths_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    // Deterministic junk.
    let mut x = 0x1234_5678_9abc_def0u64;
    let junk: Vec<u8> = (0..10_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();

    // A store whose only segment is random bytes: not a store.
    let dir = tmp.path().join("junkstore");
    std::fs::create_dir(&dir).unwrap();
    let seg = dir.join("0000000001.tseg");
    std::fs::write(&seg, &junk).unwrap();
    for args in [
        vec!["verify", p(&dir)],
        vec!["dump", p(&dir)],
        vec!["dump", p(&seg), "--json"],
    ] {
        let out = turnstone(&args);
        assert_eq!(code(&out), 2, "{args:?}");
        let err = stderr(&out);
        assert!(err.starts_with("turnstone: "), "{err}");
        assert!(err.contains("0000000001.tseg") && err.contains("not a turnstone segment"));
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
    let loose = tmp.path().join("junk.bin");
    std::fs::write(&loose, &junk).unwrap();
    let out = turnstone(&["dump", p(&loose)]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("junk.bin"));

    // Random bytes in place of a sealed segment of a real store: corruption.
    let store = tmp.path().join("store");
    fleet(&store, 1500, &[]);
    let segs = segment_files(&store);
    assert!(segs.len() >= 3);
    std::fs::write(&segs[1], &junk).unwrap();
    let out = turnstone(&["verify", p(&store)]);
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains(segs[1].file_name().unwrap().to_str().unwrap()));

    // Missing directory, empty directory.
    let missing = tmp.path().join("no-such-dir");
    for cmd in ["verify", "dump"] {
        let out = turnstone(&[cmd, p(&missing)]);
        assert_eq!(code(&out), 2);
        let err = stderr(&out);
        assert!(
            err.starts_with("turnstone: ") && err.contains("no-such-dir"),
            "{err}"
        );
    }
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = turnstone(&["verify", p(&empty)]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no segment files"));

    // Usage errors.
    let out = turnstone(&["fleet", p(&tmp.path().join("x")), "--sessions", "0"]);
    assert_eq!(code(&out), 2);
    let out = turnstone(&["verify"]);
    assert_eq!(code(&out), 2);
}

#[test]
fn killed_fleet_keeps_every_acknowledged_event() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let ledger = tmp.path().join("acks.txt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstone"))
        .args([
            "fleet",
            p(&dir),
            "--sessions",
            "32",
            "--threads",
            "4",
            "--events",
            "100000000",
            "--segment-bytes",
            "262144",
            "--ack-ledger",
            p(&ledger),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let n = std::fs::read_to_string(&ledger).map_or(0, |t| t.lines().count());
        if n >= 300 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "fleet made no progress"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no clean close
    child.wait().unwrap();

    let out = turnstone(&["verify", p(&dir), "--json"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["clean_close"], false);
    let (lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 0);
    let all = frames(&lines);
    assert_dense(&seqs_by_session(&all));
    let present: std::collections::HashSet<(String, u64)> = all
        .iter()
        .map(|f| {
            (
                f["session"].as_str().unwrap().to_string(),
                f["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    let text = std::fs::read_to_string(&ledger).unwrap();
    for line in text
        .lines()
        .filter(|l| l.ends_with(|c: char| c.is_ascii_digit()))
    {
        let (s, seq) = line.split_once(' ').unwrap();
        let seq: u64 = seq.parse().unwrap();
        assert!(present.contains(&(s.to_string(), seq)), "acked {line} lost");
    }
    // It reopens and continues.
    let line = fleet(&dir, 500, &[]);
    assert_eq!(line["events"], 500);
    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 0);
}
