//! Server-Sent Events: catch-up data then live data, each `data` event
//! followed by a `control` event with the next offset and a cursor; a closed
//! stream ends with `streamClosed: true` and the connection closes.
//!
//! Text and JSON streams are sent as text, split into `data:` lines at every
//! CR, LF or CRLF so that no payload can forge an event boundary; other
//! content types are sent base64-encoded (`Stream-SSE-Data-Encoding: base64`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::body::Body;
use crate::headers as h;
use crate::http::{now_secs, set, SSE_KEEPALIVE};
use crate::offset::{self, Offset};
use crate::read;
use crate::stream::Stream;
use crate::App;

/// Start an SSE response reading `s` from `from`.
pub fn respond(
    app: Arc<App>,
    s: Arc<Stream>,
    from: Offset,
    client_cursor: Option<String>,
    content_type: &str,
) -> Response<Body> {
    let text = h::is_text(content_type);
    // One chunk in the channel, one in the connection: a reader that does
    // not read pins about two chunks, never the stream.
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    let gauge = app.metrics.bytes_buffered.clone();
    tokio::spawn(pump(app, s, from, client_cursor, text, tx));
    let mut r = Response::new(Body::Stream(rx, gauge));
    *r.status_mut() = StatusCode::OK;
    let hd = r.headers_mut();
    set(hd, "content-type", "text/event-stream");
    set(hd, "cache-control", "no-cache");
    set(hd, "x-accel-buffering", "no");
    if !text {
        set(hd, h::STREAM_SSE_DATA_ENCODING, "base64");
    }
    r
}

