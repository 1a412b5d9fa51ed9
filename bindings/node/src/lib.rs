//! The native side of the `turnstone` Node.js package (napi-rs).
//!
//! The boundary carries JSON text (the JavaScript wrapper, `turnstone.js`,
//! turns objects into it and back), so provider content crosses it exactly
//! as the engine stores it. Everything that waits for durability or reads a
//! session runs on libuv's thread pool and returns a Promise: the event
//! loop never blocks. Errors are thrown with a JSON message
//! `{"kind","message","path","offset"}` that the wrapper turns into a
//! `TurnstoneError`; a Rust panic becomes a thrown error, never an abort.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::{Env, Task};
use napi_derive::napi;
use parking_lot::Mutex;
use serde_json::{json, Value};
use turnstone::gc::CollectOptions;
use turnstone::session::gc::{collect_live, Retention};
use turnstone::session::{
    self as ts, Host, LogHandle, Provider, Registry, SessionEvent, SessionSubscription,
    SharedSession, SurfaceOp,
};
use turnstone::session::{list_sessions, SearchIndex};
use turnstone::{Error as TsError, Options, Store as TsStore};
use turnstone_pg::{is_url, PgEventLog, PgLog};

fn kind_of(e: &TsError) -> (&'static str, Option<String>, Option<u64>) {
    let (path, offset) = e.location();
    (e.kind(), path.map(|p| p.display().to_string()), offset)
}

fn thrown(kind: &str, message: String, path: Option<String>, offset: Option<u64>) -> napi::Error {
    let body = json!({"kind": kind, "message": message, "path": path, "offset": offset});
    napi::Error::new(Status::GenericFailure, body.to_string())
}

fn err(e: TsError) -> napi::Error {
    let (kind, path, offset) = kind_of(&e);
    thrown(kind, e.to_string(), path, offset)
}

fn usage(msg: impl Into<String>) -> napi::Error {
    thrown("invalid_argument", msg.into(), None, None)
}

/// A provider by the name the packages use for it.
fn provider(name: &str) -> napi::Result<Provider> {
    match name {
        "anthropic" => Ok(Provider::Anthropic),
        "openai-responses" => Ok(Provider::OpenAiResponses),
        "openai-chat" => Ok(Provider::OpenAiChat),
        other => Err(usage(format!(
            "unknown provider {other:?}: expected \"anthropic\", \"openai-responses\" or \"openai-chat\""
        ))),
    }
}

/// A whole number from JavaScript within `0..=max` (a JavaScript number
/// is a double: a negative, fractional or too large one is refused rather
/// than wrapped or truncated), or a usage error naming `what`.
fn whole(what: &str, v: f64, max: u64) -> napi::Result<u64> {
    if v.fract() == 0.0 && v >= 0.0 && v <= max as f64 {
        Ok(v as u64)
    } else {
        Err(usage(format!(
            "{what} must be a whole number from 0 to {max}, not {v}"
        )))
    }
}

fn event_json(ev: &SessionEvent) -> Value {
    ev.to_json()
}

/// Work run on libuv's thread pool; its result resolves the Promise.
pub struct Job<T: Send + 'static>(Option<Box<dyn FnOnce() -> napi::Result<T> + Send>>);

impl<T: Send + ToNapiValue + TypeName + 'static> Job<T> {
    fn new(f: impl FnOnce() -> napi::Result<T> + Send + 'static) -> AsyncTask<Job<T>> {
        AsyncTask::new(Job(Some(Box::new(f))))
    }
}

impl<T: Send + ToNapiValue + TypeName + 'static> Task for Job<T> {
    type Output = T;
    type JsValue = T;

    fn compute(&mut self) -> napi::Result<T> {
        let f = self
            .0
            .take()
            .ok_or_else(|| usage("a task of the turnstone addon ran twice"))?;
        // A panic becomes a rejected Promise, never an abort of the process.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(thrown(
                "panic",
                format!("internal error (a bug): {what}"),
                None,
                None,
            ))
        })
    }

    fn resolve(&mut self, _env: Env, output: T) -> napi::Result<T> {
        Ok(output)
    }
}

/// An open store (the wrapper's `Store`).
#[napi]
pub struct NativeStore {
    log: Mutex<Option<LogHandle>>,
    host: Mutex<Option<Arc<Host>>>,
    /// A database's connection pool (issue 18), closed by `close`.
    pg: Option<PgLog>,
    registry: Arc<Registry>,
    /// The listing's catalog, brought up to date at each listing.
    catalog: Arc<Mutex<ts::Catalog>>,
}

