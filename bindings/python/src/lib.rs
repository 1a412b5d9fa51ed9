//! `turnstone._native`: the session layer for Python.
//!
//! The boundary carries JSON text (the Python package turns it into dicts
//! and back with the standard `json` module), so provider content — thinking
//! blocks with signatures, images, block types that do not exist yet —
//! crosses it exactly as the engine stores it. Every call that waits for
//! durability or reads the log releases the GIL. Errors become
//! `TurnstoneError(kind, message, path, offset)`; a Rust panic becomes a
//! Python exception (PyO3 catches it), never an abort.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

mod aio;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use serde_json::{json, Value};
use turnstone::session::{
    self as ts, Host, LogHandle, Provider, Registry, SessionEvent, SessionSubscription,
    SharedSession, SurfaceOp,
};
use turnstone::session::{list_sessions, SearchIndex};
use turnstone::{Error, Options, Store};
use turnstone_pg::{is_url, PgEventLog, PgLog};

create_exception!(
    _native,
    TurnstoneError,
    PyException,
    "An error of the turnstone engine: args are (kind, message, path, offset)."
);

/// The error's kind name, and the file and offset where it has them.
fn describe(e: &Error) -> (&'static str, Option<String>, Option<u64>) {
    let (path, offset) = e.location();
    (e.kind(), path.map(|p| p.display().to_string()), offset)
}

fn err(e: Error) -> PyErr {
    let (kind, path, offset) = describe(&e);
    TurnstoneError::new_err((kind, e.to_string(), path, offset))
}

fn usage(msg: impl Into<String>) -> PyErr {
    TurnstoneError::new_err(("invalid_argument", msg.into(), None::<String>, None::<u64>))
}

