//! `turnstone retention`: shows and changes a store's policy
//! (`retention.json`); an expired session vanishes from `sessions` and
//! `export` at once, and `gc` reclaims it.

mod common;

use std::sync::Arc;

use common::{code, stderr, stdout, turnstone};
use serde_json::Value;
use turnstone::session::*;
use turnstone::Store;

#[test]
fn a_policy_set_from_the_cli_expires_a_session_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    {
        let store = Arc::new(Store::open(&dir).unwrap());
        for id in ["old", "keep"] {
            let mut s = Session::create(store.clone(), id, Arc::new(Registry::new())).unwrap();
            s.append(
                UserMessage {
                    content: vec![ContentBlock::text(format!("{id} says hi"))],
                },
                SurfaceOp::Append,
            )
            .unwrap();
            s.flush().unwrap();
        }
        drop(store);
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let d = dir.to_str().unwrap();
    let shown = turnstone(&["retention", d]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    assert_eq!(stdout(&shown).trim(), "{}", "no policy");

    let set = turnstone(&[
        "retention",
        d,
        "--expire-after",
        "1ms",
        "--max-bytes",
        "64M",
    ]);
    assert_eq!(code(&set), 0, "{}", stderr(&set));
    let keep = turnstone(&["retention", d, "--session", "keep", "--keep"]);
    assert_eq!(code(&keep), 0, "{}", stderr(&keep));
    let p: Value = serde_json::from_str(&stdout(&keep)).unwrap();
    assert_eq!(p["expire_after_ms"], 1);
    assert_eq!(p["max_bytes"], 64 << 20);
    assert_eq!(p["sessions"]["keep"]["keep"], true);

    let listed = stdout(&turnstone(&["sessions", d]));
    assert!(
        listed.contains("keep") && !listed.contains("old"),
        "{listed}"
    );
    let export = turnstone(&["export", d, "--session", "old"]);
    assert_ne!(code(&export), 0);
    assert!(stderr(&export).contains("expired"), "{}", stderr(&export));
    let gc = turnstone(&["gc", d, "--json", "--threshold", "1"]);
    assert_eq!(code(&gc), 0, "{}", stderr(&gc));

    // Clearing the store-wide rules brings back nothing reclaimed, and
    // keeps the per-session rule.
    let cleared = turnstone(&["retention", d, "--clear"]);
    let p: Value = serde_json::from_str(&stdout(&cleared)).unwrap();
    assert!(p.get("expire_after_ms").is_none(), "{p}");
    assert_eq!(p["sessions"]["keep"]["keep"], true);
    let bad = turnstone(&["retention", d, "--max-bytes", "12X"]);
    assert_eq!(code(&bad), 2, "a bad size is a usage error");
}
