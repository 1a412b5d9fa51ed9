//! The command line's session-writing commands beside a process that hosts
//! the store (docs/MULTIPROCESS.md, issue 40): `import`, `meta` and
//! `delete` run as clients of the host instead of meeting `locked`, and
//! what they wrote is what the host's process then reads.

mod common;

use std::sync::Arc;

use common::*;
use turnstone::session::{list_sessions, Registry, Session};
use turnstone::{share, Options};

#[test]
fn import_meta_and_delete_run_through_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    // This test process hosts the store, as a Python or Node worker would.
    let host = share::open(&store_dir, Options::default()).unwrap();
    assert!(host.store().is_some(), "this process hosts it");
    let registry = Arc::new(Registry::new());
    let mut s = Session::create(&host, "kept", registry.clone()).unwrap();
    s.append(
        turnstone::session::UserMessage {
            content: vec![turnstone::session::ContentBlock::text("hello")],
        },
        turnstone::session::SurfaceOp::Append,
    )
    .unwrap();
    s.flush().unwrap();
    drop(s);

    let jsonl = dir.path().join("imported.jsonl");
    std::fs::write(
        &jsonl,
        concat!(
            r#"{"seq":0,"kind":"user/message","data":{"content":[{"type":"text","text":"from a file"}]},"surface":{"op":"append"}}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = turnstone(&["import", p(&store_dir), p(&jsonl)]);
    assert_eq!(code(&out), 0, "import beside a host: {}", stderr(&out));
    let out = turnstone(&[
        "meta",
        p(&store_dir),
        "--session",
        "imported",
        "--title",
        "Imported",
    ]);
    assert_eq!(code(&out), 0, "meta beside a host: {}", stderr(&out));
    let out = turnstone(&["delete", p(&store_dir), "--session", "kept"]);
    assert_eq!(code(&out), 0, "delete beside a host: {}", stderr(&out));

    // The host's process sees all three.
    let listed = list_sessions(&host).unwrap();
    let names: Vec<&str> = listed.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        names,
        ["imported"],
        "kept was deleted, imported was created"
    );
    let mut imported = Session::open_read_only(&host, "imported", registry.clone()).unwrap();
    assert_eq!(imported.metadata().title.as_deref(), Some("Imported"));
    assert!(
        format!("{:?}", imported.derive_messages()).contains("from a file"),
        "the imported message"
    );
}
