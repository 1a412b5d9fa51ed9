//! `turnstone torture`: a short run finds nothing, and the self-test catches
//! the planted durability bugs (a checker that cannot fail proves nothing).

use std::process::{Command, Output};

use serde_json::Value;

fn torture(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_turnstone"))
        .arg("torture")
        .args(args)
        .output()
        .expect("run turnstone torture")
}

/// The closing JSON line, with its fields in the documented order.
fn summary(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    let keys: Vec<&str> = [
        "kills",
        "simulated_crashes",
        "acked_events_checked",
        "violations",
        "seed",
    ]
    .to_vec();
    let mut at = 0;
    for k in &keys {
        let p = last[at..]
            .find(&format!("\"{k}\":"))
            .unwrap_or_else(|| panic!("{k} missing or out of order in {last}"));
        at += p;
    }
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {text}"))
}

#[test]
fn a_short_run_checks_kills_and_simulated_crashes_and_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = torture(&[
        dir.path().to_str().unwrap(),
        "--seconds",
        "5",
        "--seed",
        "42",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "torture failed: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v = summary(&out);
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["seed"], 42, "{v}");
    assert!(v["kills"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["simulated_crashes"].as_u64().unwrap() >= 10, "{v}");
    assert!(v["acked_events_checked"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn self_test_catches_planted_durability_bugs() {
    let dir = tempfile::tempdir().unwrap();
    let out = torture(&[dir.path().to_str().unwrap(), "--self-test", "--seed", "5"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "self-test failed: {text}");
    assert!(text.contains("fsync that lies: caught"), "{text}");
    assert!(
        text.contains("ledger claiming an extra event: caught"),
        "{text}"
    );
    let v = summary(&out);
    assert_eq!(v["violations"], 2, "{v}");
}
