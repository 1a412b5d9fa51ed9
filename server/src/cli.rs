//! The `turnstone serve` command line (feature `cli`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `turnstone serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Store directory (created if missing).
    pub dir: PathBuf,
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = crate::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Require `Authorization: Bearer <TOKEN>` on every request.
    #[arg(long, env = "TURNSTONE_SERVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Largest request body in bytes (413 above it).
    #[arg(long, default_value_t = 16 << 20)]
    pub max_body_bytes: usize,
    /// How long a long-poll read waits for data before answering 204.
    #[arg(long, default_value_t = 20_000)]
    pub long_poll_timeout_ms: u64,
    /// SSE connections are closed after this long; clients reconnect.
    #[arg(long, default_value_t = 60_000)]
    pub sse_max_ms: u64,
}

impl ServeArgs {
    /// Server options from the arguments.
    pub fn options(&self) -> crate::Options {
        let mut o = crate::Options::new(&self.dir);
        o.listen = self.listen;
        o.token = self.token.clone().filter(|t| !t.is_empty());
        o.max_body_bytes = self.max_body_bytes;
        o.long_poll_timeout = Duration::from_millis(self.long_poll_timeout_ms.max(1));
        o.sse_max_duration = Duration::from_millis(self.sse_max_ms.max(1));
        o
    }
}

/// Serve until Ctrl-C or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<(), String> {
    crate::run(args.options())
}
