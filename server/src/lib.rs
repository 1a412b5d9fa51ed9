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
mod delete;
pub mod durable;
pub mod headers;
mod http;
pub mod offset;
pub mod read;
pub mod rebuild;
pub mod record;
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
    /// How the store is opened.
    pub store: turnstone::Options,
}

impl Options {
    pub fn new(dir: impl Into<PathBuf>) -> Options {
        Options {
            dir: dir.into(),
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            token: None,
            max_body_bytes: 16 << 20,
            long_poll_timeout: Duration::from_secs(20),
            sse_max_duration: Duration::from_secs(60),
            read_chunk_bytes: 1 << 20,
            store: turnstone::Options::default(),
        }
    }
}

/// The largest `max_body_bytes` accepted: one append is one engine batch.
pub const MAX_BODY_LIMIT: usize = 24 << 20;

/// Shared by every request.
pub(crate) struct App {
    pub streams: streams::Streams,
    pub durable: durable::Durability,
    pub opts: Options,
    pub shutdown: watch::Receiver<bool>,
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
    let (dir, store_opts) = (opts.dir.clone(), opts.store.clone());
    let (store, reg, report) = tokio::task::spawn_blocking(move || {
        let store = Store::open_with(&dir, store_opts)
            .map_err(|e| format!("cannot open store {}: {e}", dir.display()))?;
        let (reg, report) = rebuild::rebuild(&store, record::now_ms())?;
        Ok::<_, String>((Arc::new(store), reg, report))
    })
    .await
    .map_err(|e| format!("open task failed: {e}"))??;
    let durable = durable::Durability::start(store.clone())
        .map_err(|e| format!("cannot start the durability thread: {e}"))?;
    let (stop, shutdown) = watch::channel(false);
    let app = Arc::new(App {
        streams: streams::Streams::new(store.clone(), reg),
        durable,
        opts,
        shutdown,
    });
    drop(store);
    let task = tokio::spawn(accept_loop(listener, app));
    Ok(Server {
        addr,
        report,
        stop,
        task,
    })
}

async fn accept_loop(listener: TcpListener, app: Arc<App>) -> Result<(), String> {
    let mut conns = JoinSet::new();
    let mut shutdown = app.shutdown.clone();
    let sweeper = tokio::spawn(sweep_loop(app.clone()));
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                let app = app.clone();
                conns.spawn(serve_connection(tcp, app));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    sweeper.abort();
    let _ = sweeper.await;
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

async fn serve_connection(tcp: tokio::net::TcpStream, app: Arc<App>) {
    let mut shutdown = app.shutdown.clone();
    let svc_app = app.clone();
    let svc = hyper::service::service_fn(move |req| http::handle(svc_app.clone(), req));
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tcp), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn.as_mut()).await;
        }
    }
}

/// Expire streams in the background (reads and writes also check on access).
async fn sweep_loop(app: Arc<App>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
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
        streams, durable, ..
    } = app;
    durable.stop();
    drop(durable);
    let store = streams.store.clone();
    drop(streams);
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
