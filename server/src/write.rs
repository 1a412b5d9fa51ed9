//! Write requests: PUT (create, fork), POST (append, close), DELETE.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::header::HeaderMap;
use hyper::{Response, StatusCode};

use crate::body::Body;
use crate::headers as h;
use crate::http::{
    after_durable, blocking, content_type, durable, durable_write, header_str, lookup,
    lookup_for_append, read_body, set, stream_path, BodySlot, HttpError, Result,
};
use crate::offset::{self, Offset, Requested};
use crate::record::now_ms;
use crate::stream::Fail;
use crate::streams::{AppendReq, CreateReq, ForkReq};
use crate::App;

fn fork_source_path(v: &str) -> Result<String> {
    let v = v.trim();
    let path = match v.find("://") {
        Some(i) => {
            let rest = &v[i + 3..];
            &rest[rest.find('/').unwrap_or(rest.len())..]
        }
        None => v,
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    stream_path(path).map_err(|e| HttpError::bad(format!("Stream-Forked-From: {}", e.message)))
}

/// Refuse writes up front while the store takes none (nothing applied).
fn check_writable(app: &App) -> Result<()> {
    match app.health.refusal() {
        None => Ok(()),
        Some(why) => Err(Fail::Unavailable(why).into()),
    }
}

/// The engine refused a write (poisoned, closed): nothing applied; the
/// store is reported unhealthy and the refusal logged once.
fn refused(app: &App, fail: Fail) -> HttpError {
    if let Fail::Unavailable(m) = &fail {
        app.health.failed(m);
    }
    fail.into()
}

pub(crate) async fn put(
    app: &Arc<App>,
    path: String,
    hd: &HeaderMap,
    body: &mut BodySlot,
) -> Result<Response<Body>> {
    check_writable(app)?;
    let content_type = content_type(hd)?;
    let ttl_secs = match header_str(hd, h::STREAM_TTL)? {
        None => None,
        Some(v) => Some(h::parse_strict_uint(v.trim()).ok_or_else(|| {
            HttpError::bad(
                "Stream-TTL must be a non-negative integer without sign or leading zeros",
            )
        })?),
    };
    let expires_at = match header_str(hd, h::STREAM_EXPIRES_AT)? {
        None => None,
        Some(v) => Some((
            h::parse_rfc3339_ms(v)
                .ok_or_else(|| HttpError::bad("Stream-Expires-At must be an RFC 3339 timestamp"))?,
            v.trim().to_string(),
        )),
    };
    if ttl_secs.is_some() && expires_at.is_some() {
        return Err(HttpError::bad(
            "give Stream-TTL or Stream-Expires-At, not both",
        ));
    }
    let closed = header_str(hd, h::STREAM_CLOSED)?.is_some_and(h::is_true);
    let forked_from = header_str(hd, h::STREAM_FORKED_FROM)?;
    let fork_offset = header_str(hd, h::STREAM_FORK_OFFSET)?;
    let sub_offset = header_str(hd, h::STREAM_FORK_SUB_OFFSET)?;
    let fork = match forked_from {
        None => {
            if fork_offset.is_some() || sub_offset.is_some() {
                return Err(HttpError::bad("fork offsets need Stream-Forked-From"));
            }
            None
        }
        Some(src) => {
            let offset = match fork_offset {
                None => None,
                Some(v) => match offset::parse(v.trim()) {
                    Some(Requested::Start) => Some(Offset::ZERO),
                    Some(Requested::Now) => None,
                    Some(Requested::At(o)) => Some(o),
                    None => return Err(HttpError::bad("malformed Stream-Fork-Offset")),
                },
            };
            let sub_offset = match sub_offset {
                None => 0,
                Some(v) => h::parse_strict_uint(v.trim())
                    .ok_or_else(|| HttpError::bad("malformed Stream-Fork-Sub-Offset"))?,
            };
            if sub_offset > 0 && fork_offset.is_none() {
                return Err(HttpError::bad(
                    "Stream-Fork-Sub-Offset needs Stream-Fork-Offset",
                ));
            }
            Some(ForkReq {
                source_path: fork_source_path(src)?,
                offset,
                sub_offset,
            })
        }
    };
    let host = header_str(hd, "host")?.map(str::to_string);
    let body = read_body(app, hd, body).await?;
    let creq = CreateReq {
        path: path.clone(),
        content_type,
        ttl_secs,
        expires_at,
        closed,
        fork,
        body,
    };
    let a = app.clone();
    let created = match blocking(move || a.streams.create(&creq, now_ms())).await? {
        Ok(c) => c,
        Err(fail @ Fail::Unavailable(_)) => return Err(refused(app, fail)),
        Err(Fail::After(fail, pos)) => return Err(after_durable(app, *fail, pos).await),
        Err(fail) => return Err(fail.into()),
    };
    if created.created {
        durable_write(app, created.end).await?;
    } else {
        durable(app, created.end).await?;
    }
    let s = &created.stream;
    let (ct, vis, vis_closed) = {
        let st = s.state.lock();
        (st.config.content_type.clone(), st.vis, st.vis_closed)
    };
    let mut r = Response::new(Body::empty());
    let hd = r.headers_mut();
    set(hd, "content-type", &ct);
    set(hd, h::STREAM_NEXT_OFFSET, &vis.token());
    if vis_closed {
        set(hd, h::STREAM_CLOSED, "true");
    }
    if created.created {
        *r.status_mut() = StatusCode::CREATED;
        let host = host.unwrap_or_else(|| app.opts.listen.to_string());
        set(
            r.headers_mut(),
            "location",
            &format!("http://{host}{}", encode_path(&path)),
        );
    }
    Ok(r)
}

/// Percent-encode a decoded stream path for a URL: every byte but the
/// unreserved and sub-delimiter characters, `:`, `@` and `/` (RFC 3986
/// `pchar`), so that `?`, `#`, `%` and spaces stay part of the path.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        let keep = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn producer_headers(hd: &HeaderMap) -> Result<Option<(String, u64, u64)>> {
    let id = header_str(hd, h::PRODUCER_ID)?;
    let epoch = header_str(hd, h::PRODUCER_EPOCH)?;
    let seq = header_str(hd, h::PRODUCER_SEQ)?;
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.trim().is_empty() {
                return Err(HttpError::bad("Producer-Id must not be empty"));
            }
            let num = |v: &str, name: &str| {
                h::parse_strict_uint(v.trim())
                    .filter(|n| *n <= h::JS_SAFE_MAX)
                    .ok_or_else(|| HttpError::bad(format!("{name} must be an integer 0..2^53-1")))
            };
            Ok(Some((
                id.to_string(),
                num(epoch, "Producer-Epoch")?,
                num(seq, "Producer-Seq")?,
            )))
        }
        _ => Err(HttpError::bad(
            "Producer-Id, Producer-Epoch and Producer-Seq go together",
        )),
    }
}

