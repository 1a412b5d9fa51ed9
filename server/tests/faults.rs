//! A slow or failing disk under the server (issue 19, items 2, 7 and 11),
//! through a fault-injecting file layer in-process: an answer is only ever
//! given for what is durable, a 503 means nothing of the request is or will
//! be applied, a 500 on a write means "outcome unknown" and an idempotent
//! retry settles it exactly, and readers never see what is not durable.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::fault::{FaultVfs, Faults};
use common::*;
use reqwest::Method;
use turnstone_server::Server;

async fn faulty_server(dir: &std::path::Path) -> (Server, Arc<Faults>) {
    let (vfs, faults) = FaultVfs::new();
    let mut o = options(dir);
    o.store.vfs = vfs;
    (start(o).await, faults)
}

async fn wait_held(f: &Arc<Faults>, n: u64) {
    let f = f.clone();
    tokio::task::spawn_blocking(move || f.wait_held(n))
        .await
        .unwrap();
}

fn spawn_req(
    h: &Http,
    method: Method,
    path: &str,
    headers: Vec<(&'static str, &'static str)>,
    body: &'static str,
) -> tokio::task::JoinHandle<reqwest::Response> {
    let (client, url) = (h.client.clone(), format!("{}{}", h.base, path));
    tokio::spawn(async move {
        let mut rb = client.request(method, url);
        for (k, v) in headers {
            rb = rb.header(k, v);
        }
        rb.body(body).send().await.expect("request sent")
    })
}

/// Item 2: a `Stream-Seq` retry is not answered 409 ("it was durable")
/// while the original append is still waiting for its fdatasync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_seq_retry_waits_for_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let (server, faults) = faulty_server(dir.path()).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/s", "text/plain", "").await.status(), 201);

    let _hold = faults.hold_syncs();
    let hd = vec![("content-type", "text/plain"), ("stream-seq", "001")];
    let original = spawn_req(&h, Method::POST, "/s", hd.clone(), "one");
    wait_held(&faults, 1).await;
    let mut retry = spawn_req(&h, Method::POST, "/s", hd, "one");
    // The original is not durable: the retry must not be answered yet (a
    // 409 now would claim durability the disk has not given).
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut retry)
            .await
            .is_err(),
        "the retry was answered before the original was durable"
    );
    // Nor may a reader see the append.
    let (status, _, body) = h.read("/s").await;
    assert_eq!((status, body.as_str()), (200, ""));
    faults.release_syncs();
    assert_eq!(original.await.unwrap().status(), 204);
    assert_eq!(retry.await.unwrap().status(), 409);
    assert_eq!(h.read("/s").await.2, "one");
    server.shutdown().await.unwrap();
}

/// Item 7: a write that fails (ENOSPC: the engine keeps the batch and may
/// commit it later) answers 500 with `Stream-Outcome: unknown`; nothing is
/// shown to readers; the producer's retry settles it exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_write_is_outcome_unknown_and_a_producer_retry_settles_it() {
    let dir = tempfile::tempdir().unwrap();
    let (server, faults) = faulty_server(dir.path()).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/p", "text/plain", "a").await.status(), 201);
    let prod = |seq: &'static str| {
        vec![
            ("content-type", "text/plain"),
            ("producer-id", "w"),
            ("producer-epoch", "0"),
            ("producer-seq", seq),
        ]
    };
    faults.fail_writes.store(true, Ordering::SeqCst);
    let r = spawn_req(&h, Method::POST, "/p", prod("0"), "b")
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(header(&r, "stream-outcome"), "unknown");
    assert!(faults.failed_writes.load(Ordering::SeqCst) > 0);
    assert_eq!(h.read("/p").await.2, "a", "a failed write is not shown");
    // While the write fails, new writes are refused (503: not applied), so
    // that a full disk does not pile up appends in memory; health says so.
    let r = h.post("/p", "text/plain", "c").await;
    assert_eq!(r.status(), 503);
    let r = h.get("/.well-known/turnstone/health").await;
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().starts_with("write-failing: "));
    assert_eq!(h.read("/p").await.2, "a");

    faults.fail_writes.store(false, Ordering::SeqCst);
    // The server retries the kept batch by itself; writes resume.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while h.get("/.well-known/turnstone/health").await.status() != 200 {
        assert!(std::time::Instant::now() < deadline, "writes never resumed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The retry settles the producer's append: a duplicate, once durable.
    let r = spawn_req(&h, Method::POST, "/p", prod("0"), "b")
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(header(&r, "producer-seq"), "0");
    // The failed append was kept by the engine and is now durable (which
    // is why its answer had to be "unknown", not "not applied"); the
    // refused one is not there.
    assert_eq!(h.read("/p").await.2, "ab");
    let r = spawn_req(&h, Method::POST, "/p", prod("1"), "d")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    server.shutdown().await.unwrap();

    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.read("/p").await.2, "abd");
    server.shutdown().await.unwrap();
}

