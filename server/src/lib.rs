//! `turnstone serve`: the Durable Streams HTTP protocol over a turnstone
//! store.
//!
//! Each stream is an engine session (`ds/<16 digits>`), each append one or
//! more events in one atomic group (a JSON message per event in JSON mode),
//! and every piece of stream state — configuration, closure, producer and
//! `Stream-Seq` state, deletion — is a logged record written in the same group
//! as the bytes it belongs to (`format-spec/FORMAT.md` §13). A 2xx answer to a
//! write means its group is durable; concurrent requests share the engine's
//! group commit. On start the registry is rebuilt from the log.
//!
//! ```no_run
//! let opts = turnstone_server::Options::new("./streams-store");
//! turnstone_server::run(opts).unwrap(); // until Ctrl-C / SIGTERM
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use turnstone::Store;

mod body;
#[cfg(feature = "cli")]
pub mod cli;
pub mod collect;
mod delete;
pub mod durable;
mod get;
pub mod headers;
mod http;
pub mod log;
pub mod offset;
pub mod ops;
pub mod read;
pub mod rebuild;
pub mod record;
mod shared;
mod sse;
pub mod stream;
pub mod streams;
mod write;

pub use rebuild::RebuildReport;

/// Default listen address (the protocol's registered port, loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4437";

/// How to serve.
#[derive(Debug, Clone)]
pub struct Options {
    /// The store directory.
    pub dir: PathBuf,
    /// Serve from this PostgreSQL database instead (`postgres://…`; `dir`
    /// is then not used): several servers may share it, and a client may
    /// write through one and read or follow through another.
    pub store_url: Option<String>,
    pub listen: SocketAddr,
    /// When set, every request (but CORS preflights) needs
    /// `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Largest request body; larger ones get 413.
    pub max_body_bytes: usize,
    /// How long a long-poll waits for data before answering 204.
    pub long_poll_timeout: Duration,
    /// SSE connections are closed after this long (clients reconnect).
    pub sse_max_duration: Duration,
    /// Data per catch-up response (at least one event is always sent).
    pub read_chunk_bytes: usize,
    /// Listen on a non-loopback address without a token (refused otherwise).
    pub insecure: bool,
    /// A connection that has not sent a complete request header this long
    /// after it opened or after its previous response (idle keep-alive) is
    /// closed.
    pub header_timeout: Duration,
    /// A request body not received in full within this long is answered
    /// 408 and the connection closed.
    pub body_timeout: Duration,
    /// Open connections at most; more are answered 503 and closed.
    pub max_connections: usize,
    /// Browser origins allowed to call (`Access-Control-Allow-Origin`): none
    /// by default (a request with an `Origin` header is refused with 403),
    /// `*` for any, or a comma-separated list.
    pub cors_origin: Option<String>,
    /// Log one line per request to stderr.
    pub access_log: bool,
    /// How the store is opened.
    pub store: turnstone::Options,
    /// Background collection of deleted and expired streams' bytes
    /// (`None`: off). Default: every 30 s, at most 64 MiB/s of I/O.
    pub gc: Option<turnstone::session::gc::BackgroundOptions>,
}

impl Options {
    pub fn new(dir: impl Into<PathBuf>) -> Options {
        Options {
            dir: dir.into(),
            store_url: None,
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            long_poll_timeout: Duration::from_secs(20),
            sse_max_duration: Duration::from_secs(60),
            read_chunk_bytes: 256 << 10,
            insecure: false,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            cors_origin: None,
            access_log: false,
            store: turnstone::Options::default(),
            gc: Some(turnstone::session::gc::BackgroundOptions {
                interval: Duration::from_secs(30),
                ..Default::default()
            }),
        }
    }
}

/// The default `max_body_bytes`: the largest JSON message (16 MiB less the
/// record header), so that any body the limit lets in fits as one message.
pub const DEFAULT_MAX_BODY_BYTES: usize = record::JSON_MESSAGE_BYTES_MAX;

/// The largest `max_body_bytes` accepted: one append is one engine batch.
pub const MAX_BODY_LIMIT: usize = 24 << 20;

/// Shared by every request.
pub(crate) struct App {
    pub streams: streams::Streams,
    pub durable: durable::Durability,
    pub opts: Options,
    pub shutdown: watch::Receiver<bool>,
    pub metrics: ops::Metrics,
    pub health: ops::Health,
    /// The background collector, stopped before the store closes.
    pub gc: parking_lot::Mutex<Option<turnstone::session::gc::Background>>,
}

