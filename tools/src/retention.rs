//! `turnstone retention`: show or change a store's retention policy
//! (`retention.json`, FORMAT.md §18). The file is replaced atomically and
//! needs no lock: readers and collections load it each time, so a change
//! takes effect at once (an expired session vanishes from loads and lists;
//! the next collection frees its bytes).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use turnstone::session::retention::{Policy, SessionPolicy};
use turnstone::vfs::OsVfs;

use crate::failure::existing_dir;
use crate::gc::{parse_bytes, parse_duration_ms};
use crate::Failure;

#[derive(Debug, Args)]
pub struct RetentionArgs {
    /// Store directory.
    pub dir: PathBuf,
    /// Expire a session this long after its last event (e.g. 30d, 12h).
    #[arg(long, value_parser = parse_duration_ms)]
    pub expire_after: Option<u64>,
    /// Expire a session this long after its first own event (e.g. 90d).
    #[arg(long, value_parser = parse_duration_ms)]
    pub max_age: Option<u64>,
    /// Keep at most this many bytes of live frames (e.g. 500G, 64M):
    /// collections evict the sessions whose last event is oldest first.
    #[arg(long, value_parser = parse_bytes, conflicts_with = "session")]
    pub max_bytes: Option<u64>,
    /// Apply --expire-after / --max-age / --keep / --clear to this session only.
    #[arg(long)]
    pub session: Option<String>,
    /// With --session: the session never expires and is never evicted.
    #[arg(long, requires = "session")]
    pub keep: bool,
    /// Remove the rules (the store's, or with --session the session's) first.
    #[arg(long)]
    pub clear: bool,
    /// Print the policy as JSON (the default output is JSON too; this is
    /// accepted for symmetry with other commands).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &RetentionArgs) -> Result<ExitCode, Failure> {
    existing_dir(&a.dir)?;
    let vfs = OsVfs;
    let mut p = Policy::load(&vfs, &a.dir)?;
    let changes = a.expire_after.is_some()
        || a.max_age.is_some()
        || a.max_bytes.is_some()
        || a.keep
        || a.clear;
    if changes {
        match &a.session {
            Some(id) => {
                let mut sp = if a.clear {
                    SessionPolicy::default()
                } else {
                    p.sessions.get(id).cloned().unwrap_or_default()
                };
                if a.expire_after.is_some() {
                    sp.expire_after_ms = a.expire_after;
                }
                if a.max_age.is_some() {
                    sp.max_age_ms = a.max_age;
                }
                if a.keep {
                    sp.keep = true;
                }
                if sp == SessionPolicy::default() {
                    p.sessions.remove(id);
                } else {
                    p.sessions.insert(id.clone(), sp);
                }
            }
            None => {
                if a.clear {
                    p.expire_after_ms = None;
                    p.max_age_ms = None;
                    p.max_bytes = None;
                }
                if a.expire_after.is_some() {
                    p.expire_after_ms = a.expire_after;
                }
                if a.max_age.is_some() {
                    p.max_age_ms = a.max_age;
                }
                if a.max_bytes.is_some() {
                    p.max_bytes = a.max_bytes;
                }
            }
        }
        p.save(&vfs, &a.dir)?;
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&p).map_err(|e| Failure::io(e.to_string()))?
    );
    Ok(ExitCode::SUCCESS)
}
