//! `turnstone gc`: frees deleted sessions' bytes; the store still verifies,
//! lists and exports the same live sessions.

mod common;

use std::sync::Arc;

use common::{code, stdout, turnstone};
use serde_json::Value;
use turnstone::session::*;
use turnstone::{Options, Store};

fn store_with_deleted_sessions(dir: &std::path::Path) {
    let store = Arc::new(
        Store::open_with(
            dir,
            Options {
                segment_bytes: 16 << 10,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    for name in ["keep", "gone", "gone2"] {
        let mut s = Session::create(store.clone(), name, Arc::new(Registry::new())).unwrap();
        for i in 0..40 {
            s.append(
                UserMessage {
                    content: vec![ContentBlock::text(format!(
                        "{name} message {i} {}",
                        "x".repeat(400)
                    ))],
                },
                SurfaceOp::Append,
            )
            .unwrap();
            s.flush().unwrap();
        }
    }
    delete(&store, "gone").unwrap();
    delete(&store, "gone2").unwrap();
    let mut s = Session::open(store.clone(), "keep", Arc::new(Registry::new())).unwrap();
    for i in 0..40 {
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(format!("more {i} {}", "y".repeat(400)))],
            },
            SurfaceOp::Append,
        )
        .unwrap();
        s.flush().unwrap();
    }
    drop(s);
    Arc::into_inner(store).unwrap().close().unwrap();
}

#[test]
fn gc_frees_deleted_sessions_and_the_store_still_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    store_with_deleted_sessions(&dir);
    let d = dir.to_str().unwrap();
    let export_before = stdout(&turnstone(&["export", d, "--session", "keep"]));
    assert!(export_before.lines().count() >= 80);

    let dry = turnstone(&["gc", d, "--dry-run", "--json"]);
    assert_eq!(code(&dry), 0, "{}", common::stderr(&dry));
    let dry: Value = serde_json::from_str(&stdout(&dry)).unwrap();
    assert_eq!(dry["dry_run"], true);
    let would = dry["bytes_reclaimed"].as_u64().unwrap();
    assert!(would > 0, "{dry}");

    let out = turnstone(&["gc", d, "--json"]);
    assert_eq!(code(&out), 0, "{}", common::stderr(&out));
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["bytes_reclaimed"].as_u64().unwrap(), would, "{r}");
    assert_eq!(r["sessions_reclaimed"], 2, "{r}");
    assert!(r["segments_examined"].as_u64().unwrap() > 1, "{r}");

    let v = turnstone(&["verify", d]);
    assert_eq!(
        code(&v),
        0,
        "verify after gc: {}{}",
        stdout(&v),
        common::stderr(&v)
    );
    let sessions = stdout(&turnstone(&["sessions", d]));
    assert!(
        sessions.contains("keep") && !sessions.contains("gone"),
        "{sessions}"
    );
    assert_eq!(
        stdout(&turnstone(&["export", d, "--session", "keep"])),
        export_before
    );

    let text = turnstone(&["gc", d]);
    assert_eq!(code(&text), 0);
    assert!(
        stdout(&text).contains("sealed segments examined"),
        "{}",
        stdout(&text)
    );
}

#[test]
fn gc_of_a_missing_directory_is_a_usage_error() {
    let out = turnstone(&["gc", "/nonexistent/turnstone-gc-test"]);
    assert_eq!(code(&out), 2);
}
