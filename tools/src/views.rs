//! `turnstone replay`, `fork`, `sessions` and `search`: the views over the
//! one log (session layer: replay, fork, query).

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};
use turnstone::session::{self as query, Catalog, Cursor, ListQuery};
use turnstone::session::{fork, replay, LogHandle, Registry, SessionEvent};
use turnstone::Store;

use crate::failure::existing_dir;
use crate::Failure;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Store directory, or a postgres:// (postgresql://) URL.
    pub dir: PathBuf,
    /// Session id.
    #[arg(long)]
    pub session: String,
    /// One JSON object per event, in the shape of `dump --json`.
    #[arg(long)]
    pub json: bool,
    /// Wait between events as long as they were apart when recorded (at most 1 s each).
    #[arg(long)]
    pub pace: bool,
    /// Keep going: print the session's new events as the process writing the
    /// store makes them durable, like `tail -f` (Ctrl-C ends it).
    #[arg(long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Store directory, or a postgres:// (postgresql://) URL.
    pub dir: PathBuf,
    /// Session to fork.
    #[arg(long)]
    pub session: String,
    /// The child holds the source's events with seq < AT (default: up to the last closed turn).
    #[arg(long)]
    pub at: Option<u64>,
    /// Id of the child (default: SOURCE.fork-RANDOM).
    #[arg(long)]
    pub child: Option<String>,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Store directory, or a postgres:// (postgresql://) URL.
    pub dir: PathBuf,
    /// One JSON object per session.
    #[arg(long)]
    pub json: bool,
    /// Only sessions with this tag (repeatable: all of them).
    #[arg(long, value_name = "TAG")]
    pub tag: Vec<String>,
    /// Only sessions whose field KEY equals VALUE (repeatable: all of them).
    #[arg(long = "where", value_name = "KEY=VALUE")]
    pub where_: Vec<String>,
    /// Only sessions whose last event was appended at or after this time (ms since the epoch).
    #[arg(long, value_name = "MS")]
    pub updated_since: Option<u64>,
    /// Only sessions with an open turn.
    #[arg(long)]
    pub open_turn: bool,
    /// Only fork children of this session.
    #[arg(long, value_name = "ID")]
    pub parent: Option<String>,
    /// Newest first (default: creation order).
    #[arg(long)]
    pub newest_first: bool,
    /// Most sessions to print (the next page's cursor goes to stderr).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Continue after this cursor (printed by a previous --limit listing).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Store directory, or a postgres:// (postgresql://) URL (PostgreSQL text search: web-search syntax).
    pub dir: PathBuf,
    /// Words to find (SQLite FTS5 syntax; anything else is searched as a phrase).
    pub query: String,
    /// Most hits to print.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Search only this session, with the events it inherits from fork
    /// ancestors (hits are reported under this session).
    #[arg(long)]
    pub session: Option<String>,
    /// One JSON object per hit: {"session","seq","snippet"}.
    #[arg(long)]
    pub json: bool,
}

fn read_only(dir: &std::path::Path) -> Result<Arc<Store>, Failure> {
    crate::store_open::read_only(dir)
}

fn no_session_on(url: &str, id: &str) -> Failure {
    Failure::usage(format!(
        "database {} has no session {id:?} (`turnstone sessions URL` lists them)",
        crate::place::redact(url)
    ))
}

