//! Hostile clients and what operators expect (issue 19): auth that cannot
//! be switched off by accident, timeouts and a connection cap, bounded
//! buffers, early answers that keep the connection usable, and the
//! operator endpoints.

mod common;

use std::time::Duration;

use common::*;
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read until the peer closes (or `limit` passes: then `None`).
async fn read_to_close(s: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut out = Vec::new();
    let r = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    r.ok().map(|_| String::from_utf8_lossy(&out).into_owned())
}

/// Item 4: an empty token, and a non-loopback address without a token
/// (unless `insecure`), refuse to start.
#[tokio::test]
async fn empty_token_and_open_address_without_token_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for t in ["", "   "] {
        let mut o = options(dir.path());
        o.token = Some(t.into());
        let err = turnstone_server::start(o).await.err().expect("refused");
        assert!(err.contains("token"), "{err}");
    }
    let mut o = options(dir.path());
    o.listen = "0.0.0.0:0".parse().unwrap();
    let err = turnstone_server::check_exposure(&o).unwrap_err();
    assert!(err.contains("--insecure"), "{err}");
    o.insecure = true;
    assert!(turnstone_server::check_exposure(&o).is_ok());
    o.insecure = false;
    o.token = Some("t".into());
    assert!(turnstone_server::check_exposure(&o).is_ok());
    o.listen = "[::1]:0".parse().unwrap();
    o.token = None;
    assert!(turnstone_server::check_exposure(&o).is_ok());
}

/// Item 4: the auth scheme is case-insensitive (RFC 9110 §11.1).
#[tokio::test]
async fn bearer_scheme_is_case_insensitive() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.token = Some("s3cret".into());
    let server = start(o).await;
    let h = Http::new(&server);
    for (auth, want) in [
        ("Bearer s3cret", 201),
        ("bearer s3cret", 200),
        ("BEARER  s3cret", 200),
        ("Basic s3cret", 401),
        ("Bearers3cret", 401),
        ("bearer wrong", 401),
    ] {
        let r = h
            .req(
                Method::PUT,
                "/a",
                &[("authorization", auth), ("content-type", "text/plain")],
                "",
            )
            .await;
        assert_eq!(r.status(), want, "{auth}");
    }
    server.shutdown().await.unwrap();
}

fn quick_timeouts(dir: &std::path::Path) -> turnstone_server::Options {
    let mut o = options(dir);
    o.header_timeout = Duration::from_millis(300);
    o.body_timeout = Duration::from_millis(300);
    o
}

/// Item 5: a client that never finishes its header, one that idles between
/// requests, and one that stalls in its body are all dropped.
#[tokio::test]
async fn slow_and_idle_clients_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(quick_timeouts(dir.path())).await;
    let addr = server.local_addr();
    // Slow header.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /x HTTP/1.1\r\nhost: a\r\n")
        .await
        .unwrap();
    let out = read_to_close(&mut s, Duration::from_secs(20)).await;
    assert!(out.is_some(), "a slow header was not dropped");
    // Idle keep-alive after a complete request.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    let out = read_to_close(&mut s, Duration::from_secs(20))
        .await
        .expect("an idle connection was not dropped");
    assert!(out.starts_with("HTTP/1.1 404"), "{out}");
    // Stalled body: 408, and the connection closes.
    let h = Http::new(&server);
    assert_eq!(h.put("/b", "text/plain", "").await.status(), 201);
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /b HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\nonly ten b",
    )
    .await
    .unwrap();
    let out = read_to_close(&mut s, Duration::from_secs(20))
        .await
        .expect("a stalled body was not dropped");
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(out.to_lowercase().contains("connection: close"), "{out}");
    assert_eq!(h.read("/b").await.2, "", "nothing of it was appended");
    server.shutdown().await.unwrap();
}

