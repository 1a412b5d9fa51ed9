//! What operators see: health (ready / poisoned / store missing / read-only),
//! Prometheus-style metrics, and the access log line. The store's own
//! failures are recorded here when the write path meets them, logged once,
//! and from then on every write is refused with 503 before it reaches the
//! engine.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Reserved paths (never streams).
pub const HEALTH_PATH: &str = "/.well-known/turnstone/health";
pub const METRICS_PATH: &str = "/.well-known/turnstone/metrics";

/// Durability wait latency buckets (upper bounds, microseconds).
const WAIT_BUCKETS_US: [u64; 10] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

/// Counters and gauges (all relaxed atomics: they are reports, not locks).
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub responses_2xx: AtomicU64,
    pub responses_3xx: AtomicU64,
    pub responses_4xx: AtomicU64,
    pub responses_5xx: AtomicU64,
    /// POSTs that wrote data and were acknowledged.
    pub appends: AtomicU64,
    pub append_bytes: AtomicU64,
    pub open_connections: AtomicU64,
    /// Connections answered 503 because `max_connections` were open.
    pub refused_connections: AtomicU64,
    /// Failed `accept` calls (descriptor limits and the like).
    pub accept_errors: AtomicU64,
    pub sse_readers: AtomicU64,
    /// Response bytes produced but not yet taken by the connection (SSE).
    pub bytes_buffered: std::sync::Arc<AtomicU64>,
    /// Durability waits of writes: on a store directory timed around the
    /// engine's wait, on PostgreSQL around the commit (shared with the
    /// log, which records them).
    pub durable_waits: std::sync::Arc<WaitHistogram>,
}

/// A histogram of wait times (relaxed atomics).
#[derive(Debug, Default)]
pub struct WaitHistogram {
    count: AtomicU64,
    sum_us: AtomicU64,
    buckets: [AtomicU64; WAIT_BUCKETS_US.len()],
}

