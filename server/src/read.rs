//! Reading a stream: offset validation against the log, catch-up chunks,
//! and where a fork with a sub-offset cuts its source.

use std::ops::ControlFlow;

use crate::log::Log;

use crate::offset::Offset;
use crate::record::{self, DATA_CONTINUES, KIND_DATA};
use crate::stream::{Fail, Stream};

/// Check that `o` is a position of this stream: at most the visible tail,
/// and with the byte count the log records there. Blocking (reads one event).
pub fn validate(log: &Log, session: &str, vis: Offset, o: Offset) -> Result<(), Fail> {
    let bad = || {
        Fail::BadRequest(format!(
            "offset {} is not a position of this stream",
            o.token()
        ))
    };
    if o.seq > vis.seq {
        return Err(bad());
    }
    if o.seq == vis.seq {
        return if o.bytes == vis.bytes {
            Ok(())
        } else {
            Err(bad())
        };
    }
    let (kind, payload) = log.read(session, o.seq)?;
    match record::decode(&payload) {
        Some(d) if record::is_server_kind(kind) && d.bytes_before == o.bytes => Ok(()),
        _ => Err(bad()),
    }
}

/// Where a fork cuts its source: it inherits events `0..upto` (stream
/// bytes `bytes`), then copies `partial` (the head of a split event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub upto: u64,
    pub bytes: u64,
    pub partial: Option<Vec<u8>>,
}

/// Resolve `Stream-Fork-Sub-Offset: n` (n > 0): `n` bytes (or JSON
/// messages) into the append that starts at `at`. Blocking.
pub fn sub_offset(
    log: &Log,
    session: &str,
    vis: Offset,
    json: bool,
    at: Offset,
    n: u64,
) -> Result<Cut, Fail> {
    let mut remaining = n;
    let mut started = false;
    let mut out: Option<Result<Cut, Fail>> = None;
    log.visit_range(session, at.seq..vis.seq, |e| {
        let Some(d) = record::decode(e.payload) else {
            out = Some(Err(Fail::Internal(format!(
                "undecodable event {}",
                e.seq.0
            ))));
            return ControlFlow::Break(());
        };
        if e.kind != KIND_DATA {
            if started {
                out = Some(Err(overshoot(n)));
                return ControlFlow::Break(());
            }
            return ControlFlow::Continue(());
        }
        if started && d.flags & DATA_CONTINUES == 0 {
            out = Some(Err(overshoot(n)));
            return ControlFlow::Break(());
        }
        started = true;
        let units = if json { 1 } else { d.body.len() as u64 };
        if remaining >= units {
            remaining -= units;
            if remaining == 0 {
                out = Some(Ok(Cut {
                    upto: e.seq.0 + 1,
                    bytes: d.bytes_before + d.body.len() as u64,
                    partial: None,
                }));
                return ControlFlow::Break(());
            }
        } else {
            out = Some(Ok(Cut {
                upto: e.seq.0,
                bytes: d.bytes_before,
                partial: Some(d.body[..remaining as usize].to_vec()),
            }));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })?;
    match out {
        Some(r) => r,
        None if started => Err(overshoot(n)),
        None => Err(Fail::BadRequest(
            "Stream-Fork-Sub-Offset: no append starts at the fork offset".into(),
        )),
    }
}

fn overshoot(n: u64) -> Fail {
    Fail::BadRequest(format!(
        "Stream-Fork-Sub-Offset {n} goes past the end of the append"
    ))
}

/// One response's worth of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Bytes, or for JSON streams a JSON array of the messages.
    pub body: Vec<u8>,
    /// Data events (messages) in it.
    pub items: usize,
    pub next: Offset,
    /// `next` is the visible tail.
    pub up_to_date: bool,
    /// Up to date and the stream is closed.
    pub closed: bool,
}

/// Read from `from` (validated) up to about `max_bytes` of data (at least one
/// event when there is one). Blocking.
pub fn read(log: &Log, s: &Stream, from: Offset, max_bytes: usize) -> Result<Chunk, Fail> {
    let (vis, vis_closed, json) = {
        let st = s.visible(log);
        (st.vis, st.vis_closed, st.json)
    };
    let mut body = Vec::new();
    if json {
        body.push(b'[');
    }
    let mut items = 0usize;
    let mut data_bytes = 0usize;
    let mut pos = from;
    let mut seq = from.seq;
    // (A shared database answers a range in one query: ask for more.)
    let mut batch = if log.is_shared() { 256 } else { 16u64 };
    // Events are visited in place (no copy of their payloads); the walk
    // stops once the chunk is full.
    let mut bad: Option<u64> = None;
    let mut full = false;
    while seq < vis.seq && !full {
        let to = (seq + batch).min(vis.seq);
        let mut read_bytes = 0usize;
        let mut seen = 0u64;
        log.visit_range(&s.session, seq..to, |e| {
            let Some(d) = record::decode(e.payload) else {
                bad = Some(e.seq.0);
                return ControlFlow::Break(());
            };
            seen += 1;
            read_bytes += d.body.len();
            if e.kind == KIND_DATA {
                if items > 0 && data_bytes + d.body.len() > max_bytes {
                    full = true;
                    return ControlFlow::Break(());
                }
                if json && items > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(d.body);
                items += 1;
                data_bytes += d.body.len();
                pos = Offset::new(e.seq.0 + 1, d.bytes_before + d.body.len() as u64);
            } else {
                pos = Offset::new(e.seq.0 + 1, d.bytes_before);
            }
            ControlFlow::Continue(())
        })?;
        if let Some(seq) = bad {
            return Err(Fail::Internal(format!("undecodable event {seq}")));
        }
        if seen == 0 {
            break;
        }
        seq += seen;
        if data_bytes >= max_bytes {
            break;
        }
        // Size the next batch from what this one weighed.
        let avg = (read_bytes / seen as usize).max(64);
        batch = ((max_bytes - data_bytes) / avg).clamp(1, 1024) as u64;
    }
    if json {
        body.push(b']');
    }
    let up_to_date = pos.seq >= vis.seq;
    if up_to_date {
        pos = vis;
    }
    Ok(Chunk {
        body,
        items,
        next: pos,
        up_to_date,
        closed: up_to_date && vis_closed,
    })
}
