//! `NativeStore`: an open store (a store directory or a PostgreSQL
//! database) and what is done on it as a whole — opening sessions,
//! listing, forking, replay, search, deletion, collection, subscribing.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use parking_lot::Mutex;
use serde_json::{json, Value};
use turnstone::gc::CollectOptions;
use turnstone::session::gc::{collect_live, Retention};
use turnstone::session::{self as ts, Host, LogHandle, Registry};
use turnstone::{Error as TsError, Options, Store as TsStore};
use turnstone_pg::{is_url, PgEventLog, PgLog};

use crate::convert::{err, event_json, thrown, usage, whole};
use crate::job::Job;
use crate::session::{session_handle, NativeSession};
use crate::subscribe::NativeSubscription;

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
    /// The embedded store, for what only it has (collection, stats, live
    /// follow).
    fn store(&self, what: &str) -> napi::Result<Arc<TsStore>> {
        let log = self.log()?;
        if let Some(s) = log.store() {
            return Ok(s.clone());
        }
        let l = log.as_log();
        if self.pg.is_none() {
            return Err(err(TsError::Refused(format!(
                "{what} runs in the process that hosts the store; this process is its client ({}, docs/MULTIPROCESS.md)",
                l.backend()
            ))));
        }
        Err(err(TsError::Refused(format!(
            "{what} is not available on a database yet"
        ))))
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
        let (log, catalog) = (self.log()?, self.catalog.clone());
        Ok(Job::new(move || {
            // The store's catalog, brought up to date (one listing for both
            // calls; only what changed since the last is read).
            let list = {
                let mut catalog = catalog.lock();
                catalog.refresh(&log).map_err(err)?;
                let all = ts::ListQuery {
                    limit: usize::MAX,
                    ..Default::default()
                };
                catalog.list(&all).sessions
            };
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
        // The log's own search (PostgreSQL; a client asks its host), or the
        // session layer's index in the store's files.
        let (log, registry) = (self.log()?, self.registry.clone());
        Ok(Job::new(move || {
            let hits = match &session {
                Some(s) => ts::search_session(&log, &registry, s, &query, limit),
                None => ts::search(&log, &registry, &query, limit),
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
                Some(log) => match log.store() {
                    Some(store) => store.shutdown().map_err(err),
                    // A client of another process's store (or the store it
                    // took over).
                    None => log.as_log().close().map_err(err),
                },
                None => Ok(()),
            }
        })
    }
}
