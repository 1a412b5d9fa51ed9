//! Read requests: GET (a catch-up read or a long poll; SSE is handed to
//! `sse.rs`) and HEAD.
//!
//! Invariant: a read answers only what is visible in the stream (durable),
//! with the offset to read from next; a long poll subscribes before each
//! read, so an event made durable after the read looked still wakes it.

use std::sync::Arc;

use hyper::header::{self, HeaderMap};
use hyper::{Response, StatusCode};

use crate::body::Body;
use crate::headers as h;
use crate::http::{blocking, lookup, now_secs, refresh, set, subscribe, HttpError, Query, Result};
use crate::log::Follower;
use crate::offset::{self, Offset, Requested};
use crate::read::{self, Chunk};
use crate::record::now_ms;
use crate::stream::{Fail, Stream};
use crate::App;

pub(crate) async fn head(app: &Arc<App>, path: String) -> Result<Response<Body>> {
    let s = lookup(app, &path).await?;
    let st = s.visible(&app.streams.log);
    let mut r = Response::new(Body::empty());
    let hd = r.headers_mut();
    set(hd, "content-type", &st.config.content_type);
    set(hd, h::STREAM_NEXT_OFFSET, &st.vis.token());
    set(hd, "cache-control", "no-store");
    if let Some(ttl) = st.config.ttl_secs {
        set(hd, h::STREAM_TTL, &ttl.to_string());
    }
    if let Some(ms) = st.config.expires_at_ms {
        set(hd, h::STREAM_EXPIRES_AT, &h::format_rfc3339_ms(ms));
    }
    if st.vis_closed {
        set(hd, h::STREAM_CLOSED, "true");
    }
    Ok(r)
}

/// Resolve `offset=` for a stream (validating real offsets against the log).
async fn start_offset(app: &Arc<App>, s: &Arc<Stream>, requested: Requested) -> Result<Offset> {
    let vis = s.visible(&app.streams.log).vis;
    match requested {
        Requested::Start => Ok(Offset::ZERO),
        Requested::Now => Ok(vis),
        Requested::At(o) => {
            let (a, session) = (app.clone(), s.session.clone());
            blocking(move || read::validate(&a.streams.log, &session, vis, o)).await??;
            Ok(o)
        }
    }
}

async fn read_chunk(app: &Arc<App>, s: &Arc<Stream>, from: Offset) -> Result<Chunk> {
    let (a, s2) = (app.clone(), s.clone());
    let max = app.opts.read_chunk_bytes;
    Ok(blocking(move || read::read(&a.streams.log, &s2, from, max)).await??)
}

pub(crate) async fn get(
    app: &Arc<App>,
    path: String,
    q: Query,
    req_hd: &HeaderMap,
) -> Result<Response<Body>> {
    let live = match q.live.as_deref() {
        None => None,
        Some(m @ ("long-poll" | "sse")) => Some(m),
        Some(other) => return Err(HttpError::bad(format!("unknown live mode {other:?}"))),
    };
    let requested = match q.offset.as_deref() {
        None if live.is_some() => return Err(HttpError::bad("live reads need an offset")),
        None => Requested::Start,
        Some(v) => {
            offset::parse(v).ok_or_else(|| HttpError::bad(format!("malformed offset {v:?}")))?
        }
    };
    let s = lookup(app, &path).await?;
    if app.streams.log.is_shared() {
        let (a, s2) = (app.clone(), s.clone());
        blocking(move || a.streams.touch(&s2, now_ms())).await?;
    } else {
        app.streams.touch(&s, now_ms());
    }
    let from = start_offset(app, &s, requested).await?;
    let ct = s.state.lock().config.content_type.clone();
    match live {
        Some("sse") => return Ok(crate::sse::respond(app.clone(), s, from, q.cursor, &ct)),
        Some(_) => return long_poll(app, &s, from, q.cursor.as_deref(), &ct).await,
        None => {}
    }
    if requested == Requested::Now {
        let st = s.visible(&app.streams.log);
        let body = if st.json { "[]" } else { "" };
        let mut r = Response::new(Body::full(body));
        let hd = r.headers_mut();
        set(hd, "content-type", &ct);
        set(hd, h::STREAM_NEXT_OFFSET, &st.vis.token());
        set(hd, h::STREAM_UP_TO_DATE, "true");
        set(hd, "cache-control", "no-store");
        if st.vis_closed {
            set(hd, h::STREAM_CLOSED, "true");
        }
        return Ok(r);
    }
    let chunk = read_chunk(app, &s, from).await?;
    let etag = format!(
        "\"{}:{}:{}{}\"",
        s.session,
        from.token(),
        chunk.next.token(),
        if chunk.closed { ":c" } else { "" }
    );
    if let Some(inm) = req_hd
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    {
        if inm
            .split(',')
            .any(|t| t.trim().trim_start_matches("W/") == etag)
        {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            set(r.headers_mut(), "etag", &etag);
            set(r.headers_mut(), h::STREAM_NEXT_OFFSET, &chunk.next.token());
            return Ok(r);
        }
    }
    let mut r = chunk_response(app, chunk, &ct, None);
    set(r.headers_mut(), "etag", &etag);
    Ok(r)
}