/// Format one `data` event.
pub fn data_event(payload: &[u8], text: bool) -> Vec<u8> {
    let mut out = b"event: data\n".to_vec();
    if !text {
        out.extend_from_slice(b"data:");
        out.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(payload)
                .as_bytes(),
        );
        out.extend_from_slice(b"\n\n");
        return out;
    }
    let mut i = 0;
    let mut start = 0;
    let line = |out: &mut Vec<u8>, l: &[u8]| {
        // One leading space after the colon is eaten by SSE parsers: keep a
        // payload's own leading space by writing a second one.
        out.extend_from_slice(if l.first() == Some(&b' ') {
            b"data: "
        } else {
            b"data:"
        });
        out.extend_from_slice(l);
        out.push(b'\n');
    };
    while i < payload.len() {
        match payload[i] {
            b'\r' => {
                line(&mut out, &payload[start..i]);
                if payload.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            b'\n' => {
                line(&mut out, &payload[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    line(&mut out, &payload[start..]);
    out.push(b'\n');
    out
}

/// Format one `control` event.
pub fn control_event(
    next: Offset,
    cursor: Option<&str>,
    up_to_date: bool,
    closed: bool,
) -> Vec<u8> {
    let mut obj = serde_json::Map::new();
    obj.insert("streamNextOffset".into(), next.token().into());
    if closed {
        obj.insert("streamClosed".into(), true.into());
        obj.insert("upToDate".into(), true.into());
    } else {
        if let Some(c) = cursor {
            obj.insert("streamCursor".into(), c.into());
        }
        if up_to_date {
            obj.insert("upToDate".into(), true.into());
        }
    }
    let mut out = b"event: control\ndata:".to_vec();
    out.extend_from_slice(serde_json::Value::Object(obj).to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}

/// Data per SSE event at most (before base64): with a channel of one,
/// bounds what a stalled reader holds.
pub const SSE_CHUNK_BYTES: usize = 64 << 10;

/// Counts an open SSE response in the metrics while it lives.
struct ReaderGuard(Arc<App>);

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        self.0.metrics.sse_readers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Send `out` in pieces of at most [`SSE_CHUNK_BYTES`] (one JSON message can
/// be larger than a chunk), each counted as buffered until the connection
/// takes it; `false` when the reader is gone or the response's time is up.
async fn send(app: &App, tx: &mpsc::Sender<Bytes>, out: Vec<u8>, until: Instant) -> bool {
    if out.len() <= SSE_CHUNK_BYTES {
        return send_piece(app, tx, out, until).await;
    }
    for piece in out.chunks(SSE_CHUNK_BYTES) {
        if !send_piece(app, tx, piece.to_vec(), until).await {
            return false;
        }
    }
    true
}

/// Send one piece, counting it as buffered until the connection takes it;
/// `false` when the reader is gone or the response's time is up (a reader
/// that stops reading is not waited for beyond `--sse-max-ms`).
async fn send_piece(app: &App, tx: &mpsc::Sender<Bytes>, out: Vec<u8>, until: Instant) -> bool {
    let n = out.len() as u64;
    app.metrics.bytes_buffered.fetch_add(n, Ordering::Relaxed);
    let sent = tokio::time::timeout_at(until, tx.send(Bytes::from(out))).await;
    if !matches!(sent, Ok(Ok(()))) {
        app.metrics.bytes_buffered.fetch_sub(n, Ordering::Relaxed);
        return false;
    }
    true
}

async fn pump(
    app: Arc<App>,
    s: Arc<Stream>,
    mut pos: Offset,
    client_cursor: Option<String>,
    text: bool,
    tx: mpsc::Sender<Bytes>,
) {
    app.metrics.sse_readers.fetch_add(1, Ordering::Relaxed);
    let _guard = ReaderGuard(app.clone());
    let mut changed = s.changed.subscribe();
    let mut shutdown = app.shutdown.clone();
    let deadline = Instant::now() + app.opts.sse_max_duration;
    // Whether the last control event already said "up to date" at `pos`.
    let mut announced = false;
    // A watcher on a shared database is kept across the loop.
    let mut kept: Option<crate::log::Follower> = None;
    loop {
        if crate::http::refresh(&app, &s).await.is_err() {
            return;
        }
        if s.state.lock().check_visible().is_err() {
            return;
        }
        // Subscribed before the read, so that nothing made durable after
        // the read looked is missed.
        let mut sub = match kept.take() {
            Some(f) => f,
            None => match crate::http::subscribe(&app, &s, pos.seq).await {
                Ok(f) => f,
                Err(_) => return,
            },
        };
        let max = app.opts.read_chunk_bytes.min(SSE_CHUNK_BYTES);
        let (a, s2) = (app.clone(), s.clone());
        let chunk =
            match tokio::task::spawn_blocking(move || read::read(&a.streams.log, &s2, pos, max))
                .await
            {
                Ok(Ok(c)) => c,
                _ => return,
            };
        let cursor = offset::cursor(now_secs(), client_cursor.as_deref());
        let mut out = Vec::new();
        if chunk.items > 0 {
            out.extend(data_event(&chunk.body, text));
        }
        let moved = chunk.next != pos;
        pos = chunk.next;
        sub.seen(pos.seq);
        if chunk.closed {
            out.extend(control_event(pos, None, true, true));
            send(&app, &tx, out, deadline).await;
            return;
        }
        if chunk.items > 0 || !announced || (moved && chunk.up_to_date) {
            out.extend(control_event(pos, Some(&cursor), chunk.up_to_date, false));
            announced = chunk.up_to_date;
        }
        if !out.is_empty() && !send(&app, &tx, out, deadline).await {
            return;
        }
        if !chunk.up_to_date {
            kept = sub.reusable().then_some(sub);
            continue;
        }
        if sub.next_seq() < pos.seq {
            // The read passed events without data (stream state): follow
            // from where it stopped.
            continue;
        }
        // See `long_poll`: a pending deletion is waited for on `changed`.
        let deleting = s.state.lock().deleted.is_some();
        loop {
            tokio::select! {
                // Woken by the flusher when a batch holding this stream's
                // events is durable; `false`: the store stopped.
                more = sub.ready(), if !deleting => {
                    if !more { return; }
                    break;
                }
                r = changed.changed() => {
                    if r.is_err() { return; }
                    break;
                }
                _ = tokio::time::sleep(SSE_KEEPALIVE) => {
                    if !send(&app, &tx, b": keepalive\n\n".to_vec(), deadline).await {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
            }
        }
        kept = sub.reusable().then_some(sub);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lines_cannot_forge_events() {
        let ev = data_event(b"a\r\n\r\nevent: control\rdata: x\n", true);
        let s = String::from_utf8(ev).unwrap();
        assert_eq!(
            s,
            "event: data\ndata:a\ndata:\ndata:event: control\ndata:data: x\ndata:\n\n"
        );
        let s = String::from_utf8(data_event(b" lead", true)).unwrap();
        assert_eq!(s, "event: data\ndata:  lead\n\n");
        let s = String::from_utf8(data_event(b"Hello", false)).unwrap();
        assert_eq!(s, "event: data\ndata:SGVsbG8=\n\n");
    }

    #[test]
    fn control_events() {
        let s =
            String::from_utf8(control_event(Offset::new(1, 2), Some("7"), true, false)).unwrap();
        assert!(s.starts_with("event: control\ndata:{"));
        assert!(s.contains("\"streamCursor\":\"7\"") && s.contains("\"upToDate\":true"));
        let s = String::from_utf8(control_event(Offset::new(1, 2), Some("7"), true, true)).unwrap();
        assert!(s.contains("\"streamClosed\":true") && !s.contains("streamCursor"));
    }
}