fn known(store: &Store, dir: &std::path::Path, id: &str) -> Result<(), Failure> {
    if store.session_len(id).is_none() {
        return Err(Failure::usage(format!(
            "store {} has no session {id:?} (`turnstone sessions {}` lists them)",
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// The `dump --json`-shaped object of a session event.
pub fn event_json(session: &str, ev: &SessionEvent) -> Value {
    let mut o = ev.to_json();
    o["session"] = json!(session);
    o
}

fn write_line(out: &mut impl Write, line: &str) -> Result<(), Failure> {
    writeln!(out, "{line}").map_err(|e| Failure::io(format!("cannot write to stdout: {e}")))
}

pub fn run_replay(a: &ReplayArgs) -> Result<ExitCode, Failure> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut last_ts: Option<u64> = None;
    let mut print = |ev: SessionEvent| -> Result<(), Failure> {
        if a.pace {
            if let (Some(prev), Some(ts)) = (last_ts, ev.ts) {
                out.flush().ok();
                std::thread::sleep(Duration::from_millis(ts.saturating_sub(prev).min(1000)));
            }
            last_ts = ev.ts.or(last_ts);
        }
        let line = if a.json {
            event_json(&a.session, &ev).to_string()
        } else {
            let preview = crate::dump::clip(&ev.data.to_string(), 100);
            format!("{:>6}  {:<20} {preview}", ev.seq, ev.kind.name())
        };
        write_line(&mut out, &line)?;
        if a.follow {
            out.flush().ok();
        }
        Ok(())
    };
    if let Some(url) = crate::place::url_of(&a.dir) {
        crate::pg_views::replay(url, &a.session, a.follow, &mut print)?;
        out.flush().ok();
        return Ok(ExitCode::SUCCESS);
    }
    let store = read_only(&a.dir)?;
    known(&store, &a.dir, &a.session)?;
    let registry = Arc::new(Registry::new());
    let events: Box<dyn Iterator<Item = turnstone::Result<SessionEvent>>> = if a.follow {
        Box::new(turnstone::session::subscribe(
            &store, &a.session, registry, 0,
        )?)
    } else {
        Box::new(replay(&store, &a.session, registry, 0)?)
    };
    for ev in events {
        print(ev?)?;
    }
    out.flush().ok();
    Ok(ExitCode::SUCCESS)
}

pub fn run_fork(a: &ForkArgs) -> Result<ExitCode, Failure> {
    let f = if let Some(url) = crate::place::url_of(&a.dir) {
        let log = crate::place::session_log(url, true)?;
        fork(&log, &a.session, a.at, a.child.as_deref())
            .map_err(|e| crate::place::on_url(url, e))?
    } else {
        existing_dir(&a.dir)?;
        let store = Store::open(&a.dir)?;
        known(&store, &a.dir, &a.session)?;
        let f = fork(&store, &a.session, a.at, a.child.as_deref())?;
        store.sync()?;
        store.close()?;
        f
    };
    eprintln!(
        "forked {:?} at seq {} (the child holds seqs 0..{})",
        a.session, f.upto, f.upto
    );
    println!("{}", f.child);
    Ok(ExitCode::SUCCESS)
}

pub fn run_sessions(a: &SessionsArgs) -> Result<ExitCode, Failure> {
    let mut q = ListQuery {
        tags: a.tag.clone(),
        updated_since_ms: a.updated_since,
        open_turn: a.open_turn.then_some(true),
        parent: a.parent.clone(),
        newest_first: a.newest_first,
        limit: a.limit.unwrap_or(usize::MAX),
        ..Default::default()
    };
    for w in &a.where_ {
        q.fields.push(crate::meta::key_value(w)?);
    }
    if let Some(c) = &a.after {
        q.after = Some(
            c.parse::<Cursor>()
                .map_err(|e| Failure::usage(e.to_string()))?,
        );
    }
    if a.limit == Some(0) {
        return Err(Failure::usage("--limit must be at least 1"));
    }
    let catalog = match crate::place::url_of(&a.dir) {
        // The session layer's catalog on the database's log.
        Some(url) => Catalog::build(&crate::place::session_log(url, false)?)
            .map_err(|e| crate::place::on_url(url, e))?,
        None => Catalog::build(&*read_only(&a.dir)?)?,
    };
    let page = catalog.list(&q);
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for s in &page.sessions {
        let line = if a.json {
            serde_json::to_string(s).expect("summary serializes")
        } else {
            format!(
                "{:<32} {:>8} events  {}{}{}{}",
                s.id,
                s.events,
                if s.open_turn { "turn open" } else { "idle" },
                s.parent
                    .as_ref()
                    .map(|(p, n)| format!("  fork of {p} at {n}"))
                    .unwrap_or_default(),
                s.metadata
                    .title
                    .as_ref()
                    .map(|t| format!("  {t:?}"))
                    .unwrap_or_default(),
                if s.metadata.tags.is_empty() {
                    String::new()
                } else {
                    format!(
                        "  [{}]",
                        s.metadata
                            .tags
                            .iter()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            )
        };
        write_line(&mut out, &line)?;
    }
    out.flush().ok();
    if let Some(next) = page.next {
        eprintln!("next: --after {next}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_search(a: &SearchArgs) -> Result<ExitCode, Failure> {
    // The session layer's search: the store's index, or the database's
    // own text search (PostgreSQL, web-search syntax).
    let url = crate::place::url_of(&a.dir);
    let log: LogHandle = match url {
        Some(url) => {
            let log = crate::place::session_log(url, false)?;
            if let Some(id) = &a.session {
                match log.as_log().durable_len(id) {
                    Ok(Some(_)) => {}
                    Ok(None) => return Err(no_session_on(url, id)),
                    Err(e) if e.is_not_found() => return Err(no_session_on(url, id)),
                    Err(e) => return Err(crate::place::on_url(url, e)),
                }
            }
            log
        }
        None => {
            let store = read_only(&a.dir)?;
            if let Some(id) = &a.session {
                known(&store, &a.dir, id)?;
            }
            LogHandle::from(store)
        }
    };
    let registry = Registry::new();
    let hits = match &a.session {
        Some(id) => query::search_session(&log, &registry, id, &a.query, a.limit),
        None => query::search(&log, &registry, &a.query, a.limit),
    }
    .map_err(|e| match url {
        Some(url) => crate::place::on_url(url, e),
        None => Failure::from(e),
    })?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for h in &hits {
        let line = if a.json {
            serde_json::to_string(h).expect("hit serializes")
        } else {
            format!("{} #{}  {}", h.session, h.seq, h.snippet.replace('\n', " "))
        };
        write_line(&mut out, &line)?;
    }
    out.flush().ok();
    Ok(ExitCode::SUCCESS)
}
