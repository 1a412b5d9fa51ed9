//! The stream registry and its write operations: create (and fork), append,
//! close, delete, expire. Every state change is an engine append in the same
//! atomic group as the bytes it belongs to; callers answer only after
//! [`crate::durable::Durability::wait`] on the returned position.
//!
//! Lock order: the registry lock, then one stream's state lock. Appends take
//! only the stream lock.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::watch;
use turnstone::LogPos;

use crate::headers::{self, essence};
use crate::log::{Commit, Log, Written};
use crate::offset::Offset;
use crate::record::{
    self, CreateRecord, DeleteMode, ForkRecord, ProducerRecord, StateRecord, DATA_CONTINUES,
    FLAG_IGNORABLE, KIND_CREATE, KIND_DATA, KIND_STATE,
};
use crate::stream::{check_producer, Fail, ProducerCheck, State, Stream};

/// Byte bodies are stored as events of at most this many bytes (FORMAT.md
/// §13 allows up to 1 MiB; smaller events bound what a reader holds: a
/// catch-up chunk or an SSE event always carries at least one whole event).
pub const DATA_EVENT_BYTES: usize = 64 << 10;

/// Streams by path and by engine session.
#[derive(Debug, Default)]
pub struct Registry {
    pub by_path: HashMap<String, Arc<Stream>>,
    pub by_session: HashMap<String, Arc<Stream>>,
    pub next_incarnation: u64,
}

/// The server's streams over one store.
pub struct Streams {
    pub log: Log,
    pub reg: parking_lot::Mutex<Registry>,
    /// Tombstones written but not yet known durable: (stream, end).
    pub(crate) pending_deletes: parking_lot::Mutex<Vec<(Arc<Stream>, LogPos)>>,
}

/// A PUT.
#[derive(Debug, Clone)]
pub struct CreateReq {
    pub path: String,
    /// Normalised content type, if the request had one.
    pub content_type: Option<String>,
    pub ttl_secs: Option<u64>,
    /// Milliseconds and the header as sent.
    pub expires_at: Option<(i64, String)>,
    pub closed: bool,
    pub fork: Option<ForkReq>,
    pub body: Bytes,
}

/// Fork headers of a PUT.
#[derive(Debug, Clone)]
pub struct ForkReq {
    pub source_path: String,
    pub offset: Option<Offset>,
    pub sub_offset: u64,
}

/// What a PUT did.
#[derive(Debug)]
pub struct Created {
    pub created: bool,
    pub stream: Arc<Stream>,
    /// Wait for this before answering.
    pub end: LogPos,
    /// On PostgreSQL: the commit to wait for first.
    pub commit: Option<Commit>,
}

/// A POST.
#[derive(Debug, Clone)]
pub struct AppendReq {
    pub content_type: Option<String>,
    pub body: Bytes,
    pub close: bool,
    pub stream_seq: Option<String>,
    pub producer: Option<(String, u64, u64)>,
}

/// What a POST did (answer after `end` is durable; then publish `tail`).
#[derive(Debug, Clone)]
pub struct Appended {
    /// New data was written (or only state, for a close).
    pub wrote: bool,
    /// A producer duplicate or an idempotent close: nothing written.
    pub duplicate: bool,
    pub end: LogPos,
    pub tail: Offset,
    pub closed: bool,
    /// Producer epoch and highest accepted seq, to echo.
    pub producer: Option<(u64, u64)>,
    /// On PostgreSQL: the commit to wait for first.
    pub commit: Option<Commit>,
}

/// Split a JSON body into messages: an array is flattened one level, any
/// other value is one message. Empty arrays are refused unless `allow_empty`.
pub fn json_messages(body: &[u8], allow_empty: bool) -> Result<Vec<Vec<u8>>, Fail> {
    let raw: &RawValue = serde_json::from_slice(body)
        .map_err(|e| Fail::BadRequest(format!("body is not valid JSON: {e}")))?;
    let text = raw.get().trim();
    if text.starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(text)
            .map_err(|e| Fail::BadRequest(format!("body is not valid JSON: {e}")))?;
        if items.is_empty() && !allow_empty {
            return Err(Fail::BadRequest(
                "an empty JSON array appends nothing".into(),
            ));
        }
        Ok(items
            .into_iter()
            .map(|i| i.get().trim().as_bytes().to_vec())
            .collect())
    } else {
        Ok(vec![text.as_bytes().to_vec()])
    }
}

