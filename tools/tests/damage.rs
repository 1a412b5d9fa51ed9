//! Every command on every damage vector of format-spec/vectors, on random
//! files, on a locked store; errors are one sentence with the path.

mod common;

use std::path::Path;

use base64::Engine as _;
use common::*;

/// File name of a path string.
fn file_name(s: &str) -> &str {
    Path::new(s).file_name().unwrap().to_str().unwrap()
}

fn assert_one_line_error(out: &std::process::Output, args: &[&str], needles: &[&str]) {
    assert_eq!(code(out), 2, "{args:?}: {}", stdout(out));
    let err = stderr(out);
    assert!(err.starts_with("turnstone: "), "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: one line: {err}"
    );
    for n in needles {
        assert!(err.contains(n), "{args:?}: {err} lacks {n:?}");
    }
}

#[test]
fn every_command_on_each_format_vector() {
    let tmp = tempfile::tempdir().unwrap();
    let vectors = vectors();
    assert!(vectors.len() >= 10);
    for (name, src, exp) in vectors {
        let dir = tmp.path().join(&name);
        copy_dir(&src, &dir);
        let d = p(&dir);
        let outcome = exp["outcome"].as_str().unwrap();
        let files: Vec<String> = exp["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .filter(|f| f.ends_with(".tseg"))
            .collect();
        let seg1 = dir.join("0000000001.tseg");
        let jsonl = tmp.path().join("empty.jsonl");
        std::fs::write(&jsonl, "").unwrap();
        let all_cmds: Vec<Vec<&str>> = vec![
            vec!["verify", d],
            vec!["verify", d, "--json"],
            vec!["dump", d],
            vec!["dump", d, "--json"],
            vec!["dump", d, "--raw"],
            vec!["dump", p(&seg1)],
            vec!["stats", d, "--json"],
            vec!["messages", d, "--session", "s"],
            vec!["export", d, "--session", "s"],
            vec!["recover", d],
            vec!["import", d, p(&jsonl), "--session", "x"],
            vec!["fleet", d, "--events", "10", "--sessions", "2"],
        ];
        match outcome {
            "not-turnstone" | "unsupported-version" => {
                let needle = if outcome == "not-turnstone" {
                    "is not a turnstone segment"
                } else {
                    "has format version 2, but this turnstone reads version 1"
                };
                let before = std::fs::read(&seg1).unwrap();
                for args in &all_cmds {
                    let out = turnstone(args);
                    assert_one_line_error(&out, args, &["0000000001.tseg", needle]);
                }
                assert_eq!(
                    std::fs::read(&seg1).unwrap(),
                    before,
                    "{name}: bytes changed"
                );
                continue;
            }
            _ => {}
        }
        let corrupt = outcome == "corruption";
        let want_code = i32::from(corrupt);
        let pit = &exp["modes"]["point-in-time"];
        let first = pit["problems"].as_array().unwrap().first().cloned();

        // verify --json: verdict, the first problem where recovery finds it.
        let out = turnstone(&["verify", d, "--json"]);
        assert_eq!(code(&out), want_code, "{name}");
        let v = json_one(&out);
        let status = match outcome {
            "ok" => "clean",
            "torn-tail" => "torn-tail",
            _ => "corrupt",
        };
        assert_eq!(v["status"], status, "{name}: {v}");
        let per_seg = v["per_segment"].as_array().unwrap();
        assert_eq!(per_seg.len(), files.len(), "{name}");
        let vp = v["problems"].as_array().unwrap();
        match &first {
            Some(f) => {
                assert_eq!(vp[0]["problem"], f["kind"], "{name}");
                assert_eq!(vp[0]["offset"], f["offset"], "{name}");
                assert_eq!(file_name(vp[0]["segment"].as_str().unwrap()), f["file"]);
                let seg = per_seg
                    .iter()
                    .find(|s| file_name(s["file"].as_str().unwrap()) == f["file"])
                    .unwrap();
                assert_ne!(seg["status"], "ok", "{name}");
            }
            None => assert!(vp.is_empty(), "{name}: {v}"),
        }

        // dump --json: same verdict, problems in place, frames checked
        // against the expected events (raw payloads come out in base64).
        let (lines, rc) = dump_json(&dir, &[]);
        assert_eq!(rc, want_code, "{name}");
        let probs = problems(&lines);
        if let Some(f) = &first {
            assert_eq!(probs[0]["problem"], f["kind"], "{name}");
            assert_eq!(probs[0]["offset"], f["offset"], "{name}");
            assert!(probs[0]["detail"].as_str().unwrap().len() > 10);
        }
        // (Frames of a failing batch are shown too, marked not trusted, and
        // are not events of the store.)
        let fr: Vec<_> = frames(&lines)
            .into_iter()
            .filter(|f| f["trusted"] != false)
            .collect();
        assert_eq!(fr.len() as u64, v["events"].as_u64().unwrap(), "{name}");
        for f in &fr {
            assert_eq!(f["encoding"], "base64", "{name}: {f}");
            assert!(f["kind"].as_str().unwrap().contains('/'));
        }
        if !corrupt {
            for sess in pit["sessions"].as_array().unwrap() {
                let upto = sess["parent"]["upto"].as_u64().unwrap_or(0);
                let want: Vec<(u64, String)> = sess["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|e| e["seq"].as_u64().unwrap() >= upto)
                    .map(|e| {
                        (
                            e["seq"].as_u64().unwrap(),
                            e["payload"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect();
                let got: Vec<(u64, String)> = fr
                    .iter()
                    .filter(|f| f["session"] == sess["name"])
                    .map(|f| {
                        let raw = base64::engine::general_purpose::STANDARD
                            .decode(f["data"].as_str().unwrap())
                            .unwrap();
                        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                        (f["seq"].as_u64().unwrap(), hex)
                    })
                    .collect();
                assert_eq!(got, want, "{name}: session {}", sess["name"]);
            }
        }

        // Text and raw dumps: a header per segment, damage marked in place.
        let out = turnstone(&["dump", d]);
        assert_eq!(code(&out), want_code, "{name}");
        let text = stdout(&out);
        assert_eq!(
            text.lines().filter(|l| l.starts_with("== segment")).count(),
            files.len(),
            "{name}: {text}"
        );
        assert_eq!(text.contains("!! "), first.is_some(), "{name}: {text}");
        let out = turnstone(&["dump", d, "--raw"]);
        assert_eq!(code(&out), want_code, "{name}");
        assert!(
            stdout(&out).contains("5453 544e 5345 4700"),
            "{name}: magic"
        );

        // Each segment file alone, copied elsewhere: no panic, damage shown.
        for f in &files {
            let lone = tmp.path().join(format!("lone-{name}"));
            std::fs::create_dir_all(&lone).unwrap();
            let copy = lone.join(f);
            std::fs::copy(dir.join(f), &copy).unwrap();
            let out = turnstone(&["dump", p(&copy), "--json"]);
            assert!(matches!(code(&out), 0 | 1), "{name}/{f}: {}", stderr(&out));
            json_lines(&out);
        }

        // stats agrees with verify.
        let out = turnstone(&["stats", d, "--json"]);
        assert_eq!(code(&out), want_code, "{name}");
        assert_eq!(json_one(&out)["events"], v["events"], "{name}");

        // The vectors' payloads are raw bytes, not session envelopes: the
        // session commands say so, in one line.
        if let Some(sess) = pit["sessions"].as_array().and_then(|s| s.first()) {
            let sname = sess["name"].as_str().unwrap();
            if !corrupt {
                for cmd in ["messages", "export"] {
                    let args = [cmd, d, "--session", sname];
                    let out = turnstone(&args);
                    assert_one_line_error(&out, &args, &["not a session envelope"]);
                }
            }
        }

        // recover: corruption is refused (nothing changes) unless salvaging.
        let before: Vec<Vec<u8>> = files
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap())
            .collect();
        let out = turnstone(&["recover", d, "--json"]);
        if corrupt {
            let args = ["recover", d];
            let f = first.as_ref().unwrap();
            assert_eq!(code(&out), 1, "{name}");
            let err = stderr(&out);
            assert!(
                err.starts_with("turnstone: corruption in "),
                "{name}: {err}"
            );
            assert!(err.contains(f["file"].as_str().unwrap()), "{args:?} {err}");
            assert!(err.contains(&format!("offset {}", f["offset"])), "{err}");
            let after: Vec<Vec<u8>> = files
                .iter()
                .map(|f| std::fs::read(dir.join(f)).unwrap())
                .collect();
            assert!(before == after, "{name}: a refused recover changed bytes");
            let out = turnstone(&["recover", d, "--json", "--point-in-time"]);
            assert!(matches!(code(&out), 0 | 1), "{name}: {}", stderr(&out));
            let r = json_one(&out);
            assert_eq!(r["problems"][0]["problem"], "corruption", "{name}");
        } else {
            // Recovery itself succeeds; sessions that are not session-layer
            // sessions are listed as not repaired (exit 1).
            let r = json_one(&out);
            let tol = exp["modes"]["tolerate-torn-tail"]["problems"]
                .as_array()
                .unwrap();
            let got = r["problems"].as_array().unwrap();
            assert_eq!(got.len(), tol.len(), "{name}: {r}");
            for (g, t) in got.iter().zip(tol) {
                assert_eq!(g["problem"], t["kind"]);
                assert_eq!(g["offset"], t["offset"]);
                assert!(!g["action"].as_str().unwrap().is_empty());
            }
            let errors = r["errors"].as_array().unwrap();
            assert_eq!(code(&out), i32::from(!errors.is_empty()), "{name}");
            assert!(errors.iter().all(|e| e["error"]
                .as_str()
                .unwrap()
                .contains("not a session envelope")));
            assert_eq!(r["sessions_repaired"], 0);
        }
        // After a (salvaging) recover the store verifies clean.
        let out = turnstone(&["verify", d, "--json"]);
        assert_eq!(code(&out), 0, "{name}: {}", stdout(&out));
        assert_eq!(json_one(&out)["status"], "clean", "{name}");
    }
}

#[test]
fn checksum_mismatch_is_shown_expected_and_found() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, src, _) = vectors()
        .into_iter()
        .find(|v| v.0 == "mid-log-corruption")
        .unwrap();
    let dir = tmp.path().join("v");
    copy_dir(&src, &dir);
    let (lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 1);
    let pr = problems(&lines);
    assert_eq!(pr.len(), 1);
    let (e, f) = (
        pr[0]["expected"].as_str().unwrap(),
        pr[0]["found"].as_str().unwrap(),
    );
    assert!(
        e.starts_with("0x") && f.starts_with("0x") && e != f,
        "{}",
        pr[0]
    );
    // The stored checksum is the one in the batch header at that offset.
    let bytes = std::fs::read(dir.join("0000000001.tseg")).unwrap();
    let off = pr[0]["offset"].as_u64().unwrap() as usize;
    let stored = u32::from_le_bytes(bytes[off + 20..off + 24].try_into().unwrap());
    assert_eq!(e, format!("{stored:#010x}"));
    assert_eq!(
        pr[0]["bytes"], 96,
        "bytes skipped up to the next valid batch"
    );
    // Dumping went on past the damage to the valid batch after it.
    let last = lines.last().unwrap();
    assert!(last["offset"].as_u64().unwrap() > off as u64, "{last}");
    let out = turnstone(&["verify", p(&dir)]);
    assert!(stdout(&out).contains(&format!("expected {e}, found {f}")));
    // Issue 16: the damage is named at its frame (the flipped bit is in the
    // batch's first frame), with the checksum that failed; the batch's
    // other frame checks on its own and is shown, marked not trusted.
    assert_eq!(pr[0]["checksum"], "batch-body", "{}", pr[0]);
    let damaged = pr[0]["damaged_frames"].as_array().expect("damaged frames");
    assert_eq!(damaged.len(), 1, "{}", pr[0]);
    assert_eq!(damaged[0]["offset"], 192);
    assert_eq!(damaged[0]["len"], 31);
    assert!(damaged[0]["expected"].as_str().unwrap() != damaged[0]["found"].as_str().unwrap());
    assert_eq!(pr[0]["untrusted_frames"], 1);
    let untrusted: Vec<_> = lines.iter().filter(|l| l["trusted"] == false).collect();
    assert_eq!(untrusted.len(), 1, "{lines:?}");
    assert_eq!(untrusted[0]["offset"], 224);
    assert!(stdout(&turnstone(&["dump", p(&dir)])).contains("not trusted"));
}

/// Issue 16: `export --salvage` reads a damaged store past the damage: the
/// session's dense prefix up to its damaged frame, and other sessions whole;
/// what was dropped is said on standard error. Plain `export` refuses.
#[test]
fn export_salvage_reads_past_a_damaged_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 600, &[]);
    let (lines, rc) = dump_json(&dir, &[]);
    assert_eq!(rc, 0);
    let fr = frames(&lines);
    // A frame in the middle of the first segment, not a define.
    let victim = fr
        .iter()
        .filter(|f| {
            f["kind"] != "session/define"
                && f["segment"].as_str().unwrap().ends_with("0000000001.tseg")
        })
        .nth(40)
        .expect("a frame to damage");
    let session = victim["session"].as_str().unwrap().to_string();
    let seq = victim["seq"].as_u64().unwrap();
    let seg = std::path::PathBuf::from(victim["segment"].as_str().unwrap());
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[victim["offset"].as_u64().unwrap() as usize + 24 + 3] ^= 0x20;
    std::fs::write(&seg, &bytes).unwrap();
    let _ = std::fs::remove_file(dir.join("index.ckpt"));

    let out = turnstone(&["export", p(&dir), "--session", &session]);
    assert_ne!(
        code(&out),
        0,
        "a corrupt store is refused without --salvage"
    );
    let out = turnstone(&["export", p(&dir), "--session", &session, "--salvage"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).lines().count() as u64,
        seq,
        "{session}: seq {seq} damaged"
    );
    let err = stderr(&out);
    let at = format!("offset {}", victim["offset"]);
    assert!(
        err.contains("salvage: corruption") && err.contains(&at),
        "{err}"
    );
}

#[test]
fn locked_store_refuses_writers_and_serves_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    fleet(&dir, 600, &[]);
    let (text, _) = {
        let out = turnstone(&["export", p(&dir), "--session", "sess-000001"]);
        (stdout(&out), ())
    };
    let file = tmp.path().join("s.jsonl");
    std::fs::write(&file, text).unwrap();
    // This process holds the writer's lock.
    let store = turnstone::Store::open(&dir).unwrap();
    let d = p(&dir);
    for args in [
        vec!["recover", d],
        vec!["import", d, p(&file), "--session", "n"],
        vec!["fleet", d, "--events", "10"],
    ] {
        let out = turnstone(&args);
        assert_one_line_error(&out, &args, &[d, "is in use", "LOCK"]);
    }
    // Read-only commands never take the lock.
    for args in [
        vec!["verify", d, "--json"],
        vec!["dump", d, "--json"],
        vec!["stats", d, "--json"],
        vec!["messages", d, "--session", "sess-000001", "--json"],
        vec!["export", d, "--session", "sess-000001"],
    ] {
        let out = turnstone(&args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert!(!json_lines(&out).is_empty());
    }
    store.close().unwrap();
    let out = turnstone(&["recover", d]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn random_and_missing_inputs_are_one_sentence() {
    let tmp = tempfile::tempdir().unwrap();
    let junk = junk(10_000, 0x1234_5678_9abc_def0);
    let dir = tmp.path().join("junkstore");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("0000000001.tseg"), &junk).unwrap();
    let loose = tmp.path().join("junk.bin");
    std::fs::write(&loose, &junk).unwrap();
    let missing = tmp.path().join("no-such-dir");
    let empty_jsonl = tmp.path().join("a.jsonl");
    std::fs::write(&empty_jsonl, "").unwrap();
    let d = p(&dir);
    for args in [
        vec!["stats", d],
        vec!["messages", d, "--session", "a"],
        vec!["export", d, "--session", "a"],
        vec!["recover", d],
        vec!["import", d, p(&empty_jsonl)],
        vec!["fleet", d, "--events", "5"],
    ] {
        let out = turnstone(&args);
        assert_one_line_error(&out, &args, &["0000000001.tseg", "not a turnstone segment"]);
    }
    for cmd in ["verify", "dump", "stats"] {
        let args = [cmd, p(&loose)];
        assert_one_line_error(&turnstone(&args), &args, &["junk.bin", "not a turnstone"]);
    }
    for args in [
        vec!["messages", p(&loose), "--session", "a"],
        vec!["export", p(&loose), "--session", "a"],
        vec!["recover", p(&loose)],
    ] {
        assert_one_line_error(&turnstone(&args), &args, &["junk.bin", "is a file"]);
    }
    for args in [
        vec!["verify", p(&missing)],
        vec!["dump", p(&missing)],
        vec!["stats", p(&missing)],
        vec!["messages", p(&missing), "--session", "a"],
        vec!["export", p(&missing), "--session", "a"],
        vec!["recover", p(&missing)],
    ] {
        assert_one_line_error(&turnstone(&args), &args, &["no-such-dir"]);
    }
    assert!(!missing.exists(), "recover must not create a store");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for cmd in ["verify", "dump", "stats", "recover"] {
        let args = [cmd, p(&empty)];
        assert_one_line_error(&turnstone(&args), &args, &["empty", "no segment files"]);
    }
    // Usage errors.
    for args in [
        vec!["dump", d, "--kind", "toolcall"],
        vec!["dump", d, "--from-seq", "5", "--to-seq", "2"],
        vec!["fleet", p(&tmp.path().join("x")), "--sessions", "0"],
    ] {
        assert_eq!(code(&turnstone(&args)), 2, "{args:?}");
    }
}

#[test]
fn help_on_every_command_has_an_example() {
    for cmd in [
        "fleet", "messages", "recover", "dump", "verify", "stats", "export", "import",
    ] {
        let out = turnstone(&[cmd, "--help"]);
        assert_eq!(code(&out), 0, "{cmd}");
        let text = stdout(&out);
        assert!(text.contains("Example"), "{cmd} --help: {text}");
        assert!(text.contains(&format!("turnstone {cmd} ")), "{cmd}: {text}");
    }
    let out = turnstone(&["--help"]);
    assert!(stdout(&out).contains("Examples:"));
}
