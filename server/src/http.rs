//! Requests to responses: routing, header parsing, status codes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use crate::body::Body;
use crate::headers as h;
use crate::log::Follower;
use crate::record::now_ms;
use crate::stream::{Fail, Stream};
use crate::App;

/// An error answer.
pub struct HttpError {
    pub status: StatusCode,
    pub message: String,
    pub headers: Vec<(&'static str, String)>,
}

impl HttpError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        HttpError {
            status,
            message: message.into(),
            headers: Vec::new(),
        }
    }
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<Fail> for HttpError {
    fn from(f: Fail) -> Self {
        use StatusCode as S;
        match f {
            Fail::NotFound => HttpError::new(S::NOT_FOUND, "stream not found"),
            Fail::Gone => HttpError::new(S::GONE, "stream deleted (forks still read through it)"),
            Fail::BadRequest(m) => HttpError::new(S::BAD_REQUEST, m),
            Fail::Conflict(m) => HttpError::new(S::CONFLICT, m),
            Fail::Closed { tail } => HttpError {
                status: S::CONFLICT,
                message: "stream is closed".into(),
                headers: vec![
                    (h::STREAM_CLOSED, "true".into()),
                    (h::STREAM_NEXT_OFFSET, tail.token()),
                ],
            },
            Fail::StaleEpoch { current } => HttpError {
                status: S::FORBIDDEN,
                message: "stale producer epoch".into(),
                headers: vec![(h::PRODUCER_EPOCH, current.to_string())],
            },
            Fail::SeqGap { expected, received } => HttpError {
                status: S::CONFLICT,
                message: format!("producer sequence gap: expected {expected}, got {received}"),
                headers: vec![
                    (h::PRODUCER_EXPECTED_SEQ, expected.to_string()),
                    (h::PRODUCER_RECEIVED_SEQ, received.to_string()),
                ],
            },
            Fail::TooLarge(m) => HttpError::new(S::PAYLOAD_TOO_LARGE, m),
            Fail::Unavailable(m) => HttpError {
                status: S::SERVICE_UNAVAILABLE,
                message: format!("{m} (nothing of this request was applied)"),
                headers: vec![("retry-after", "1".into())],
            },
            Fail::After(f, _) => (*f).into(),
            Fail::Retry => HttpError {
                status: S::SERVICE_UNAVAILABLE,
                message: "the stream is being written through another server instance at the \
                          same time (nothing of this request was applied)"
                    .into(),
                headers: vec![("retry-after", "1".into())],
            },
            Fail::Unknown(m) => HttpError {
                status: S::INTERNAL_SERVER_ERROR,
                message: format!(
                    "{m}: the write may or may not be applied; retry it with the same \
                     Producer-Id/Epoch/Seq or Stream-Seq, or read the stream first"
                ),
                headers: vec![(h::STREAM_OUTCOME, "unknown".into())],
            },
            Fail::Internal(m) => HttpError::new(S::INTERNAL_SERVER_ERROR, m),
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, HttpError>;

/// A request body not read yet by its handler (or read in part): drained
/// (up to a bound) after an early answer, so that the client, which sends
/// its whole body before reading, gets the answer and not a reset.
pub(crate) struct BodySlot {
    body: Option<Incoming>,
}

impl BodySlot {
    fn new(body: Incoming) -> BodySlot {
        let body = (!hyper::body::Body::is_end_stream(&body)).then_some(body);
        BodySlot { body }
    }
}

/// An early answer drains at most this much of the request body (and for at
/// most [`DRAIN_TIME`]); beyond it the connection is closed.
const DRAIN_BYTES_MAX: usize = 32 << 20;
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Entry point for every request.
pub async fn handle(
    app: Arc<App>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> std::result::Result<Response<Body>, Infallible> {
    let started = std::time::Instant::now();
    app.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let mut slot = BodySlot::new(body);
    let is_head = parts.method == Method::HEAD;
    let origin = parts
        .headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let allow_origin = cors_allow(app.opts.cors_origin.as_deref(), origin.as_deref());
    // A preflight is always answered (it does nothing); without an allowed
    // origin it carries no Access-Control-Allow-Origin, so the browser never
    // sends the request it asked about.
    let routed = match (&origin, &allow_origin) {
        (Some(o), None) if parts.method != Method::OPTIONS => Err(HttpError::new(
            StatusCode::FORBIDDEN,
            format!("origin {o:?} is not allowed (see --cors-origin)"),
        )),
        _ => route(&app, &parts, &mut slot).await,
    };
    let mut resp = match routed {
        Ok(r) => r,
        Err(e) => {
            if e.status.is_server_error() && e.status != StatusCode::SERVICE_UNAVAILABLE {
                // A 500 is a fault of this server or its store: said where
                // an operator looks, not only to the client.
                eprintln!(
                    "turnstone serve: {} {} answered {}: {}",
                    parts.method,
                    parts.uri.path(),
                    e.status.as_u16(),
                    e.message
                );
            }
            let body = if is_head || e.status == StatusCode::NOT_MODIFIED {
                Body::empty()
            } else {
                Body::full(format!("{}\n", e.message))
            };
            let mut r = Response::new(body);
            *r.status_mut() = e.status;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            for (k, v) in e.headers {
                set(r.headers_mut(), k, &v);
            }
            r
        }
    };
    // An answer given before the body was read: drain it (unless the client
    // waits for `100 Continue`, which it never gets now), and close the
    // connection when it cannot be drained.
    if let Some(mut body) = slot.body.take() {
        let expects_continue = parts
            .headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let drained = !expects_continue
            && resp.status() != StatusCode::REQUEST_TIMEOUT
            && drain(&mut body).await;
        if !drained {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
    let hd = resp.headers_mut();
    hd.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    if let Some(o) = allow_origin {
        hd.insert(
            "cross-origin-resource-policy",
            HeaderValue::from_static("cross-origin"),
        );
        set(hd, "access-control-allow-origin", &o);
        if o != "*" {
            hd.append(header::VARY, HeaderValue::from_static("origin"));
        }
        hd.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(h::EXPOSED),
        );
    } else {
        hd.insert(
            "cross-origin-resource-policy",
            HeaderValue::from_static("same-origin"),
        );
    }
    let status = resp.status().as_u16();
    app.metrics.status(status);
    if app.opts.access_log {
        crate::ops::access_log(&peer, &parts.method, &parts.uri, status, started.elapsed());
    }
    Ok(resp)
}

/// Read and discard the rest of a request body, within bounds; whether it
/// ended.
async fn drain(body: &mut Incoming) -> bool {
    let mut left = DRAIN_BYTES_MAX;
    let all = async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Ok(data) = frame.into_data() {
                if data.len() > left {
                    return false;
                }
                left -= data.len();
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, all).await.unwrap_or(false)
}

/// The `Access-Control-Allow-Origin` value for a request, if it may be
/// answered: requests without `Origin` (not from a browser page) always may,
/// and get none unless `*` is configured.
fn cors_allow(config: Option<&str>, origin: Option<&str>) -> Option<String> {
    match (config, origin) {
        (Some("*"), _) => Some("*".into()),
        (Some(list), Some(o)) => list
            .split(',')
            .map(str::trim)
            .any(|a| a.eq_ignore_ascii_case(o))
            .then(|| o.to_string()),
        _ => None,
    }
}

/// Set a header, skipping values that are not valid header text.
pub fn set(hd: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        hd.insert(HeaderName::from_static(name), v);
    }
}

pub(crate) fn header_str<'a>(hd: &'a HeaderMap, name: &str) -> Result<Option<&'a str>> {
    match hd.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(Some)
            .map_err(|_| HttpError::bad(format!("header {name} is not visible ASCII"))),
    }
}

async fn route(
    app: &Arc<App>,
    req: &hyper::http::request::Parts,
    body: &mut BodySlot,
) -> Result<Response<Body>> {
    if req.method == Method::OPTIONS {
        return Ok(preflight(&req.headers));
    }
    let raw_path = req.uri.path();
    if raw_path == crate::ops::HEALTH_PATH && matches!(req.method, Method::GET | Method::HEAD) {
        return Ok(health(app));
    }
    if let Some(token) = &app.opts.token {
        let ok = req
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_credentials)
            .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()));
        if !ok {
            let mut e = HttpError::new(StatusCode::UNAUTHORIZED, "a bearer token is required");
            e.headers.push(("www-authenticate", "Bearer".into()));
            return Err(e);
        }
    }
    if raw_path == crate::ops::METRICS_PATH && req.method == Method::GET {
        return Ok(metrics(app));
    }
    let path = stream_path(raw_path)?;
    let query = Query::parse(req.uri.query().unwrap_or(""))?;
    match req.method {
        Method::PUT => crate::write::put(app, path, &req.headers, body).await,
        Method::POST => crate::write::post(app, path, &req.headers, body).await,
        Method::GET => crate::get::get(app, path, query, &req.headers).await,
        Method::HEAD => crate::get::head(app, path).await,
        Method::DELETE => crate::write::delete(app, path).await,
        _ => {
            let mut e = HttpError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
            e.headers
                .push(("allow", "GET, HEAD, PUT, POST, DELETE, OPTIONS".into()));
            Err(e)
        }
    }
}

