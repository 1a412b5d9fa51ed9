//! `turnstone meta` and `turnstone delete`: session metadata and deletion
//! (session layer: `session/meta`, `session/delete`; SESSIONS.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use turnstone::session::{MetaUpdate, Registry, Session, SessionMetadata};

use crate::failure::existing_dir;
use crate::Failure;

#[derive(Debug, Args)]
pub struct MetaArgs {
    /// Store directory, or a postgres:// (postgresql://) URL.
    pub dir: PathBuf,
    /// Session id.
    #[arg(long)]
    pub session: String,
    /// Set a field: KEY=VALUE (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Remove a field (repeatable).
    #[arg(long, value_name = "KEY")]
    pub unset: Vec<String>,
    /// Add a tag (repeatable).
    #[arg(long, value_name = "TAG")]
    pub tag: Vec<String>,
    /// Remove a tag (repeatable).
    #[arg(long, value_name = "TAG")]
    pub untag: Vec<String>,
    /// Set the title ("" clears it).
    #[arg(long)]
    pub title: Option<String>,
    /// Print the metadata as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Store directory, or a postgres:// (postgresql://) URL.
    pub dir: PathBuf,
    /// Session id.
    #[arg(long)]
    pub session: String,
}

/// `KEY=VALUE` split at the first `=`.
pub fn key_value(s: &str) -> Result<(String, String), Failure> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(Failure::usage(format!(
            "{s:?} is not KEY=VALUE (a non-empty key, then '=')"
        ))),
    }
}

fn print(id: &str, m: &SessionMetadata, json: bool) {
    if json {
        let mut v = serde_json::to_value(m).expect("metadata serializes");
        v["id"] = id.into();
        println!("{v}");
        return;
    }
    println!("session  {id}");
    println!("title    {}", m.title.as_deref().unwrap_or("-"));
    println!(
        "tags     {}",
        if m.tags.is_empty() {
            "-".to_string()
        } else {
            m.tags.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    );
    for (k, v) in &m.fields {
        println!("{k} = {v}");
    }
}

pub fn run_meta(a: &MetaArgs) -> Result<ExitCode, Failure> {
    let mut update = MetaUpdate {
        title: a.title.clone(),
        add_tags: a.tag.clone(),
        remove_tags: a.untag.clone(),
        fields: Default::default(),
    };
    for s in &a.set {
        let (k, v) = key_value(s)?;
        update.fields.insert(k, Some(v));
    }
    for k in &a.unset {
        update.fields.insert(k.clone(), None);
    }
    if let Some(url) = crate::place::url_of(&a.dir) {
        let fail = |e| crate::place::on_url(url, e);
        let read_only = update == MetaUpdate::default();
        if !read_only {
            update.check().map_err(Failure::usage)?;
        }
        let log = crate::place::session_log(url, !read_only)?;
        let registry = Arc::new(Registry::new());
        let meta = if read_only {
            Session::open_read_only(log, &a.session, registry)
                .map_err(fail)?
                .metadata()
                .clone()
        } else {
            // Leased for the update, released when the handle drops.
            let mut s = Session::open(log, &a.session, registry).map_err(fail)?;
            s.update_metadata(update).map_err(fail)?;
            s.flush().map_err(fail)?;
            s.metadata().clone()
        };
        print(&a.session, &meta, a.json);
        return Ok(ExitCode::SUCCESS);
    }
    if update == MetaUpdate::default() {
        // Read only: print.
        let store = crate::store_open::read_only(&a.dir)?;
        let s = Session::open_read_only(store, &a.session, Arc::new(Registry::new()))?;
        print(&a.session, s.metadata(), a.json);
        return Ok(ExitCode::SUCCESS);
    }
    update.check().map_err(Failure::usage)?;
    existing_dir(&a.dir)?;
    let log = crate::store_open::shared(&a.dir)?;
    let meta = {
        let mut s = Session::open(&log, &a.session, Arc::new(Registry::new()))?;
        s.update_metadata(update)?;
        s.flush()?;
        s.metadata().clone()
    };
    crate::store_open::close_shared(log, &a.dir)?;
    print(&a.session, &meta, a.json);
    Ok(ExitCode::SUCCESS)
}

pub fn run_delete(a: &DeleteArgs) -> Result<ExitCode, Failure> {
    if let Some(url) = crate::place::url_of(&a.dir) {
        let log = crate::place::session_log(url, true)?;
        let seq = turnstone::session::delete(&log, &a.session)
            .map_err(|e| crate::place::on_url(url, e))?;
        eprintln!(
            "deleted {:?} (tombstone at seq {seq}); its forks keep working",
            a.session
        );
        return Ok(ExitCode::SUCCESS);
    }
    existing_dir(&a.dir)?;
    let log = crate::store_open::shared(&a.dir)?;
    let seq = turnstone::session::delete(&log, &a.session)?;
    crate::store_open::close_shared(log, &a.dir)?;
    eprintln!(
        "deleted {:?} (tombstone at seq {seq}); its forks keep working; `turnstone gc` reclaims its bytes",
        a.session
    );
    Ok(ExitCode::SUCCESS)
}
