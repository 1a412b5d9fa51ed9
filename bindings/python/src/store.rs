//! `NativeStore`: an open store (a store directory or a PostgreSQL
//! database) and what is done on it as a whole — opening sessions,
//! listing, forking, replay, search, deletion, collection, subscribing.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use serde_json::{json, Value};
use turnstone::session::{self as ts, Host, LogHandle, Registry};
use turnstone::{Error, Options, Store};
use turnstone_pg::{is_url, PgEventLog, PgLog};

use crate::convert::{err, event_json, registry_from, usage};
use crate::session::NativeSession;
use crate::subscribe::NativeSubscription;

/// An open store: a store directory, or a PostgreSQL database (issue 18).
#[pyclass(frozen, module = "turnstone._native")]
pub(crate) struct NativeStore {
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
    /// The embedded store, for what only it has (collection, stats, live
    /// follow).
    fn store(&self, what: &str) -> PyResult<Arc<Store>> {
        let log = self.log()?;
        if let Some(s) = log.store() {
            return Ok(s.clone());
        }
        let l = log.as_log();
        if self.pg.is_none() {
            return Err(err(Error::Refused(format!(
                "{what} runs in the process that hosts the store; this process is its client ({}, docs/MULTIPROCESS.md)",
                l.backend()
            ))));
        }
        Err(err(Error::Refused(format!(
            "{what} is not available on a database yet"
        ))))
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
        let log = self.log()?;
        // The store's catalog, brought up to date (one listing for both
        // calls; only what changed since the last is read).
        let list = py
            .detach(|| {
                let mut catalog = self.catalog.lock();
                catalog.refresh(&log)?;
                let all = ts::ListQuery {
                    limit: usize::MAX,
                    ..Default::default()
                };
                Ok::<_, Error>(catalog.list(&all).sessions)
            })
            .map_err(err)?;
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
        // The log's own search (PostgreSQL; a client asks its host), or the
        // session layer's index in the store's files.
        let (log, registry) = (self.log()?, self.registry.clone());
        let hits = py
            .detach(|| match &session {
                Some(s) => ts::search_session(&log, &registry, s, &query, limit),
                None => ts::search(&log, &registry, &query, limit),
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
                Some(log) => match log.store() {
                    Some(store) => store.shutdown(),
                    // A client of another process's store (or the store it
                    // took over).
                    None => log.as_log().close(),
                },
                None => Ok(()),
            }
        })
        .map_err(err)
    }
}
