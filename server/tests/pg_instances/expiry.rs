//! Expiry across instances: streams no instance loaded expire, both see an
//! expiry, and requests racing it get 200 or 404 only.

use super::*;

/// The mapped stream paths in the database.
pub(super) async fn mapped_paths(url: &str) -> Vec<String> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query("SELECT path FROM turnstone_streams ORDER BY path", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    })
    .await
    .unwrap()
}

/// Streams whose instance stopped expire anyway: another instance that
/// never loaded them finds them by the expiry their mappings record
/// (before, they waited for their next use), and a stream without expiry
/// stays.
pub(super) async fn streams_no_instance_loaded_expire(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let ha = http(a.local_addr());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let at = turnstone_server::headers::format_rfc3339_ms(now + 1000);
    let ttl = [("content-type", "text/plain"), ("stream-ttl", "1")];
    let exp = [
        ("content-type", "text/plain"),
        ("stream-expires-at", at.as_str()),
    ];
    assert_eq!(
        ha.req(Method::PUT, "/sliding", &ttl, "x").await.status(),
        201
    );
    assert_eq!(ha.req(Method::PUT, "/fixed", &exp, "x").await.status(), 201);
    assert_eq!(ha.put("/keep", "text/plain", "x").await.status(), 201);
    // A source that expires while a fork (with a long TTL of its own)
    // reads through it: soft-deleted, still mapped, no longer due.
    assert_eq!(ha.req(Method::PUT, "/src", &exp, "s").await.status(), 201);
    let fork = [
        ("content-type", "text/plain"),
        ("stream-forked-from", "/src"),
        ("stream-ttl", "3600"),
    ];
    assert_eq!(
        ha.req(Method::PUT, "/src-fork", &fork, "").await.status(),
        201
    );
    a.shutdown().await.unwrap();
    let b = instance(&cx, "b").await;
    let t = Instant::now();
    loop {
        let paths = mapped_paths(&cx.url).await;
        let src_due = {
            let url = cx.url.clone();
            tokio::task::spawn_blocking(move || {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                c.query_one(
                    "SELECT expires_ms IS NOT NULL FROM turnstone_streams WHERE path = '/src'",
                    &[],
                )
                .unwrap()
                .get::<_, bool>(0)
            })
            .await
            .unwrap()
        };
        if paths == ["/keep", "/src", "/src-fork"] && !src_due {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "still mapped after 10 s: {paths:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hb = http(b.local_addr());
    assert_eq!(hb.get("/sliding").await.status(), 404);
    assert_eq!(hb.get("/fixed").await.status(), 404);
    assert_eq!(read_text(&hb, "/keep").await.0, "x");
    assert_eq!(hb.get("/src").await.status(), 410);
    assert_eq!(read_text(&hb, "/src-fork").await.0, "s");
    b.shutdown().await.unwrap();
}

/// A stream's TTL runs out for both instances at once: both expire it
/// (concurrently), one new stream is made in its place.
pub(super) async fn expiry_seen_by_both_instances(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    let hd = [("content-type", "text/plain"), ("stream-ttl", "1")];
    let r = ha.req(Method::PUT, "/t", &hd, "gone soon").await;
    assert_eq!(r.status(), 201);
    assert_eq!(header(&head(&hb, "/t").await, "stream-ttl"), "1");
    assert_eq!(read_text(&hb, "/t").await.0, "gone soon");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (ra, rb) = tokio::join!(ha.get("/t"), hb.get("/t"));
    assert_eq!((ra.status().as_u16(), rb.status().as_u16()), (404, 404));
    let (ra, rb) = tokio::join!(
        ha.put("/t", "text/plain", "from a"),
        hb.put("/t", "text/plain", "from b")
    );
    let st = (ra.status().as_u16(), rb.status().as_u16());
    let winner = match st {
        (201, 200) => "from a",
        (200, 201) => "from b",
        _ => panic!("one re-create wins: {st:?}"),
    };
    assert_eq!(read_text(&ha, "/t").await.0, winner);
    assert_eq!(read_text(&hb, "/t").await.0, winner);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Streams expiring while requests on them and the background sweep race
/// to expire them, in one instance and across two (CI met a 500 on a GET
/// right after a HEAD had answered 404, and a 503 "written through another
/// instance" with only one instance running): every answer is 200 until
/// the stream is gone and 404 after; never a 5xx, never 200 after a 404.
pub(super) async fn expiry_racing_requests_answers_only_200_or_404(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));
    const STREAMS: usize = 24;
    // An absolute expiry (a Stream-TTL is renewed by every read).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let at = turnstone_server::headers::format_rfc3339_ms(now + 1500);
    for i in 0..STREAMS {
        let exp = [("content-type", "text/plain"), ("stream-expires-at", &at)];
        let r = ha.req(Method::PUT, &format!("/ttl/{i}"), &exp, "x").await;
        assert_eq!(r.status(), 201, "create /ttl/{i}");
    }
    let mut tasks = Vec::new();
    for i in 0..STREAMS {
        // Three pollers per stream: two on the instance that made it (one
        // HEAD, one GET), one GET on the other.
        for (k, h) in [&ha, &ha, &hb].into_iter().enumerate() {
            let (h, path) = (h.clone(), format!("/ttl/{i}"));
            tasks.push(tokio::spawn(async move {
                let method = if k == 0 { Method::HEAD } else { Method::GET };
                let mut gone = false;
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(4) {
                    let r = h.req(method.clone(), &path, &[], "").await;
                    let st = r.status().as_u16();
                    let body = r.text().await.unwrap_or_default();
                    match (st, gone) {
                        (200, false) => {}
                        (404, _) => gone = true,
                        _ => panic!("{method} {path}: {st} (gone before: {gone}): {body}"),
                    }
                    tokio::time::sleep(Duration::from_millis(if gone { 40 } else { 7 })).await;
                }
                assert!(gone, "{method} {path}: never expired");
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
