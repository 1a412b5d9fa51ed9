//! The protocol end to end over HTTP: create, append, read, live modes,
//! close, delete, fork, idempotent producers.

mod common;

use common::*;
use futures_util::StreamExt;
use reqwest::Method;

#[tokio::test]
async fn create_append_read_head() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);

    let r = h.put("/s/a", "text/plain", "hello").await;
    assert_eq!(r.status(), 201);
    assert!(header(&r, "location").ends_with("/s/a"));
    let o1 = header(&r, "stream-next-offset");
    assert_eq!(h.put("/s/a", "TEXT/PLAIN", "").await.status(), 200);
    assert_eq!(h.put("/s/a", "application/json", "").await.status(), 409);

    let r = h.post("/s/a", "text/plain", " world").await;
    assert_eq!(r.status(), 204);
    let o2 = header(&r, "stream-next-offset");
    assert!(o2 > o1, "{o2} > {o1}");

    let (st, next, body) = h.read("/s/a").await;
    assert_eq!(
        (st, next.as_str(), body.as_str()),
        (200, o2.as_str(), "hello world")
    );
    let (_, _, body) = h.read(&format!("/s/a?offset={o1}")).await;
    assert_eq!(body, " world");
    let (st, next, body) = h.read(&format!("/s/a?offset={o2}")).await;
    assert_eq!((st, next, body), (200, o2.clone(), String::new()));
    let r = h.get("/s/a?offset=now").await;
    assert_eq!(header(&r, "stream-next-offset"), o2);
    assert_eq!(header(&r, "cache-control"), "no-store");

    let r = h.req(Method::HEAD, "/s/a", &[], "").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/plain");
    assert_eq!(header(&r, "stream-next-offset"), o2);

    // ETag revalidation.
    let r = h.get("/s/a").await;
    let etag = header(&r, "etag");
    let r = h
        .req(Method::GET, "/s/a", &[("if-none-match", &etag)], "")
        .await;
    assert_eq!(r.status(), 304);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn json_mode_keeps_message_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/j", "application/json", "[]").await.status(), 201);
    assert_eq!(
        h.post("/j", "application/json", r#"{"a":1}"#)
            .await
            .status(),
        204
    );
    assert_eq!(
        h.post("/j", "application/json", "[[1,2], {\"b\":\n2}]")
            .await
            .status(),
        204
    );
    assert_eq!(h.post("/j", "application/json", "[]").await.status(), 400);
    assert_eq!(
        h.post("/j", "application/json", "{nope").await.status(),
        400
    );
    let (_, _, body) = h.read("/j").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v, serde_json::json!([{"a":1},[1,2],{"b":2}]));
    let (_, _, body) = h.read("/j?offset=now").await;
    assert_eq!(body, "[]");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn long_poll_waits_then_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    let r = h.put("/lp", "text/plain", "").await;
    let tail = header(&r, "stream-next-offset");

    let url = format!("{}/lp?offset={tail}&live=long-poll", h.base);
    let waiter = tokio::spawn(async move {
        let r = reqwest::get(url).await.unwrap();
        let cursor = header(&r, "stream-cursor");
        (r.status().as_u16(), cursor, r.text().await.unwrap())
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    h.post("/lp", "text/plain", "wake").await;
    let (status, cursor, body) = waiter.await.unwrap();
    assert_eq!((status, body.as_str()), (200, "wake"));
    assert!(cursor.parse::<u64>().is_ok());

    let r = h.get("/lp?offset=now&live=long-poll").await;
    assert_eq!(r.status(), 204);
    assert_eq!(header(&r, "stream-up-to-date"), "true");
    assert_eq!(h.get("/lp?live=long-poll").await.status(), 400);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn sse_catch_up_live_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    h.put("/e", "text/plain", "one\ntwo").await;
    let r = h.get("/e?offset=-1&live=sse").await;
    assert_eq!(header(&r, "content-type"), "text/event-stream");
    let mut stream = r.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("upToDate") {
        seen.push_str(&String::from_utf8_lossy(
            &stream.next().await.unwrap().unwrap(),
        ));
    }
    assert!(
        seen.contains("event: data\ndata:one\ndata:two\n\n"),
        "{seen}"
    );
    let r = h
        .req(
            Method::POST,
            "/e",
            &[("content-type", "text/plain"), ("stream-closed", "true")],
            "three",
        )
        .await;
    assert_eq!(r.status(), 204);
    while let Some(chunk) = stream.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(seen.contains("data:three"), "{seen}");
    assert!(seen.contains("\"streamClosed\":true"), "{seen}");

    // Binary streams are base64 in SSE.
    h.put("/b", "application/octet-stream", "Hello").await;
    let r = h.get("/b?offset=-1&live=sse").await;
    assert_eq!(header(&r, "stream-sse-data-encoding"), "base64");
    let mut stream = r.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("upToDate") {
        seen.push_str(&String::from_utf8_lossy(
            &stream.next().await.unwrap().unwrap(),
        ));
    }
    assert!(seen.contains("data:SGVsbG8="), "{seen}");
    drop(stream);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn close_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    h.put("/c", "text/plain", "x").await;
    let close = |path: &'static str| h.req(Method::POST, path, &[("stream-closed", "true")], "");
    let r = close("/c").await;
    assert_eq!(r.status(), 204);
    let tail = header(&r, "stream-next-offset");
    assert_eq!(close("/c").await.status(), 204);
    let r = h.post("/c", "text/plain", "late").await;
    assert_eq!(r.status(), 409);
    assert_eq!(header(&r, "stream-closed"), "true");
    assert_eq!(header(&r, "stream-next-offset"), tail);
    let r = h.get(&format!("/c?offset={tail}&live=long-poll")).await;
    assert_eq!(r.status(), 204);
    assert_eq!(header(&r, "stream-closed"), "true");

    assert_eq!(h.req(Method::DELETE, "/c", &[], "").await.status(), 204);
    assert_eq!(h.get("/c").await.status(), 404);
    assert_eq!(h.req(Method::DELETE, "/c", &[], "").await.status(), 404);
    assert_eq!(h.put("/c", "text/plain", "new").await.status(), 201);
    assert_eq!(h.read("/c").await.2, "new");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn forks_share_history_and_soft_delete() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    let r = h.put("/src", "text/plain", "hello").await;
    let mid = header(&r, "stream-next-offset");
    h.post("/src", "text/plain", " world").await;

    assert_eq!(fork(&h, "/f1", vec![]).await.status(), 201);
    assert_eq!(h.read("/f1").await.2, "hello world");
    assert_eq!(fork(&h, "/f1", vec![]).await.status(), 200);
    assert_eq!(
        fork(&h, "/f2", vec![("stream-fork-offset", mid.clone())])
            .await
            .status(),
        201
    );
    assert_eq!(h.read("/f2").await.2, "hello");
    let r = fork(
        &h,
        "/f3",
        vec![
            ("stream-fork-offset", OFFSET_ZERO.into()),
            ("stream-fork-sub-offset", "3".into()),
        ],
    )
    .await;
    assert_eq!(r.status(), 201);
    h.post("/f3", "text/plain", "P").await;
    assert_eq!(h.read("/f3").await.2, "helP");
    let bad = fork(
        &h,
        "/f4",
        vec![(
            "stream-fork-offset",
            "9999999999999999_9999999999999999".into(),
        )],
    )
    .await;
    assert_eq!(bad.status(), 400);

    // The source is hidden (410) while forks read through it, and gone when
    // the last one goes.
    assert_eq!(h.req(Method::DELETE, "/src", &[], "").await.status(), 204);
    assert_eq!(h.get("/src").await.status(), 410);
    assert_eq!(h.put("/src", "text/plain", "").await.status(), 409);
    assert_eq!(h.read("/f1").await.2, "hello world");
    for f in ["/f1", "/f2", "/f3"] {
        assert_eq!(h.req(Method::DELETE, f, &[], "").await.status(), 204);
    }
    assert_eq!(h.get("/src").await.status(), 404);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn idempotent_producers() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    h.put("/p", "text/plain", "").await;
    assert_eq!(produce(&h, "0", "0", "a").await.status(), 200);
    assert_eq!(produce(&h, "0", "1", "b").await.status(), 200);
    let dup = produce(&h, "0", "0", "a").await;
    assert_eq!(dup.status(), 204);
    assert_eq!(header(&dup, "producer-seq"), "1");
    let gap = produce(&h, "0", "5", "x").await;
    assert_eq!(gap.status(), 409);
    assert_eq!(header(&gap, "producer-expected-seq"), "2");
    assert_eq!(produce(&h, "1", "0", "c").await.status(), 200);
    let stale = produce(&h, "0", "2", "z").await;
    assert_eq!(stale.status(), 403);
    assert_eq!(header(&stale, "producer-epoch"), "1");
    assert_eq!(produce(&h, "2", "1", "z").await.status(), 400);
    assert_eq!(h.read("/p").await.2, "abc");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn ttl_expiry_removes_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    let r = h
        .req(
            Method::PUT,
            "/t",
            &[("content-type", "text/plain"), ("stream-ttl", "1")],
            "gone soon",
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = h.req(Method::HEAD, "/t", &[], "").await;
    assert_eq!(header(&r, "stream-ttl"), "1");
    tokio::time::sleep(std::time::Duration::from_millis(1400)).await;
    assert_eq!(h.get("/t").await.status(), 404);
    assert_eq!(h.put("/t", "text/plain", "again").await.status(), 201);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn concurrent_appends_all_land_in_order_of_acknowledgement() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    h.put("/many", "application/json", "").await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let url = format!("{}/many", h.base);
        let c = h.client.clone();
        tasks.push(tokio::spawn(async move {
            let r = c
                .post(url)
                .header("content-type", "application/json")
                .body(format!("{{\"i\":{i}}}"))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), header(&r, "stream-next-offset"))
        }));
    }
    let mut offsets = Vec::new();
    for t in tasks {
        let (st, off) = t.await.unwrap();
        assert_eq!(st, 204);
        offsets.push(off);
    }
    offsets.sort();
    offsets.dedup();
    assert_eq!(offsets.len(), 64, "every append has its own offset");
    let (_, _, body) = h.read("/many").await;
    let v: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(v.len(), 64);
    server.shutdown().await.unwrap();
}

async fn fork(h: &Http, path: &str, extra: Vec<(&str, String)>) -> reqwest::Response {
    let mut hd = vec![("stream-forked-from", "/src".to_string())];
    hd.extend(extra);
    let hd: Vec<(&str, &str)> = hd.iter().map(|(k, v)| (*k, v.as_str())).collect();
    h.req(Method::PUT, path, &hd, "").await
}

async fn produce(h: &Http, epoch: &str, seq: &str, body: &'static str) -> reqwest::Response {
    h.req(
        Method::POST,
        "/p",
        &[
            ("content-type", "text/plain"),
            ("producer-id", "w1"),
            ("producer-epoch", epoch),
            ("producer-seq", seq),
        ],
        body,
    )
    .await
}
