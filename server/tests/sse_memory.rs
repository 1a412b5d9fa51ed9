//! Readers that do not read pin a bounded amount of memory (issue 19,
//! item 6): 30 SSE readers of an 8 MiB stream that never read from their
//! sockets. Before, each buffered up to 16 chunks of 1 MiB (about the whole
//! stream, base64-encoded); now one 64 KiB chunk waits in the channel and
//! one in the connection. Its own test binary, so that the process's
//! resident size is this test's alone.

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const READERS: usize = 30;
const STREAM_BYTES: usize = 8 << 20;

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

async fn metric(h: &Http, name: &str) -> u64 {
    let m = h
        .get("/.well-known/turnstone/metrics")
        .await
        .text()
        .await
        .unwrap();
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} missing"))
        .parse()
        .unwrap()
}

/// Poll a metric (generous bound) until `ok`.
async fn wait_metric(h: &Http, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = metric(h, name).await;
        if ok(v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{name} stuck at {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_sse_readers_hold_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.store.segment_bytes = 64 << 20;
    let server = start(o).await;
    let h = Http::new(&server);
    let data: Vec<u8> = (0..STREAM_BYTES).map(|i| (i * 7 % 251) as u8).collect();
    let r = h
        .req(
            Method::PUT,
            "/big",
            &[("content-type", "application/octet-stream")],
            data,
        )
        .await;
    assert_eq!(r.status(), 201);
    // One full read first, so that the allocator's arenas are warm.
    assert_eq!(h.get("/big").await.bytes().await.unwrap().len(), 256 << 10);
    let before = rss_bytes();

    let mut socks = Vec::new();
    for _ in 0..READERS {
        let mut s = TcpStream::connect(server.local_addr()).await.unwrap();
        s.write_all(b"GET /big?offset=-1&live=sse HTTP/1.1\r\nhost: a\r\n\r\n")
            .await
            .unwrap();
        socks.push(s);
    }
    wait_metric(&h, "turnstone_serve_sse_readers", |v| v == READERS as u64).await;
    // Let every pump run until it blocks on its stalled reader.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let buffered = metric(&h, "turnstone_serve_bytes_buffered").await;
    let grown = rss_bytes().saturating_sub(before);
    eprintln!(
        "{READERS} stalled readers: {} KiB buffered, resident +{} MiB",
        buffered >> 10,
        grown >> 20
    );
    assert!(
        buffered <= (READERS * 2 * 100 * 1024) as u64,
        "{buffered} bytes buffered"
    );
    // Each reader of the old server pinned about the whole stream (base64:
    // 10.7 MiB): 30 of them, over 300 MiB.
    assert!(grown < 100 << 20, "resident size grew {} MiB", grown >> 20);

    drop(socks);
    wait_metric(&h, "turnstone_serve_sse_readers", |v| v == 0).await;
    wait_metric(&h, "turnstone_serve_bytes_buffered", |v| v == 0).await;
    server.shutdown().await.unwrap();
}
