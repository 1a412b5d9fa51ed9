//! Where a command reads or writes: a store directory or a PostgreSQL
//! connection URL (`postgres://…` or `postgresql://…`, issue 18).

use std::path::PathBuf;

pub use turnstone_pg::{is_url, redact};
use turnstone_pg::{PgError, PgLog, PgOptions};

use crate::Failure;

/// A store directory or a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Dir(PathBuf),
    Url(String),
}

impl Place {
    pub fn parse(s: &str) -> Place {
        if is_url(s) {
            Place::Url(s.to_string())
        } else {
            Place::Dir(PathBuf::from(s))
        }
    }

    /// For messages: the path as given, a URL without its password.
    pub fn show(&self) -> String {
        match self {
            Place::Dir(d) => d.display().to_string(),
            Place::Url(u) => redact(u),
        }
    }
}

/// The URL a path argument holds, if it is one.
pub fn url_of(p: &std::path::Path) -> Option<&str> {
    p.to_str().filter(|s| is_url(s))
}

/// The sentence for a PostgreSQL error, naming the database.
pub fn pg_failure(url: &str, e: PgError) -> Failure {
    Failure::io(format!("{}: {e}", redact(url)))
}

/// Connect for reading (no lease renewer, one lane: a reader commits nothing).
pub fn connect_reader(url: &str) -> Result<PgLog, Failure> {
    PgLog::connect(
        url,
        PgOptions {
            lanes: 1,
            renew_leases: false,
            ..PgOptions::default()
        },
    )
    .map_err(|e| pg_failure(url, e))
}

/// The session layer's log on a database (issue 18): a reader's
/// connection (`writer` false) or a writer's, whose leases are held as
/// `turnstone-cli:<pid>@<host>` and released when the command ends (a
/// command killed midway leaves its leases to expire).
pub fn session_log(url: &str, writer: bool) -> Result<turnstone::session::LogHandle, Failure> {
    let log = if writer {
        PgLog::connect(
            url,
            PgOptions {
                lanes: 1,
                ..PgOptions::default()
            },
        )
        .map_err(|e| pg_failure(url, e))?
    } else {
        connect_reader(url)?
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let owner = format!("turnstone-cli:{}@{host}", std::process::id());
    Ok(turnstone::session::LogHandle::from(std::sync::Arc::new(
        turnstone_pg::PgEventLog::new(log, &owner),
    )))
}

/// A session-layer error on a database, naming it.
pub fn on_url(url: &str, e: turnstone::Error) -> Failure {
    let f = Failure::from(e);
    Failure {
        msg: format!("{}: {}", redact(url), f.msg),
        ..f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_a_place_of_its_own() {
        assert_eq!(Place::parse("dir"), Place::Dir(PathBuf::from("dir")));
        assert_eq!(
            Place::parse("postgres://u@h/db"),
            Place::Url("postgres://u@h/db".into())
        );
    }
}