impl WaitHistogram {
    pub fn record(&self, us: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        for (b, le) in self.buckets.iter().zip(WAIT_BUCKETS_US) {
            if us <= le {
                b.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Time `f` and record it.
    pub fn time<T>(&self, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let r = f();
        self.record(t.elapsed().as_micros().min(u128::from(u64::MAX)) as u64);
        r
    }
}

/// The log's own counters, as the metrics show them.
pub enum LogCounters {
    /// The embedded store's.
    Store(turnstone::Stats),
    /// The PostgreSQL committer's.
    Pg(turnstone_pg::PgStats),
}

impl Metrics {
    pub fn status(&self, code: u16) {
        let c = match code {
            200..=299 => &self.responses_2xx,
            300..=399 => &self.responses_3xx,
            400..=499 => &self.responses_4xx,
            _ => &self.responses_5xx,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Metrics whose durability-wait histogram is `waits`.
    pub fn with_waits(waits: std::sync::Arc<WaitHistogram>) -> Metrics {
        Metrics {
            durable_waits: waits,
            ..Metrics::default()
        }
    }

    pub fn durable_wait(&self, us: u64) {
        self.durable_waits.record(us);
    }

    /// The Prometheus text format (version 0.0.4).
    pub fn render(&self, counters: &LogCounters, health: &str) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut o = String::new();
        let mut one = |name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        one(
            "turnstone_serve_requests_total",
            "counter",
            "HTTP requests received.",
            g(&self.requests),
        );
        one(
            "turnstone_serve_appends_total",
            "counter",
            "Acknowledged appends (POSTs that wrote data).",
            g(&self.appends),
        );
        one(
            "turnstone_serve_append_bytes_total",
            "counter",
            "Body bytes of acknowledged appends.",
            g(&self.append_bytes),
        );
        one(
            "turnstone_serve_open_connections",
            "gauge",
            "Open client connections.",
            g(&self.open_connections),
        );
        one(
            "turnstone_serve_refused_connections_total",
            "counter",
            "Connections refused over the connection cap.",
            g(&self.refused_connections),
        );
        one(
            "turnstone_serve_accept_errors_total",
            "counter",
            "Failed accept calls (for example at the descriptor limit).",
            g(&self.accept_errors),
        );
        one(
            "turnstone_serve_sse_readers",
            "gauge",
            "Open SSE responses.",
            g(&self.sse_readers),
        );
        one(
            "turnstone_serve_bytes_buffered",
            "gauge",
            "Response bytes produced but not yet taken by a connection.",
            g(&self.bytes_buffered),
        );
        match counters {
            LogCounters::Store(stats) => {
                one(
                    "turnstone_store_fdatasyncs_total",
                    "counter",
                    "fdatasyncs that made commit batches durable.",
                    stats.syncs,
                );
                one(
                    "turnstone_store_batches_total",
                    "counter",
                    "Commit batches written.",
                    stats.batches,
                );
                one(
                    "turnstone_store_write_failures_total",
                    "counter",
                    "Batch writes that failed (kept for a retry).",
                    stats.write_failures,
                );
                one(
                    "turnstone_store_bytes_written_total",
                    "counter",
                    "Bytes written to segment files.",
                    stats.bytes_written,
                );
            }
            LogCounters::Pg(stats) => {
                one(
                    "turnstone_pg_commits_total",
                    "counter",
                    "Transactions of this instance that committed events.",
                    stats.commits,
                );
                one(
                    "turnstone_pg_events_total",
                    "counter",
                    "Events this instance committed.",
                    stats.events,
                );
            }
        }
        one(
            "turnstone_serve_healthy",
            "gauge",
            "1 when the store takes writes.",
            u64::from(health == "ready"),
        );
        let _ = writeln!(
            o,
            "# HELP turnstone_serve_responses_total HTTP responses by status class.\n\
             # TYPE turnstone_serve_responses_total counter"
        );
        for (class, a) in [
            ("2xx", &self.responses_2xx),
            ("3xx", &self.responses_3xx),
            ("4xx", &self.responses_4xx),
            ("5xx", &self.responses_5xx),
        ] {
            let _ = writeln!(
                o,
                "turnstone_serve_responses_total{{class=\"{class}\"}} {}",
                g(a)
            );
        }
        let _ = writeln!(
            o,
            "# HELP turnstone_serve_durable_wait_seconds Time a write waited for durability.\n\
             # TYPE turnstone_serve_durable_wait_seconds histogram"
        );
        let w = &self.durable_waits;
        for (b, le) in w.buckets.iter().zip(WAIT_BUCKETS_US) {
            let _ = writeln!(
                o,
                "turnstone_serve_durable_wait_seconds_bucket{{le=\"{}\"}} {}",
                le as f64 / 1e6,
                g(b)
            );
        }
        let n = g(&w.count);
        let _ = writeln!(
            o,
            "turnstone_serve_durable_wait_seconds_bucket{{le=\"+Inf\"}} {n}"
        );
        let _ = writeln!(
            o,
            "turnstone_serve_durable_wait_seconds_sum {}",
            g(&w.sum_us) as f64 / 1e6
        );
        let _ = writeln!(o, "turnstone_serve_durable_wait_seconds_count {n}");
        o
    }
}

/// Whether the store takes writes; the first failure is logged.
#[derive(Debug)]
pub struct Health {
    dir: PathBuf,
    read_only: bool,
    /// (device, inode) of the store directory at start.
    dir_id: Option<(u64, u64)>,
    failed: parking_lot::Mutex<Option<String>>,
    /// The last durability wait failed without poisoning the store (a
    /// failed write, kept by the engine for a retry): new writes are refused
    /// until a retry succeeds, so that a full disk does not pile up
    /// unacknowledgeable appends in memory.
    write_failing: parking_lot::Mutex<Option<String>>,
    missing: AtomicBool,
    /// On a shared database there is no store directory to watch.
    no_dir: bool,
}

fn dir_id(dir: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(dir).ok().map(|_| (0, 0))
    }
}

impl Health {
    pub fn new(dir: &Path, read_only: bool) -> Health {
        Health {
            dir: dir.to_path_buf(),
            read_only,
            dir_id: dir_id(dir),
            failed: parking_lot::Mutex::new(None),
            write_failing: parking_lot::Mutex::new(None),
            missing: AtomicBool::new(false),
            no_dir: false,
        }
    }

    /// The health of a server on a shared database (no directory).
    pub fn shared() -> Health {
        Health {
            no_dir: true,
            ..Health::new(Path::new(""), false)
        }
    }

    /// The engine refused for good (poisoned, closed): log once, remember.
    pub fn failed(&self, why: &str) {
        let mut f = self.failed.lock();
        if f.is_none() {
            eprintln!(
                "turnstone serve: the store stopped taking writes: {why}; every write now \
                 answers 503 (restart the server once the disk is fixed: recovery keeps \
                 what is durable)"
            );
            *f = Some(why.to_string());
        }
    }

    /// A durability wait failed but the store is not poisoned (the engine
    /// retries the batch): log once per episode.
    pub fn write_failed(&self, why: &str) {
        let mut f = self.write_failing.lock();
        if f.is_none() {
            eprintln!(
                "turnstone serve: a write to the store failed: {why}; new writes answer 503 \
                 until a retry succeeds (retried every 250 ms)"
            );
        }
        *f = Some(why.to_string());
    }

    /// A durability wait succeeded: writes are taken again.
    pub fn write_ok(&self) {
        if self.write_failing.lock().take().is_some() {
            eprintln!("turnstone serve: writes to the store succeed again");
        }
    }

    pub fn is_write_failing(&self) -> bool {
        self.write_failing.lock().is_some()
    }

    /// Check that the store directory is still the one opened (not removed
    /// or replaced); a store that is gone takes no more writes, loudly.
    pub fn check_dir(&self) -> bool {
        if self.no_dir {
            return true;
        }
        if self.missing.load(Ordering::Relaxed) {
            return false;
        }
        let now = dir_id(&self.dir);
        let lock_there = self.dir.join("LOCK").exists() || self.read_only;
        if now.is_some() && now == self.dir_id && lock_there {
            return true;
        }
        if !self.missing.swap(true, Ordering::Relaxed) {
            eprintln!(
                "turnstone serve: the store directory {} was removed or replaced while \
                 serving; writes are refused (503) from now on",
                self.dir.display()
            );
        }
        false
    }

    /// `ready`, `read-only`, `store-missing`, `poisoned: <why>` or
    /// `write-failing: <why>`.
    pub fn state(&self) -> String {
        if !self.check_dir() {
            return "store-missing".into();
        }
        if let Some(why) = self.failed.lock().as_ref() {
            return format!("poisoned: {why}");
        }
        if let Some(why) = self.write_failing.lock().as_ref() {
            return format!("write-failing: {why}");
        }
        if self.read_only {
            return "read-only".into();
        }
        "ready".into()
    }

    /// Why writes are refused, if they are.
    pub fn refusal(&self) -> Option<String> {
        match self.state() {
            s if s == "ready" => None,
            s => Some(format!("the store takes no writes ({s})")),
        }
    }
}

/// One access log line on stderr: time, peer, method, target, status, ms.
pub fn access_log(
    peer: &std::net::SocketAddr,
    method: &hyper::Method,
    uri: &hyper::Uri,
    status: u16,
    took: std::time::Duration,
) {
    use std::io::Write;
    let ts = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    // One write per line, so that concurrent lines do not interleave. The
    // target is as received (percent-encoded: no control characters).
    let line = format!(
        "{ts} {peer} {method} {uri} {status} {:.1}ms\n",
        took.as_secs_f64() * 1e3
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