/// The credentials of `Authorization: Bearer <token>`; the scheme name is
/// case-insensitive (RFC 9110 §11.1), then one or more spaces.
fn bearer_credentials(v: &str) -> Option<&str> {
    let (scheme, rest) = v.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case("bearer") || !rest.starts_with(' ') {
        return None;
    }
    Some(rest.trim())
}

/// `GET /.well-known/turnstone/health`: 200 `ready` or `read-only`, 503
/// otherwise (`poisoned: ...`, `write-failing: ...`, `store-missing`). No
/// token needed.
fn health(app: &App) -> Response<Body> {
    let state = app.health.state();
    let mut r = Response::new(Body::full(format!("{state}\n")));
    if state != "ready" && state != "read-only" {
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    set(r.headers_mut(), "content-type", "text/plain; charset=utf-8");
    set(r.headers_mut(), "cache-control", "no-store");
    r
}

/// `GET /.well-known/turnstone/metrics`: Prometheus text format.
fn metrics(app: &App) -> Response<Body> {
    let counters = match &app.streams.log {
        crate::log::Log::Embedded(s) => crate::ops::LogCounters::Store(s.stats()),
        crate::log::Log::Pg(p) => crate::ops::LogCounters::Pg(p.log.stats()),
    };
    let text = app.metrics.render(&counters, &app.health.state());
    let mut r = Response::new(Body::full(text));
    set(
        r.headers_mut(),
        "content-type",
        "text/plain; version=0.0.4; charset=utf-8",
    );
    set(r.headers_mut(), "cache-control", "no-store");
    r
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn preflight(hd: &HeaderMap) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let out = r.headers_mut();
    set(
        out,
        "access-control-allow-methods",
        "GET, HEAD, PUT, POST, DELETE, OPTIONS",
    );
    let asked = hd
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.trim().is_empty());
    set(
        out,
        "access-control-allow-headers",
        asked.unwrap_or(h::ALLOWED),
    );
    set(out, "access-control-max-age", "86400");
    r
}

