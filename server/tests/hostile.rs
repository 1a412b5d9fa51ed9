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
    // A preflight is answered, but allows no origin: the browser stops there.
    let pre = [
        ("origin", "https://evil.example"),
        ("access-control-request-method", "DELETE"),
    ];
    let r = h.req(Method::OPTIONS, "/c", &pre, "").await;
    assert_eq!(r.status(), 204);
    assert_eq!(header(&r, "access-control-allow-origin"), "");
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

/// Read one response whose body ends with `tail`; `None` if the connection
/// ends first.
async fn read_response(s: &mut TcpStream, tail: &str) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let r = tokio::time::timeout(Duration::from_secs(20), async {
        while !got.ends_with(tail.as_bytes()) {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    matches!(r, Ok(true)).then(|| String::from_utf8_lossy(&got).into_owned())
}

/// Item 8: an answer given before the body is read (404 to a POST, 413)
/// reaches the client, and the connection either stays usable or says
/// `Connection: close`.
#[tokio::test]
async fn early_answers_reach_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.max_body_bytes = 1024;
    let server = start(o).await;
    let addr = server.local_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /missing HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello",
    )
    .await
    .unwrap();
    let first = read_response(&mut s, "stream not found\n")
        .await
        .expect("404 received");
    assert!(first.starts_with("HTTP/1.1 404"), "{first}");
    if !first.to_lowercase().contains("connection: close") {
        s.write_all(b"GET /missing HTTP/1.1\r\nhost: a\r\n\r\n")
            .await
            .unwrap();
        let second = read_response(&mut s, "stream not found\n").await;
        assert!(
            second.is_some(),
            "keep-alive connection broken after an early 404"
        );
    }
    // A body far over the limit, sent without `Expect`: the 413 arrives
    // (the body is drained, up to a bound), not a reset.
    let h = Http::new(&server);
    assert_eq!(h.put("/x", "text/plain", "").await.status(), 201);
    let mut s = TcpStream::connect(addr).await.unwrap();
    let body = vec![b'z'; 2 << 20];
    let head = format!(
        "POST /x HTTP/1.1\r\nhost: a\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body)
        .await
        .expect("the body is read, not refused");
    let out = read_response(&mut s, "(--max-body-bytes)\n")
        .await
        .expect("413 received");
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert_eq!(h.read("/x").await.2, "");
    server.shutdown().await.unwrap();
}

/// Item 9: `Location` is the request path re-encoded, not decoded.
#[tokio::test]
async fn location_is_percent_encoded() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    let r = h
        .req(
            Method::PUT,
            "/loc%3Fq%3D1%23f%20x/%C3%A9",
            &[("content-type", "text/plain")],
            "hi",
        )
        .await;
    assert_eq!(r.status(), 201);
    let loc = header(&r, "location");
    let path = loc.splitn(4, '/').nth(3).map(|p| format!("/{p}")).unwrap();
    // (`=` may stay as it is: it is a path character.)
    assert_eq!(path, "/loc%3Fq=1%23f%20x/%C3%A9", "{loc}");
    assert_eq!(h.read(&path).await.2, "hi");
    server.shutdown().await.unwrap();
}

/// Item 10: one JSON message may be as large as --max-body-bytes allows by
/// default; over a limit, the 413 names the limit that was hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_and_message_limits_agree() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.store.segment_bytes = 64 << 20;
    let max = o.max_body_bytes;
    let server = start(o).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/j", "application/json", "").await.status(), 201);
    // A JSON string that makes the body exactly max bytes.
    let msg = format!("\"{}\"", "m".repeat(max - 2));
    let r = h.post("/j", "application/json", &msg).await;
    assert_eq!(r.status(), 204, "{:?}", r.text().await);
    let over = format!("\"{}\"", "m".repeat(max - 1));
    let r = h.post("/j", "application/json", &over).await;
    assert_eq!(r.status(), 413);
    assert!(r.text().await.unwrap().contains("--max-body-bytes"));
    server.shutdown().await.unwrap();

    // A larger body limit: one message over the per-message limit, and an
    // append whose events take more than one atomic append can hold.
    let mut o = options(dir.path());
    o.store.segment_bytes = 64 << 20;
    o.max_body_bytes = 24 << 20;
    let server = start(o).await;
    let h = Http::new(&server);
    let big = format!("\"{}\"", "m".repeat(17 << 20));
    let r = h.post("/j", "application/json", &big).await;
    assert_eq!(r.status(), 413);
    let text = r.text().await.unwrap();
    assert!(text.contains("JSON message"), "{text}");
    let many = format!("[{}1]", "1,".repeat(2 << 20));
    let r = h.post("/j", "application/json", &many).await;
    assert_eq!(r.status(), 413);
    let text = r.text().await.unwrap();
    assert!(text.contains("one append"), "{text}");
    server.shutdown().await.unwrap();
}
