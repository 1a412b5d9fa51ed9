//! Helpers shared by the CLI tests: run the built binary, parse its JSON.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_turnstone");

/// Run `turnstone ARGS`; a panic or backtrace in its stderr fails the test.
pub fn turnstone(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run turnstone");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked")
            && !stderr.contains("internal error")
            && !stderr.contains("stack backtrace"),
        "turnstone {args:?} panicked: {stderr}"
    );
    out
}

pub fn code(out: &Output) -> i32 {
    out.status.code().expect("exit code")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Every stdout line parsed as JSON.
pub fn json_lines(out: &Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

/// The one JSON object a `--json` report prints.
pub fn json_one(out: &Output) -> Value {
    let v = json_lines(out);
    assert_eq!(v.len(), 1, "one JSON line: {}", stdout(out));
    v.into_iter().next().unwrap()
}

/// Run `fleet` (16 sessions, 4 threads, 64 KiB segments) and return its JSON line.
pub fn fleet(dir: &Path, events: u64, extra: &[&str]) -> Value {
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
    json_one(&out)
}

/// `dump --json` lines, parsed, and the exit code.
pub fn dump_json(target: &Path, extra: &[&str]) -> (Vec<Value>, i32) {
    let mut args = vec!["dump", p(target), "--json"];
    args.extend_from_slice(extra);
    let out = turnstone(&args);
    (json_lines(&out), code(&out))
}

pub fn frames(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|v| v.get("seq").is_some()).collect()
}

pub fn problems(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|v| v.get("problem").is_some())
        .collect()
}

/// Per session: the seqs in log order.
pub fn seqs_by_session(frames: &[&Value]) -> HashMap<String, Vec<u64>> {
    let mut m: HashMap<String, Vec<u64>> = HashMap::new();
    for f in frames {
        m.entry(f["session"].as_str().unwrap().to_string())
            .or_default()
            .push(f["seq"].as_u64().unwrap());
    }
    m
}

pub fn assert_dense(m: &HashMap<String, Vec<u64>>) {
    for (s, seqs) in m {
        let want: Vec<u64> = (0..seqs.len() as u64).collect();
        assert_eq!(seqs, &want, "session {s} seqs are not dense 0..n");
    }
}

/// (session, seq) of every frame.
pub fn present(frames: &[&Value]) -> HashSet<(String, u64)> {
    frames
        .iter()
        .map(|f| {
            (
                f["session"].as_str().unwrap().to_string(),
                f["seq"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Every complete `SESSION SEQ` line of an ack ledger.
pub fn ledger(path: &Path) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| {
            let (s, seq) = l.split_once(' ')?;
            Some((s.to_string(), seq.parse().ok()?))
        })
        .collect()
}

pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tseg"))
        .collect();
    v.sort();
    v
}

/// Copy a directory's files (not recursive).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// `messages --json` of a session.
pub fn messages(dir: &Path, session: &str) -> Vec<Value> {
    let out = turnstone(&["messages", p(dir), "--session", session, "--json"]);
    assert_eq!(code(&out), 0, "messages {session}: {}", stderr(&out));
    json_lines(&out)
}

/// A message history is valid for a model: every tool use has a tool result
/// after it, and every message has the four fields.
pub fn assert_valid_messages(session: &str, msgs: &[Value]) {
    let mut pending: Vec<String> = Vec::new();
    for m in msgs {
        let obj = m.as_object().expect("message object");
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["content", "kind", "role", "source_seq"], "{m}");
        let role = m["role"].as_str().unwrap();
        let kind = m["kind"].as_str().unwrap();
        match kind {
            "assistant/message" => assert_eq!(role, "assistant"),
            "user/message" | "tool/result" => assert_eq!(role, "user"),
            other => panic!("unexpected message kind {other}"),
        }
        let content = m["content"].as_array().expect("content array");
        assert!(!content.is_empty(), "derived messages are never empty: {m}");
        for b in content {
            match b["type"].as_str().unwrap() {
                "tool_use" => pending.push(b["id"].as_str().unwrap().to_string()),
                "tool_result" => {
                    let id = b["tool_use_id"].as_str().unwrap();
                    pending.retain(|p| p != id);
                }
                // Provider-native blocks the fleet writes (and one it
                // invents, which the engine must carry unchanged).
                "text" | "thinking" | "image" | "fleet_future_block" => {}
                t => panic!("unexpected block type {t}"),
            }
        }
    }
    assert!(
        pending.is_empty(),
        "session {session}: tool uses without a result: {pending:?}"
    );
}

/// The vectors of format-spec/vectors, each with its expected.json.
pub fn vectors() -> Vec<(String, PathBuf, Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../format-spec/vectors");
    let mut v: Vec<(String, PathBuf, Value)> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.json").exists())
        .map(|p| {
            let exp: Value =
                serde_json::from_str(&std::fs::read_to_string(p.join("expected.json")).unwrap())
                    .unwrap();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                p,
                exp,
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Deterministic junk bytes.
pub fn junk(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
