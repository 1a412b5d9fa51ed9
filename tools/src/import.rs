//! `turnstone import`: append a JSONL file (as written by `export`) as a new
//! session. Every line is validated before anything is written; the events
//! then go in as the session's seed history, all or nothing: one atomic
//! batch when they fit one, else through a staging session the new session
//! is defined as a fork of (`Session::create_with_history`).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use turnstone::frame::{PAYLOAD_BYTES_MAX, SESSION_NAME_BYTES_MAX};
use turnstone::session::internals::{self as event, Envelope, KIND_CODE_PLUGIN};
use turnstone::session::EventKind;
use turnstone::session::{CoreKind, HistoryEvent, Host, Registry, Surface};

use crate::export::Line;
use crate::failure::dir_or_new;
use crate::Failure;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Store directory (it must exist; an empty directory becomes a new store).
    pub dir: PathBuf,
    /// JSONL file, one event per line (the format `turnstone export` writes).
    pub file: PathBuf,
    /// Id of the new session (default: the file name without its extension).
    #[arg(long)]
    pub session: Option<String>,
}

/// What a valid import file holds: the seed events and the plugin kinds
/// used (with their `ignorable` flag).
type Validated = (Vec<HistoryEvent>, BTreeMap<String, bool>);

/// Validate every line; return the seed events and the plugin kinds used.
fn validate(file: &std::path::Path, bar: &indicatif::ProgressBar) -> Result<Validated, Failure> {
    let f = std::fs::File::open(file)
        .map_err(|e| Failure::usage(format!("cannot open {}: {e}", file.display())))?;
    let reader = std::io::BufReader::new(f);
    let mut seed = Vec::new();
    let mut plugins: BTreeMap<String, bool> = BTreeMap::new();
    let mut surface = Surface::default();
    let mut registry = Registry::new();
    let mut lines = reader.lines().enumerate().peekable();
    while let Some((i, text)) = lines.next() {
        let n = i + 1;
        let bad = |why: String| {
            Failure::usage(format!(
                "{} line {n}: {why}; nothing was imported",
                file.display()
            ))
        };
        let text = text.map_err(|e| bad(format!("cannot read: {e}")))?;
        bar.inc(text.len() as u64 + 1);
        if text.trim().is_empty() {
            if lines.peek().is_none() {
                break;
            }
            return Err(bad("empty line".into()));
        }
        let line: Line = serde_json::from_str(&text).map_err(|e| bad(format!("{e}")))?;
        let seq = seed.len() as u64;
        if line.seq != seq {
            return Err(bad(format!(
                "seq {} where {seq} was expected (seqs must be 0, 1, 2, ... with no gap)",
                line.seq
            )));
        }
        if line.encoding.is_some() {
            return Err(bad(
                "an event kept as raw bytes (\"encoding\") cannot be imported".into(),
            ));
        }
        let (kind, code, flags) = match CoreKind::from_name(&line.kind) {
            Some(k) => {
                if line.ignorable.is_some() {
                    return Err(bad(format!(
                        "\"ignorable\" is for plugin events, not {}",
                        line.kind
                    )));
                }
                (EventKind::Core(k), k.code(), 0u16)
            }
            None if line.kind.starts_with("unknown/") || line.kind == crate::kinds::DEFINE => {
                return Err(bad(format!("kind {:?} cannot be imported", line.kind)));
            }
            None => {
                // A plugin event says whether it is ignorable (export always
                // writes it): a misspelt core kind is not taken for a plugin.
                let Some(ign) = line.ignorable else {
                    return Err(bad(format!(
                        "unknown kind {:?}: not a core kind, and a plugin event needs \"ignorable\": true or false",
                        line.kind
                    )));
                };
                match plugins.get(&line.kind) {
                    Some(prev) if *prev != ign => {
                        return Err(bad(format!(
                            "plugin kind {:?} is ignorable on one line and not on another",
                            line.kind
                        )))
                    }
                    Some(_) => {}
                    None => {
                        registry
                            .register(&line.kind, ign)
                            .map_err(|e| bad(format!("plugin kind: {e}")))?;
                        plugins.insert(line.kind.clone(), ign);
                    }
                }
                let flags = if ign {
                    turnstone::frame::FLAG_IGNORABLE
                } else {
                    0
                };
                (
                    EventKind::Plugin(line.kind.clone()),
                    KIND_CODE_PLUGIN,
                    flags,
                )
            }
        };
        let env = Envelope {
            v: turnstone::session::SESSION_FORMAT_VERSION,
            kind: match &kind {
                EventKind::Plugin(n) => Some(n.clone()),
                EventKind::Core(_) => None,
            },
            surface: line.surface,
            ts: line.ts,
            data: line.data.clone(),
        };
        let payload = serde_json::to_vec(&env).map_err(|e| bad(e.to_string()))?;
        if payload.len() > PAYLOAD_BYTES_MAX {
            return Err(bad(format!(
                "event of {} bytes exceeds the maximum of {PAYLOAD_BYTES_MAX}",
                payload.len()
            )));
        }
        // The engine's own decoding: kind, envelope, the kind's data schema,
        // surface op present exactly for surface kinds.
        let decoded = event::decode(seq, code, flags, &payload, &registry).map_err(|e| {
            bad(match e {
                turnstone::session::DecodeError::Malformed(m) => m,
                turnstone::session::DecodeError::UnknownKind(k) => format!("unknown kind {k}"),
                turnstone::session::DecodeError::Version(v) => {
                    format!("session format version {v}")
                }
            })
        })?;
        if let Some(op) = decoded.surface {
            surface
                .apply(seq, op)
                .map_err(|e| bad(format!("surface op: {e}")))?;
        }
        seed.push(HistoryEvent {
            kind,
            data: line.data,
            surface: line.surface,
            ts: line.ts,
        });
    }
    Ok((seed, plugins))
}

