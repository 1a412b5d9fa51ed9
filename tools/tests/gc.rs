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

/// A store written by `turnstone serve` (FORMAT.md §13): `gc` collects a
/// hard-deleted stream by the server's rule (its last record is a `delete`
/// in `hard` mode), and keeps a soft-deleted one (forks read through it).
#[test]
fn gc_collects_a_servers_hard_deleted_streams_and_keeps_soft_deleted_ones() {
    use turnstone_server::record::{self, DeleteMode, DeleteRecord, KIND_DATA, KIND_DELETE};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let store = Store::open_with(
        &dir,
        Options {
            segment_bytes: 16 << 10,
            ..Default::default()
        },
    )
    .unwrap();
    let names: Vec<String> = (0..3).map(record::session_name).collect();
    let flag = record::FLAG_IGNORABLE;
    for i in 0..60u64 {
        for n in &names {
            let body = format!("{n} {i} {}", "z".repeat(300));
            store
                .append(n, KIND_DATA, flag, &record::encode(0, 0, body.as_bytes()))
                .unwrap();
        }
        store.sync().unwrap();
    }
    for (n, mode) in [(&names[1], DeleteMode::Hard), (&names[2], DeleteMode::Soft)] {
        let rec = DeleteRecord {
            mode,
            reason: "delete".into(),
            at_ms: 1,
        };
        let body = serde_json::to_vec(&rec).unwrap();
        store
            .append(n, KIND_DELETE, flag, &record::encode(0, 0, &body))
            .unwrap();
    }
    for i in 0..60u64 {
        let body = format!("tail {i} {}", "w".repeat(300));
        store
            .append(
                &names[0],
                KIND_DATA,
                flag,
                &record::encode(0, 0, body.as_bytes()),
            )
            .unwrap();
    }
    store.close().unwrap();
    let d = dir.to_str().unwrap();
    // A third of each segment is the deleted stream's: rewrite every
    // segment holding garbage.
    let out = turnstone(&["gc", d, "--json", "--threshold", "1"]);
    assert_eq!(code(&out), 0, "{}", common::stderr(&out));
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["sessions_reclaimed"], 1, "{r}");
    assert!(r["bytes_reclaimed"].as_u64().unwrap() > 0, "{r}");
    let store = Store::open_with(
        &dir,
        Options {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let listed: Vec<String> = store.sessions().into_iter().map(|s| s.name).collect();
    assert_eq!(listed, vec![names[0].clone(), names[2].clone()]);
    assert_eq!(store.reclaimed_names(), vec![names[1].clone()]);
    assert_eq!(store.session_len(&names[0]), Some(120));
    assert_eq!(store.session_len(&names[2]), Some(61));
}
