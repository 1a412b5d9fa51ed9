//! Everything survives a restart and `kill -9`: data, offsets, producer
//! state, closure, deletion, forks.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;

#[tokio::test]
async fn state_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);

    h.put("/text", "text/plain", "hello").await;
    h.post("/text", "text/plain", " again").await;
    h.put("/json", "application/json", r#"[{"a":1},{"b":2}]"#)
        .await;
    assert_eq!(prod(&h, "0", "0", r#"{"c":3}"#).await.status(), 200);
    assert_eq!(prod(&h, "1", "1", r#"{"d":4}"#).await.status(), 200);
    h.put("/closed", "text/plain", "final").await;
    h.req(Method::POST, "/closed", &[("stream-closed", "true")], "")
        .await;
    h.put("/deleted", "text/plain", "bye").await;
    h.req(Method::DELETE, "/deleted", &[], "").await;
    h.put("/src", "text/plain", "shared").await;
    h.req(
        Method::PUT,
        "/fork",
        &[
            ("stream-forked-from", "/src"),
            ("content-type", "text/plain"),
        ],
        "",
    )
    .await;
    h.post("/fork", "text/plain", "+mine").await;
    h.req(Method::DELETE, "/src", &[], "").await;
    let exp = "2999-01-01T00:00:00Z";
    h.req(
        Method::PUT,
        "/exp",
        &[("content-type", "text/plain"), ("stream-expires-at", exp)],
        "",
    )
    .await;
    let before_text = h.read("/text").await;
    let before_json = h.read("/json").await;
    server.shutdown().await.unwrap();

    let server = start(options(dir.path())).await;
    let report = server.rebuild_report().clone();
    assert_eq!(report.incomplete, 0);
    let h = Http::new(&server);
    assert_eq!(h.read("/text").await, before_text);
    assert_eq!(h.read("/json").await, before_json);
    let v: serde_json::Value = serde_json::from_str(&before_json.2).unwrap();
    assert_eq!(v, serde_json::json!([{"a":1},{"b":2},{"c":3},{"d":4}]));
    // Producer and Stream-Seq state were logged with the data.
    assert_eq!(
        prod(&h, "1", "1", r#"{"e":5}"#).await.status(),
        204,
        "retry deduplicated"
    );
    assert_eq!(
        prod(&h, "2", "0", r#"{"e":5}"#).await.status(),
        409,
        "Stream-Seq regression"
    );
    assert_eq!(prod(&h, "2", "2", r#"{"e":5}"#).await.status(), 200);
    let r = h.post("/closed", "text/plain", "more").await;
    assert_eq!(r.status(), 409);
    assert_eq!(header(&r, "stream-closed"), "true");
    assert_eq!(h.read("/closed").await.2, "final");
    assert_eq!(h.get("/deleted").await.status(), 404);
    assert_eq!(h.get("/src").await.status(), 410);
    assert_eq!(h.read("/fork").await.2, "shared+mine");
    let r = h.req(Method::HEAD, "/exp", &[], "").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "stream-expires-at"), exp);
    // Releasing the last fork releases the source, across the restart too.
    assert_eq!(h.req(Method::DELETE, "/fork", &[], "").await.status(), 204);
    assert_eq!(h.get("/src").await.status(), 404);
    server.shutdown().await.unwrap();
}

async fn prod(h: &Http, seq: &str, sseq: &str, body: &'static str) -> reqwest::Response {
    h.req(
        Method::POST,
        "/json",
        &[
            ("content-type", "application/json"),
            ("producer-id", "w"),
            ("producer-epoch", "3"),
            ("producer-seq", seq),
            ("stream-seq", sseq),
        ],
        body,
    )
    .await
}

const CHILD_ENV: &str = "TURNSTONE_SERVE_TEST_CHILD_DIR";

/// Not a test on its own: the child process of `kill_9_under_load`.
#[tokio::test]
async fn kill9_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let server = start(options(std::path::Path::new(&dir).join("store").as_path())).await;
    let tmp = std::path::Path::new(&dir).join("addr.tmp");
    std::fs::write(&tmp, server.local_addr().to_string()).unwrap();
    std::fs::rename(&tmp, std::path::Path::new(&dir).join("addr")).unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test]
async fn kill_9_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "kill9_child", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let addr = loop {
        if let Ok(a) = std::fs::read_to_string(dir.path().join("addr")) {
            break a;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "child server did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let base = format!("http://{addr}");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    const WRITERS: usize = 6;
    for w in 0..WRITERS {
        let r = client
            .put(format!("{base}/k{w}"))
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    // Writers append with producer headers until the server dies; each
    // records the highest seq that got a 2xx.
    let deadline = Instant::now() + Duration::from_millis(800);
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (client, base) = (client.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked: Option<u64> = None;
            for seq in 0u64.. {
                let r = client
                    .post(format!("{base}/k{w}"))
                    .header("content-type", "application/json")
                    .header("producer-id", format!("p{w}"))
                    .header("producer-epoch", "0")
                    .header("producer-seq", seq.to_string())
                    .body(format!("{{\"w\":{w},\"s\":{seq}}}"))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 200 => acked = Some(seq),
                    _ => break,
                }
                if Instant::now() > deadline + Duration::from_secs(5) {
                    break;
                }
            }
            acked
        }));
    }
    tokio::time::sleep_until(deadline.into()).await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let mut acked = Vec::new();
    for t in tasks {
        acked.push(t.await.unwrap());
    }
    assert!(
        acked.iter().all(Option::is_some),
        "every writer got acks: {acked:?}"
    );

    let server = start(options(&dir.path().join("store"))).await;
    let h = Http::new(&server);
    for (w, acked) in acked.iter().enumerate() {
        let acked = acked.unwrap();
        let (st, _, body) = h.read(&format!("/k{w}")).await;
        assert_eq!(st, 200);
        let v: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        let seqs: Vec<u64> = v.iter().map(|m| m["s"].as_u64().unwrap()).collect();
        let expect: Vec<u64> = (0..seqs.len() as u64).collect();
        assert_eq!(
            seqs, expect,
            "writer {w}: a durable prefix, no holes or repeats"
        );
        assert!(
            seqs.len() as u64 > acked,
            "writer {w}: every acknowledged append survived"
        );
        // A retry of the last durable append is deduplicated.
        let last = seqs.len() as u64 - 1;
        let r = h
            .req(
                Method::POST,
                &format!("/k{w}"),
                &[
                    ("content-type", "application/json"),
                    ("producer-id", &format!("p{w}")),
                    ("producer-epoch", "0"),
                    ("producer-seq", &last.to_string()),
                ],
                format!("{{\"w\":{w},\"s\":{last}}}"),
            )
            .await;
        assert_eq!(
            r.status(),
            204,
            "writer {w}: retry after the crash deduplicates"
        );
    }
    server.shutdown().await.unwrap();
}