/// A Python value as JSON, without going through `json.dumps`: dicts with
/// string keys, lists, tuples, strings, ints, finite floats, bools, None.
/// Anything else is refused with what it is and where (the caller makes it
/// a `TurnstoneError` of kind `invalid_argument` naming the event kind).
/// A string holding a lone surrogate (text cut inside a UTF-16 pair) is
/// kept, with U+FFFD in place of the surrogate: the event is not lost,
/// and JSON (UTF-8) cannot hold the surrogate itself.
fn to_value(obj: &Bound<'_, PyAny>, depth: u32) -> Result<Value, String> {
    use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
    fn text(s: &Bound<'_, PyString>) -> Result<String, String> {
        if let Ok(t) = s.to_cow() {
            return Ok(t.into_owned());
        }
        // Not UTF-8: a lone surrogate. As UTF-16 (surrogates passed
        // through), each lone one becomes one U+FFFD and pairs join.
        let bytes: Vec<u8> = s
            .call_method1("encode", ("utf-16-le", "surrogatepass"))
            .and_then(|b| b.extract())
            .map_err(|e| format!("a string is not text: {e}"))?;
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        Ok(String::from_utf16_lossy(&units))
    }
    if depth > 512 {
        return Err("it nests more than 512 levels (a circular reference?)".into());
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(text(s)?));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        if let Ok(v) = i.extract::<i64>() {
            return Ok(Value::from(v));
        }
        if let Ok(v) = i.extract::<u64>() {
            return Ok(Value::from(v));
        }
        return Err(
            "an int outside the 64-bit range JSON readers keep exactly (send it as a string)"
                .into(),
        );
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| {
                format!(
                    "{} is not JSON (NaN and infinity have no JSON form)",
                    f.value()
                )
            });
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut m = serde_json::Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let k = k.cast::<PyString>().map_err(|_| {
                let ty = k
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                format!("a dict key is a {ty}; JSON keys are strings")
            })?;
            let key = text(k)?;
            let v = to_value(&v, depth + 1).map_err(|e| format!("at {key:?}: {e}"))?;
            m.insert(key, v);
        }
        return Ok(Value::Object(m));
    }
    let items = |it: &mut dyn Iterator<Item = Bound<'_, PyAny>>| -> Result<Value, String> {
        it.enumerate()
            .map(|(i, v)| to_value(&v, depth + 1).map_err(|e| format!("at [{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    };
    if let Ok(l) = obj.cast::<PyList>() {
        return items(&mut l.iter());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return items(&mut t.iter());
    }
    let ty = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    Err(format!("a {ty} is not JSON"))
}

fn provider(format: &str) -> PyResult<Provider> {
    match format {
        "anthropic" => Ok(Provider::Anthropic),
        "openai-responses" | "openai_responses" | "responses" => Ok(Provider::OpenAiResponses),
        "openai-chat" | "openai_chat" | "chat" => Ok(Provider::OpenAiChat),
        other => Err(usage(format!(
            "unknown format {other:?}: expected \"anthropic\", \"openai-responses\" or \"openai-chat\""
        ))),
    }
}

/// The plugin kinds a harness declares: JSON `{"name": ignorable, ...}`.
fn registry_from(plugins: Option<&str>) -> PyResult<Registry> {
    let mut registry = Registry::new();
    if let Some(text) = plugins {
        let map: std::collections::BTreeMap<String, bool> =
            serde_json::from_str(text).map_err(|e| {
                usage(format!(
                    "plugins must map kind names to an ignorable flag: {e}"
                ))
            })?;
        for (name, ignorable) in map {
            registry.register(&name, ignorable).map_err(usage)?;
        }
    }
    Ok(registry)
}

fn event_json(ev: &SessionEvent) -> Value {
    ev.to_json()
}

/// An open store: a store directory, or a PostgreSQL database (issue 18).
#[pyclass(frozen, module = "turnstone._native")]
struct NativeStore {
    log: Mutex<Option<LogHandle>>,
    host: Mutex<Option<Arc<Host>>>,
    /// The database's connection pool, closed by `close`.
    pg: Option<PgLog>,
    registry: Arc<Registry>,
    /// The listing's catalog, brought up to date at each listing.
    catalog: Mutex<ts::Catalog>,
}

impl NativeStore {
    fn log(&self) -> PyResult<LogHandle> {
        self.log.lock().clone().ok_or_else(|| err(Error::Closed))
    }
    /// The embedded store, for what only it has (its search index, live
    /// follow).
    fn store(&self, what: &str) -> PyResult<Arc<Store>> {
        match self.log()? {
            LogHandle::Embedded(s) => Ok(s),
            LogHandle::Other(l) if self.pg.is_none() => Err(err(Error::Refused(format!(
                "{what} runs in the process that hosts the store; this process is its client ({}, docs/MULTIPROCESS.md)",
                l.backend()
            )))),
            LogHandle::Other(_) => Err(err(Error::Refused(format!(
                "{what} is not available on a database yet"
            )))),
        }
    }
    fn host(&self) -> PyResult<Arc<Host>> {
        self.host.lock().clone().ok_or_else(|| err(Error::Closed))
    }
}

#[pymethods]
impl NativeStore {
    #[new]
    #[pyo3(signature = (path, read_only = false, plugins = None, owner = None, lease_ttl_ms = None, segment_bytes = None, recycle_segments = 0, prepare_segments = None, direct_writes = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: String,
        read_only: bool,
        plugins: Option<&str>,
        owner: Option<String>,
        lease_ttl_ms: Option<u64>,
        segment_bytes: Option<u32>,
        recycle_segments: usize,
        prepare_segments: Option<bool>,
        direct_writes: Option<bool>,
    ) -> PyResult<Self> {
        let registry = Arc::new(registry_from(plugins)?);
        if is_url(&path) {
            if segment_bytes.is_some()
                || recycle_segments != 0
                || prepare_segments.is_some()
                || direct_writes.is_some()
            {
                return Err(usage(
                    "segment_bytes, recycle_segments, prepare_segments and direct_writes are options of a store directory, not of a database",
                ));
            }
            // A database: sessions are leased by `owner` (this process by
            // default) while a handle holds them for writing.
            let owner = owner.unwrap_or_else(|| format!("python:{}", std::process::id()));
            let ttl = lease_ttl_ms.map(std::time::Duration::from_millis);
            let ev = py
                .detach(|| PgEventLog::connect(&path, &owner, ttl))
                .map_err(err)?;
            let pg = ev.log().clone();
            let log = LogHandle::from(Arc::new(ev));
            let host = Arc::new(Host::new(log.clone(), registry.clone()));
            return Ok(NativeStore {
                log: Mutex::new(Some(log)),
                host: Mutex::new(Some(host)),
                pg: Some(pg),
                registry,
                catalog: Mutex::new(ts::Catalog::new()),
            });
        }
        let log = py
            .detach(|| {
                let defaults = Options::default();
                let opts = Options {
                    read_only,
                    segment_bytes: segment_bytes.unwrap_or(defaults.segment_bytes),
                    recycle_segments,
                    prepare_segments: prepare_segments.unwrap_or(defaults.prepare_segments),
                    direct_writes: direct_writes.unwrap_or(defaults.direct_writes),
                    ..defaults
                };
                if read_only {
                    Store::open_with(&path, opts).map(|s| LogHandle::from(Arc::new(s)))
                } else {
                    // Host it, or be the client of the process that does
                    // (docs/MULTIPROCESS.md).
                    turnstone::share::open(&path, opts)
                }
            })
            .map_err(err)?;
        let host = Arc::new(Host::new(log.clone(), registry.clone()));
        Ok(NativeStore {
            log: Mutex::new(Some(log)),
            host: Mutex::new(Some(host)),
            pg: None,
            registry,
            catalog: Mutex::new(ts::Catalog::new()),
        })
    }

    /// `"embedded"` or `"postgres"`.
    fn backend(&self) -> PyResult<&'static str> {
        Ok(self.log()?.as_log().backend())
    }

    /// Create a new session.
    fn create_session(&self, py: Python<'_>, id: String) -> PyResult<NativeSession> {
        let host = self.host()?;
        let s = py.detach(|| host.create(&id)).map_err(err)?;
        Ok(NativeSession::new(s))
    }

    /// Load a session for writing, repairing it if a crash left it open.
    /// Returns the session and the repair report as JSON (`null`: nothing
    /// to repair).
    fn open_session(&self, py: Python<'_>, id: String) -> PyResult<(NativeSession, String)> {
        let host = self.host()?;
        let (s, report) = py
            .detach(|| {
                let (s, report) = host.load(&id)?;
                // The repair is durable before anything else happens.
                s.lock().flush()?;
                Ok::<_, Error>((s, report))
            })
            .map_err(err)?;
        let report = serde_json::to_string(&report).unwrap_or_else(|_| "null".into());
        Ok((NativeSession::new(s), report))
    }

    /// A read-only view of a session (live or not).
    fn open_read_only(&self, py: Python<'_>, id: String) -> PyResult<NativeSession> {
        let (log, registry) = (self.log()?, self.registry.clone());
        let s = py
            .detach(|| ts::Session::open_read_only(log, &id, registry))
            .map_err(err)?;
        Ok(NativeSession::new(Arc::new(Mutex::new(s))))
    }

    /// Every session as JSON: id, events, created/updated ms, open turn, parent.
    fn sessions(&self, py: Python<'_>) -> PyResult<String> {
        let (log, registry) = (self.log()?, self.registry.clone());
        let list = py.detach(|| list_sessions(&log, &registry)).map_err(err)?;
        let out: Vec<Value> = list
            .into_iter()
            .map(|s| {
                json!({
                    "id": s.id, "events": s.events, "created_ms": s.created_ms,
                    "updated_ms": s.updated_ms, "open_turn": s.open_turn,
                    "parent": s.parent.map(|(p, n)| json!({"session": p, "upto": n})),
                })
            })
            .collect();
        Ok(Value::Array(out).to_string())
    }

    /// One page of the sessions a query selects (the CLI's filters: tags,
    /// fields, updated since, open turn, parent, newest first, a cursor, a
    /// limit), from the store's catalog brought up to date first, as JSON
    /// `{"sessions": [...], "next_cursor": "c3" | null}`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (tags, fields, updated_since_ms, open_turn, parent, newest_first, cursor, limit))]
    fn list_sessions(
        &self,
        py: Python<'_>,
        tags: Vec<String>,
        fields: Vec<(String, String)>,
        updated_since_ms: Option<u64>,
        open_turn: Option<bool>,
        parent: Option<String>,
        newest_first: bool,
        cursor: Option<String>,
        limit: usize,
    ) -> PyResult<String> {
        let after = cursor
            .map(|c| c.parse::<ts::Cursor>())
            .transpose()
            .map_err(|e| usage(e.to_string()))?;
        let q = ts::ListQuery {
            tags,
            fields,
            updated_since_ms,
            open_turn,
            parent,
            newest_first,
            after,
            limit: limit.max(1),
        };
        let log = self.log()?;
        py.detach(|| {
            let mut catalog = self.catalog.lock();
            catalog.refresh(&log)?;
            let page = catalog.list(&q);
            let sessions: Vec<Value> = page
                .sessions
                .iter()
                .map(|e| {
                    json!({
                        "id": e.id, "events": e.events, "created_ms": e.created_ms,
                        "updated_ms": e.updated_ms, "open_turn": e.open_turn,
                        "parent": e.parent.as_ref().map(|(p, n)| json!({"session": p, "upto": n})),
                        "title": e.metadata.title, "tags": e.metadata.tags,
                        "fields": e.metadata.fields,
                    })
                })
                .collect();
            Ok(json!({
                "sessions": sessions,
                "next_cursor": page.next.map(|c| c.to_string()),
            })
            .to_string())
        })
        .map_err(err)
    }

    /// Fork `source` at a turn boundary (default: the end of its last closed
    /// turn). Returns (child id, events inherited).
    #[pyo3(signature = (source, at = None, child = None))]
    fn fork(
        &self,
        py: Python<'_>,
        source: String,
        at: Option<u64>,
        child: Option<String>,
    ) -> PyResult<(String, u64)> {
        let log = self.log()?;
        let f = py
            .detach(|| ts::fork(&log, &source, at, child.as_deref()))
            .map_err(err)?;
        Ok((f.child, f.upto))
    }

    /// Events `start..end` of a session (durable ones), as a JSON array.
    #[pyo3(signature = (id, start = 0, end = None))]
    fn replay(&self, py: Python<'_>, id: String, start: u64, end: Option<u64>) -> PyResult<String> {
        let (log, registry) = (self.log()?, self.registry.clone());
        let events = py
            .detach(|| {
                ts::replay_range(&log, &id, registry, start..end.unwrap_or(u64::MAX))?
                    .map(|e| e.map(|e| event_json(&e)))
                    .collect::<turnstone::Result<Vec<Value>>>()
            })
            .map_err(err)?;
        Ok(Value::Array(events).to_string())
    }

    /// Full-text search over message text (the index is brought up to date
    /// first). JSON array of {session, seq, snippet}.
    #[pyo3(signature = (query, limit = 20, session = None))]
    fn search(
        &self,
        py: Python<'_>,
        query: String,
        limit: usize,
        session: Option<String>,
    ) -> PyResult<String> {
        if let Some(pg) = &self.pg {
            // PostgreSQL's own text search: the same hit shape.
            let hits = py
                .detach(|| match &session {
                    Some(s) => pg.search_session(s, &query, limit),
                    None => pg.search(&query, limit),
                })
                .map_err(|e| err(turnstone_pg::engine_error(e)))?;
            let hits: Vec<Value> = hits
                .into_iter()
                .map(|h| json!({"session": h.session, "seq": h.seq, "snippet": h.snippet}))
                .collect();
            return Ok(Value::Array(hits).to_string());
        }
        if let LogHandle::Other(l) = self.log()? {
            // A client: the store's host searches its index.
            let hits = py
                .detach(|| l.search(&query, limit, session.as_deref()))
                .map_err(err)?;
            return Ok(serde_json::to_string(&hits).unwrap_or_else(|_| "[]".into()));
        }
        let (store, registry) = (self.store("search")?, self.registry.clone());
        let hits = py
            .detach(|| {
                let mut ix = SearchIndex::open(&store)?;
                ix.update(&store, &registry)?;
                match &session {
                    Some(s) => ix.search_session(&store, s, &query, limit),
                    None => ix.search(&query, limit),
                }
            })
            .map_err(err)?;
        Ok(serde_json::to_string(&hits).unwrap_or_else(|_| "[]".into()))
    }

    /// Delete a session: a durable tombstone; it is not found by loads,
    /// lists and search from then on (its forks keep working). Refused
    /// while a handle holds it for writing. Returns the tombstone's seq.
    fn delete(&self, py: Python<'_>, id: String) -> PyResult<u64> {
        let host = self.host()?;
        py.detach(|| host.delete(&id)).map_err(err)
    }

    /// Collect now, while the store stays open (an online collection): the
    /// bytes of deleted sessions and of those the store's retention expires,
    /// then unreferenced blob files. Returns the report as JSON.
    #[pyo3(signature = (threshold = 0.5, dry_run = false))]
    fn collect(&self, py: Python<'_>, threshold: f64, dry_run: bool) -> PyResult<String> {
        if !(0.0..=1.0).contains(&threshold) {
            return Err(usage(format!(
                "threshold must be within 0.0 and 1.0, not {threshold}"
            )));
        }
        let store = self.store("collect")?;
        let opts = turnstone::gc::CollectOptions {
            threshold,
            dry_run,
            ..Default::default()
        };
        let report = py
            .detach(|| ts::gc::collect_live(&store, &opts, &ts::gc::Retention::default()))
            .map_err(err)?;
        Ok(serde_json::to_string(&report).expect("a report serializes"))
    }

    /// Follow a session live from `from_seq`.
    #[pyo3(signature = (id, from_seq = 0))]
    fn subscribe(&self, id: String, from_seq: u64) -> PyResult<NativeSubscription> {
        let log = self.log()?;
        let sub = ts::subscribe(&log, &id, self.registry.clone(), from_seq).map_err(err)?;
        Ok(NativeSubscription {
            sub: Arc::new(Mutex::new(Some(sub))),
            ended_at: Arc::new(AtomicU64::new(from_seq)),
            lent: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Close the store: everything appended is made durable first. Sessions
    /// opened from it stop working (their calls raise `closed`).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let host = self.host.lock().take();
        let log = self.log.lock().take();
        let pg = self.pg.clone();
        py.detach(move || {
            drop(host);
            if let Some(pg) = pg {
                // What was queued is committed first; sessions opened from
                // it stop working (their writers are closed).
                drop(log);
                pg.close();
                return Ok(());
            }
            match log {
                // Sessions may still hold it: close it for them too.
                Some(LogHandle::Embedded(s)) => s.shutdown(),
                // A client of another process's store (or the store it
                // took over).
                Some(LogHandle::Other(l)) => l.close(),
                None => Ok(()),
            }
        })
        .map_err(err)
    }
}

/// One session handle.
#[pyclass(frozen, module = "turnstone._native")]
struct NativeSession {
    /// `None` once closed (`close()`): the claim on the session is released.
    s: Mutex<Option<SharedSession>>,
}

impl NativeSession {
    fn new(s: SharedSession) -> NativeSession {
        NativeSession {
            s: Mutex::new(Some(s)),
        }
    }

    /// The shared session, unless this handle is closed.
    fn shared(&self) -> PyResult<SharedSession> {
        self.s
            .lock()
            .clone()
            .ok_or_else(|| usage("this session handle is closed"))
    }
}

#[pymethods]
impl NativeSession {
    #[getter]
    fn id(&self) -> PyResult<String> {
        Ok(self.shared()?.lock().id().to_string())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.shared()?.lock().len() as usize)
    }

    /// Release this handle: the session is no longer held for writing here
    /// (another handle may open it, `delete` may delete it). What it
    /// appended stays appended; flush first to wait for durability. Later
    /// calls on this handle raise; closing twice does nothing.
    fn close(&self) {
        self.s.lock().take();
    }

    /// Append one event: kind name, data as JSON text, surface op as JSON
    /// text (required for the three surface kinds). Returns its seq.
    #[pyo3(signature = (kind, data, surface = None))]
    fn append(
        &self,
        py: Python<'_>,
        kind: &str,
        data: &Bound<'_, PyAny>,
        surface: Option<&str>,
    ) -> PyResult<u64> {
        let data = to_value(data, 0).map_err(|e| usage(format!("{kind} data: {e}")))?;
        let s = self.shared()?;
        // Parsing, checking and encoding run without the GIL: other Python
        // threads go on meanwhile.
        py.detach(move || {
            let surface: Option<SurfaceOp> = match surface {
                None => None,
                Some(t) => Some(
                    serde_json::from_str(t)
                        .map_err(|e| usage(format!("surface op is not valid: {e}")))?,
                ),
            };
            s.lock().append_json(kind, data, surface).map_err(err)
        })
    }

    /// Append several core events as one atomic group (after a crash all
    /// or none exist): a list of (kind, data, surface op as JSON text or
    /// None); surface kinds may only append. Returns their seqs.
    fn append_group(
        &self,
        py: Python<'_>,
        events: Vec<(String, Bound<'_, PyAny>, Option<String>)>,
    ) -> PyResult<Vec<u64>> {
        let mut values = Vec::with_capacity(events.len());
        for (kind, data, surface) in &events {
            let value = to_value(data, 0).map_err(|e| usage(format!("{kind} data: {e}")))?;
            values.push((kind.clone(), value, surface.clone()));
        }
        let s = self.shared()?;
        py.detach(move || {
            let mut group = Vec::with_capacity(values.len());
            for (kind, data, surface) in values {
                let op: Option<SurfaceOp> = match surface {
                    None => None,
                    Some(t) => Some(
                        serde_json::from_str(&t)
                            .map_err(|e| usage(format!("surface op is not valid: {e}")))?,
                    ),
                };
                group.push((kind, data, op));
            }
            s.lock().append_json_group(group).map_err(err)
        })
    }

    /// Record the tool calls of one assistant message as one atomic group
    /// (JSON array of {call_id, name, input}); returns their seqs.
    fn record_tool_calls(&self, py: Python<'_>, calls: &str) -> PyResult<Vec<u64>> {
        let calls: Vec<ts::ToolCall> = serde_json::from_str(calls).map_err(|e| {
            usage(format!(
                "tool calls must be [{{call_id, name, input}}]: {e}"
            ))
        })?;
        let s = self.shared()?;
        py.detach(move || {
            let mut g = s.lock();
            let first = g.len();
            g.record_tool_calls(&calls)?;
            Ok::<_, Error>((first..g.len()).collect())
        })
        .map_err(err)
    }

    /// The session's metadata (title, tags, fields) as JSON.
    fn metadata(&self) -> PyResult<String> {
        Ok(serde_json::to_string(self.shared()?.lock().metadata()).unwrap_or_else(|_| "{}".into()))
    }

    /// [`flush`] as a future for asyncio (`Session.aflush`): woken by the
    /// flusher after the fdatasync that covers it, it holds no thread.
    fn flush_wait(&self) -> PyResult<aio::NativeWait> {
        let point = self.shared()?.lock().durability_point();
        let wait = point.wait_async();
        Ok(aio::NativeWait::new(Box::pin(async move {
            wait.await?;
            Ok(None)
        })))
    }

    /// Wait until everything this handle appended is durable (GIL released).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.shared()?;
        py.detach(move || {
            // Take the durable target under the lock, wait without it.
            let point = s.lock().durability_point();
            point.wait()
        })
        .map_err(err)
    }

    /// Append a provider's response body as an `assistant/message`
    /// (`AssistantMessage::from_response`: the content blocks or output
    /// items as sent, the usage normalised with every field kept, every
    /// other field in `extra`). Returns its seq.
    fn append_response(
        &self,
        py: Python<'_>,
        provider_name: &str,
        body: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let p = provider(provider_name)?;
        let body = to_value(body, 0).map_err(|e| usage(format!("response body: {e}")))?;
        let s = self.shared()?;
        py.detach(move || {
            let m = ts::AssistantMessage::from_response(p, &body);
            s.lock().append(m, SurfaceOp::Append)
        })
        .map_err(err)
    }

    /// Resolve the next request's header from a spec (JSON: provider,
    /// model, params, adapter_defaults, system, tools) and write a
    /// `request/header` when needed. Returns the reason written
    /// (`"initial"`, `"resume"`, `"change"`) or `None`.
    fn prepare_request(
        &self,
        py: Python<'_>,
        spec: &Bound<'_, PyAny>,
    ) -> PyResult<Option<&'static str>> {
        let spec = to_value(spec, 0).map_err(|e| usage(format!("request spec: {e}")))?;
        let s = self.shared()?;
        let reason = py
            .detach(move || s.lock().prepare_request_json(spec))
            .map_err(err)?;
        Ok(reason.map(|r| match r {
            ts::HeaderReason::Initial => "initial",
            ts::HeaderReason::Resume => "resume",
            ts::HeaderReason::Change => "change",
        }))
    }

    /// A new agent loop takes over this session: the next header is `resume`.
    fn begin_loop(&self) -> PyResult<()> {
        self.shared()?.lock().begin_loop();
        Ok(())
    }

    /// Check a request body against the one the log rebuilds for a
    /// provider; the error (`request_mismatch`) names the first differing path.
    fn check_request_body(
        &self,
        py: Python<'_>,
        format: &str,
        body: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let p = provider(format)?;
        let body = to_value(body, 0).map_err(|e| usage(format!("request body: {e}")))?;
        let s = self.shared()?;
        py.detach(move || s.lock().check_request_body(p, &body))
            .map_err(err)
    }

    /// Replace surface nodes `start..end` by a summary, atomically (the
    /// originals stay in the log). Returns the summary message's seq.
    fn compact(
        &self,
        py: Python<'_>,
        compaction_id: String,
        start: u64,
        end: u64,
        summary: String,
    ) -> PyResult<u64> {
        let s = self.shared()?;
        py.detach(move || s.lock().compact(&compaction_id, start, end, &summary))
            .map_err(err)
    }

    /// Replace the messages of ended turn `turn_id` by a summary,
    /// atomically. Returns the summary message's seq.
    fn compact_turn(
        &self,
        py: Python<'_>,
        compaction_id: String,
        turn_id: String,
        summary: String,
    ) -> PyResult<u64> {
        let s = self.shared()?;
        py.detach(move || s.lock().compact_turn(&compaction_id, &turn_id, &summary))
            .map_err(err)
    }

    /// Replace the tool result at surface position `at` by a shorter text,
    /// atomically (the original stays in the log). Returns its seq.
    fn prune_tool_result(
        &self,
        py: Python<'_>,
        at: u64,
        replacement: String,
        tokens_saved: u64,
    ) -> PyResult<u64> {
        let s = self.shared()?;
        py.detach(move || s.lock().prune_tool_result(at, &replacement, tokens_saved))
            .map_err(err)
    }

    /// Every turn of the session, in order, as a JSON array.
    fn turns(&self) -> PyResult<String> {
        let s = self.shared()?;
        let g = s.lock();
        Ok(serde_json::to_string(g.turns()).unwrap_or_else(|_| "[]".into()))
    }

    /// Fork after the end of turn `turn_id` (durable events only): the
    /// child's id and the number of events it holds.
    #[pyo3(signature = (turn_id, child = None))]
    fn fork_after_turn(
        &self,
        py: Python<'_>,
        turn_id: String,
        child: Option<String>,
    ) -> PyResult<(String, u64)> {
        let s = self.shared()?;
        let f = py
            .detach(move || s.lock().fork_after_turn(&turn_id, child.as_deref()))
            .map_err(err)?;
        Ok((f.child, f.upto))
    }

    /// What `request_body(format)` leaves out because the header was
    /// written for another API, as a JSON array of `{what, why, count}`.
    fn dropped(&self, py: Python<'_>, format: &str) -> PyResult<String> {
        let p = provider(format)?;
        let s = self.shared()?;
        Ok(py.detach(move || {
            let (_, dropped) = s.lock().request_body_report(p);
            serde_json::to_string(&dropped).unwrap_or_else(|_| "[]".into())
        }))
    }

    /// The messages the model sees (`None`), or the request body for a
    /// provider (`"anthropic"`, `"openai-responses"`, `"openai-chat"`), as JSON.
    #[pyo3(signature = (format = None))]
    fn messages(&self, py: Python<'_>, format: Option<&str>) -> PyResult<String> {
        let provider = format.map(provider).transpose()?;
        let s = self.shared()?;
        Ok(py.detach(move || {
            let mut g = s.lock();
            match provider {
                Some(p) => g.request_body(p).to_string(),
                None => {
                    let msgs: Vec<&ts::Message> =
                        g.derive_messages().iter().map(|m| &**m).collect();
                    serde_json::to_string(&msgs).unwrap_or_else(|_| "[]".into())
                }
            }
        }))
    }

    /// This session's events `start..end` as seen by this handle (appended
    /// ones included), as a JSON array.
    #[pyo3(signature = (start = 0, end = None))]
    fn events(&self, py: Python<'_>, start: u64, end: Option<u64>) -> PyResult<String> {
        let s = self.shared()?;
        let events = py
            .detach(move || {
                let g = s.lock();
                let end = end.unwrap_or(g.len()).min(g.len());
                g.events(start.min(end)..end)
            })
            .map_err(err)?;
        Ok(Value::Array(events.iter().map(event_json).collect()).to_string())
    }
}