/// Longest stream path accepted (bytes, decoded).
const PATH_MAX: usize = 1024;

/// The stream key of a request path: percent-decoded, UTF-8, no `.`/`..`
/// segments, no control characters. Streams live in the log, never in files
/// named after them, so no path can reach the filesystem; this only keeps
/// names unambiguous.
pub fn stream_path(raw: &str) -> Result<String> {
    let decoded =
        percent_decode(raw).ok_or_else(|| HttpError::bad("malformed percent-encoding in path"))?;
    let path = String::from_utf8(decoded).map_err(|_| HttpError::bad("path is not UTF-8"))?;
    if !path.starts_with('/') || path.len() < 2 {
        return Err(HttpError::new(StatusCode::NOT_FOUND, "no stream at /"));
    }
    if path.len() > PATH_MAX {
        return Err(HttpError::new(
            StatusCode::URI_TOO_LONG,
            "stream path too long",
        ));
    }
    if path.chars().any(|c| c.is_control()) {
        return Err(HttpError::bad("control characters in path"));
    }
    if path.split('/').any(|seg| seg == "." || seg == "..") {
        return Err(HttpError::bad(
            "'.' and '..' segments are not allowed in stream paths",
        ));
    }
    Ok(path)
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The protocol's query parameters (others are ignored).
#[derive(Debug, Default)]
pub struct Query {
    pub offset: Option<String>,
    pub live: Option<String>,
    pub cursor: Option<String>,
}

impl Query {
    pub fn parse(q: &str) -> Result<Query> {
        let mut out = Query::default();
        for (k, v) in form_urlencoded::parse(q.as_bytes()) {
            let slot = match k.as_ref() {
                "offset" => &mut out.offset,
                "live" => &mut out.live,
                "cursor" => &mut out.cursor,
                _ => continue,
            };
            if slot.is_some() {
                return Err(HttpError::bad(format!("query parameter {k} given twice")));
            }
            *slot = Some(v.into_owned());
        }
        Ok(out)
    }
}

/// Read the whole request body (at most `max_body_bytes`, within
/// `body_timeout`). On 413 the rest stays in the slot to be drained.
pub(crate) async fn read_body(app: &App, hd: &HeaderMap, slot: &mut BodySlot) -> Result<Bytes> {
    let max = app.opts.max_body_bytes;
    let too_large = || {
        HttpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body over {max} bytes (--max-body-bytes)"),
        )
    };
    if let Some(len) = hd
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > max as u64 {
            return Err(too_large());
        }
    }
    let Some(body) = slot.body.as_mut() else {
        return Ok(Bytes::new());
    };
    let mut buf = BytesMut::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| HttpError::bad(format!("reading the body: {e}")))?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > max {
                    return Err(too_large());
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(())
    };
    match tokio::time::timeout(app.opts.body_timeout, read).await {
        Ok(Ok(())) => {
            slot.body = None;
            Ok(buf.freeze())
        }
        Ok(Err(e)) => {
            if e.status != StatusCode::PAYLOAD_TOO_LARGE {
                slot.body = None;
            }
            Err(e)
        }
        Err(_) => {
            let mut e = HttpError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms",
                    app.opts.body_timeout.as_millis()
                ),
            );
            e.headers.push(("connection", "close".into()));
            Err(e)
        }
    }
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// Wait until `pos` is durable when this request wrote nothing of its own
/// before it: a failure is a 503 (nothing of this request is applied).
pub(crate) async fn durable(app: &App, pos: turnstone::LogPos) -> Result<()> {
    wait_durable(app, pos, false)
        .await
        .map_err(|m| Fail::Unavailable(m).into())
}

