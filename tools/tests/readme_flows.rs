//! The README's main job and its import line, as a new user meets them
//! (issue 39 §10): `fleet` goes on after a session of its store was
//! deleted (and after that session was collected), and `import`/`restore`
//! into a directory that does not exist yet create the store there, as
//! `fleet` does.

mod common;

use common::*;

/// `fleet` once more on the store `common::fleet` made.
fn fleet_again(d: &str) -> std::process::Output {
    turnstone(&[
        "fleet",
        d,
        "--sessions",
        "16",
        "--threads",
        "4",
        "--events",
        "400",
        "--segment-bytes",
        "65536",
    ])
}

/// `fleet` on a store where some of its sessions were deleted: the run
/// goes on with the live ones and says how many it skipped.
#[test]
fn fleet_goes_on_after_a_delete_and_after_its_collection() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let d = p(&dir);
    fleet(&dir, 400, &[]);
    for id in ["sess-000003", "sess-000007"] {
        let out = turnstone(&["delete", d, "--session", id]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let out = fleet_again(d);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json_one(&out);
    assert!(report["events"].as_u64().unwrap() > 0, "{report}");
    let err = stderr(&out);
    assert!(err.contains("skipped 2 deleted sessions"), "{err}");

    // Collected: the deleted sessions' frames are gone, their names stay
    // taken; the fleet still goes on.
    let out = turnstone(&["gc", d, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = fleet_again(d);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("skipped 2 deleted sessions"),
        "{}",
        stderr(&out)
    );
    // The async mode takes the same path.
    let out = turnstone(&["fleet", d, "--sessions", "16", "--events", "200", "--async"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = turnstone(&["verify", d]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// A store whose every session of the fleet's range is deleted ends the
/// run at once (nothing to do), rather than spinning.
#[test]
fn fleet_with_every_session_deleted_does_nothing_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let d = p(&dir);
    let out = turnstone(&[
        "fleet",
        d,
        "--sessions",
        "2",
        "--threads",
        "1",
        "--events",
        "50",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for id in ["sess-000000", "sess-000001"] {
        let out = turnstone(&["delete", d, "--session", id]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let out = turnstone(&[
        "fleet",
        d,
        "--sessions",
        "2",
        "--threads",
        "1",
        "--events",
        "50",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json_one(&out)["events"], 0);
    assert!(stderr(&out).contains("skipped 2 deleted sessions"));
}

/// The README's `export ... > s.jsonl && import ./other-store s.jsonl`:
/// the other store does not exist yet.
#[test]
fn import_and_restore_create_a_missing_store() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("demo-store");
    fleet(&src, 300, &[]);
    let jsonl = tmp.path().join("s.jsonl");
    let out = turnstone(&["export", p(&src), "--session", "sess-000003"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::write(&jsonl, &out.stdout).unwrap();

    let other = tmp.path().join("other-store");
    let out = turnstone(&["import", p(&other), p(&jsonl)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let a = turnstone(&["messages", p(&src), "--session", "sess-000003"]);
    // The session is named after the file.
    let b = turnstone(&["messages", p(&other), "--session", "s"]);
    assert_eq!(code(&b), 0, "{}", stderr(&b));
    assert_eq!(stdout(&a), stdout(&b));

    // `restore` of an archive into a store that does not exist yet.
    let tsarc = tmp.path().join("s3.tsarc");
    let out = turnstone(&[
        "archive",
        p(&src),
        "--session",
        "sess-000003",
        "--out",
        p(&tsarc),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let third = tmp.path().join("third-store");
    let out = turnstone(&["restore", p(&third), p(&tsarc)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let c = turnstone(&["messages", p(&third), "--session", "sess-000003"]);
    assert_eq!(code(&c), 0, "{}", stderr(&c));
    assert_eq!(stdout(&a), stdout(&c));

    // A path that exists but is a file is still refused, naming it.
    let out = turnstone(&["import", p(&jsonl), p(&jsonl)]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains(p(&jsonl)), "{}", stderr(&out));
}