/// A 200 with a chunk and its headers (`cursor`: for live responses).
fn chunk_response(app: &App, chunk: Chunk, ct: &str, cursor: Option<String>) -> Response<Body> {
    let up_to_date = chunk.up_to_date;
    let mut r = Response::new(Body::full(chunk.body));
    let hd = r.headers_mut();
    set(hd, "content-type", ct);
    set(hd, h::STREAM_NEXT_OFFSET, &chunk.next.token());
    if up_to_date {
        set(hd, h::STREAM_UP_TO_DATE, "true");
        set(hd, "cache-control", "no-cache");
    } else {
        let scope = if app.opts.token.is_some() {
            "private"
        } else {
            "public"
        };
        set(
            hd,
            "cache-control",
            &format!("{scope}, max-age=60, stale-while-revalidate=300"),
        );
    }
    if chunk.closed {
        set(hd, h::STREAM_CLOSED, "true");
    }
    if let Some(c) = cursor {
        set(hd, h::STREAM_CURSOR, &c);
    }
    r
}

async fn long_poll(
    app: &Arc<App>,
    s: &Arc<Stream>,
    from: Offset,
    client_cursor: Option<&str>,
    ct: &str,
) -> Result<Response<Body>> {
    let mut changed = s.changed.subscribe();
    let deadline = tokio::time::Instant::now() + app.opts.long_poll_timeout;
    let mut shutdown = app.shutdown.clone();
    let mut from = from;
    // A watcher on a shared database is kept across the loop (it reads
    // nothing; it is told what was read before each wait).
    let mut kept: Option<Follower> = None;
    loop {
        refresh(app, s).await?;
        s.state.lock().check_visible()?;
        // Subscribed before the read: an event made durable after the read
        // looked is still waited for (the subscription starts at `from`).
        let mut sub = match kept.take() {
            Some(f) => f,
            None => subscribe(app, s, from.seq).await?,
        };
        let chunk = read_chunk(app, s, from).await?;
        if chunk.items > 0 {
            let cursor = offset::cursor(now_secs(), client_cursor);
            return Ok(chunk_response(app, chunk, ct, Some(cursor)));
        }
        let passed = chunk.next.seq > from.seq;
        from = chunk.next;
        if chunk.closed {
            return Ok(no_content(from, true, client_cursor));
        }
        if sub.reusable() {
            sub.seen(from.seq);
        }
        if passed {
            // The read passed events without data (stream state): follow
            // from after them.
            if sub.reusable() {
                kept = Some(sub);
            }
            continue;
        }
        // A deletion accepted but not yet visible: its tombstone is not
        // data, so only its becoming visible (`changed`) is waited for.
        let deleting = s.state.lock().deleted.is_some();
        tokio::select! {
            // Woken by the flusher when a batch holding this stream's
            // events is durable; `false`: the store stopped.
            more = sub.ready(), if !deleting => {
                if !more {
                    return Ok(no_content(from, false, client_cursor));
                }
            }
            r = changed.changed() => { if r.is_err() { return Err(Fail::NotFound.into()); } }
            _ = tokio::time::sleep_until(deadline) => {
                let closed = s.state.lock().vis_closed;
                return Ok(no_content(from, closed, client_cursor));
            }
            _ = shutdown.changed() => {
                return Ok(no_content(from, false, client_cursor));
            }
        }
        if sub.reusable() {
            kept = Some(sub);
        }
    }
}

fn no_content(at: Offset, closed: bool, client_cursor: Option<&str>) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let hd = r.headers_mut();
    set(hd, h::STREAM_NEXT_OFFSET, &at.token());
    set(hd, h::STREAM_UP_TO_DATE, "true");
    set(
        hd,
        h::STREAM_CURSOR,
        &offset::cursor(now_secs(), client_cursor),
    );
    set(hd, "cache-control", "no-store");
    if closed {
        set(hd, h::STREAM_CLOSED, "true");
    }
    r
}