/// The data events of a body: JSON messages, or byte slices.
fn data_units(json: bool, body: &[u8], allow_empty: bool) -> Result<Vec<Vec<u8>>, Fail> {
    if body.is_empty() {
        return Ok(Vec::new());
    }
    if json {
        let messages = json_messages(body, allow_empty)?;
        if let Some(m) = messages
            .iter()
            .find(|m| m.len() > record::JSON_MESSAGE_BYTES_MAX)
        {
            return Err(Fail::TooLarge(format!(
                "a JSON message of {} bytes is over the {} bytes one message can hold \
                 (one message is one event)",
                m.len(),
                record::JSON_MESSAGE_BYTES_MAX
            )));
        }
        Ok(messages)
    } else {
        Ok(body.chunks(DATA_EVENT_BYTES).map(<[u8]>::to_vec).collect())
    }
}

/// Events under construction for one atomic group.
pub(crate) struct Group {
    pub(crate) events: Vec<(u16, Vec<u8>)>,
    pub(crate) bytes: u64,
}

impl Group {
    pub(crate) fn new(bytes: u64) -> Self {
        Group {
            events: Vec::new(),
            bytes,
        }
    }
    pub(crate) fn json<T: serde::Serialize>(&mut self, kind: u16, body: &T) {
        let b = serde_json::to_vec(body).expect("record serializes");
        self.events.push((kind, record::encode(0, self.bytes, &b)));
    }
    fn data(&mut self, units: Vec<Vec<u8>>) {
        for (i, u) in units.into_iter().enumerate() {
            let flags = if i == 0 { 0 } else { DATA_CONTINUES };
            self.events
                .push((KIND_DATA, record::encode(flags, self.bytes, &u)));
            self.bytes += u.len() as u64;
        }
    }
    fn raw_data(&mut self, flags: u8, body: &[u8]) {
        self.events
            .push((KIND_DATA, record::encode(flags, self.bytes, body)));
        self.bytes += body.len() as u64;
    }
    /// Append to the log at `expect` (the session's length as the
    /// stream's state has it); returns the position to wait for.
    pub(crate) fn write(&self, log: &Log, session: &str, expect: u64) -> Result<Written, Fail> {
        let evs: Vec<(u16, u16, &[u8])> = self
            .events
            .iter()
            .map(|(k, p)| (*k, FLAG_IGNORABLE, p.as_slice()))
            .collect();
        log.append_group(session, &evs, expect)
    }
}

pub(crate) fn new_stream(path: &str, session: &str, end: LogPos, state: State) -> Arc<Stream> {
    let (changed, _) = watch::channel(0u64);
    Arc::new(Stream {
        path: path.to_string(),
        session: session.to_string(),
        create_end: end,
        state: parking_lot::Mutex::new(state),
        changed,
        reload: parking_lot::Mutex::new(()),
    })
}