/// Refuse options that would expose the store by accident: an empty token,
/// or a non-loopback address without a token (unless `insecure`).
pub fn check_exposure(opts: &Options) -> Result<(), String> {
    if let Some(t) = &opts.token {
        if t.trim().is_empty() {
            return Err(
                "the token is empty (an unset variable in --token \"$TOKEN\"?): \
                 refusing to start without authentication"
                    .into(),
            );
        }
    }
    if opts.token.is_none() && !opts.listen.ip().is_loopback() && !opts.insecure {
        return Err(format!(
            "listening on {} (not loopback) without a token would let anyone who can \
             reach it read, append to and delete every stream: give --token, or \
             --insecure if that is really what you want",
            opts.listen
        ));
    }
    Ok(())
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    report: RebuildReport,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Server {
    /// The address it listens on (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What was rebuilt from the log at start.
    pub fn rebuild_report(&self) -> &RebuildReport {
        &self.report
    }

    /// Stop accepting, end live reads, let requests finish, close the store.
    pub async fn shutdown(self) -> Result<(), String> {
        let _ = self.stop.send(true);
        self.task
            .await
            .map_err(|e| format!("server task failed: {e}"))?
    }
}

/// Open the store, rebuild the streams and start listening.
pub async fn start(opts: Options) -> Result<Server, String> {
    check_exposure(&opts)?;
    if opts.max_connections == 0 {
        return Err("max connections must be at least 1".into());
    }
    if opts.max_body_bytes == 0 || opts.max_body_bytes > MAX_BODY_LIMIT {
        return Err(format!(
            "max body bytes must be 1 to {MAX_BODY_LIMIT} (one append is one commit batch)"
        ));
    }
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", opts.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("listener address: {e}"))?;
    let (streams, durable, gc, health, report) = match &opts.store_url {
        Some(url) => {
            let url = url.clone();
            let log = tokio::task::spawn_blocking(move || {
                turnstone_pg::PgLog::connect(&url, pg_options()).map_err(|e| {
                    format!(
                        "cannot open the database {}: {e}",
                        turnstone_pg::redact(&url)
                    )
                })
            })
            .await
            .map_err(|e| format!("open task failed: {e}"))??;
            (
                streams::Streams::new(
                    log::Log::Pg(log::Shared::new(log)),
                    streams::Registry::default(),
                ),
                durable::Durability::none(),
                None,
                ops::Health::shared(),
                RebuildReport::default(),
            )
        }
        None => {
            let (dir, store_opts) = (opts.dir.clone(), opts.store.clone());
            let (store, reg, report) = tokio::task::spawn_blocking(move || {
                let store = Arc::new(
                    Store::open_with(&dir, store_opts)
                        .map_err(|e| format!("cannot open store {}: {e}", dir.display()))?,
                );
                let (reg, report) = rebuild::rebuild(&store, record::now_ms())?;
                Ok::<_, String>((store, reg, report))
            })
            .await
            .map_err(|e| format!("open task failed: {e}"))??;
            let durable = durable::Durability::start(store.clone())
                .map_err(|e| format!("cannot start the durability thread: {e}"))?;
            let gc = match (&opts.gc, opts.store.read_only) {
                (Some(g), false) => Some(collect::start(store.clone(), g.clone())?),
                _ => None,
            };
            let health = ops::Health::new(&opts.dir, opts.store.read_only);
            (
                streams::Streams::new(log::Log::Embedded(store), reg),
                durable,
                gc,
                health,
                report,
            )
        }
    };
    let (stop, shutdown) = watch::channel(false);
    let metrics = match streams.log.shared() {
        Some(pg) => ops::Metrics::with_waits(pg.waits.clone()),
        None => ops::Metrics::default(),
    };
    let app = Arc::new(App {
        streams,
        durable,
        opts,
        shutdown,
        metrics,
        health,
        gc: parking_lot::Mutex::new(gc),
    });
    let task = tokio::spawn(accept_loop(listener, app));
    Ok(Server {
        addr,
        report,
        stop,
        task,
    })
}

/// How long accepting pauses after a failed `accept` (EMFILE, ENFILE,
/// ENOBUFS, ...): doubling from the first to the last, reset by a success.
const ACCEPT_PAUSE_FIRST: Duration = Duration::from_millis(5);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);
/// Connections being refused (503) at once, at most; more are just closed.
const REFUSING_MAX: usize = 64;