pub(crate) async fn post(
    app: &Arc<App>,
    path: String,
    hd: &HeaderMap,
    body: &mut BodySlot,
) -> Result<Response<Body>> {
    check_writable(app)?;
    let areq_head = (
        content_type(hd)?,
        header_str(hd, h::STREAM_CLOSED)?.is_some_and(h::is_true),
        header_str(hd, h::STREAM_SEQ)?.map(str::to_string),
        producer_headers(hd)?,
    );
    let s = lookup_for_append(app, &path).await?;
    let body = read_body(app, hd, body).await?;
    let (content_type, close, stream_seq, producer) = areq_head;
    let areq = AppendReq {
        content_type,
        body,
        close,
        stream_seq,
        producer,
    };
    let (s, appended) = if app.streams.log.is_shared() {
        let (a, s2, r) = (app.clone(), s.clone(), areq.clone());
        blocking(move || a.streams.append_path_shared(s2, &path, &r, now_ms())).await?
    } else {
        let r = app.streams.append(&s, &areq, now_ms());
        (s, r)
    };
    let done = match appended {
        Ok(done) => done,
        Err(fail @ Fail::Unavailable(_)) => return Err(refused(app, fail)),
        Err(fail) => {
            // A conflict, a closed or deleted stream, a producer error: all
            // come from accepted state, which may not be durable yet (a
            // retry racing its original): answer once it is.
            let end = s.state.lock().last_end;
            return Err(after_durable(app, fail, end).await);
        }
    };
    if done.duplicate {
        // Nothing written by this request: what it confirms must be
        // durable, and once it is, it is visible.
        durable(app, done.end).await?;
    } else {
        durable_write(app, done.end).await?;
    }
    app.streams.publish(&s, done.tail, done.closed);
    if done.wrote && !done.duplicate {
        app.metrics.appends.fetch_add(1, Ordering::Relaxed);
        app.metrics
            .append_bytes
            .fetch_add(areq.body.len() as u64, Ordering::Relaxed);
    }
    let status = if done.duplicate || !done.wrote || areq.producer.is_none() {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::OK
    };
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    let hd = r.headers_mut();
    set(hd, h::STREAM_NEXT_OFFSET, &done.tail.token());
    if done.closed {
        set(hd, h::STREAM_CLOSED, "true");
    }
    if let Some((epoch, seq)) = done.producer {
        set(hd, h::PRODUCER_EPOCH, &epoch.to_string());
        set(hd, h::PRODUCER_SEQ, &seq.to_string());
    }
    Ok(r)
}

pub(crate) async fn delete(app: &Arc<App>, path: String) -> Result<Response<Body>> {
    check_writable(app)?;
    lookup(app, &path).await?;
    let deleted = if app.streams.log.is_shared() {
        let a = app.clone();
        blocking(move || a.streams.delete(&path, now_ms())).await?
    } else {
        app.streams.delete(&path, now_ms())
    };
    let end = match deleted {
        Ok(end) => end,
        Err((fail @ Fail::Unavailable(_), _)) => return Err(refused(app, fail)),
        Err((fail, Some(wait))) => return Err(after_durable(app, fail, wait).await),
        Err((fail, None)) => return Err(fail.into()),
    };
    durable_write(app, end).await?;
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    Ok(r)
}