/// A live follower of one session.
#[pyclass(frozen, module = "turnstone._native")]
struct NativeSubscription {
    /// `None` once it ended, or while an awaited `next_wait` holds it.
    sub: Arc<Mutex<Option<SessionSubscription>>>,
    /// The seq it yields next, while `sub` is `None`.
    ended_at: Arc<AtomicU64>,
    /// A `next_wait` future holds the subscription.
    lent: Arc<AtomicBool>,
}

/// A subscription lent to a `next_wait` future: given back to its handle
/// when the future ends or is dropped (a cancelled task), unless it ended.
struct Lent {
    slot: Arc<Mutex<Option<SessionSubscription>>>,
    lent: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
    sub: Option<SessionSubscription>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(s) = self.sub.take() {
            self.ended_at.store(s.next_seq(), Ordering::Relaxed);
            *self.slot.lock() = Some(s);
        }
        self.lent.store(false, Ordering::Release);
    }
}

impl NativeSubscription {
    fn busy() -> PyErr {
        usage("an anext() of this subscription is still waiting; await it (or cancel it) first")
    }
}

#[pymethods]
impl NativeSubscription {
    /// The next durable event as JSON, waiting for it (GIL released);
    /// `None` when the store closes.
    fn next(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if self.lent.load(Ordering::Acquire) {
            return Err(Self::busy());
        }
        py.detach(|| {
            let mut g = self.sub.lock();
            let Some(sub) = g.as_mut() else {
                return Ok(None);
            };
            match sub.next() {
                Some(Ok(e)) => Ok(Some(event_json(&e).to_string())),
                Some(Err(e)) => Err(e),
                None => {
                    self.ended_at.store(sub.next_seq(), Ordering::Relaxed);
                    *g = None;
                    Ok(None)
                }
            }
        })
        .map_err(err)
    }

