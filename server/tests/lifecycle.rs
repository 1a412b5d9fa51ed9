//! Storage lifecycle of a server (issue 17 §2): `DELETE` and expiry
//! (`Stream-TTL`) tombstone streams, and the background collector frees
//! their bytes while the server runs, so that a server under steady
//! create/delete load keeps bounded disk; what live streams and forks read
//! is untouched, and after a restart new streams never reuse a collected
//! stream's engine session.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;

const SEGMENT: u32 = 64 << 10;

fn segment_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tseg"))
        // The collector may remove a file between the listing and the stat:
        // a file gone by then holds no bytes.
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn gc_options(dir: &Path) -> turnstone_server::Options {
    let mut o = options(dir);
    o.store.segment_bytes = SEGMENT;
    o.gc = Some(turnstone::session::gc::BackgroundOptions {
        interval: Duration::from_millis(20),
        collect: turnstone::gc::CollectOptions {
            rate_bytes_per_sec: None,
            ..Default::default()
        },
        ..Default::default()
    });
    o
}

/// Wait until the segment files take at most `bound` bytes.
async fn wait_disk_at_most(dir: &Path, bound: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = segment_bytes(dir);
        if now <= bound {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {now} bytes of segments, bound {bound}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_under_create_delete_load_keeps_bounded_disk() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(gc_options(dir.path())).await;
    let h = Http::new(&server);
    let chunk = "x".repeat(4000);

    // A stream that lives throughout, a source that is deleted while a
    // fork reads through it (soft), and the fork.
    assert_eq!(h.put("/keep", "text/plain", "start;").await.status(), 201);
    assert_eq!(h.put("/src", "text/plain", &chunk).await.status(), 201);
    let r = h
        .req(
            Method::PUT,
            "/fork",
            &[
                ("stream-forked-from", "/src"),
                ("content-type", "text/plain"),
            ],
            "",
        )
        .await;
    assert_eq!(r.status(), 201);
    h.post("/fork", "text/plain", "+mine").await;
    assert_eq!(h.req(Method::DELETE, "/src", &[], "").await.status(), 204);
    let fork_before = h.read("/fork").await;

    let mut keep = String::from("start;");
    let rounds = 300;
    let mut peak = 0u64;
    for i in 0..rounds {
        let path = format!("/tmp-{i}");
        assert_eq!(h.put(&path, "text/plain", &chunk).await.status(), 201);
        assert_eq!(h.post(&path, "text/plain", &chunk).await.status(), 204);
        assert_eq!(h.req(Method::DELETE, &path, &[], "").await.status(), 204);
        let line = format!("{i};");
        assert_eq!(h.post("/keep", "text/plain", &line).await.status(), 204);
        keep.push_str(&line);
        peak = peak.max(segment_bytes(dir.path()));
    }
    // A stream that expires (a TTL of one second) is collected the same
    // way once the server's sweep has tombstoned it.
    let r = h
        .req(
            Method::PUT,
            "/short",
            &[("content-type", "text/plain"), ("stream-ttl", "1")],
            chunk.clone(),
        )
        .await;
    assert_eq!(r.status(), 201);
    let written = rounds as u64 * 2 * chunk.len() as u64;
    // What must stay: /keep, /fork and the part of /src it reads, every
    // stream's define frame, the active segment (preallocated) and the
    // tail not yet sealed.
    let bound = 6 * SEGMENT as u64;
    wait_disk_at_most(dir.path(), bound, "after the create/delete rounds").await;
    assert!(
        peak < written,
        "collection ran during the load: peak {peak} bytes for {written} written"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(h.get("/short").await.status(), 404, "expired");

    // More short-lived streams, then enough for /keep to seal their
    // segments: the newest engine sessions are collected too.
    for i in 0..20 {
        let path = format!("/late-{i}");
        assert_eq!(h.put(&path, "text/plain", &chunk).await.status(), 201);
        assert_eq!(h.req(Method::DELETE, &path, &[], "").await.status(), 204);
    }
    // Every short-lived stream (300 + 20, and /short) is in gc.manifest
    // (FORMAT.md §14.2: 64-byte header, 12 bytes per entry, 4-byte CRC)
    // once a collection after the last delete rewrote a range.
    let dead = rounds as u64 + 20 + 1;
    let manifest_entries =
        |dir: &Path| std::fs::metadata(dir.join("gc.manifest")).map_or(0, |m| (m.len() - 68) / 12);
    let deadline = Instant::now() + Duration::from_secs(60);
    while manifest_entries(dir.path()) < dead {
        assert!(
            Instant::now() < deadline,
            "{} of {dead} dead streams collected",
            manifest_entries(dir.path())
        );
        // Small appends: the segments holding the late streams' frames
        // stay mostly garbage (a segment is rewritten when under half of
        // it is live), and fill until they are sealed.
        let line = "k".repeat(400);
        h.post("/keep", "text/plain", &line).await;
        keep.push_str(&line);
    }
    wait_disk_at_most(
        dir.path(),
        bound + 4 * SEGMENT as u64,
        "after the late streams",
    )
    .await;

    // Live streams read back whole, before and after a restart.
    let (status, _, body) = h.read("/keep").await;
    assert_eq!((status, body.as_str()), (200, keep.as_str()));
    assert_eq!(h.read("/fork").await, fork_before);
    assert_eq!(h.get("/src").await.status(), 410, "soft-deleted source");
    server.shutdown().await.unwrap();

    // The case the restart below is about: the newest engine session was
    // collected, so the store no longer lists it.
    {
        let store = turnstone::Store::open_with(
            dir.path(),
            turnstone::Options {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        let newest = |names: Vec<String>| {
            names
                .iter()
                .filter_map(|n| turnstone_server::record::parse_session_name(n))
                .max()
        };
        let listed = newest(store.sessions().into_iter().map(|s| s.name).collect());
        let reclaimed = newest(store.reclaimed_names());
        assert!(
            reclaimed > listed,
            "the newest incarnation was collected: listed {listed:?}, reclaimed {reclaimed:?}"
        );
    }

    let server = start(gc_options(dir.path())).await;
    let h = Http::new(&server);
    let (status, _, body) = h.read("/keep").await;
    assert_eq!((status, body.as_str()), (200, keep.as_str()));
    assert_eq!(h.read("/fork").await, fork_before);
    // New streams get new engine sessions, never a collected one's name.
    for i in 0..3 {
        let path = format!("/after-{i}");
        assert_eq!(
            h.put(&path, "text/plain", "new").await.status(),
            201,
            "create after restart"
        );
        assert_eq!(h.read(&path).await.2, "new");
    }
    // Deleting the fork releases the source; both are collected.
    assert_eq!(h.req(Method::DELETE, "/fork", &[], "").await.status(), 204);
    for _ in 0..40 {
        h.post("/keep", "text/plain", &chunk).await;
        keep.push_str(&chunk);
    }
    wait_disk_at_most(dir.path(), bound + 40 * 4096, "after deleting the fork").await;
    let (status, _, body) = h.read("/keep").await;
    assert_eq!((status, body.as_str()), (200, keep.as_str()));
    server.shutdown().await.unwrap();
    let server = start(gc_options(dir.path())).await;
    let h = Http::new(&server);
    let (status, _, body) = h.read("/keep").await;
    assert_eq!((status, body.as_str()), (200, keep.as_str()));
    assert_eq!(h.get("/fork").await.status(), 404);
    assert_eq!(h.get("/src").await.status(), 404);
    assert_eq!(h.read("/after-2").await.2, "new");
    server.shutdown().await.unwrap();
}
