//! Forks and deletes across instances: forks through another instance, a
//! fork racing its source's deletion, background collection, a delete made
//! by the session layer served as a delete.

use super::*;

/// PUT /fork, a fork of /src.
pub(super) async fn fork_src(h: &Http) -> Response {
    let hd = [
        ("stream-forked-from", "/src"),
        ("content-type", "text/plain"),
    ];
    h.req(Method::PUT, "/fork", &hd, "").await
}

/// A fork made through one instance of a stream made through the other;
/// the source's soft deletion and release seen across them.
pub(super) async fn forks_across_instances(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    assert_eq!(ha.put("/src", "text/plain", "shared").await.status(), 201);
    assert_eq!(fork_src(&hb).await.status(), 201);
    assert_eq!(
        fork_src(&ha).await.status(),
        200,
        "the fork exists for A too"
    );
    assert_eq!(read_text(&ha, "/fork").await.0, "shared");
    assert_eq!(ha.post("/fork", "text/plain", "+mine").await.status(), 204);
    assert_eq!(hb.post("/src", "text/plain", "+theirs").await.status(), 204);
    assert_eq!(read_text(&hb, "/fork").await.0, "shared+mine");
    assert_eq!(read_text(&ha, "/src").await.0, "shared+theirs");
    // The source deleted through B: gone (410) for A while the fork reads
    // through it; released when the fork is deleted through A.
    assert_eq!(delete(&hb, "/src").await.status(), 204);
    assert_eq!(ha.get("/src").await.status(), 410);
    assert_eq!(ha.put("/src", "text/plain", "").await.status(), 409);
    assert_eq!(read_text(&ha, "/fork").await.0, "shared+mine");
    assert_eq!(delete(&ha, "/fork").await.status(), 204);
    assert_eq!(hb.get("/fork").await.status(), 404);
    assert_eq!(hb.get("/src").await.status(), 404);
    assert_eq!(hb.put("/src", "text/plain", "again").await.status(), 201);
    assert_eq!(read_text(&ha, "/src").await.0, "again");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A fork made through one instance while its source is deleted through
/// the other, many times over: whichever goes first, the outcome is one
/// of the two orders. A fork that was made (201) keeps its source
/// soft-deleted (410, re-create refused with 409) until the fork is
/// deleted; a fork refused (404 or 409) left the source hard-deleted (its
/// path free again). Never a fork made with its source hard-deleted.
pub(super) async fn fork_racing_the_deletion_of_its_source(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    const ROUNDS: usize = 24;
    let mut made = 0;
    for i in 0..ROUNDS {
        let (src, fork) = (format!("/race/{i}/src"), format!("/race/{i}/fork"));
        assert_eq!(hb.put(&src, "text/plain", "data").await.status(), 201);
        // Both instances have the source loaded.
        assert_eq!(ha.get(&src).await.status(), 200);
        let hd = [
            ("stream-forked-from", src.as_str()),
            ("content-type", "text/plain"),
        ];
        // One side or the other starts a little later each round, so that
        // each lands across the other's steps.
        let lag = Duration::from_micros(400 * (i as u64 / 2 % 12));
        let (fork_lag, delete_lag) = if i % 2 == 0 {
            (Duration::ZERO, lag)
        } else {
            (lag, Duration::ZERO)
        };
        let (f, d) = tokio::join!(
            async {
                tokio::time::sleep(fork_lag).await;
                ha.req(Method::PUT, &fork, &hd, "").await
            },
            async {
                tokio::time::sleep(delete_lag).await;
                delete(&hb, &src).await
            }
        );
        let (f, d) = (f.status().as_u16(), d.status().as_u16());
        assert_eq!(d, 204, "round {i}: the delete");
        match f {
            201 => {
                made += 1;
                assert_eq!(read_text(&hb, &fork).await.0, "data", "round {i}");
                for h in [&ha, &hb] {
                    let g = h.get(&src).await.status().as_u16();
                    assert_eq!(
                        g, 410,
                        "round {i}: a source read through by a fork is soft-deleted"
                    );
                }
                let p = ha.put(&src, "text/plain", "").await.status().as_u16();
                assert_eq!(
                    p, 409,
                    "round {i}: re-creating a source a fork reads through"
                );
                assert_eq!(delete(&hb, &fork).await.status(), 204, "round {i}");
                let g = ha.get(&src).await.status().as_u16();
                assert_eq!(g, 404, "round {i}: released with its last fork");
            }
            404 | 409 => {
                assert_eq!(hb.get(&fork).await.status(), 404, "round {i}: no fork");
                let g = ha.get(&src).await.status().as_u16();
                assert_eq!(
                    g, 404,
                    "round {i}: the source without forks is hard-deleted"
                );
            }
            other => panic!("round {i}: the fork answered {other}"),
        }
        let p = hb.put(&src, "text/plain", "again").await.status().as_u16();
        assert_eq!(
            p, 201,
            "round {i}: the path is free once nothing reads through it"
        );
    }
    eprintln!("fork_racing_the_deletion_of_its_source: {made} of {ROUNDS} forks made");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Events of deleted sessions in the database (what collection removes,
/// less what forks read).
pub(super) async fn deleted_events(url: &str) -> i64 {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT count(*) FROM turnstone_events e
               JOIN turnstone_sessions s ON s.id = e.session WHERE s.deleted",
            &[],
        )
        .unwrap()
        .get(0)
    })
    .await
    .unwrap()
}