impl Streams {
    pub fn new(log: Log, reg: Registry) -> Streams {
        Streams {
            log,
            reg: parking_lot::Mutex::new(reg),
            pending_deletes: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// The stream at `path`, expiring it first when its time has come.
    /// `Err((fail, Some(end)))`: it just expired; wait for `end` to be durable
    /// before answering.
    pub fn lookup(&self, path: &str, now_ms: u64) -> Result<Arc<Stream>, (Fail, Option<LogPos>)> {
        if self.log.is_shared() {
            return self
                .lookup_shared(path, now_ms, true)
                .map_err(|f| (f, None));
        }
        let s = self
            .reg
            .lock()
            .by_path
            .get(path)
            .cloned()
            .ok_or((Fail::NotFound, None))?;
        let (expired, live) = {
            let st = s.state.lock();
            (st.is_expired(now_ms), st.check_visible())
        };
        if expired {
            let mut reg = self.reg.lock();
            let (mode, end) = self
                .delete_locked(&mut reg, &s, "expired", now_ms)
                .map_err(|f| (f, None))?;
            let fail = match mode {
                DeleteMode::Soft => Fail::Gone,
                DeleteMode::Hard => Fail::NotFound,
            };
            return Err((fail, end));
        }
        live.map_err(|f| (f, None))?;
        Ok(s)
    }

    /// Create a stream (PUT), or confirm an existing one with the same
    /// configuration. Blocking (a fork reads the source's log).
    pub fn create(&self, req: &CreateReq, now_ms: u64) -> Result<Created, Fail> {
        if self.log.is_shared() {
            return self.create_shared(req, now_ms);
        }
        let mut reg = self.reg.lock();
        // A hard-deleted stream (its tombstone maybe not durable yet) is
        // replaced: the new incarnation is logged after the tombstone.
        let existing = reg
            .by_path
            .get(&req.path)
            .filter(|e| e.state.lock().deleted != Some(DeleteMode::Hard))
            .cloned();
        if let Some(existing) = existing {
            let expired = existing.state.lock().is_expired(now_ms);
            if expired {
                let (mode, end) = self.delete_locked(&mut reg, &existing, "expired", now_ms)?;
                if mode == DeleteMode::Soft {
                    let fail = Fail::Conflict(
                        "the stream was deleted but forks still read through it".into(),
                    );
                    return Err(match end {
                        Some(end) => fail.after(end),
                        None => fail,
                    });
                }
            } else {
                // Conflicts rest on the existing stream's state: answered
                // once its last write is durable.
                let st = existing.state.lock();
                if st.deleted == Some(DeleteMode::Soft) {
                    return Err(Fail::Conflict(
                        "the stream was deleted but forks still read through it".into(),
                    )
                    .after(st.last_end));
                }
                if !same_config(req, &st.config) {
                    return Err(Fail::Conflict(
                        "the stream exists with a different configuration".into(),
                    )
                    .after(st.last_end));
                }
                let end = st.last_end;
                drop(st);
                return Ok(Created {
                    created: false,
                    stream: existing,
                    end,
                    commit: None,
                });
            }
        }
        let session = record::session_name(reg.next_incarnation);
        let created = match &req.fork {
            None => self.create_plain(req, &session, now_ms)?,
            Some(f) => {
                let source = self.fork_source(&mut reg, f, now_ms)?;
                self.create_fork(&source, req, f, &session, now_ms)?
            }
        };
        reg.next_incarnation += 1;
        reg.by_path.insert(req.path.clone(), created.stream.clone());
        reg.by_session.insert(session, created.stream.clone());
        Ok(created)
    }

    pub(crate) fn create_plain(
        &self,
        req: &CreateReq,
        session: &str,
        now_ms: u64,
    ) -> Result<Created, Fail> {
        let content_type = req
            .content_type
            .clone()
            .unwrap_or_else(|| headers::DEFAULT_CONTENT_TYPE.to_string());
        let json = headers::is_json(&content_type);
        let units = data_units(json, &req.body, true)?;
        let config = CreateRecord {
            path: req.path.clone(),
            content_type,
            ttl_secs: req.ttl_secs,
            expires_at_ms: req.expires_at.as_ref().map(|e| e.0),
            expires_at: req.expires_at.as_ref().map(|e| e.1.clone()),
            closed: req.closed,
            fork: None,
            created_ms: now_ms,
        };
        let mut g = Group::new(0);
        g.json(KIND_CREATE, &config);
        g.data(units);
        self.log.create_session(session)?;
        let Written { end, commit } = g.write(&self.log, session, 0)?;
        let tail = Offset::new(g.events.len() as u64, g.bytes);
        let state = State::new(config, tail, end, now_ms);
        Ok(Created {
            created: true,
            stream: new_stream(&req.path, session, end, state),
            end,
            commit,
        })
    }

    /// The source of a fork, expired first when its time has come.
    fn fork_source(
        &self,
        reg: &mut Registry,
        f: &ForkReq,
        now_ms: u64,
    ) -> Result<Arc<Stream>, Fail> {
        let source = reg
            .by_path
            .get(&f.source_path)
            .cloned()
            .ok_or(Fail::NotFound)?;
        if source.state.lock().is_expired(now_ms) {
            let (mode, end) = self.delete_locked(reg, &source, "expired", now_ms)?;
            let fail = match mode {
                DeleteMode::Soft => Fail::Conflict("the fork source was deleted".into()),
                DeleteMode::Hard => Fail::NotFound,
            };
            return Err(match end {
                Some(end) => fail.after(end),
                None => fail,
            });
        }
        Ok(source)
    }

    pub(crate) fn create_fork(
        &self,
        source: &Arc<Stream>,
        req: &CreateReq,
        f: &ForkReq,
        session: &str,
        now_ms: u64,
    ) -> Result<Created, Fail> {
        let (src_config, src_vis) = {
            let st = source.state.lock();
            match st.deleted {
                Some(DeleteMode::Hard) => return Err(Fail::NotFound.after(st.last_end)),
                Some(DeleteMode::Soft) => {
                    return Err(
                        Fail::Conflict("the fork source was deleted".into()).after(st.last_end)
                    )
                }
                None => {}
            }
            (st.config.clone(), st.vis)
        };
        if self.log.durable_pos() < source.create_end {
            return Err(Fail::Conflict(
                "the fork source is still being created".into(),
            ));
        }
        let content_type = req
            .content_type
            .clone()
            .unwrap_or_else(|| src_config.content_type.clone());
        if essence(&content_type) != essence(&src_config.content_type) {
            return Err(Fail::Conflict(format!(
                "content type {content_type} differs from the source's {}",
                src_config.content_type
            )));
        }
        let json = headers::is_json(&content_type);
        let units = data_units(json, &req.body, true)?;
        let at = match f.offset {
            None => src_vis,
            Some(o) => {
                crate::read::validate(&self.log, &source.session, src_vis, o)?;
                o
            }
        };
        let cut = if f.sub_offset > 0 {
            crate::read::sub_offset(&self.log, &source.session, src_vis, json, at, f.sub_offset)?
        } else {
            crate::read::Cut {
                upto: at.seq,
                bytes: at.bytes,
                partial: None,
            }
        };
        let (ttl_secs, expires_at) = if req.ttl_secs.is_none() && req.expires_at.is_none() {
            (
                src_config.ttl_secs,
                src_config.expires_at_ms.zip(src_config.expires_at.clone()),
            )
        } else {
            (req.ttl_secs, req.expires_at.clone())
        };
        let config = CreateRecord {
            path: req.path.clone(),
            content_type,
            ttl_secs,
            expires_at_ms: expires_at.as_ref().map(|e| e.0),
            expires_at: expires_at.map(|e| e.1),
            closed: req.closed,
            fork: Some(ForkRecord {
                source_path: f.source_path.clone(),
                source_session: source.session.clone(),
                offset: f.offset.map(|o| o.token()),
                sub_offset: f.sub_offset,
            }),
            created_ms: now_ms,
        };
        self.log.fork(&source.session, cut.upto, session)?;
        let mut g = Group::new(cut.bytes);
        g.json(KIND_CREATE, &config);
        if let Some(p) = &cut.partial {
            g.raw_data(0, p);
        }
        g.data(units);
        let Written { end, commit } = g.write(&self.log, session, cut.upto)?;
        let tail = Offset::new(cut.upto + g.events.len() as u64, g.bytes);
        source.state.lock().forks += 1;
        let state = State::new(config, tail, end, now_ms);
        Ok(Created {
            created: true,
            stream: new_stream(&req.path, session, end, state),
            end,
            commit,
        })
    }

    /// Append (POST), close, or both. Blocking on a shared database.
    pub fn append(&self, s: &Stream, req: &AppendReq, now_ms: u64) -> Result<Appended, Fail> {
        if self.log.is_shared() {
            return self.append_shared(s, req, now_ms);
        }
        self.append_once(s, req, now_ms)
    }

    pub(crate) fn append_once(
        &self,
        s: &Stream,
        req: &AppendReq,
        now_ms: u64,
    ) -> Result<Appended, Fail> {
        let mut st = s.state.lock();
        if st.stale {
            // (On a shared database: folded again first.)
            return Err(Fail::Retry);
        }
        st.check_live()?;
        let close_only = req.close && req.body.is_empty();
        if !close_only {
            if req.body.is_empty() {
                return Err(Fail::BadRequest("an append needs a non-empty body".into()));
            }
            let ct = req
                .content_type
                .as_deref()
                .ok_or_else(|| Fail::BadRequest("an append needs a Content-Type".into()))?;
            if essence(ct) != essence(&st.config.content_type) {
                return Err(Fail::Conflict(format!(
                    "content type {ct} does not match the stream's {}",
                    st.config.content_type
                )));
            }
        }
        let units = if close_only {
            Vec::new()
        } else {
            data_units(st.json, &req.body, false)?
        };
        let mut state_rec = StateRecord::default();
        let mut echo = None;
        if let Some((id, epoch, seq)) = &req.producer {
            let current = st.producers.get(id).copied();
            match check_producer(current, *epoch, *seq)? {
                ProducerCheck::Duplicate { highest } => {
                    st.last_access_ms = now_ms;
                    return Ok(Appended {
                        wrote: false,
                        duplicate: true,
                        end: st.last_end,
                        tail: st.tail,
                        closed: st.closed,
                        producer: Some((*epoch, highest)),
                        commit: None,
                    });
                }
                ProducerCheck::Accept => {
                    state_rec.producer = Some(ProducerRecord {
                        id: id.clone(),
                        epoch: *epoch,
                        seq: *seq,
                    });
                    echo = Some((*epoch, *seq));
                }
            }
        }
        if st.closed {
            if close_only {
                // Closing a closed stream is idempotent.
                st.last_access_ms = now_ms;
                return Ok(Appended {
                    wrote: false,
                    duplicate: true,
                    end: st.last_end,
                    tail: st.tail,
                    closed: true,
                    producer: echo,
                    commit: None,
                });
            }
            return Err(Fail::Closed { tail: st.vis });
        }
        if let Some(seq) = &req.stream_seq {
            if st
                .stream_seq
                .as_deref()
                .is_some_and(|last| seq.as_str() <= last)
            {
                return Err(Fail::Conflict(format!(
                    "Stream-Seq {seq:?} is not above the last accepted {:?}",
                    st.stream_seq.as_deref().unwrap_or("")
                )));
            }
            state_rec.stream_seq = Some(seq.clone());
        }
        state_rec.closed = req.close;
        let mut g = Group::new(st.tail.bytes);
        if state_rec != StateRecord::default() {
            g.json(KIND_STATE, &state_rec);
        }
        let wrote_data = !units.is_empty();
        g.data(units);
        let Written { end, commit } = g.write(&self.log, &s.session, st.tail.seq)?;
        st.tail = Offset::new(st.tail.seq + g.events.len() as u64, g.bytes);
        st.apply(&state_rec);
        st.last_end = end;
        let (tail, closed) = (st.tail, st.closed);
        st.pending.push_back((end, tail, closed));
        st.last_access_ms = now_ms;
        Ok(Appended {
            wrote: wrote_data,
            duplicate: false,
            end,
            tail: st.tail,
            closed: st.closed,
            producer: echo,
            commit,
        })
    }

    /// Make an append visible once it is durable (its writer knows it is).
    /// Readers are not woken here: the engine woke them when the batch
    /// became durable, and they catch up themselves ([`Stream::visible`]).
    pub fn publish(&self, s: &Stream, tail: Offset, closed: bool) {
        s.state.lock().show(tail, closed);
    }

    /// Renew a sliding TTL (reads and appends; not HEAD). Blocking on a
    /// shared database (the renewal is recorded there, at most every
    /// twentieth of the TTL).
    pub fn touch(&self, s: &Stream, now_ms: u64) {
        {
            let mut st = s.state.lock();
            if st.deleted.is_some() {
                return;
            }
            st.last_access_ms = st.last_access_ms.max(now_ms);
        }
        self.touch_shared(s, now_ms);
    }
}

/// Whether a PUT asks for the configuration an existing stream has.
pub(crate) fn same_config(req: &CreateReq, have: &CreateRecord) -> bool {
    let inherit = req.fork.is_some();
    let ct_ok = match &req.content_type {
        Some(ct) => essence(ct) == essence(&have.content_type),
        None if inherit => true,
        None => essence(headers::DEFAULT_CONTENT_TYPE) == essence(&have.content_type),
    };
    let expiry_ok = if inherit && req.ttl_secs.is_none() && req.expires_at.is_none() {
        true
    } else {
        req.ttl_secs == have.ttl_secs && req.expires_at.as_ref().map(|e| e.0) == have.expires_at_ms
    };
    let fork_ok = match (&req.fork, &have.fork) {
        (None, None) => true,
        (Some(r), Some(h)) => {
            r.source_path == h.source_path
                && r.offset.map(|o| o.token()) == h.offset
                && r.sub_offset == h.sub_offset
        }
        _ => false,
    };
    ct_ok && expiry_ok && fork_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_flattening() {
        let m = |s: &str| json_messages(s.as_bytes(), false);
        assert_eq!(m(r#"{"a":1}"#).unwrap(), vec![br#"{"a":1}"#.to_vec()]);
        assert_eq!(
            m("[1, [2,3]]").unwrap(),
            vec![b"1".to_vec(), b"[2,3]".to_vec()]
        );
        assert_eq!(m("[[[1]]]").unwrap(), vec![b"[[1]]".to_vec()]);
        assert!(matches!(m("[]"), Err(Fail::BadRequest(_))));
        assert!(json_messages(b"[]", true).unwrap().is_empty());
        assert!(matches!(m("{ invalid json }"), Err(Fail::BadRequest(_))));
        assert!(matches!(m("1 2"), Err(Fail::BadRequest(_))));
    }
}
