//! `turnstone sessions` filters and pages, `turnstone meta`, `turnstone delete`.

use std::process::Command;
use std::sync::Arc;

use serde_json::Value;
use turnstone::session::*;
use turnstone::Store;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_turnstone"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn ids(out: &str) -> Vec<String> {
    json_lines(out)
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect()
}

/// Five sessions s0..s4 with one user message each; s1 has a fork child.
fn store_with_sessions(dir: &std::path::Path) {
    let store = Arc::new(Store::open(dir).unwrap());
    for i in 0..5 {
        let mut s =
            Session::create(store.clone(), &format!("s{i}"), Arc::new(Registry::new())).unwrap();
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(format!("hello from s{i}"))],
            },
            SurfaceOp::Append,
        )
        .unwrap();
        s.flush().unwrap();
    }
    fork(&store, "s1", None, Some("s1-child")).unwrap();
    store.sync().unwrap();
    drop(store);
}

#[test]
fn meta_sets_and_shows_and_sessions_filters() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    store_with_sessions(dir.path());

    let (code, out, err) = run(&[
        "meta",
        d,
        "--session",
        "s2",
        "--set",
        "user=alice",
        "--set",
        "cwd=/a=b",
        "--tag",
        "ci",
        "--title",
        "Two",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let m: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(m["id"], "s2");
    assert_eq!(m["title"], "Two");
    assert_eq!(m["tags"], serde_json::json!(["ci"]));
    assert_eq!(m["fields"]["user"], "alice");
    assert_eq!(m["fields"]["cwd"], "/a=b", "split at the first '='");
    let (code, _, err) = run(&["meta", d, "--session", "s3", "--set", "user=alice"]);
    assert_eq!(code, 0, "{err}");

    // Shown read-only, also in text form.
    let (code, out, err) = run(&["meta", d, "--session", "s2"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("title    Two") && out.contains("user = alice"),
        "{out}"
    );

    let (code, out, err) = run(&["sessions", d, "--tag", "ci", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(ids(&out), ["s2"]);
    let listed = json_lines(&out);
    assert_eq!(listed[0]["metadata"]["fields"]["user"], "alice");
    let (code, out, err) = run(&["sessions", d, "--where", "user=alice", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(ids(&out), ["s2", "s3"]);
    let (code, out, _) = run(&[
        "sessions",
        d,
        "--where",
        "user=alice",
        "--tag",
        "ci",
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(ids(&out), ["s2"]);
    let (code, out, _) = run(&["sessions", d, "--parent", "s1", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(ids(&out), ["s1-child"]);
    // Untag and unset.
    let (code, _, err) = run(&[
        "meta",
        d,
        "--session",
        "s2",
        "--untag",
        "ci",
        "--unset",
        "user",
    ]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = run(&["sessions", d, "--tag", "ci", "--json"]);
    assert!(out.is_empty(), "{out}");

    // Bad input: exit 2 with one sentence.
    let (code, _, err) = run(&["sessions", d, "--where", "novalue"]);
    assert_eq!(code, 2);
    assert!(err.contains("KEY=VALUE"), "{err}");
    let (code, _, err) = run(&["meta", d, "--session", "nope", "--tag", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("nope"), "{err}");
    let (code, _, err) = run(&["meta", d, "--session", "s0", "--tag", ""]);
    assert_eq!(code, 2);
    assert!(err.contains("tag"), "{err}");
    let (code, _, err) = run(&["sessions", d, "--after", "x1"]);
    assert_eq!(code, 2);
    assert!(err.contains("cursor"), "{err}");
}

#[test]
fn sessions_pages_with_a_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    store_with_sessions(dir.path());
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["sessions", d, "--json", "--limit", "2"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{err}");
        seen.extend(ids(&out));
        match err.lines().find_map(|l| l.strip_prefix("next: --after ")) {
            Some(c) => after = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ["s0", "s1", "s2", "s3", "s4", "s1-child"]);
    let (_, out, _) = run(&["sessions", d, "--json", "--newest-first", "--limit", "2"]);
    assert_eq!(ids(&out), ["s1-child", "s4"]);
}

#[test]
fn delete_hides_the_session_and_keeps_its_fork() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    store_with_sessions(dir.path());
    let (code, _, err) = run(&["delete", d, "--session", "s1"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("deleted"), "{err}");
    let (_, out, _) = run(&["sessions", d, "--json"]);
    assert_eq!(ids(&out), ["s0", "s2", "s3", "s4", "s1-child"]);
    let (code, _, err) = run(&["messages", d, "--session", "s1"]);
    assert_eq!(code, 2);
    assert!(err.contains("deleted"), "{err}");
    let (code, _, err) = run(&["delete", d, "--session", "s1"]);
    assert_eq!(code, 2);
    assert!(err.contains("not found"), "{err}");
    let (code, _, err) = run(&["export", d, "--session", "s1"]);
    assert_eq!(code, 2);
    assert!(err.contains("deleted"), "{err}");
    // The fork keeps what it inherits.
    let (code, out, err) = run(&["messages", d, "--session", "s1-child", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("hello from s1"), "{out}");
    let (code, out, err) = run(&["search", d, "hello", "--json"]);
    assert_eq!(code, 0, "{err}");
    let sessions: Vec<String> = json_lines(&out)
        .iter()
        .map(|h| h["session"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sessions.len(), 4, "{out}");
    assert!(!sessions.contains(&"s1".to_string()));
    let (code, out, _) = run(&["search", d, "hello", "--session", "s1-child", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json_lines(&out).len(), 1);
}

/// `turnstone recover` on a store with a deleted session: the deleted
/// session is not something to repair (it used to be reported NOT
/// REPAIRED, exit 1).
#[test]
fn recover_passes_over_deleted_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    store_with_sessions(dir.path());
    let (code, _, err) = run(&["delete", d, "--session", "s2"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&["recover", d, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["errors"], serde_json::json!([]), "{report}");
    let (code, out, err) = run(&["recover", d]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("NOT REPAIRED"), "{out}");
}