/// Background collection on PostgreSQL: a deleted stream's events go from
/// the database; a soft-deleted source keeps what its fork reads until the
/// fork goes too; readers never miss anything.
pub(super) async fn background_collection_removes_deleted_streams_events(cx: Ctx) {
    let mut o = pg_options(&cx.url, &cx.tmp.path().join("a"));
    o.gc = Some(turnstone::session::gc::BackgroundOptions {
        interval: Duration::from_millis(100),
        ..Default::default()
    });
    let a = turnstone_server::start(o).await.unwrap();
    let h = http(a.local_addr());
    let gone_within = |what: &'static str| {
        let url = cx.url.clone();
        async move {
            let t = Instant::now();
            while deleted_events(&url).await > 0 {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "{what}: not collected"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(h.put("/plain", "text/plain", "a").await.status(), 201);
    for i in 0..5 {
        assert_eq!(
            h.post("/plain", "text/plain", &format!("{i}"))
                .await
                .status(),
            204
        );
    }
    assert_eq!(h.put("/src", "text/plain", "shared").await.status(), 201);
    assert_eq!(h.post("/src", "text/plain", "+more").await.status(), 204);
    assert_eq!(fork_src(&h).await.status(), 201);
    assert_eq!(delete(&h, "/plain").await.status(), 204);
    assert_eq!(delete(&h, "/src").await.status(), 204);
    gone_within("the deleted stream").await;
    assert_eq!(
        h.get("/src").await.status(),
        410,
        "soft-deleted: a fork reads through it"
    );
    assert_eq!(read_text(&h, "/fork").await.0, "shared+more");
    assert_eq!(delete(&h, "/fork").await.status(), 204);
    gone_within("the released source and its fork").await;
    assert_eq!(h.get("/src").await.status(), 404);
    a.shutdown().await.unwrap();
}

/// The engine session a stream path maps to.
pub(super) async fn session_of_path(url: &str, path: &str) -> String {
    let (url, path) = (url.to_string(), path.to_string());
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT session FROM turnstone_streams WHERE path = $1",
            &[&path],
        )
        .unwrap()
        .get(0)
    })
    .await
    .unwrap()
}

/// A stream deleted through the session layer by another process
/// (`turnstone delete postgres://… --session ds/…`, issue 44 §5): refused,
/// naming the lease, while an instance holds the stream; once the
/// instances stopped, the delete goes through and new instances answer 404
/// for the stream, refuse appends to it, and serve the other streams.
pub(super) async fn a_session_layer_delete_is_served_as_a_delete(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let ha = http(a.local_addr());
    assert_eq!(ha.put("/gone", "text/plain", "x;").await.status(), 201);
    assert_eq!(ha.post("/gone", "text/plain", "y;").await.status(), 204);
    assert_eq!(ha.put("/kept", "text/plain", "k;").await.status(), 201);
    assert_eq!(read_text(&ha, "/gone").await.0, "x;y;");
    let session = session_of_path(&cx.url, "/gone").await;
    let delete_now = || {
        let (url, session) = (cx.url.clone(), session.clone());
        tokio::task::spawn_blocking(move || {
            let log = turnstone_pg::PgEventLog::connect(&url, "cli", None).unwrap();
            let log: &dyn turnstone::backend::EventLog = &log;
            turnstone::session::delete(log, &session)
        })
    };
    let refused = delete_now().await.unwrap();
    assert!(
        matches!(&refused, Err(turnstone::Error::Fenced { detail, .. }) if detail.contains("turnstone-serve")),
        "refused while an instance holds it: {refused:?}"
    );
    assert_eq!(read_text(&ha, "/gone").await.0, "x;y;", "nothing changed");
    a.shutdown().await.unwrap();
    // The stopped instance's lease runs out (30 s, brought forward here).
    let (url, sess) = (cx.url.clone(), session.clone());
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.execute(
            "UPDATE turnstone_sessions SET lease_expires = now() - interval '1 second' WHERE id = $1",
            &[&sess],
        )
        .unwrap();
    })
    .await
    .unwrap();

    let deleted = delete_now().await.unwrap();
    assert!(deleted.is_ok(), "the session layer deletes it: {deleted:?}");
    let a = instance(&cx, "a2").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    for (h, who) in [(&ha, "one instance"), (&hb, "another")] {
        assert_eq!(h.get("/gone").await.status(), 404, "{who}: GET");
        assert_eq!(
            h.post("/gone", "text/plain", "z;").await.status(),
            404,
            "{who}: append"
        );
        assert_eq!(
            read_text(h, "/kept").await.0,
            "k;",
            "{who}: the other stream"
        );
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