    /// The next durable event as a future for asyncio (`Subscription.anext`):
    /// woken by the flusher, it holds no thread while it waits.
    fn next_wait(&self) -> PyResult<aio::NativeWait> {
        if self.lent.swap(true, Ordering::AcqRel) {
            return Err(Self::busy());
        }
        let mut lent = Lent {
            slot: self.sub.clone(),
            lent: self.lent.clone(),
            ended_at: self.ended_at.clone(),
            sub: None,
        };
        lent.sub = self.sub.lock().take();
        if let Some(s) = &lent.sub {
            self.ended_at.store(s.next_seq(), Ordering::Relaxed);
        }
        Ok(aio::NativeWait::new(Box::pin(async move {
            let mut lent = lent;
            let Some(sub) = lent.sub.as_mut() else {
                return Ok(None); // it had ended
            };
            match sub.next_async().await {
                Some(Ok(e)) => Ok(Some(event_json(&e).to_string())),
                Some(Err(e)) => Err(e),
                None => {
                    let s = lent.sub.take().expect("lent");
                    lent.ended_at.store(s.next_seq(), Ordering::Relaxed);
                    Ok(None)
                }
            }
        })))
    }

    /// The next durable event if there is one now, else `None`.
    fn try_next(&self) -> PyResult<Option<String>> {
        if self.lent.load(Ordering::Acquire) {
            return Err(Self::busy());
        }
        let mut g = self.sub.lock();
        let Some(sub) = g.as_mut() else {
            return Ok(None);
        };
        Ok(sub
            .try_next()
            .map_err(err)?
            .map(|e| event_json(&e).to_string()))
    }