/// Item 5: headers are bounded (431, not hundreds of KB buffered per
/// connection), and connections over the cap get a 503 and are closed.
#[tokio::test]
async fn header_size_and_connection_count_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.max_connections = 4;
    let server = start(o).await;
    let addr = server.local_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let big = format!(
        "GET /x HTTP/1.1\r\nhost: a\r\nx-big: {}\r\n\r\n",
        "a".repeat(100 << 10)
    );
    let _ = s.write_all(big.as_bytes()).await;
    let out = read_to_close(&mut s, Duration::from_secs(20))
        .await
        .expect("closed");
    assert!(out.is_empty() || out.starts_with("HTTP/1.1 431"), "{out}");
    drop(s);

    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(addr).await.unwrap();
        // A request per connection, so each is known to be accepted.
        c.write_all(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 12];
        c.read_exact(&mut buf).await.unwrap();
        held.push(c);
    }
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let _ = extra.write_all(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n").await;
    let out = read_to_close(&mut extra, Duration::from_secs(20))
        .await
        .expect("closed");
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    drop(held);
    // Capacity comes back once those close.
    let h = Http::new(&server);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while h.get("/x").await.status() != 404 {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.shutdown().await.unwrap();
}

/// Item 12: no CORS by default (a browser page's request, which carries
/// `Origin`, is refused before it does anything); `*` or a list opt in.
#[tokio::test]
async fn cors_is_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/c", "text/plain", "").await.status(), 201);
    let evil = [
        ("origin", "https://evil.example"),
        ("content-type", "text/plain"),
    ];
    let r = h.req(Method::POST, "/c", &evil, "pwned").await;
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, "access-control-allow-origin"), "");
    let r = h.req(Method::DELETE, "/c", &evil, "").await;
    assert_eq!(r.status(), 403);
    let r = h.get("/c").await;
    assert_eq!(header(&r, "access-control-allow-origin"), "");
    assert_eq!(r.text().await.unwrap(), "", "nothing was appended");
    server.shutdown().await.unwrap();

    let mut o = options(dir.path());
    o.cors_origin = Some("https://app.example, https://other.example".into());
    let server = start(o).await;
    let h = Http::new(&server);
    let r = h
        .req(Method::GET, "/c", &[("origin", "https://app.example")], "")
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        "https://app.example"
    );
    assert_eq!(header(&r, "vary"), "origin");
    assert_eq!(
        h.req(Method::GET, "/c", &[("origin", "https://evil.example")], "")
            .await
            .status(),
        403
    );
    server.shutdown().await.unwrap();

    let mut o = options(dir.path());
    o.cors_origin = Some("*".into());
    let server = start(o).await;
    let h = Http::new(&server);
    let r = h.get("/c").await;
    assert_eq!(header(&r, "access-control-allow-origin"), "*");
    server.shutdown().await.unwrap();
}

/// Item 12: health and metrics endpoints; metrics need the token when one
/// is set, health does not.
#[tokio::test]
async fn health_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.token = Some("t".into());
    let server = start(o).await;
    let mut h = Http::new(&server);
    let r = h.get("/.well-known/turnstone/health").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ready\n");
    assert_eq!(h.get("/.well-known/turnstone/metrics").await.status(), 401);
    h.token = Some("t".into());
    assert_eq!(h.put("/m", "text/plain", "").await.status(), 201);
    assert_eq!(h.post("/m", "text/plain", "abc").await.status(), 204);
    let m = h
        .get("/.well-known/turnstone/metrics")
        .await
        .text()
        .await
        .unwrap();
    for want in [
        "\nturnstone_serve_appends_total 1\n",
        "\nturnstone_serve_append_bytes_total 3\n",
        "\nturnstone_serve_healthy 1\n",
        "turnstone_serve_durable_wait_seconds_count ",
        "turnstone_store_fdatasyncs_total ",
        "turnstone_serve_open_connections ",
        "turnstone_serve_sse_readers 0",
    ] {
        assert!(m.contains(want), "{want:?} missing in\n{m}");
    }
    server.shutdown().await.unwrap();
}