async fn accept_loop(listener: TcpListener, app: Arc<App>) -> Result<(), String> {
    let mut conns = JoinSet::new();
    let mut refusing = JoinSet::new();
    let mut shutdown = app.shutdown.clone();
    let sweeper = tokio::spawn(sweep_loop(app.clone()));
    let pg_collector = tokio::spawn(pg_collect_loop(app.clone()));
    let mut pause = Duration::ZERO;
    let mut paused_until: Option<tokio::time::Instant> = None;
    let mut failures_logged_at: Option<tokio::time::Instant> = None;
    let mut failures_unlogged = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = tokio::time::sleep_until(paused_until.unwrap_or_else(tokio::time::Instant::now)),
                if paused_until.is_some() => {
                paused_until = None;
            }
            accepted = listener.accept(), if paused_until.is_none() => {
                let (tcp, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) if is_transient_accept_error(&e) => continue,
                    Err(e) => {
                        // Out of descriptors (or buffers): accepting again at
                        // once fails again and spins a core. Pause, keep
                        // serving the open connections, and say so.
                        app.metrics.accept_errors.fetch_add(1, Ordering::Relaxed);
                        pause = (pause * 2).clamp(ACCEPT_PAUSE_FIRST, ACCEPT_PAUSE_MAX);
                        let now = tokio::time::Instant::now();
                        paused_until = Some(now + pause);
                        failures_unlogged += 1;
                        let log_due = match failures_logged_at {
                            None => true,
                            Some(t) => now - t >= Duration::from_secs(5),
                        };
                        if log_due {
                            eprintln!(
                                "turnstone serve: accept failed {failures_unlogged} time(s): {e}; \
                                 pausing new connections up to {} ms at a time ({} open \
                                 connections are still served)",
                                pause.as_millis(),
                                conns.len()
                            );
                            failures_logged_at = Some(now);
                            failures_unlogged = 0;
                        }
                        continue;
                    }
                };
                pause = Duration::ZERO;
                if conns.len() >= app.opts.max_connections {
                    app.metrics.refused_connections.fetch_add(1, Ordering::Relaxed);
                    if refusing.len() < REFUSING_MAX {
                        refusing.spawn(refuse_connection(tcp));
                    }
                    continue;
                }
                let _ = tcp.set_nodelay(true);
                conns.spawn(serve_connection(tcp, peer, app.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            Some(_) = refusing.join_next(), if !refusing.is_empty() => {}
        }
    }
    drop(listener);
    refusing.abort_all();
    sweeper.abort();
    let _ = sweeper.await;
    pg_collector.abort();
    let _ = pg_collector.await;
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .is_err()
    {
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
    close(app).await
}

/// Errors of one connection (the peer gave up before it was accepted):
/// the next accept is fine.
fn is_transient_accept_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionAborted | K::ConnectionReset | K::Interrupted | K::WouldBlock
    )
}

/// Over the connection cap: answer 503 and close, within a second.
async fn refuse_connection(mut tcp: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BODY: &str = "too many open connections; retry later\n";
    let resp = format!(
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\nretry-after: 1\r\n\
         content-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        // Read what the client sent first (up to a bound), so that closing
        // does not reset the connection before it reads the answer.
        let mut buf = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_millis(100), tcp.read(&mut buf)).await;
        let _ = tcp.write_all(resp.as_bytes()).await;
        let _ = tcp.shutdown().await;
        let mut drained = 0usize;
        while drained < 64 << 10 {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}

/// Request heads (and the read buffer) per connection, at most.
const CONN_BUF_BYTES: usize = 64 << 10;

async fn serve_connection(tcp: tokio::net::TcpStream, peer: SocketAddr, app: Arc<App>) {
    app.metrics.open_connections.fetch_add(1, Ordering::Relaxed);
    let mut shutdown = app.shutdown.clone();
    let svc_app = app.clone();
    let svc = hyper::service::service_fn(move |req| http::handle(svc_app.clone(), peer, req));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .keep_alive(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(app.opts.header_timeout)
        .max_header_size(CONN_BUF_BYTES)
        .max_buf_size(CONN_BUF_BYTES);
    let conn = builder.serve_connection(TokioIo::new(tcp), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn.as_mut()).await;
        }
    }
    app.metrics.open_connections.fetch_sub(1, Ordering::Relaxed);
}

