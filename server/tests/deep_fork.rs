//! A deep fork chain over HTTP (issue 19, item 1): each PUT forks the
//! previous stream; reading the deepest and restarting stay correct. The
//! 100,000-level case is the engine's `deep_fork` test (built with
//! `Store::fork` directly, so that it runs in seconds).

mod common;

use common::*;
use reqwest::Method;

const LEVELS: usize = 1_500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_fork_chain_reads_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/f/0", "text/plain", "a").await.status(), 201);
    for level in 1..LEVELS {
        let src = format!("/f/{}", level - 1);
        let r = h
            .req(
                Method::PUT,
                &format!("/f/{level}"),
                &[("content-type", "text/plain"), ("stream-forked-from", &src)],
                "a",
            )
            .await;
        assert_eq!(r.status(), 201, "level {level}");
    }
    let deepest = format!("/f/{}", LEVELS - 1);
    let (status, next, body) = h.read(&deepest).await;
    assert_eq!(status, 200);
    assert_eq!(body, "a".repeat(LEVELS));
    // Reading from an offset inside the chain validates it against the log.
    let (status, _, mid) = h
        .read(&format!("{deepest}?offset={}", offset_of(&h, "/f/9").await))
        .await;
    assert_eq!(status, 200);
    assert_eq!(mid.len(), LEVELS - 10);
    server.shutdown().await.unwrap();

    let server = start(options(dir.path())).await;
    assert_eq!(server.rebuild_report().streams, LEVELS);
    let h = Http::new(&server);
    assert_eq!(h.read(&deepest).await, (200, next, "a".repeat(LEVELS)));
    // Deleting from the top releases nothing until the deepest goes.
    for level in 0..LEVELS {
        let r = h.req(Method::DELETE, &format!("/f/{level}"), &[], "").await;
        assert_eq!(r.status(), 204, "level {level}");
    }
    assert_eq!(h.get("/f/0").await.status(), 404);
    server.shutdown().await.unwrap();
    let server = start(options(dir.path())).await;
    assert_eq!(server.rebuild_report().streams, 0);
    server.shutdown().await.unwrap();
}

async fn offset_of(h: &Http, path: &str) -> String {
    header(&h.get(path).await, "stream-next-offset")
}