    /// The seq of the next event it yields.
    fn next_seq(&self) -> u64 {
        self.sub
            .lock()
            .as_ref()
            .map_or_else(|| self.ended_at.load(Ordering::Relaxed), |s| s.next_seq())
    }
}

/// Wait until everything each of `sessions` appended is durable: one
/// wait per store (for the furthest position), with the GIL released
/// once for the whole list. What a waiter that serves many asyncio tasks
/// calls, instead of one `flush` per session (each of which would have to
/// take the GIL back from a busy event loop).
#[pyfunction]
fn flush_all(py: Python<'_>, sessions: Vec<PyRef<'_, NativeSession>>) -> PyResult<()> {
    let handles = sessions
        .iter()
        .map(|s| s.shared())
        .collect::<PyResult<Vec<SharedSession>>>()?;
    drop(sessions);
    py.detach(move || {
        let mut targets: Vec<(Arc<Store>, turnstone::LogPos)> = Vec::new();
        for h in handles {
            let (store, end) = {
                let g = h.lock();
                match g.durability_point().log_pos() {
                    Some(t) => t,
                    // Nothing appended by this handle.
                    None => continue,
                }
            };
            match targets.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &store)) {
                Some((_, e)) => *e = (*e).max(end),
                None => targets.push((store, end)),
            }
        }
        for (store, end) in targets {
            store.wait_durable(end)?;
        }
        Ok::<_, Error>(())
    })
    .map_err(err)
}