/// On a shared database, with background collection on: every interval,
/// remove the events of deleted streams' sessions that no fork reads
/// (turnstone-pg's `collect_deleted`; any number of instances may run it).
async fn pg_collect_loop(app: Arc<App>) {
    let (Some(pg), Some(gc)) = (app.streams.log.shared(), app.opts.gc.as_ref()) else {
        return;
    };
    let log = pg.log.clone();
    let mut tick = tokio::time::interval(gc.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let l = log.clone();
        match tokio::task::spawn_blocking(move || l.collect_deleted()).await {
            Ok(Ok(r)) if r.events_removed > 0 || r.snapshots_removed > 0 => eprintln!(
                "turnstone serve: collection removed {} event(s) and {} snapshot(s) of deleted streams",
                r.events_removed, r.snapshots_removed
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("turnstone serve: collection failed (tried again later): {e}"),
            Err(e) => eprintln!("turnstone serve: collection task failed: {e}"),
        }
    }
}

/// Expire streams in the background (reads and writes also check on access),
/// and retry the engine's failed batch while writes are failing.
async fn sweep_loop(app: Arc<App>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // On a shared database, the streams no instance has loaded are looked
    // for less often (a query over every mapping with an expiry).
    let mut ticks = 0u64;
    loop {
        tick.tick().await;
        ticks += 1;
        if ticks.is_multiple_of(8) && app.streams.log.is_shared() {
            let a = app.clone();
            let _ = tokio::task::spawn_blocking(move || {
                a.streams.sweep_unloaded_shared(record::now_ms())
            })
            .await;
        }
        if let (true, Some(store)) = (app.health.is_write_failing(), app.streams.log.embedded()) {
            let store = store.clone();
            // Retry the engine's kept batch, so that writes resume once
            // the disk has room again.
            let retried = tokio::task::spawn_blocking(move || store.sync()).await;
            if matches!(retried, Ok(Ok(_))) {
                app.health.write_ok();
                app.streams.settle();
            }
        }
        let a = app.clone();
        let end = tokio::task::spawn_blocking(move || a.streams.sweep(record::now_ms()))
            .await
            .ok()
            .flatten();
        if let Some(end) = end {
            if app.durable.wait(end).await.is_ok() {
                app.streams.settle();
            }
        }
    }
}

/// Drop the last references and close the store cleanly.
async fn close(app: Arc<App>) -> Result<(), String> {
    let mut app = app;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let app = loop {
        match Arc::try_unwrap(app) {
            Ok(a) => break Some(a),
            Err(a) if tokio::time::Instant::now() < deadline => {
                app = a;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(_) => break None,
        }
    };
    let Some(app) = app else {
        return Err("requests still running at shutdown; the store closes when they end".into());
    };
    let App {
        streams,
        durable,
        gc,
        ..
    } = app;
    if let Some(gc) = gc.into_inner() {
        // It holds the store; stopping waits for a collection's current
        // step.
        tokio::task::spawn_blocking(move || gc.stop())
            .await
            .map_err(|e| format!("collector stop failed: {e}"))?;
    }
    durable.stop();
    drop(durable);
    let store = match streams.log {
        log::Log::Embedded(store) => store,
        log::Log::Pg(shared) => {
            tokio::task::spawn_blocking(move || shared.log.close())
                .await
                .map_err(|e| format!("close task failed: {e}"))?;
            return Ok(());
        }
    };
    match Arc::try_unwrap(store) {
        Ok(store) => tokio::task::spawn_blocking(move || store.close())
            .await
            .map_err(|e| format!("close task failed: {e}"))?
            .map_err(|e| format!("closing the store: {e}")),
        Err(_) => Err("the store is still referenced at shutdown".into()),
    }
}

/// Serve until Ctrl-C or SIGTERM.
pub async fn serve(opts: Options) -> Result<(), String> {
    let server = start(opts).await?;
    let r = server.rebuild_report().clone();
    // One write, so that a reader of the log never sees half the address.
    let line = format!(
        "turnstone serve: listening on http://{} ({} streams, {} deleted, {} incomplete)\n",
        server.local_addr(),
        r.streams,
        r.deleted,
        r.incomplete
    );
    {
        use std::io::Write;
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
    wait_for_signal().await;
    eprintln!("turnstone serve: shutting down");
    server.shutdown().await
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Blocking entry point for the CLI: a runtime, then [`serve`].
pub fn run(opts: Options) -> Result<(), String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("turnstone-serve")
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?
        .block_on(serve(opts))
}

/// How a server connects to a shared database: idle connections enough
/// for the blocking tasks that read and fold streams at once (a request
/// that finds none idle opens one, which costs a connection handshake).
fn pg_options() -> turnstone_pg::PgOptions {
    turnstone_pg::PgOptions {
        read_pool: 32,
        ..Default::default()
    }
}