/// Wait until this request's own write (ending at `pos`) is durable: a
/// failure is "outcome unknown" (the engine keeps a failed batch and
/// retries it; after an fdatasync error the bytes may be on disk anyway).
pub(crate) async fn durable_write(app: &App, pos: turnstone::LogPos) -> Result<()> {
    wait_durable(app, pos, true)
        .await
        .map_err(|m| Fail::Unknown(m).into())
}

/// `own_write`: time the wait, and check that the store directory is still
/// there (a removed store directory takes fdatasyncs into deleted files).
async fn wait_durable(
    app: &App,
    pos: turnstone::LogPos,
    own_write: bool,
) -> std::result::Result<(), String> {
    let t = std::time::Instant::now();
    let r = app.durable.wait(pos).await;
    // (On PostgreSQL the commit wait is timed where it happens.)
    if own_write && !app.streams.log.is_shared() {
        let us = t.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
        app.metrics.durable_wait(us);
    }
    match r {
        Ok(()) if !own_write || app.health.check_dir() => {
            if own_write {
                // (A wait for what was durable already proves nothing.)
                app.health.write_ok();
            }
            app.streams.settle();
            Ok(())
        }
        Ok(()) => Err("the store directory was removed or replaced".into()),
        Err(e) => {
            if e.fatal {
                app.health.failed(&e.message);
            } else {
                app.health.write_failed(&e.message);
            }
            Err(e.message)
        }
    }
}

