//! The `turnstone` command line: `fleet`, `verify`, `dump`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod dump;
mod fleet;
mod kinds;
mod sink;
mod verify;

#[derive(Debug, Parser)]
#[command(
    name = "turnstone",
    version,
    about = "Tools for turnstone stores: an embedded, event-sourced storage engine for agent sessions"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Simulate an agent fleet appending to a store; print one JSON line of results.
    Fleet(fleet::FleetArgs),
    /// Check every segment and frame of a store (read-only, full scan).
    ///
    /// Exit status: 0 when clean or when the only damage is a torn tail, 1 on
    /// corruption, 2 when the store cannot be read at all.
    Verify {
        /// Store directory (or a single segment file).
        dir: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the frames of a store or of one segment file in log order (read-only).
    ///
    /// Exit status: 1 when corruption was found, 2 when nothing could be read.
    Dump {
        /// Store directory or segment file.
        path: PathBuf,
        /// Only frames of this session id.
        #[arg(long)]
        session: Option<String>,
        /// One JSON object per frame (and per problem) instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// A command failure: one sentence for the operator and an exit status.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    /// Bad arguments or a path that is not a store: exit 2.
    pub fn usage(msg: impl Into<String>) -> Self {
        Failure {
            code: 2,
            msg: msg.into(),
        }
    }
    /// I/O and other runtime errors: exit 2.
    pub fn io(msg: impl Into<String>) -> Self {
        Failure {
            code: 2,
            msg: msg.into(),
        }
    }
    pub fn context(mut self, what: String) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }
}

impl From<turnstone::Error> for Failure {
    fn from(e: turnstone::Error) -> Self {
        let code = match e {
            turnstone::Error::Corrupt { .. } => 1,
            _ => 2,
        };
        Failure {
            code,
            msg: e.to_string(),
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    match cli.cmd {
        Cmd::Fleet(args) => fleet::run(&args).map(|()| ExitCode::SUCCESS),
        Cmd::Verify { dir, json } => verify::run(&dir, json),
        Cmd::Dump {
            path,
            session,
            json,
        } => dump::run(&path, session.as_deref(), json),
    }
}

fn main() -> ExitCode {
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("turnstone: internal error (a bug, please report it): {info}");
    }));
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("turnstone: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}
