//! The session-layer commands on fleet stores: messages, recover (after a
//! kill -9 of a fleet), stats, export and import.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn session_names(dir: &Path) -> Vec<String> {
    let (lines, rc) = dump_json(dir, &[]);
    assert_eq!(rc, 0);
    let mut names: Vec<String> = seqs_by_session(&frames(&lines)).into_keys().collect();
    names.sort();
    names
}

#[test]
fn messages_stats_and_recover_on_a_healthy_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let n = fleet(&dir, 4000, &[])["events"].as_u64().unwrap();
    let (lines, _) = dump_json(&dir, &[]);
    let all = frames(&lines);

    // messages --json: one object per surface node that is not an empty
    // assistant message, valid for a model, in surface order.
    let mut total_msgs = 0;
    for s in session_names(&dir) {
        let msgs = messages(&dir, &s);
        assert!(!msgs.is_empty());
        assert_valid_messages(&s, &msgs);
        // Every message comes from a surface event of that session.
        let seqs: HashMap<u64, &Value> = all
            .iter()
            .filter(|f| f["session"] == s.as_str())
            .map(|f| (f["seq"].as_u64().unwrap(), *f))
            .collect();
        for m in &msgs {
            let src = seqs[&m["source_seq"].as_u64().unwrap()];
            assert_eq!(src["kind"], m["kind"], "{m}");
            if m["kind"] != "tool/result" {
                assert_eq!(src["data"]["content"], m["content"]);
            }
        }
        // A compacted session starts with its summary.
        let compacted = all
            .iter()
            .any(|f| f["session"] == s.as_str() && f["kind"] == "compaction/summary");
        if compacted {
            let first = &msgs[0]["content"][0]["text"];
            assert!(
                first.as_str().unwrap().starts_with("Summary of"),
                "{s}: {first}"
            );
        }
        total_msgs += msgs.len();
    }
    assert!(total_msgs > 100);
    // Text form: one line per message.
    let out = turnstone(&["messages", p(&dir), "--session", "sess-000002"]);
    assert_eq!(code(&out), 0);
    assert_eq!(
        stdout(&out).lines().count(),
        messages(&dir, "sess-000002").len()
    );
    assert!(!stdout(&out).contains('\x1b'), "no colours when piped");
    let out = turnstone(&["messages", p(&dir), "--session", "nope"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no session \"nope\""),
        "{}",
        stderr(&out)
    );

    // stats --json agrees with dump.
    let out = turnstone(&["stats", p(&dir), "--json", "--top", "3"]);
    assert_eq!(code(&out), 0);
    let st = json_one(&out);
    assert_eq!(st["events"], n);
    assert_eq!(st["sessions"], 16);
    assert_eq!(st["segments"], segment_files(&dir).len());
    let disk: u64 = segment_files(&dir)
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert_eq!(st["file_bytes"], disk);
    assert_eq!(st["clean_close"], true);
    let kinds = st["kinds"].as_array().unwrap();
    assert_eq!(
        kinds
            .iter()
            .map(|k| k["events"].as_u64().unwrap())
            .sum::<u64>(),
        n
    );
    assert_eq!(
        kinds
            .iter()
            .map(|k| k["bytes"].as_u64().unwrap())
            .sum::<u64>(),
        st["payload_bytes"].as_u64().unwrap()
    );
    let chunks = kinds
        .iter()
        .find(|k| k["kind"] == "assistant/chunk")
        .unwrap();
    assert_eq!(
        chunks["events"].as_u64().unwrap() as usize,
        all.iter()
            .filter(|f| f["kind"] == "assistant/chunk")
            .count()
    );
    let largest = st["largest_sessions"].as_array().unwrap();
    assert_eq!(largest.len(), 3);
    assert!(largest[0]["bytes"].as_u64() >= largest[1]["bytes"].as_u64());
    // A clean fleet run closes its turns (cancelled at the end).
    assert_eq!(st["open_turns"]["count"], 0);
    let out = turnstone(&["stats", p(&dir)]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("largest sessions"));

    // recover on a cleanly closed store repairs nothing.
    let out = turnstone(&["recover", p(&dir), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = json_one(&out);
    assert_eq!(r["clean_shutdown"], true);
    assert_eq!(r["sessions"], 16);
    assert_eq!(r["sessions_repaired"], 0);
    assert_eq!(r["events_appended"], 0);
    assert_eq!(r["errors"], json!([]));
}

/// Run `turnstone fleet` (with `args` after the store directory and the
/// ack ledger's) until its ledger holds 600 acks, then SIGKILL it; check
/// that every acknowledged event is in the store and seqs are dense.
/// Returns the number of events in the store and the acks.
fn kill_fleet_after_600_acks(
    dir: &Path,
    ledger_path: &Path,
    args: &[&str],
) -> (usize, Vec<(String, u64)>) {
    let mut child = Command::new(BIN)
        .args(["fleet", p(dir), "--ack-ledger", p(ledger_path)])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(ledger_path).map_or(0, |t| t.lines().count()) < 600 {
        assert!(Instant::now() < deadline, "fleet made no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no clean close, turns left open
    child.wait().unwrap();

    // Read-only views before recover: every acknowledged event is there.
    let (lines, rc) = dump_json(dir, &[]);
    assert_eq!(rc, 0);
    let all = frames(&lines);
    assert_dense(&seqs_by_session(&all));
    let have = present(&all);
    let acks = ledger(ledger_path);
    assert!(acks.len() >= 600);
    for a in &acks {
        assert!(have.contains(a), "acknowledged {a:?} is missing");
    }
    (all.len(), acks)
}

/// `fleet --async` killed with SIGKILL: every event the ledger
/// acknowledged is in the store, and `recover` repairs what the tasks left
/// open.
#[test]
fn killed_async_fleet_loses_no_acknowledged_event() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let ledger_path = tmp.path().join("acks.txt");
    kill_fleet_after_600_acks(
        &dir,
        &ledger_path,
        &[
            "--async",
            "--sessions",
            "64",
            "--threads",
            "2",
            "--events",
            "100000000",
            "--segment-bytes",
            "262144",
        ],
    );
    let out = turnstone(&["recover", p(&dir), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = json_one(&out);
    assert_eq!(r["sessions"], 64);
    assert_eq!(r["errors"], json!([]));
    assert!(r["turns_interrupted"].as_u64().unwrap() > 0, "{r}");
    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn killed_fleet_then_recover() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let ledger_path = tmp.path().join("acks.txt");
    let (before, acks) = kill_fleet_after_600_acks(
        &dir,
        &ledger_path,
        &[
            "--sessions",
            "32",
            "--threads",
            "4",
            "--events",
            "100000000",
            "--segment-bytes",
            "262144",
        ],
    );
    let st = json_one(&turnstone(&["stats", p(&dir), "--json"]));
    assert_eq!(st["clean_close"], false);
    let open_before = st["open_turns"]["count"].as_u64().unwrap();
    assert!(open_before > 0, "a killed fleet leaves open turns: {st}");

    // recover: the recovery pass, then repair of every open session.
    let out = turnstone(&["recover", p(&dir), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = json_one(&out);
    assert_eq!(r["clean_shutdown"], false);
    assert_eq!(r["sessions"], 32);
    assert_eq!(r["errors"], json!([]));
    assert_eq!(r["turns_interrupted"], open_before);
    assert!(r["sessions_repaired"].as_u64().unwrap() >= open_before);
    let listed = |k: &str| -> Vec<(String, String)> {
        r[k].as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["session"].as_str().unwrap().to_string(),
                    t["call_id"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let unknown = listed("tools_outcome_unknown");
    let not_started = listed("tools_not_started");

    // After recover: all acknowledged events still there, every session's
    // messages are valid, and the synthetic results are what recover said.
    let (lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 0);
    let after = frames(&lines);
    assert_dense(&seqs_by_session(&after));
    let have = present(&after);
    for a in &acks {
        assert!(have.contains(a), "acknowledged {a:?} lost by recover");
    }
    assert_eq!(
        after.len() - before,
        r["events_appended"].as_u64().unwrap() as usize
    );
    let synthetic: Vec<(String, String, String)> = after[before..]
        .iter()
        .filter(|f| f["kind"] == "tool/result")
        .map(|f| {
            (
                f["session"].as_str().unwrap().to_string(),
                f["data"]["call_id"].as_str().unwrap().to_string(),
                f["data"]["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (s, c) in &unknown {
        assert!(synthetic.contains(&(s.clone(), c.clone(), "TOOL_OUTCOME_UNKNOWN".into())));
    }
    for (s, c) in &not_started {
        assert!(synthetic.contains(&(s.clone(), c.clone(), "TOOL_NOT_STARTED".into())));
    }
    assert_eq!(synthetic.len(), unknown.len() + not_started.len());
    assert!(after[before..]
        .iter()
        .filter(|f| f["kind"] == "turn/end")
        .all(|f| f["data"]["reason"]["kind"] == "interrupted"));
    for s in session_names(&dir) {
        assert_valid_messages(&s, &messages(&dir, &s));
    }
    let st = json_one(&turnstone(&["stats", p(&dir), "--json"]));
    assert_eq!(st["open_turns"]["count"], 0);

    // Idempotent: a second recover repairs nothing.
    let out = turnstone(&["recover", p(&dir), "--json"]);
    assert_eq!(code(&out), 0);
    let r2 = json_one(&out);
    assert_eq!(r2["sessions_repaired"], 0);
    assert_eq!(r2["events_appended"], 0);
    assert_eq!(r2["clean_shutdown"], true);
    let out = turnstone(&["recover", p(&dir)]);
    assert_eq!(code(&out), 0);
    assert!(
        stdout(&out).contains("nothing to repair"),
        "{}",
        stdout(&out)
    );

    // The fleet continues on the repaired store.
    let v = fleet(&dir, 300, &["--seed", "9"]);
    assert!(v["events"].as_u64().unwrap() >= 300);
    let out = turnstone(&["verify", p(&dir)]);
    assert_eq!(code(&out), 0);
}

#[test]
fn fleet_reopen_after_kill_repairs_and_reports_on_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let mut child = Command::new(BIN)
        .args(["fleet", p(&dir), "--sessions", "8", "--threads", "2"])
        .args(["--events", "100000000", "--segment-bytes", "262144"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while turnstone(&["stats", p(&dir), "--json"]).status.code() != Some(0)
        || json_one(&turnstone(&["stats", p(&dir), "--json"]))["events"]
            .as_u64()
            .unwrap()
            < 500
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = turnstone(&[
        "fleet",
        p(&dir),
        "--sessions",
        "8",
        "--threads",
        "2",
        "--events",
        "200",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("continued 8 sessions; repaired"), "{err}");
    assert!(!err.contains("repaired 0 "), "{err}");
    // The reopened sessions' first request header is a resume.
    let (lines, _) = dump_json(&dir, &["--kind", "request/header,turn/end"]);
    let resumes = lines
        .iter()
        .filter(|f| f["data"]["reason"] == "resume")
        .count();
    assert!(resumes > 0);
    assert!(lines
        .iter()
        .any(|f| f["kind"] == "turn/end" && f["data"]["reason"]["kind"] == "interrupted"));
    for s in session_names(&dir) {
        assert_valid_messages(&s, &messages(&dir, &s));
    }
}

/// A session's export: its JSONL lines, parsed.
fn export(dir: &Path, session: &str) -> (String, Vec<Value>) {
    let out = turnstone(&["export", p(dir), "--session", session]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    (text, json_lines(&out))
}

#[test]
fn export_import_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 3000, &[]);
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    for s in ["sess-000001", "sess-000006"] {
        let (text, lines) = export(&dir, s);
        // One event per line: dense seqs, kinds, surface ops on surface kinds.
        let len = json_one(&turnstone(&["stats", p(&dir), "--json", "--top", "16"]))
            ["largest_sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["session"] == s)
            .unwrap()["events"]
            .as_u64()
            .unwrap();
        assert_eq!(lines.len() as u64, len);
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l["seq"], i);
            let kind = l["kind"].as_str().unwrap();
            let surface = matches!(kind, "user/message" | "assistant/message" | "tool/result");
            assert_eq!(l.get("surface").is_some(), surface, "{l}");
            assert_eq!(l.get("ignorable").is_some(), kind == "fleet/usage", "{l}");
        }
        let file = tmp.path().join(format!("{s}.jsonl"));
        std::fs::write(&file, &text).unwrap();
        // Into the same store under a new id, and into another store under
        // the file's name.
        let copy = format!("{s}-copy");
        let out = turnstone(&["import", p(&dir), p(&file), "--session", &copy]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stdout(&out).contains(&format!("imported {len} events")));
        let out = turnstone(&["import", p(&other), p(&file)]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let orig = messages(&dir, s);
        assert_eq!(messages(&dir, &copy), orig);
        assert_eq!(messages(&other, s), orig);
        // The import is the original plus the seed marker.
        let (_, back) = export(&dir, &copy);
        assert_eq!(back.len(), lines.len() + 1);
        assert_eq!(back.last().unwrap()["kind"], "session/end-seed");
        for (a, b) in lines.iter().zip(&back) {
            let strip = |v: &Value| {
                let mut v = v.clone();
                v.as_object_mut().unwrap().remove("ts");
                v
            };
            assert_eq!(strip(a), strip(b));
        }
        // A second import under the same id is refused.
        let out = turnstone(&["import", p(&other), p(&file)]);
        assert_eq!(code(&out), 2);
        assert!(
            stderr(&out).contains("already has a session"),
            "{}",
            stderr(&out)
        );
    }
    let out = turnstone(&["verify", p(&other), "--json"]);
    assert_eq!(
        json_one(&out)["events"],
        json!(export(&other, "sess-000001").1.len() + export(&other, "sess-000006").1.len())
    );
}

#[test]
fn import_refuses_bad_lines_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 600, &[]);
    // The longest session: the fleet's threads share one event budget, so
    // on a loaded machine any one session may have few events.
    let text = (0..=16)
        .map(|i| turnstone(&["export", p(&dir), "--session", &format!("sess-{i:06}")]))
        .filter(|out| code(out) == 0)
        .map(|out| stdout(&out))
        .max_by_key(|t| t.lines().count())
        .unwrap();
    let good: Vec<String> = text.lines().map(str::to_string).collect();
    assert!(good.len() > 20);
    let before: Vec<Vec<u8>> = segment_files(&dir)
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    let user_at = good
        .iter()
        .position(|l| l.contains(r#""kind":"user/message""#))
        .unwrap();
    let turn_at = good
        .iter()
        .position(|l| l.contains(r#""kind":"turn/start""#))
        .unwrap();
    let edit = |i: usize, f: &dyn Fn(&mut Value)| -> Vec<String> {
        let mut v = good.clone();
        let mut j: Value = serde_json::from_str(&v[i]).unwrap();
        f(&mut j);
        v[i] = j.to_string();
        v
    };
    let cases: Vec<(&str, Vec<String>, usize, &str)> = vec![
        (
            "gap",
            {
                let mut v = good.clone();
                v.remove(5);
                v
            },
            6,
            "seq 6 where 5 was expected",
        ),
        (
            "not json",
            {
                let mut v = good.clone();
                v[3] = "{not json".into();
                v
            },
            4,
            "line 4",
        ),
        (
            "unknown field",
            edit(2, &|j| j["extra"] = json!(1)),
            3,
            "unknown field",
        ),
        (
            "bad kind",
            edit(4, &|j| j["kind"] = json!("user/mesage")),
            5,
            "unknown kind \"user/mesage\"",
        ),
        (
            "plugin flags differ",
            {
                let mut v = good.clone();
                let n = v.len();
                v.push(json!({"seq": n, "kind": "x/y", "data": {}, "ignorable": true}).to_string());
                v.push(
                    json!({"seq": n + 1, "kind": "x/y", "data": {}, "ignorable": false})
                        .to_string(),
                );
                v
            },
            good.len() + 2,
            "ignorable on one line and not on another",
        ),
        (
            "unknown code",
            edit(4, &|j| j["kind"] = json!("unknown/77")),
            5,
            "cannot be imported",
        ),
        (
            "bad data",
            edit(turn_at, &|j| j["data"] = json!({"turn": 1})),
            turn_at + 1,
            "turn/start",
        ),
        (
            "surface on a non-surface kind",
            edit(turn_at, &|j| j["surface"] = json!({"op": "append"})),
            turn_at + 1,
            "surface op",
        ),
        (
            "missing surface",
            edit(user_at, &|j| {
                j.as_object_mut().unwrap().remove("surface");
            }),
            user_at + 1,
            "without a surface op",
        ),
        (
            "replace out of range",
            edit(user_at, &|j| {
                j["surface"] = json!({"op": "replace", "start": 0, "end": 99})
            }),
            user_at + 1,
            "replace range 0..99",
        ),
        (
            "ignorable core",
            edit(1, &|j| j["ignorable"] = json!(true)),
            2,
            "ignorable",
        ),
        (
            "empty line",
            {
                let mut v = good.clone();
                v.insert(2, String::new());
                v
            },
            3,
            "empty line",
        ),
    ];
    for (name, lines, line_no, want) in cases {
        let file = tmp.path().join(format!("{}.jsonl", name.replace(' ', "-")));
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let out = turnstone(&["import", p(&dir), p(&file), "--session", "new"]);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{name}: {err}");
        assert!(
            err.contains(&format!("line {line_no}:")) && err.contains(want),
            "{name}: {err}"
        );
        assert!(err.contains("nothing was imported"), "{name}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
    }
    // Not one byte changed.
    let after: Vec<Vec<u8>> = segment_files(&dir)
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    assert!(before == after, "a refused import changed the store");
    // A missing file. A missing store is created by a good import
    // (`readme_flows.rs`), but a refused one leaves nothing behind.
    let out = turnstone(&["import", p(&dir), p(&tmp.path().join("none.jsonl"))]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("none.jsonl"));
    let nostore = tmp.path().join("nostore");
    let out = turnstone(&["import", p(&nostore), p(&tmp.path().join("none.jsonl"))]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("none.jsonl"));
    assert!(!nostore.exists(), "a refused import created a store");
}

/// The main job writes provider-native content (thinking with signatures,
/// images, tool results as block arrays, a block type nobody knows, cache
/// usage), and `dump --json` and `messages` show it unchanged.
#[test]
fn fleet_stores_carry_provider_native_content_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 6000, &[]);
    let (lines, _) = dump_json(&dir, &[]);
    let all = frames(&lines);
    let blocks_of = |kind: &str| -> Vec<Value> {
        all.iter()
            .filter(|f| f["kind"] == kind)
            .flat_map(|f| f["data"]["content"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let assistant = blocks_of("assistant/message");
    let thinking: Vec<&Value> = assistant
        .iter()
        .filter(|b| b["type"] == "thinking")
        .collect();
    assert!(!thinking.is_empty(), "thinking blocks logged");
    assert!(thinking
        .iter()
        .all(|b| b["signature"].as_str().is_some_and(|s| s.starts_with("Eq"))));
    assert!(
        assistant.iter().any(|b| b["type"] == "fleet_future_block"
            && b["payload"]["note"] == "unknown to the engine"),
        "the unknown block is kept with its fields"
    );
    assert!(blocks_of("user/message")
        .iter()
        .any(|b| b["type"] == "image" && b["source"]["type"] == "base64"));
    let results = blocks_of("tool/result");
    assert!(
        results.iter().any(|b| b["type"] == "image"),
        "tool results as block arrays"
    );
    assert!(all.iter().any(|f| f["kind"] == "assistant/message"
        && f["data"]["usage"]["cache_read_input_tokens"].is_u64()
        && f["data"]["usage"]["service_tier"] == "standard"));
    // The request body a harness would send carries the thinking blocks,
    // with signatures, in the assistant turns that called tools.
    let name = all
        .iter()
        .find(|f| {
            f["kind"] == "assistant/message"
                && f["data"]["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "thinking"))
        })
        .map(|f| f["session"].as_str().unwrap().to_string())
        .unwrap();
    let out = turnstone(&[
        "messages",
        p(&dir),
        "--session",
        &name,
        "--format",
        "anthropic",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let body: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let msgs = body["messages"].as_array().unwrap();
    assert!(msgs.iter().any(|m| m["role"] == "assistant"
        && m["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["type"] == "thinking" && b["signature"].is_string())
        && m["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["type"] == "tool_use")));
    assert!(body["system"].is_string() && body["model"].is_string());
    for fmt in ["openai-responses", "openai-chat"] {
        let out = turnstone(&["messages", p(&dir), "--session", &name, "--format", fmt]);
        assert_eq!(code(&out), 0, "{fmt}: {}", stderr(&out));
        let body: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert!(
            body.get("input")
                .or(body.get("messages"))
                .is_some_and(Value::is_array),
            "{fmt}"
        );
    }
    let out = turnstone(&["messages", p(&dir), "--session", &name, "--format", "bogus"]);
    assert_ne!(code(&out), 0);
}

/// Issue 17 §4: an import keeps each event's `ts` (it is when the event
/// happened, not when it was imported), and importing an export of an
/// import does not add a second `session/end-seed`.
#[test]
fn import_keeps_ts_and_a_reimport_gains_no_second_end_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 600, &[]);
    let (text, lines) = export(&dir, "sess-000001");
    // Past timestamps, so that an import stamping its own time shows.
    let old: Vec<Value> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut l = l.clone();
            l["ts"] = json!(1_000_000_000_000u64 + i as u64 * 7);
            l
        })
        .collect();
    assert!(!text.is_empty());
    let file = tmp.path().join("old.jsonl");
    let body: String = old.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, body).unwrap();
    let out = turnstone(&["import", p(&dir), p(&file), "--session", "a"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (text_a, a) = export(&dir, "a");
    assert_eq!(a.len(), old.len() + 1);
    assert_eq!(
        &a[..old.len()],
        &old[..],
        "every line comes back, ts included"
    );
    assert_eq!(a.last().unwrap()["kind"], "session/end-seed");
    // Import the export of the import: no second marker, the same lines.
    let file_a = tmp.path().join("a.jsonl");
    std::fs::write(&file_a, &text_a).unwrap();
    let out = turnstone(&["import", p(&dir), p(&file_a), "--session", "b"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (text_b, b) = export(&dir, "b");
    let seeds = b.iter().filter(|l| l["kind"] == "session/end-seed").count();
    assert_eq!(seeds, 1, "{text_b}");
    assert_eq!(text_b, text_a);
    assert_eq!(messages(&dir, "b"), messages(&dir, "sess-000001"));
}