pub fn run(args: &ImportArgs) -> Result<ExitCode, Failure> {
    dir_or_new(&args.dir)?;
    let id = match &args.session {
        Some(s) => s.clone(),
        None => args
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                Failure::usage("cannot take a session id from the file name; pass --session ID")
            })?,
    };
    if id.is_empty() || id.len() > SESSION_NAME_BYTES_MAX {
        return Err(Failure::usage(format!(
            "session id must be 1 to {SESSION_NAME_BYTES_MAX} bytes"
        )));
    }
    let size = std::fs::metadata(&args.file).map(|m| m.len()).unwrap_or(0);
    let bar = crate::progress::bar(size, "validate", true, true);
    let validated = validate(&args.file, &bar);
    bar.finish_and_clear();
    let (seed, plugins) = validated?;
    let log = crate::store_open::shared(&args.dir)?;
    if log.as_log().appended_len(&id)?.is_some() {
        return Err(Failure::usage(format!(
            "store {} already has a session {id:?}; choose another id with --session; nothing was imported",
            args.dir.display()
        )));
    }
    let mut registry = Registry::new();
    for (k, ign) in &plugins {
        registry.register(k, *ign).map_err(Failure::usage)?;
    }
    let host = Host::new(&log, Arc::new(registry));
    let session = host.create_with_history(&id, &seed).map_err(|e| {
        Failure::from(e).context(format!("importing {} as {id:?}", args.file.display()))
    })?;
    let end = session.lock().len();
    let marked = seed
        .iter()
        .any(|e| e.kind == EventKind::Core(CoreKind::SessionEndSeed));
    session
        .lock()
        .flush()
        .map_err(|e| Failure::from(e).context("making the import durable".into()))?;
    drop(session);
    drop(host);
    crate::store_open::close_shared(log, &args.dir)?;
    let tail = if marked {
        "its session/end-seed kept, none added".to_string()
    } else {
        format!("then session/end-seed at seq {}", end - 1)
    };
    println!(
        "imported {} events from {} into {} as session {id:?} (seqs 0..{}, {tail})",
        seed.len(),
        args.file.display(),
        args.dir.display(),
        seed.len(),
    );
    Ok(ExitCode::SUCCESS)
}