/// Item 7: after a failed fdatasync the store is poisoned; the failed write
/// answers 500 (unknown), every later write 503, and a 503 write is never
/// found after a restart. Health and metrics say so (item 11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisoned_store_answers_503_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (server, faults) = faulty_server(dir.path()).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/q", "text/plain", "a").await.status(), 201);
    let r = h.get("/.well-known/turnstone/health").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ready\n");
    faults.fail_syncs.store(true, Ordering::SeqCst);
    let r = h.post("/q", "text/plain", "b").await;
    assert_eq!(r.status(), 500);
    assert_eq!(header(&r, "stream-outcome"), "unknown");
    for body in ["x", "y"] {
        let r = h.post("/q", "text/plain", body).await;
        assert_eq!(r.status(), 503, "{:?}", r.text().await);
    }
    assert_eq!(h.read("/q").await.2, "a");
    let r = h.req(Method::PUT, "/new", &[], "").await;
    assert_eq!(r.status(), 503);
    // Exposed: health says why, metrics say unhealthy (item 11).
    let r = h.get("/.well-known/turnstone/health").await;
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().starts_with("poisoned: "));
    let m = h
        .get("/.well-known/turnstone/metrics")
        .await
        .text()
        .await
        .unwrap();
    assert!(m.contains("\nturnstone_serve_healthy 0\n"), "{m}");
    let _ = server.shutdown().await;

    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    let body = h.read("/q").await.2;
    assert!(body == "a" || body == "ab", "{body:?}");
    assert_eq!(h.get("/new").await.status(), 404);
    server.shutdown().await.unwrap();
}

/// Item 7: a DELETE hides the stream only once its tombstone is durable; a
/// DELETE whose write fails leaves the stream readable and a retry settles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_hides_the_stream_only_when_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (server, faults) = faulty_server(dir.path()).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/d", "text/plain", "data").await.status(), 201);

    let _hold = faults.hold_syncs();
    let del = spawn_req(&h, Method::DELETE, "/d", vec![], "");
    wait_held(&faults, 1).await;
    let (status, _, body) = h.read("/d").await;
    assert_eq!(
        (status, body.as_str()),
        (200, "data"),
        "hidden before durable"
    );
    faults.release_syncs();
    assert_eq!(del.await.unwrap().status(), 204);
    assert_eq!(h.get("/d").await.status(), 404);

    assert_eq!(h.put("/e", "text/plain", "data").await.status(), 201);
    faults.fail_writes.store(true, Ordering::SeqCst);
    let r = h.req(Method::DELETE, "/e", &[], "").await;
    assert_eq!(r.status(), 500);
    assert_eq!(header(&r, "stream-outcome"), "unknown");
    let (status, _, body) = h.read("/e").await;
    assert_eq!((status, body.as_str()), (200, "data"));
    faults.fail_writes.store(false, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while h.get("/.well-known/turnstone/health").await.status() != 200 {
        assert!(std::time::Instant::now() < deadline, "writes never resumed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = h.req(Method::DELETE, "/e", &[], "").await;
    assert!([204, 404].contains(&r.status().as_u16()), "{}", r.status());
    assert_eq!(h.get("/e").await.status(), 404);
    server.shutdown().await.unwrap();

    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.get("/d").await.status(), 404);
    assert_eq!(h.get("/e").await.status(), 404);
    server.shutdown().await.unwrap();
}

/// Item 11: a store directory removed while serving takes no more writes
/// (503, logged), and health says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_store_directory_stops_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let server = start(options(&store)).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/r", "text/plain", "a").await.status(), 201);
    std::fs::remove_dir_all(&store).unwrap();
    let r = h.post("/r", "text/plain", "b").await;
    assert!(
        [500, 503].contains(&r.status().as_u16()),
        "a write into a removed store was acknowledged: {}",
        r.status()
    );
    for _ in 0..3 {
        let r = h.post("/r", "text/plain", "c").await;
        assert_eq!(r.status(), 503);
    }
    let r = h.get("/.well-known/turnstone/health").await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.text().await.unwrap(), "store-missing\n");
    let _ = server.shutdown().await;
}

/// Items 2 and 7 for PUT: a conflicting create racing one that is not yet
/// durable is answered 409 only once the original is durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_conflict_waits_for_the_original_create() {
    let dir = tempfile::tempdir().unwrap();
    let (server, faults) = faulty_server(dir.path()).await;
    let h = Http::new(&server);
    let hold = faults.hold_syncs();
    let original = spawn_req(
        &h,
        Method::PUT,
        "/c",
        vec![("content-type", "text/plain")],
        "",
    );
    wait_held(&faults, 1).await;
    let mut other = spawn_req(
        &h,
        Method::PUT,
        "/c",
        vec![("content-type", "application/json")],
        "",
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut other)
            .await
            .is_err(),
        "409 before the stream it conflicts with was durable"
    );
    drop(hold);
    assert_eq!(original.await.unwrap().status(), 201);
    assert_eq!(other.await.unwrap().status(), 409);
    server.shutdown().await.unwrap();
}