/// The JSON Schema of one core kind's data (`"turn/end"`), or of every
/// core kind keyed by name: `turnstone schema`, as JSON text.
#[pyfunction]
#[pyo3(signature = (kind=None))]
fn schema_json(kind: Option<&str>) -> PyResult<String> {
    let v = ts::schema_named(kind).map_err(usage)?;
    Ok(v.to_string())
}

/// The `turnstone` command line on `argv` (program name first), with the
/// GIL released: what `pip install` puts on PATH as `turnstone`
/// (`turnstone._cli.main`). Returns the exit status.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    let code = py.detach(move || turnstone_cli::main_from(argv));
    // `ExitCode` does not give its number back: compare with the statuses
    // the CLI uses (0, 1, 2).
    [0u8, 1, 2]
        .into_iter()
        .find(|c| std::process::ExitCode::from(*c) == code)
        .map_or(2, i32::from)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeStore>()?;
    m.add_class::<NativeSession>()?;
    m.add_class::<NativeSubscription>()?;
    m.add_class::<aio::NativeWait>()?;
    m.add_class::<aio::NativeWaker>()?;
    m.add_function(wrap_pyfunction!(flush_all, m)?)?;
    m.add_function(wrap_pyfunction!(schema_json, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add("TurnstoneError", m.py().get_type::<TurnstoneError>())?;
    Ok(())
}