/// Answer `fail` (derived from a stream's accepted state) only once that
/// state is durable: a 409 or 404 must not claim what a crash could undo.
pub(crate) async fn after_durable(app: &App, fail: Fail, pos: turnstone::LogPos) -> HttpError {
    match durable(app, pos).await {
        Ok(()) => fail.into(),
        Err(e) => e,
    }
}

/// The stream at `path`, once its creation is durable (on a shared
/// database: brought up to what every instance committed).
pub(crate) async fn lookup(app: &Arc<App>, path: &str) -> Result<Arc<Stream>> {
    lookup_with(app, path, true).await
}

/// [`lookup`] for an append: on a shared database a stream this instance
/// has loaded is not folded first (the append is checked against the
/// database at its commit, and folded and checked again if it raced).
pub(crate) async fn lookup_for_append(app: &Arc<App>, path: &str) -> Result<Arc<Stream>> {
    lookup_with(app, path, false).await
}

async fn lookup_with(app: &Arc<App>, path: &str, fresh: bool) -> Result<Arc<Stream>> {
    let found = if app.streams.log.is_shared() {
        let (a, p) = (app.clone(), path.to_string());
        blocking(move || {
            a.streams
                .lookup_shared(&p, now_ms(), fresh)
                .map_err(|f| (f, None))
        })
        .await?
    } else {
        app.streams.lookup(path, now_ms())
    };
    match found {
        Ok(s) => {
            durable(app, s.create_end).await?;
            Ok(s)
        }
        Err((fail, end)) => {
            if let Some(end) = end {
                durable(app, end).await?;
            }
            Err(fail.into())
        }
    }
}

/// On a shared database: fold what other instances committed into `s`.
pub(crate) async fn refresh(app: &Arc<App>, s: &Arc<Stream>) -> Result<()> {
    if !app.streams.log.is_shared() {
        return Ok(());
    }
    let (a, s2) = (app.clone(), s.clone());
    Ok(blocking(move || a.streams.refresh(&s2)).await??)
}

/// A follower of `s` from `seq` (blocking on a shared database).
pub(crate) async fn subscribe(app: &Arc<App>, s: &Arc<Stream>, seq: u64) -> Result<Follower> {
    if !app.streams.log.is_shared() {
        return Ok(app.streams.log.subscribe(&s.session, seq)?);
    }
    let (a, session) = (app.clone(), s.session.clone());
    Ok(blocking(move || a.streams.log.subscribe(&session, seq)).await??)
}

pub(crate) fn content_type(hd: &HeaderMap) -> Result<Option<String>> {
    match header_str(hd, "content-type")? {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => h::normalize_content_type(v)
            .map(Some)
            .ok_or_else(|| HttpError::bad(format!("invalid Content-Type {v:?}"))),
    }
}

pub fn now_secs() -> u64 {
    now_ms() / 1000
}

/// Keep a long SSE connection's idle periods short enough for proxies.
pub const SSE_KEEPALIVE: Duration = Duration::from_secs(15);
