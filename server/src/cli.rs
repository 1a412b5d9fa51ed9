//! The `turnstone serve` command line (feature `cli`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `turnstone serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Store directory (created if missing), or a PostgreSQL URL
    /// (`postgres://user@host:port/db`) that several servers may share.
    #[arg(required_unless_present = "store", conflicts_with = "store")]
    pub dir: Option<PathBuf>,
    /// The same as the positional argument: a store directory or a
    /// PostgreSQL URL.
    #[arg(long, value_name = "DIR_OR_URL")]
    pub store: Option<PathBuf>,
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = crate::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Require `Authorization: Bearer <TOKEN>` on every request.
    #[arg(long, env = "TURNSTONE_SERVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Largest request body in bytes (413 above it); the default is the
    /// largest JSON message (16 MiB - 16 bytes).
    #[arg(long, default_value_t = crate::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// How long a long-poll read waits for data before answering 204.
    #[arg(long, default_value_t = 20_000)]
    pub long_poll_timeout_ms: u64,
    /// SSE connections are closed after this long; clients reconnect.
    #[arg(long, default_value_t = 60_000)]
    pub sse_max_ms: u64,
    /// Allow a non-loopback --listen address without --token.
    #[arg(long)]
    pub insecure: bool,
    /// Close a connection that sends no complete request header for this
    /// long (new, or idle between requests).
    #[arg(long, default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Answer 408 (and close) when a request body takes longer than this.
    #[arg(long, default_value_t = 60_000)]
    pub body_timeout_ms: u64,
    /// Open connections at most; more are answered 503 and closed.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Browser origins allowed (CORS): `*`, or a comma-separated list.
    /// Default: none (requests with an Origin header get 403).
    #[arg(long)]
    pub cors_origin: Option<String>,
    /// Log one line per request to stderr.
    #[arg(long)]
    pub access_log: bool,
    /// Collect deleted and expired streams' bytes in the background every
    /// this many milliseconds (0: never; `turnstone gc` on the stopped
    /// server's directory still works). On a database: their events that
    /// no fork reads (`turnstone gc URL` does the same once).
    #[arg(long, default_value_t = 30_000)]
    pub gc_interval_ms: u64,
    /// The background collection's I/O bound, MiB per second.
    #[arg(long, default_value_t = 64)]
    pub gc_rate_mib: u64,
    /// Keep up to this many segment files the background collection frees
    /// and make new segments from them (`Options::recycle_segments`): fewer
    /// device bytes and faster fdatasyncs, for up to this many segment files
    /// of disk beyond the live data. 0: off.
    #[arg(long, default_value_t = 0)]
    pub recycle_segments: usize,
    /// Do not write the next segment's file of zeros ahead of need
    /// (`Options::prepare_segments`, on by default: a background thread
    /// does it while batches are small, for one segment file of disk
    /// beyond the log).
    #[arg(long)]
    pub no_prepare_segments: bool,
    /// Write the batches of recycled and prepared segments around the page
    /// cache, with direct I/O (`Options::direct_writes`): fewer device bytes
    /// and no copy into the page cache, but reads of what was just written
    /// (a stream read right after its append) go to the device.
    #[arg(long)]
    pub direct_writes: bool,
}

impl ServeArgs {
    /// Server options from the arguments.
    pub fn options(&self) -> crate::Options {
        let dir = self
            .dir
            .clone()
            .or_else(|| self.store.clone())
            .unwrap_or_default();
        let mut o = crate::Options::new(&dir);
        if let Some(url) = dir.to_str().filter(|d| turnstone_pg::is_url(d)) {
            o.store_url = Some(url.to_string());
        }
        o.listen = self.listen;
        // An empty token is passed on, and refused at start (it would
        // otherwise silently disable auth).
        o.token = self.token.clone();
        o.max_body_bytes = self.max_body_bytes;
        o.long_poll_timeout = Duration::from_millis(self.long_poll_timeout_ms.max(1));
        o.sse_max_duration = Duration::from_millis(self.sse_max_ms.max(1));
        o.insecure = self.insecure;
        o.header_timeout = Duration::from_millis(self.header_timeout_ms.max(1));
        o.body_timeout = Duration::from_millis(self.body_timeout_ms.max(1));
        o.max_connections = self.max_connections;
        o.cors_origin = self.cors_origin.clone();
        o.access_log = self.access_log;
        o.store.recycle_segments = self.recycle_segments;
        o.store.prepare_segments = !self.no_prepare_segments;
        o.store.direct_writes = self.direct_writes;
        o.gc = (self.gc_interval_ms > 0).then(|| turnstone::session::gc::BackgroundOptions {
            interval: Duration::from_millis(self.gc_interval_ms),
            collect: turnstone::gc::CollectOptions {
                rate_bytes_per_sec: Some(self.gc_rate_mib.max(1) << 20),
                ..Default::default()
            },
            ..Default::default()
        });
        o
    }
}

/// Serve until Ctrl-C or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<(), String> {
    crate::run(args.options())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: super::ServeArgs,
    }

    #[test]
    fn recycle_segments_reaches_the_store_options() {
        let cli = Cli::parse_from(["serve", "/tmp/x", "--recycle-segments", "6"]);
        assert_eq!(cli.serve.options().store.recycle_segments, 6);
        let cli = Cli::parse_from(["serve", "/tmp/x"]);
        assert_eq!(cli.serve.options().store.recycle_segments, 0);
    }

    #[test]
    fn no_prepare_segments_reaches_the_store_options() {
        let cli = Cli::parse_from(["serve", "/tmp/x", "--no-prepare-segments"]);
        assert!(!cli.serve.options().store.prepare_segments);
        let cli = Cli::parse_from(["serve", "/tmp/x"]);
        assert!(cli.serve.options().store.prepare_segments);
    }

    #[test]
    fn direct_writes_reaches_the_store_options() {
        let cli = Cli::parse_from(["serve", "/tmp/x", "--direct-writes"]);
        assert!(cli.serve.options().store.direct_writes);
        let cli = Cli::parse_from(["serve", "/tmp/x"]);
        assert!(!cli.serve.options().store.direct_writes);
    }
}
