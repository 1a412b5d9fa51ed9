//! `turnstone replay`, `fork`, `sessions`, `search` on a fleet store.

use std::process::Command;

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_turnstone"))
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().unwrap();
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

#[test]
fn replay_fork_sessions_search() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = run(&[
        "fleet",
        d,
        "--sessions",
        "4",
        "--threads",
        "2",
        "--events",
        "600",
    ]);
    assert_eq!(code, 0, "{err}");

    let (code, out, err) = run(&["sessions", d, "--json"]);
    assert_eq!(code, 0, "{err}");
    let sessions = json_lines(&out);
    assert_eq!(sessions.len(), 4);
    let total: u64 = sessions.iter().map(|s| s["events"].as_u64().unwrap()).sum();
    assert!(total >= 600);
    let id = sessions[0]["id"].as_str().unwrap().to_string();
    let len = sessions[0]["events"].as_u64().unwrap();

    // Replay: every event in order, chunks included, in the dump --json shape.
    let (code, out, err) = run(&["replay", d, "--session", &id, "--json"]);
    assert_eq!(code, 0, "{err}");
    let evs = json_lines(&out);
    assert_eq!(evs.len() as u64, len);
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64));
        assert_eq!(e["session"].as_str(), Some(id.as_str()));
    }
    assert!(evs.iter().any(|e| e["kind"] == "assistant/chunk"));
    assert!(evs.iter().any(|e| e["surface"]["op"] == "append"));

    // Fork at a closed turn boundary: the child replays exactly the prefix.
    let boundary = evs.iter().position(|e| e["kind"] == "turn/end").unwrap() + 1;
    let at = boundary.to_string();
    let (code, out, err) = run(&["fork", d, "--session", &id, "--at", &at, "--child", "kid"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "kid");
    let (code, out, _) = run(&["replay", d, "--session", "kid", "--json"]);
    assert_eq!(code, 0);
    let kid = json_lines(&out);
    assert_eq!(kid.len(), boundary);
    for (a, b) in kid.iter().zip(&evs) {
        assert_eq!(a["data"], b["data"]);
        assert_eq!(a["session"], "kid");
    }
    // Inside a turn: refused with a clear message.
    let inside = evs.iter().position(|e| e["kind"] == "turn/start").unwrap() + 2;
    let (code, _, err) = run(&["fork", d, "--session", &id, "--at", &inside.to_string()]);
    assert_ne!(code, 0);
    assert!(err.contains("unfinished turn"), "{err}");

    // Search finds message text, with session, seq and snippet.
    let word = evs
        .iter()
        .find(|e| e["kind"] == "user/message")
        .and_then(|e| e["data"]["content"][0]["text"].as_str())
        .and_then(|t| {
            t.split_whitespace()
                .find(|w| w.len() > 4 && w.chars().all(|c| c.is_ascii_alphabetic()))
        })
        .expect("a word in a user message")
        .to_string();
    let (code, out, err) = run(&["search", d, &word, "--json", "--limit", "5"]);
    assert_eq!(code, 0, "{err}");
    let hits = json_lines(&out);
    assert!(!hits.is_empty(), "no hit for {word:?}");
    for h in &hits {
        assert!(h["snippet"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains(&word.to_lowercase()));
        assert!(h["seq"].as_u64().is_some() && h["session"].as_str().is_some());
    }
    // --session: the fork child finds the events it inherits, under its own id,
    // and only below the fork point.
    let first_user = evs
        .iter()
        .position(|e| e["kind"] == "user/message")
        .unwrap() as u64;
    let (code, out, err) = run(&[
        "search",
        d,
        &word,
        "--json",
        "--limit",
        "1000",
        "--session",
        "kid",
    ]);
    assert_eq!(code, 0, "{err}");
    let hits = json_lines(&out);
    assert!(
        hits.iter().any(|h| h["seq"].as_u64() == Some(first_user)),
        "{hits:?}"
    );
    for h in &hits {
        assert_eq!(h["session"], "kid");
        assert!(h["seq"].as_u64().unwrap() < boundary as u64, "{h}");
    }
    let (code, _, err) = run(&["search", d, &word, "--session", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("no session"), "{err}");
    let (code, _, err) = run(&["replay", d, "--session", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("no session"), "{err}");
}

/// `replay --follow` in another process prints each event once the writer
/// made it durable, in order, and nothing twice.
#[test]
fn replay_follow_tails_a_session_written_by_another_process() {
    use std::io::{BufRead, BufReader};
    use std::sync::Arc;
    use turnstone::session::{ContentBlock, Registry, Session, SurfaceOp, UserMessage};

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "live", Arc::new(Registry::new())).unwrap();
    let say = |s: &mut Session, t: &str| {
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(t)],
            },
            SurfaceOp::Append,
        )
        .unwrap();
    };
    say(&mut s, "before");
    s.flush().unwrap();
    let mut child = bin()
        .args([
            "replay",
            dir.path().to_str().unwrap(),
            "--session",
            "live",
            "--follow",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A follower that never prints must fail the test, not hang it.
    let pid = child.id().to_string();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let _ = Command::new("kill").arg(&pid).status();
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let next = |lines: &mut std::io::Lines<_>| -> Value {
        serde_json::from_str(&lines.next().expect("a line").unwrap()).unwrap()
    };
    let first = next(&mut lines);
    assert_eq!(first["seq"], 0);
    assert_eq!(first["data"]["content"][0]["text"], "before");
    for i in 0..5 {
        say(&mut s, &format!("live {i}"));
        s.flush().unwrap();
    }
    for i in 0..5u64 {
        let ev = next(&mut lines);
        assert_eq!(ev["seq"], i + 1);
        assert_eq!(ev["data"]["content"][0]["text"], format!("live {i}"));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
