//! Following a stream through another instance than the one written to
//! (long polls and SSE).

use super::*;

pub(super) async fn follow_through_another_instance(cx: Ctx) {
    let a = instance(&cx, "a").await;
    let b = instance(&cx, "b").await;
    let (ha, hb) = (http(a.local_addr()), http(b.local_addr()));

    // A long poll on one instance is answered by a write through the other
    // with the data, long before its 10 s timeout.
    for (name, writer, reader) in [("B", &ha, &hb), ("A", &hb, &ha)] {
        let path = format!("/lp{name}");
        let r = writer.put(&path, "text/plain", "before").await;
        assert_eq!(r.status(), 201);
        let tail = header(&r, "stream-next-offset");
        let url = format!("{}{path}?offset={tail}&live=long-poll", reader.base);
        let c = reader.client.clone();
        let waiter = tokio::spawn(async move {
            let r = c.get(url).send().await.unwrap();
            let at = Instant::now();
            let next = header(&r, "stream-next-offset");
            (r.status().as_u16(), next, r.text().await.unwrap(), at)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiter.is_finished(),
            "the long poll on {name} answered before any data"
        );
        let r = writer.post(&path, "text/plain", "wake").await;
        assert_eq!(r.status(), 204);
        let written = Instant::now();
        let tail2 = header(&r, "stream-next-offset");
        let (status, next, body, at) = tokio::time::timeout(Duration::from_secs(9), waiter)
            .await
            .unwrap_or_else(|_| panic!("the long poll on {name} never saw the append"))
            .unwrap();
        assert_eq!(
            (status, body.as_str()),
            (200, "wake"),
            "long poll on {name}"
        );
        assert_eq!(next, tail2);
        let lag = at.saturating_duration_since(written);
        assert!(
            lag < Duration::from_secs(5),
            "the long poll on {name} answered {lag:?} after the append"
        );
    }

    // An SSE reader on B sees two appends made through A, in order.
    assert_eq!(ha.put("/sse", "text/plain", "").await.status(), 201);
    let r = hb.get("/sse?offset=-1&live=sse").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/event-stream");
    let mut events = r.bytes_stream();
    let mut seen = String::new();
    sse_until(&mut events, &mut seen, "upToDate", |s| {
        s.contains("upToDate")
    })
    .await;
    assert_eq!(ha.post("/sse", "text/plain", "one").await.status(), 204);
    assert_eq!(ha.post("/sse", "text/plain", "two").await.status(), 204);
    // A text stream has no message boundaries: the appends may come in
    // one data event or two, but once each and in order.
    sse_until(&mut events, &mut seen, "both appends", |s| {
        sse_data(s).len() >= "onetwo".len()
    })
    .await;
    assert_eq!(sse_data(&seen), "onetwo", "SSE on B: {seen:?}");
    // Closed through A: the SSE response on B says so and ends.
    assert_eq!(close(&ha, "/sse").await.status(), 204);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = events.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "SSE on B still open after the close: {seen:?}"
    );
    assert!(seen.contains("\"streamClosed\":true"), "{seen:?}");
    assert_eq!(sse_data(&seen), "onetwo", "SSE on B: {seen:?}");

    // A long poll on B is ended by a close or a deletion through A, well
    // before its timeout.
    for (what, path) in [("close", "/lc"), ("delete", "/ld")] {
        let r = ha.put(path, "text/plain", "x").await;
        assert_eq!(r.status(), 201);
        let tail = header(&r, "stream-next-offset");
        let url = format!("{}{path}?offset={tail}&live=long-poll", hb.base);
        let c = hb.client.clone();
        let waiter = tokio::spawn(async move {
            let r = c.get(url).send().await.unwrap();
            (
                r.status().as_u16(),
                header(&r, "stream-closed"),
                Instant::now(),
            )
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiter.is_finished(), "{what}: answered before");
        let st = if what == "close" {
            close(&ha, path).await.status()
        } else {
            delete(&ha, path).await.status()
        };
        assert_eq!(st, 204, "{what} through A");
        let done = Instant::now();
        let (status, closed, at) = tokio::time::timeout(Duration::from_secs(9), waiter)
            .await
            .unwrap_or_else(|_| panic!("{what} through A: the long poll on B waits on"))
            .unwrap();
        let lag = at.saturating_duration_since(done);
        assert!(
            lag < Duration::from_secs(5),
            "{what}: answered {lag:?} after"
        );
        if what == "close" {
            assert_eq!((status, closed.as_str()), (204, "true"), "{what}");
        } else {
            assert_eq!(status, 404, "{what}");
        }
    }

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The data of the complete `event: data` events in `seen`, concatenated
/// (an event's `data:` lines joined by newlines, as the SSE spec says).
pub(super) fn sse_data(seen: &str) -> String {
    let mut out = String::new();
    let complete = seen.rsplit_once("\n\n").map_or("", |(c, _)| c);
    for event in complete.split("\n\n") {
        let lines: Vec<&str> = event.lines().collect();
        if !lines.iter().any(|l| l.trim_end() == "event: data") {
            continue;
        }
        let data: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        out.push_str(&data.join("\n"));
    }
    out
}

/// Read an SSE response into `seen` until `done(seen)` (8 s at most).
pub(super) async fn sse_until<S, B>(
    events: &mut S,
    seen: &mut String,
    want: &str,
    done: impl Fn(&str) -> bool,
) where
    S: futures_util::Stream<Item = Result<B, reqwest::Error>> + Unpin,
    B: AsRef<[u8]>,
{
    let found = tokio::time::timeout(Duration::from_secs(8), async {
        while !done(seen) {
            let chunk = events.next().await.expect("SSE ended").unwrap();
            seen.push_str(&String::from_utf8_lossy(chunk.as_ref()));
        }
    })
    .await;
    assert!(found.is_ok(), "SSE: no {want:?} within 8 s; saw {seen:?}");
}
