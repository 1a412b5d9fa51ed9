//! Bad input gets the protocol's status codes, never a crash; the bearer
//! token; stream paths never reach the filesystem.

mod common;

use common::*;
use reqwest::Method;

#[tokio::test]
async fn bad_input_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.max_body_bytes = 1024;
    let server = start(o).await;
    let h = Http::new(&server);
    h.put("/x", "text/plain", "data").await;

    // Malformed headers.
    for (k, v) in [
        ("stream-ttl", "01"),
        ("stream-ttl", "-1"),
        ("stream-ttl", "1e3"),
        ("stream-expires-at", "tomorrow"),
        ("content-type", "not a type"),
        ("stream-fork-sub-offset", "1"),
    ] {
        let r = h.req(Method::PUT, "/y", &[(k, v)], "").await;
        assert_eq!(r.status(), 400, "{k}: {v}");
    }
    let r = h
        .req(
            Method::POST,
            "/x",
            &[("content-type", "text/plain"), ("producer-id", "p")],
            "a",
        )
        .await;
    assert_eq!(r.status(), 400, "partial producer headers");
    let r = h
        .req(
            Method::POST,
            "/x",
            &[
                ("content-type", "text/plain"),
                ("producer-id", "p"),
                ("producer-epoch", "9007199254740992"),
                ("producer-seq", "0"),
            ],
            "a",
        )
        .await;
    assert_eq!(r.status(), 400, "epoch above 2^53-1");

    // Invalid offsets.
    for q in [
        "offset=",
        "offset=abc",
        "offset=0,1",
        "offset=a&offset=b",
        "offset=0000000000000000_0000000000000009",
        "offset=0000000000000099_0000000000000000",
        "offset=-1&live=forever",
    ] {
        assert_eq!(h.get(&format!("/x?{q}")).await.status(), 400, "{q}");
    }

    // Oversized bodies, with and without Content-Length.
    let big = "z".repeat(2048);
    assert_eq!(h.post("/x", "text/plain", &big).await.status(), 413);
    let chunks =
        futures_util::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b'z'; 512])));
    let r = h
        .req(
            Method::POST,
            "/x",
            &[("content-type", "text/plain")],
            reqwest::Body::wrap_stream(chunks),
        )
        .await;
    assert_eq!(r.status(), 413, "chunked body over the limit");

    // Unknown streams, type mismatches, empty appends.
    assert_eq!(h.get("/nope").await.status(), 404);
    assert_eq!(h.post("/nope", "text/plain", "a").await.status(), 404);
    assert_eq!(h.req(Method::HEAD, "/nope", &[], "").await.status(), 404);
    assert_eq!(h.post("/x", "application/json", "{}").await.status(), 409);
    assert_eq!(h.post("/x", "text/plain", "").await.status(), 400);
    let r = h.req(Method::POST, "/x", &[], "no type").await;
    assert_eq!(r.status(), 400);
    assert_eq!(h.req(Method::PATCH, "/x", &[], "").await.status(), 405);

    // Chunked uploads within the limit are fine.
    let chunks = futures_util::stream::iter(
        (0..4).map(|i| Ok::<_, std::io::Error>(format!("c{i}").into_bytes())),
    );
    let r = h
        .req(
            Method::POST,
            "/x",
            &[("content-type", "text/plain")],
            reqwest::Body::wrap_stream(chunks),
        )
        .await;
    assert_eq!(r.status(), 204);
    assert_eq!(h.read("/x").await.2, "datac0c1c2c3");
    // Every response carries the browser safety headers.
    let r = h.get("/nope").await;
    assert_eq!(header(&r, "x-content-type-options"), "nosniff");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn path_traversal_never_touches_the_filesystem() {
    let root = tempfile::tempdir().unwrap();
    let store = root.path().join("store");
    let server = start(options(&store)).await;
    let addr = server.local_addr();
    for path in [
        "/../escape",
        "/a/../../escape",
        "/%2e%2e/escape",
        "/a/%2E%2E/%2e%2e/escape",
        "/./x",
        "/a%00b",
    ] {
        let req = format!(
            "PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1\r\nConnection: close\r\n\r\nz"
        );
        assert_eq!(raw_status(addr, &req).await, 400, "{path}");
    }
    // A stream named like a file path is just a name in the log.
    let h = Http::new(&server);
    assert_eq!(
        h.put("/etc%2Fpasswd", "text/plain", "x").await.status(),
        201
    );
    assert_eq!(
        h.put("/..%2F..%2Fescape", "text/plain", "x").await.status(),
        400
    );
    server.shutdown().await.unwrap();
    let outside: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("store")]);
    for e in std::fs::read_dir(&store).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(
            name == "LOCK" || name.ends_with(".tseg") || name.starts_with("index.ckpt"),
            "unexpected file {name} in the store"
        );
    }
}

#[tokio::test]
async fn bearer_token_is_required_when_set() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.token = Some("s3cret".into());
    o.cors_origin = Some("https://example.com".into());
    let server = start(o).await;
    let mut h = Http::new(&server);
    let r = h.put("/a", "text/plain", "x").await;
    assert_eq!(r.status(), 401);
    assert_eq!(header(&r, "www-authenticate"), "Bearer");
    h.token = Some("wrong".into());
    assert_eq!(h.get("/a").await.status(), 401);
    h.token = Some("s3cret".into());
    assert_eq!(h.put("/a", "text/plain", "x").await.status(), 201);
    assert_eq!(h.read("/a").await.2, "x");
    // CORS preflights carry no credentials and are answered.
    h.token = None;
    let r = h
        .req(
            Method::OPTIONS,
            "/a",
            &[
                ("origin", "https://example.com"),
                ("access-control-request-method", "GET"),
                (
                    "access-control-request-headers",
                    "authorization, if-none-match",
                ),
            ],
            "",
        )
        .await;
    assert_eq!(r.status(), 204);
    assert!(header(&r, "access-control-allow-headers").contains("if-none-match"));
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        "https://example.com"
    );
    assert_eq!(h.get("/a").await.status(), 401);
    server.shutdown().await.unwrap();
}
