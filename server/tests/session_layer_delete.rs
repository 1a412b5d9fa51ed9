//! `turnstone serve` honours deletes whichever layer made them (issue 44
//! §5): a stream whose engine session was deleted through the session layer
//! (`turnstone delete --session ds/…`, `session::delete`) is not served
//! after a restart, its path can be created again, and the other streams
//! are served as before.

mod common;

use std::sync::Arc;

use common::*;
use reqwest::Method;

/// The engine session of each stream path, from the store (the server's
/// create record names its path).
fn session_of(store: &turnstone::Store, path: &str) -> String {
    let mut found = Vec::new();
    for info in store.sessions() {
        if !info.name.starts_with("ds/") {
            continue;
        }
        // Its own first event (a fork's first events are its source's).
        let own = info.parent.as_ref().map_or(0, |(_, upto)| *upto);
        let mut first = Vec::new();
        store
            .visit_range(&info.name, own..own + 1, |e| {
                first.extend_from_slice(e.payload);
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        if String::from_utf8_lossy(&first).contains(&format!("\"path\":\"{path}\"")) {
            found.push(info.name.clone());
        }
    }
    assert_eq!(found.len(), 1, "one session for {path}: {found:?}");
    found.pop().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_through_the_session_layer_is_not_served_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/gone", "text/plain", "a;").await.status(), 201);
    assert_eq!(h.post("/gone", "text/plain", "b;").await.status(), 204);
    assert_eq!(h.put("/kept", "text/plain", "k;").await.status(), 201);
    server.shutdown().await.unwrap();

    {
        let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
        let id = session_of(&store, "/gone");
        turnstone::session::delete(&store, &id).unwrap();
    }

    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(
        h.get("/gone").await.status(),
        404,
        "a deleted stream is not served"
    );
    let (status, _, body) = h.read("/kept").await;
    assert_eq!((status, body.as_str()), (200, "k;"));
    // The path is free again: a new stream, empty of the old one's data.
    assert_eq!(h.put("/gone", "text/plain", "new;").await.status(), 201);
    let (status, _, body) = h.read("/gone").await;
    assert_eq!((status, body.as_str()), (200, "new;"));
    assert_eq!(h.req(Method::DELETE, "/gone", &[], "").await.status(), 204);
    server.shutdown().await.unwrap();

    // And once more across a restart: nothing of either incarnation.
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.get("/gone").await.status(), 404);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_deleted_through_the_session_layer_stays_readable_through_its_fork() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.put("/src", "text/plain", "s1;").await.status(), 201);
    let r = h
        .req(
            Method::PUT,
            "/child",
            &[
                ("stream-forked-from", "/src"),
                ("content-type", "text/plain"),
            ],
            "",
        )
        .await;
    assert_eq!(r.status(), 201);
    assert_eq!(h.post("/child", "text/plain", "c1;").await.status(), 204);
    server.shutdown().await.unwrap();

    {
        let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
        let id = session_of(&store, "/src");
        turnstone::session::delete(&store, &id).unwrap();
    }

    // As after the server's own DELETE of a source a fork reads through:
    // gone for its readers, whole for the fork's.
    let server = start(options(dir.path())).await;
    let h = Http::new(&server);
    assert_eq!(h.get("/src").await.status(), 410);
    let (status, _, body) = h.read("/child").await;
    assert_eq!((status, body.as_str()), (200, "s1;c1;"));
    // The fork's delete releases the source.
    assert_eq!(h.req(Method::DELETE, "/child", &[], "").await.status(), 204);
    assert_eq!(h.get("/src").await.status(), 404);
    server.shutdown().await.unwrap();
}