impl NativeStore {
    fn log(&self) -> napi::Result<LogHandle> {
        self.log.lock().clone().ok_or_else(|| err(TsError::Closed))
    }
    /// The embedded store, for what only it has (its search index, live
    /// follow).
    fn store(&self, what: &str) -> napi::Result<Arc<TsStore>> {
        match self.log()? {
            LogHandle::Embedded(s) => Ok(s),
            LogHandle::Other(l) if self.pg.is_none() => Err(err(TsError::Refused(format!(
                "{what} runs in the process that hosts the store; this process is its client ({}, docs/MULTIPROCESS.md)",
                l.backend()
            )))),
            LogHandle::Other(_) => Err(err(TsError::Refused(format!(
                "{what} is not available on a database yet"
            )))),
        }
    }
    fn host(&self) -> napi::Result<Arc<Host>> {
        self.host.lock().clone().ok_or_else(|| err(TsError::Closed))
    }
}

#[napi]
impl NativeStore {
    /// Open (or create, unless read-only) the store in `path`. A directory
    /// only: `segment_bytes`, the size of its segment files (default 64
    /// MiB), and `recycle_segments`, how many segment files an online
    /// collection frees are kept and made into new segments (default 0:
    /// freed files are removed), and `prepare_segments`, whether a
    /// background thread writes the next segment's file of zeros ahead of
    /// need (default on), and `direct_writes`, whether batches written into
    /// recycled and prepared segments go around the page cache (default
    /// off); given with a database URL, they are refused.
    #[napi(constructor, catch_unwind)]
    // One argument per option: `turnstone.js` maps its options object onto
    // them (a napi constructor takes positional arguments).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        path: String,
        read_only: Option<bool>,
        plugins: Option<String>,
        owner: Option<String>,
        lease_ttl_ms: Option<u32>,
        segment_bytes: Option<f64>,
        recycle_segments: Option<f64>,
        prepare_segments: Option<bool>,
        direct_writes: Option<bool>,
    ) -> napi::Result<Self> {
        let segment_bytes = segment_bytes
            .map(|v| whole("segmentBytes", v, u32::MAX as u64).map(|v| v as u32))
            .transpose()?;
        let recycle_segments = recycle_segments
            .map(|v| whole("recycleSegments", v, u32::MAX as u64).map(|v| v as usize))
            .transpose()?;
        let mut registry = Registry::new();
        if let Some(text) = plugins {
            let map: std::collections::BTreeMap<String, bool> = serde_json::from_str(&text)
                .map_err(|e| {
                    usage(format!(
                        "plugins must map kind names to an ignorable flag: {e}"
                    ))
                })?;
            for (name, ignorable) in map {
                registry.register(&name, ignorable).map_err(usage)?;
            }
        }
        let registry = Arc::new(registry);
        if is_url(&path) {
            if segment_bytes.is_some()
                || recycle_segments.is_some_and(|n| n != 0)
                || prepare_segments.is_some()
                || direct_writes.is_some()
            {
                return Err(usage(
                    "segmentBytes, recycleSegments, prepareSegments and directWrites are options of a store directory, not of a database",
                ));
            }
            // A database: sessions opened for writing are leased by `owner`.
            let owner = owner.unwrap_or_else(|| format!("node:{}", std::process::id()));
            let ttl = lease_ttl_ms.map(|ms| std::time::Duration::from_millis(ms.max(1) as u64));
            let ev = PgEventLog::connect(&path, &owner, ttl).map_err(err)?;
            let pg = ev.log().clone();
            let log = LogHandle::from(Arc::new(ev));
            let host = Arc::new(Host::new(log.clone(), registry.clone()));
            return Ok(NativeStore {
                log: Mutex::new(Some(log)),
                host: Mutex::new(Some(host)),
                pg: Some(pg),
                registry,
                catalog: Arc::new(Mutex::new(ts::Catalog::new())),
            });
        }
        let defaults = Options::default();
        let opts = Options {
            read_only: read_only.unwrap_or(false),
            segment_bytes: segment_bytes.unwrap_or(defaults.segment_bytes),
            recycle_segments: recycle_segments.unwrap_or(defaults.recycle_segments),
            prepare_segments: prepare_segments.unwrap_or(defaults.prepare_segments),
            direct_writes: direct_writes.unwrap_or(defaults.direct_writes),
            ..defaults
        };
        let log = if opts.read_only {
            LogHandle::from(Arc::new(TsStore::open_with(&path, opts).map_err(err)?))
        } else {
            // Host it, or be the client of the process that does
            // (docs/MULTIPROCESS.md).
            turnstone::share::open(&path, opts).map_err(err)?
        };
        let host = Arc::new(Host::new(log.clone(), registry.clone()));
        Ok(NativeStore {
            log: Mutex::new(Some(log)),
            host: Mutex::new(Some(host)),
            pg: None,
            registry,
            catalog: Arc::new(Mutex::new(ts::Catalog::new())),
        })
    }

    /// `"embedded"` or `"postgres"`.
    #[napi(catch_unwind)]
    pub fn backend(&self) -> napi::Result<String> {
        Ok(self.log()?.as_log().backend().to_string())
    }

    /// Create a new session.
    #[napi(catch_unwind)]
    pub fn create_session(&self, id: String) -> napi::Result<NativeSession> {
        let s = self.host()?.create(&id).map_err(err)?;
        Ok(session_handle(s, "null".into()))
    }

    /// Load a session for writing (repairing what a crash left open; the
    /// repair is durable first). Resolves to the session; its repair report
    /// is `repairReport()`.
    #[napi(catch_unwind, ts_return_type = "Promise<NativeSession>")]
    pub fn open_session(&self, id: String) -> napi::Result<AsyncTask<Job<NativeSession>>> {
        let host = self.host()?;
        Ok(Job::new(move || {
            let (s, report) = host.load(&id).map_err(err)?;
            s.lock().flush().map_err(err)?;
            let report = serde_json::to_string(&report).unwrap_or_else(|_| "null".into());
            Ok(session_handle(s, report))
        }))
    }

    /// A read-only view of a session.
    #[napi(catch_unwind, ts_return_type = "Promise<NativeSession>")]
    pub fn open_read_only(&self, id: String) -> napi::Result<AsyncTask<Job<NativeSession>>> {
        let (log, registry) = (self.log()?, self.registry.clone());
        Ok(Job::new(move || {
            let s = ts::Session::open_read_only(log, &id, registry).map_err(err)?;
            Ok(session_handle(
                Arc::new(parking_lot::Mutex::new(s)),
                "null".into(),
            ))
        }))
    }

    /// Every session, as JSON.
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn sessions(&self) -> napi::Result<AsyncTask<Job<String>>> {
        let (log, registry) = (self.log()?, self.registry.clone());
        Ok(Job::new(move || {
            let list = list_sessions(&log, &registry).map_err(err)?;
            let out: Vec<Value> = list
                .into_iter()
                .map(|s| {
                    json!({"id": s.id, "events": s.events, "createdMs": s.created_ms,
                           "updatedMs": s.updated_ms, "openTurn": s.open_turn,
                           "parent": s.parent.map(|(p, n)| json!({"session": p, "upto": n}))})
                })
                .collect();
            Ok(Value::Array(out).to_string())
        }))
    }

    /// One page of the sessions a query selects (JSON: `tags`, `where`,
    /// `updatedSinceMs`, `openTurn`, `parent`, `newestFirst`, `cursor`,
    /// `limit`, the CLI's filters), from the store's catalog brought up to
    /// date first; resolves to JSON `{"sessions": [...], "nextCursor"}`.
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn list_sessions(&self, query: String) -> napi::Result<AsyncTask<Job<String>>> {
        let q: Value = serde_json::from_str(&query)
            .map_err(|e| usage(format!("a listing query is a JSON object: {e}")))?;
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let after = match q["cursor"].as_str() {
            Some(c) => Some(c.parse::<ts::Cursor>().map_err(err)?),
            None => None,
        };
        let fields = q["where"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str().map_or_else(|| v.to_string(), String::from),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let query = ts::ListQuery {
            tags: strings(&q["tags"]),
            fields,
            updated_since_ms: q["updatedSinceMs"].as_f64().map(|x| x.max(0.0) as u64),
            open_turn: q["openTurn"].as_bool(),
            parent: q["parent"].as_str().map(String::from),
            newest_first: q["newestFirst"].as_bool().unwrap_or(false),
            after,
            limit: q["limit"].as_u64().unwrap_or(50).max(1) as usize,
        };
        let (log, catalog) = (self.log()?, self.catalog.clone());
        Ok(Job::new(move || {
            let mut catalog = catalog.lock();
            catalog.refresh(&log).map_err(err)?;
            let page = catalog.list(&query);
            let sessions: Vec<Value> = page
                .sessions
                .iter()
                .map(|e| {
                    json!({"id": e.id, "events": e.events, "createdMs": e.created_ms,
                           "updatedMs": e.updated_ms, "openTurn": e.open_turn,
                           "parent": e.parent.as_ref().map(|(p, n)| json!({"session": p, "upto": n})),
                           "title": e.metadata.title, "tags": e.metadata.tags,
                           "fields": e.metadata.fields})
                })
                .collect();
            Ok(
                json!({"sessions": sessions, "nextCursor": page.next.map(|c| c.to_string())})
                    .to_string(),
            )
        }))
    }

    /// Fork `source` at a turn boundary; resolves to the child's id.
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn fork(
        &self,
        source: String,
        at: Option<i64>,
        child: Option<String>,
    ) -> napi::Result<AsyncTask<Job<String>>> {
        let log = self.log()?;
        let at = at.map(|a| a.max(0) as u64);
        Ok(Job::new(move || {
            ts::fork(&log, &source, at, child.as_deref())
                .map(|f| f.child)
                .map_err(err)
        }))
    }

    /// Durable events `start..end` of a session, as a JSON array.
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn replay(
        &self,
        id: String,
        start: Option<i64>,
        end: Option<i64>,
    ) -> napi::Result<AsyncTask<Job<String>>> {
        let (log, registry) = (self.log()?, self.registry.clone());
        let (start, end) = (
            start.unwrap_or(0).max(0) as u64,
            end.map_or(u64::MAX, |e| e.max(0) as u64),
        );
        Ok(Job::new(move || {
            let events = ts::replay_range(&log, &id, registry, start..end)
                .map_err(err)?
                .map(|e| e.map(|e| event_json(&e)))
                .collect::<turnstone::Result<Vec<Value>>>()
                .map_err(err)?;
            Ok(Value::Array(events).to_string())
        }))
    }

    /// Full-text search (the index is brought up to date first), JSON hits.
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn search(
        &self,
        query: String,
        limit: Option<u32>,
        session: Option<String>,
    ) -> napi::Result<AsyncTask<Job<String>>> {
        let limit = limit.unwrap_or(20) as usize;
        if let Some(pg) = self.pg.clone() {
            // PostgreSQL's own text search: the same hit shape.
            return Ok(Job::new(move || {
                let hits = match &session {
                    Some(s) => pg.search_session(s, &query, limit),
                    None => pg.search(&query, limit),
                }
                .map_err(|e| err(turnstone_pg::engine_error(e)))?;
                let hits: Vec<Value> = hits
                    .into_iter()
                    .map(|h| json!({"session": h.session, "seq": h.seq, "snippet": h.snippet}))
                    .collect();
                Ok(Value::Array(hits).to_string())
            }));
        }
        if let LogHandle::Other(l) = self.log()? {
            // A client: the store's host searches its index.
            return Ok(Job::new(move || {
                let hits = l.search(&query, limit, session.as_deref()).map_err(err)?;
                Ok(serde_json::to_string(&hits).unwrap_or_else(|_| "[]".into()))
            }));
        }
        let (store, registry) = (self.store("search")?, self.registry.clone());
        Ok(Job::new(move || {
            let mut ix = SearchIndex::open(&store).map_err(err)?;
            ix.update(&store, &registry).map_err(err)?;
            let hits = match &session {
                Some(s) => ix.search_session(&store, s, &query, limit),
                None => ix.search(&query, limit),
            }
            .map_err(err)?;
            Ok(serde_json::to_string(&hits).unwrap_or_else(|_| "[]".into()))
        }))
    }

    /// Delete a session (a durable tombstone); resolves to its seq.
    #[napi(catch_unwind, ts_return_type = "Promise<number>")]
    pub fn delete(&self, id: String) -> napi::Result<AsyncTask<Job<i64>>> {
        let host = self.host()?;
        Ok(Job::new(move || {
            host.delete(&id).map(|s| s as i64).map_err(err)
        }))
    }

    /// Collect now, while the store stays open (an online collection; a
    /// directory only): the bytes of deleted sessions and of the sessions
    /// the store's retention expires, then the blob files no event
    /// references. A sealed segment is rewritten when its live bytes are
    /// below `threshold` (0.0..=1.0, default 0.5) of its data; `dry_run`
    /// decides and reports, changing nothing. Writers keep appending
    /// meanwhile. Resolves to the report (the engine's `CollectReport`), as
    /// JSON.
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn collect(
        &self,
        threshold: Option<f64>,
        dry_run: Option<bool>,
    ) -> napi::Result<AsyncTask<Job<String>>> {
        let defaults = CollectOptions::default();
        let threshold = threshold.unwrap_or(defaults.threshold);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(usage(format!(
                "threshold must be within 0.0 and 1.0, not {threshold}"
            )));
        }
        let opts = CollectOptions {
            threshold,
            dry_run: dry_run.unwrap_or(false),
            ..defaults
        };
        let store = self.store("collect")?;
        Ok(Job::new(move || {
            let report = collect_live(&store, &opts, &Retention::default()).map_err(err)?;
            serde_json::to_string(&report)
                .map_err(|e| thrown("panic", format!("internal error (a bug): {e}"), None, None))
        }))
    }

    /// Follow a session live from `fromSeq`.
    #[napi(catch_unwind)]
    pub fn subscribe(&self, id: String, from_seq: Option<i64>) -> napi::Result<NativeSubscription> {
        let log = self.log()?;
        let from = from_seq.unwrap_or(0).max(0) as u64;
        let sub = ts::subscribe(&log, &id, self.registry.clone(), from).map_err(err)?;
        Ok(NativeSubscription {
            sub: Arc::new(Mutex::new(Some(sub))),
            lent: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Make everything durable and close the store (sessions opened from it
    /// stop working).
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<Job<()>> {
        let host = self.host.lock().take();
        let log = self.log.lock().take();
        let pg = self.pg.clone();
        Job::new(move || {
            drop(host);
            if let Some(pg) = pg {
                // What was queued is committed first; sessions opened from
                // it stop working.
                drop(log);
                pg.close();
                return Ok(());
            }
            match log {
                Some(LogHandle::Embedded(s)) => s.shutdown().map_err(err),
                // A client of another process's store (or the store it
                // took over).
                Some(LogHandle::Other(l)) => l.close().map_err(err),
                None => Ok(()),
            }
        })
    }
}

/// One session handle.
#[napi]
pub struct NativeSession {
    /// `None` once closed (`close()`): the claim on the session is released.
    s: Mutex<Option<SharedSession>>,
    report: String,
}

fn session_handle(s: SharedSession, report: String) -> NativeSession {
    NativeSession {
        s: Mutex::new(Some(s)),
        report,
    }
}

impl NativeSession {
    /// The shared session, unless this handle is closed.
    fn shared(&self) -> napi::Result<SharedSession> {
        self.s.lock().clone().ok_or_else(closed)
    }

    /// Run `f` on the session, unless this handle is closed.
    fn with<R>(&self, f: impl FnOnce(&mut ts::Session) -> napi::Result<R>) -> napi::Result<R> {
        let outer = self.s.lock();
        let shared = outer.as_ref().ok_or_else(closed)?;
        let mut g = shared.lock();
        f(&mut g)
    }
}

/// A surface op given as JSON (`None`: none).
fn surface_op(text: Option<&str>) -> napi::Result<Option<SurfaceOp>> {
    Ok(match text {
        None => None,
        // The common op without a parse.
        Some(r#"{"op":"append"}"#) => Some(SurfaceOp::Append),
        Some(t) => Some(
            serde_json::from_str(t).map_err(|e| usage(format!("surface op is not valid: {e}")))?,
        ),
    })
}

fn closed() -> napi::Error {
    usage("this session handle is closed")
}

#[napi]
impl NativeSession {
    /// The session id.
    #[napi(getter, catch_unwind)]
    pub fn id(&self) -> napi::Result<String> {
        self.with(|s| Ok(s.id().to_string()))
    }

    /// Number of events.
    #[napi(getter, catch_unwind)]
    pub fn length(&self) -> napi::Result<i64> {
        self.with(|s| Ok(s.len() as i64))
    }

    /// Release this handle: the session is no longer held for writing
    /// here (another handle may open it, `delete` may delete it). What it
    /// appended stays appended; call `flush` first to wait for durability.
    /// Every later call on this handle fails; closing twice does nothing.
    #[napi(catch_unwind)]
    pub fn close(&self) {
        self.s.lock().take();
    }

    /// The repair report of `openSession`, as JSON (`null`: none).
    #[napi(catch_unwind)]
    pub fn repair_report(&self) -> String {
        self.report.clone()
    }

    /// Append one event: kind name, data as UTF-8 JSON in the first `len`
    /// bytes of a Buffer (the package writes into one reused Buffer: cheaper
    /// than converting a string across N-API), surface op as JSON for the
    /// three surface kinds. The JSON text is parsed once and written as
    /// given. Returns the event's seq.
    #[napi(catch_unwind)]
    pub fn append_utf8(
        &self,
        kind: String,
        data: BufferSlice,
        len: u32,
        surface: Option<String>,
    ) -> napi::Result<i64> {
        let bytes = data
            .get(..len as usize)
            .ok_or_else(|| usage(format!("{len} bytes asked of a {}-byte buffer", data.len())))?;
        let text = std::str::from_utf8(bytes)
            .map_err(|e| usage(format!("event data is not UTF-8: {e}")))?;
        let surface = surface_op(surface.as_deref())?;
        self.with(|s| {
            s.append_json_text(&kind, text, surface)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Resolves once everything this handle appended is durable. The wait
    /// is the engine's future, woken by the flusher: it holds no thread
    /// (not one of libuv's four, which idle followers would otherwise
    /// take).
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn flush(&self, env: Env) -> napi::Result<AsyncBlock<()>> {
        let wait = self.with(|g| Ok(g.durability_point()))?.wait_async();
        AsyncBlockBuilder::new(async move { wait.await.map_err(err) }).build(&env)
    }

    /// Append a provider's response body (UTF-8 JSON in `data[..len]`) as
    /// an `assistant/message` (`AssistantMessage::from_response`: the
    /// content blocks or output items as sent, the usage normalised with
    /// every field kept, every other field in `extra`). Returns its seq.
    #[napi(catch_unwind)]
    pub fn append_response(
        &self,
        provider_name: String,
        data: BufferSlice,
        len: u32,
    ) -> napi::Result<i64> {
        let p = provider(&provider_name)?;
        let bytes = data
            .get(..len as usize)
            .ok_or_else(|| usage(format!("{len} bytes asked of a {}-byte buffer", data.len())))?;
        let body: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| usage(format!("the response body is not JSON: {e}")))?;
        let m = ts::AssistantMessage::from_response(p, &body);
        self.with(|s| {
            s.append(m, ts::SurfaceOp::Append)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Several core events as one atomic group: a JSON array of
    /// `{"kind", "data", "surface"}` (surface kinds may only append).
    /// Returns their seqs; nothing is written when one is refused.
    #[napi(catch_unwind)]
    pub fn append_group(&self, events: String) -> napi::Result<Vec<i64>> {
        let bad = |e: String| usage(format!("a group is a list of [kind, data, options]: {e}"));
        let events: Vec<Value> = serde_json::from_str(&events).map_err(|e| bad(e.to_string()))?;
        let mut group = Vec::with_capacity(events.len());
        for mut e in events {
            let kind = e["kind"]
                .as_str()
                .ok_or_else(|| bad("a kind is not a string".into()))?;
            let kind = kind.to_string();
            let surface = match e["surface"].take() {
                Value::Null => None,
                op => Some(serde_json::from_value(op).map_err(|e| bad(e.to_string()))?),
            };
            group.push((kind, e["data"].take(), surface));
        }
        self.with(|s| {
            s.append_json_group(group)
                .map(|v| v.into_iter().map(|s| s as i64).collect())
                .map_err(err)
        })
    }

    /// Resolve the next request's header from a spec (JSON: provider,
    /// model, params, adapter_defaults, system, tools) and write a
    /// `request/header` when needed: the reason written (`initial`,
    /// `resume`, `change`), or null.
    #[napi(catch_unwind)]
    pub fn prepare_request(&self, spec: String) -> napi::Result<Option<String>> {
        let spec: Value = serde_json::from_str(&spec)
            .map_err(|e| usage(format!("the request spec is not JSON: {e}")))?;
        self.with(|g| {
            let reason = g.prepare_request_json(spec).map_err(err)?;
            Ok(reason.map(|r| {
                match r {
                    ts::HeaderReason::Initial => "initial",
                    ts::HeaderReason::Resume => "resume",
                    ts::HeaderReason::Change => "change",
                }
                .to_string()
            }))
        })
    }

    /// A new agent loop takes over this session: the next header is `resume`.
    #[napi(catch_unwind)]
    pub fn begin_loop(&self) -> napi::Result<()> {
        self.with(|g| {
            g.begin_loop();
            Ok(())
        })
    }

    /// Check a request body (JSON) against the one the log rebuilds for a
    /// provider; the error (`request_mismatch`) names the first differing path.
    #[napi(catch_unwind)]
    pub fn check_request_body(&self, format: String, body: String) -> napi::Result<()> {
        let p = provider(&format)?;
        let body: Value = serde_json::from_str(&body)
            .map_err(|e| usage(format!("the request body is not JSON: {e}")))?;
        self.with(|g| g.check_request_body(p, &body).map_err(err))
    }

    /// Replace surface nodes `start..end` by a summary, atomically (the
    /// originals stay in the log). Returns the summary message's seq.
    #[napi(catch_unwind)]
    pub fn compact(
        &self,
        compaction_id: String,
        start: f64,
        end: f64,
        summary: String,
    ) -> napi::Result<i64> {
        let start = whole("start", start, u32::MAX as u64)?;
        let end = whole("end", end, u32::MAX as u64)?;
        self.with(|g| {
            g.compact(&compaction_id, start, end, &summary)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Replace the messages of ended turn `turn_id` by a summary,
    /// atomically. Returns the summary message's seq.
    #[napi(catch_unwind)]
    pub fn compact_turn(
        &self,
        compaction_id: String,
        turn_id: String,
        summary: String,
    ) -> napi::Result<i64> {
        self.with(|g| {
            g.compact_turn(&compaction_id, &turn_id, &summary)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Replace the tool result at surface position `at` by a shorter text,
    /// atomically (the original stays in the log). Returns its seq.
    #[napi(catch_unwind)]
    pub fn prune_tool_result(
        &self,
        at: f64,
        replacement: String,
        tokens_saved: f64,
    ) -> napi::Result<i64> {
        let at = whole("at", at, u32::MAX as u64)?;
        let saved = whole("tokensSaved", tokens_saved, 1 << 53)?;
        self.with(|g| {
            g.prune_tool_result(at, &replacement, saved)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Every turn of the session, in order, as a JSON array.
    #[napi(catch_unwind)]
    pub fn turns(&self) -> napi::Result<String> {
        self.with(|g| Ok(serde_json::to_string(g.turns()).unwrap_or_else(|_| "[]".into())))
    }

    /// Fork after the end of turn `turn_id` (durable events only), as JSON
    /// `{"child", "upto"}`.
    #[napi(catch_unwind)]
    pub fn fork_after_turn(&self, turn_id: String, child: Option<String>) -> napi::Result<String> {
        self.with(|g| {
            let f = g.fork_after_turn(&turn_id, child.as_deref()).map_err(err)?;
            Ok(serde_json::json!({"child": f.child, "upto": f.upto}).to_string())
        })
    }

    /// What `requestBody(format)` leaves out because the header was
    /// written for another API, as a JSON array of `{what, why, count}`.
    #[napi(catch_unwind)]
    pub fn dropped(&self, format: String) -> napi::Result<String> {
        let p = provider(&format)?;
        self.with(|g| {
            let (_, dropped) = g.request_body_report(p);
            Ok(serde_json::to_string(&dropped).unwrap_or_else(|_| "[]".into()))
        })
    }

    /// The messages (no format) or a provider request body, as JSON.
    #[napi(catch_unwind)]
    pub fn messages(&self, format: Option<String>) -> napi::Result<String> {
        let provider = format.as_deref().map(provider).transpose()?;
        self.with(|g| {
            Ok(match provider {
                Some(p) => g.request_body(p).to_string(),
                None => {
                    let msgs: Vec<&ts::Message> =
                        g.derive_messages().iter().map(|m| &**m).collect();
                    serde_json::to_string(&msgs).unwrap_or_else(|_| "[]".into())
                }
            })
        })
    }

    /// This handle's events `start..end`, as a JSON array (read off the
    /// event loop).
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn events(
        &self,
        start: Option<i64>,
        end: Option<i64>,
    ) -> napi::Result<AsyncTask<Job<String>>> {
        let s = self.shared()?;
        Ok(Job::new(move || {
            let g = s.lock();
            let len = g.len();
            let end = end.map_or(len, |e| (e.max(0) as u64).min(len));
            let start = (start.unwrap_or(0).max(0) as u64).min(end);
            let events = g.events(start..end).map_err(err)?;
            Ok(Value::Array(events.iter().map(event_json).collect()).to_string())
        }))
    }

    /// Record the tool calls of one assistant message as one atomic group
    /// (JSON array of {call_id, name, input}); returns the first seq.
    #[napi(catch_unwind)]
    pub fn record_tool_calls(&self, calls: String) -> napi::Result<i64> {
        let calls: Vec<ts::ToolCall> = serde_json::from_str(&calls).map_err(|e| {
            usage(format!(
                "tool calls must be [{{call_id, name, input}}]: {e}"
            ))
        })?;
        self.with(|g| {
            let first = g.len();
            g.record_tool_calls(&calls).map_err(err)?;
            Ok(first as i64)
        })
    }

    /// The session's metadata, as JSON.
    #[napi(catch_unwind)]
    pub fn metadata(&self) -> napi::Result<String> {
        self.with(|g| Ok(serde_json::to_string(g.metadata()).unwrap_or_else(|_| "{}".into())))
    }
}

/// The JSON Schema of one core kind's data (`"turn/end"`), or of every
/// core kind keyed by name: `turnstone schema`, as JSON text.
#[napi(catch_unwind)]
pub fn schema_json(kind: Option<String>) -> napi::Result<String> {
    let v = ts::schema_named(kind.as_deref()).map_err(usage)?;
    Ok(v.to_string())
}

/// The `turnstone` command line on `argv` (program name first): what
/// `npm install` links as the `turnstone` bin (`cli.js`). Every subcommand
/// of the Rust binary but `serve`. Runs on the calling thread (the bin does
/// nothing else) and returns the exit status.
#[napi]
pub fn cli_main(argv: Vec<String>) -> i32 {
    let code = turnstone_cli::main_from(argv);
    // `ExitCode` does not give its number back: compare with the statuses
    // the CLI uses (0, 1, 2).
    [0u8, 1, 2]
        .into_iter()
        .find(|c| std::process::ExitCode::from(*c) == code)
        .map_or(2, i32::from)
}

/// A live follower of one session.
#[napi]
pub struct NativeSubscription {
    /// `None` once it ended, or while a `next()` holds it.
    sub: Arc<Mutex<Option<SessionSubscription>>>,
    /// A `next()` future holds the subscription.
    lent: Arc<AtomicBool>,
}

/// A subscription lent to a `next()` future: given back to its handle when
/// the future ends or is dropped, unless it ended.
struct Lent {
    slot: Arc<Mutex<Option<SessionSubscription>>>,
    lent: Arc<AtomicBool>,
    sub: Option<SessionSubscription>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(s) = self.sub.take() {
            *self.slot.lock() = Some(s);
        }
        self.lent.store(false, Ordering::Release);
    }
}

#[napi]
impl NativeSubscription {
    /// Resolves to the next durable event (JSON), or null when the store
    /// closes. The wait is the engine's future, woken by the flusher when
    /// a batch holding an event of this session is durable: it holds no
    /// thread, so any number of idle followers leave libuv's pool free.
    /// One `next()` at a time per subscription.
    #[napi(catch_unwind, ts_return_type = "Promise<string | null>")]
    pub fn next(&self, env: Env) -> napi::Result<AsyncBlock<Option<String>>> {
        if self.lent.swap(true, Ordering::AcqRel) {
            return Err(usage(
                "a next() of this subscription is still waiting; await it first",
            ));
        }
        let mut lent = Lent {
            slot: self.sub.clone(),
            lent: self.lent.clone(),
            sub: None,
        };
        lent.sub = self.sub.lock().take();
        AsyncBlockBuilder::new(async move {
            let mut lent = lent;
            let Some(s) = lent.sub.as_mut() else {
                return Ok(None); // it had ended
            };
            match s.next_async().await {
                Some(Ok(e)) => Ok(Some(event_json(&e).to_string())),
                Some(Err(e)) => Err(err(e)),
                None => {
                    lent.sub = None; // ended: not given back
                    Ok(None)
                }
            }
        })
        .build(&env)
    }

    /// The next durable event now, if there is one (JSON or null).
    #[napi(catch_unwind)]
    pub fn try_next(&self) -> napi::Result<Option<String>> {
        if self.lent.load(Ordering::Acquire) {
            return Err(usage(
                "a next() of this subscription is still waiting; await it first",
            ));
        }
        let mut g = self.sub.lock();
        let Some(s) = g.as_mut() else { return Ok(None) };
        Ok(s.try_next()
            .map_err(err)?
            .map(|e| event_json(&e).to_string()))
    }
}

// Rust's allocations in this addon (event data, the session's message cache)
// use mimalloc: glibc's malloc spent a fifth of an append in free-list work.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
