//! `turnstone export`: one session as JSONL, one event per line, read-only.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use base64::Engine as _;
use clap::Args;
use serde_json::Value;
use turnstone::session::{
    internals::{Envelope, KIND_CODE_PLUGIN},
    SESSION_FORMAT_VERSION,
};
use turnstone::session::{CoreKind, SurfaceOp};

use crate::Failure;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Store directory, or a postgres:// (postgresql://) URL.
    pub dir: PathBuf,
    /// Session id.
    #[arg(long)]
    pub session: String,
    /// Salvage a damaged store: read every frame whose own checksum holds,
    /// past any damage, as far as the session's seqs stay dense; what was
    /// dropped is reported on standard error. Changes no byte.
    #[arg(long)]
    pub salvage: bool,
}

/// One exported event (and one line of an import file).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Line {
    pub seq: u64,
    pub kind: String,
    pub data: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<SurfaceOp>,
    /// Plugin (and unknown) events only: whether readers may skip it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignorable: Option<bool>,
    /// Append time, ms since the Unix epoch (informational; an import
    /// keeps it, and stamps its own time only on a line without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<u64>,
    /// `"base64"` when `data` holds an undecodable payload as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
}

fn line_of(session: &str, e: &turnstone::Event) -> Result<Line, Failure> {
    let env = serde_json::from_slice::<Envelope>(&e.payload);
    let bad = |why: String| {
        Failure::io(format!(
            "session {session:?}: event at seq {} cannot be exported: {why}",
            e.seq.0
        ))
    };
    let known = e.kind == KIND_CODE_PLUGIN || CoreKind::from_code(e.kind).is_some();
    match env {
        Ok(env) if env.v == SESSION_FORMAT_VERSION && known => {
            let (kind, ignorable) = if e.kind == KIND_CODE_PLUGIN {
                let k = env
                    .kind
                    .ok_or_else(|| bad("plugin event without a kind name".into()))?;
                (k, Some(e.ignorable()))
            } else {
                let k = CoreKind::from_code(e.kind).map(|k| k.name().to_string());
                (k.unwrap_or_default(), None)
            };
            Ok(Line {
                seq: e.seq.0,
                kind,
                data: env.data,
                surface: env.surface,
                ignorable,
                ts: env.ts,
                encoding: None,
            })
        }
        Ok(env) if env.v != SESSION_FORMAT_VERSION => Err(bad(format!(
            "session format version {}, this build reads {SESSION_FORMAT_VERSION}",
            env.v
        ))),
        // Kept as is when readers may skip it (FORMAT.md §10).
        _ if e.ignorable() => Ok(Line {
            seq: e.seq.0,
            kind: format!("unknown/{}", e.kind),
            data: Value::String(base64::engine::general_purpose::STANDARD.encode(&e.payload)),
            surface: None,
            ignorable: Some(true),
            ts: None,
            encoding: Some("base64".into()),
        }),
        Ok(_) => Err(bad(format!("unknown kind code {}", e.kind))),
        Err(err) => Err(bad(format!("payload is not a session envelope: {err}"))),
    }
}

pub fn run(args: &ExportArgs) -> Result<ExitCode, Failure> {
    if let Some(url) = crate::place::url_of(&args.dir) {
        if args.salvage {
            return Err(Failure::usage(
                "--salvage reads a damaged store directory; a database has no segments to salvage",
            ));
        }
        let (log, len) = crate::pg_views::open_session(url, &args.session)?;
        let out = io::stdout();
        let mut out = BufWriter::new(out.lock());
        crate::pg_views::for_each_event(&log, url, &args.session, len, |e| {
            let line = line_of(&args.session, &e)?;
            let text = serde_json::to_string(&line)
                .map_err(|e| Failure::io(format!("cannot encode an event: {e}")))?;
            writeln!(out, "{text}")
                .map_err(|e| Failure::io(format!("cannot write to standard output: {e}")))
        })?;
        log.close();
        out.flush()
            .map_err(|e| Failure::io(format!("cannot write to standard output: {e}")))?;
        return Ok(ExitCode::SUCCESS);
    }
    let store = if args.salvage {
        crate::store_open::salvage(&args.dir)?
    } else {
        crate::store_open::read_only(&args.dir)?
    };
    let Some(len) = store.session_len(&args.session) else {
        return Err(Failure::usage(format!(
            "store {} has no session {:?}",
            args.dir.display(),
            args.session
        )));
    };
    // A deleted session is not found (dump still shows its frames).
    turnstone::session::internals::check_not_deleted(&store, &args.session)?;
    let out = io::stdout();
    let mut out = BufWriter::new(out.lock());
    const CHUNK: u64 = 4096;
    let mut at = 0;
    while at < len {
        let events = store
            .read_range(&args.session, at..(at + CHUNK).min(len))
            .map_err(Failure::from)?;
        for e in events {
            // Blob references resolved: the line holds the blocks.
            let e = turnstone::session::internals::resolve_event(store.blobs(), e)
                .map_err(Failure::from)?;
            let line = line_of(&args.session, &e)?;
            let text = serde_json::to_string(&line)
                .map_err(|e| Failure::io(format!("cannot encode an event: {e}")))?;
            writeln!(out, "{text}")
                .map_err(|e| Failure::io(format!("cannot write to standard output: {e}")))?;
        }
        at += CHUNK;
    }
    out.flush()
        .map_err(|e| Failure::io(format!("cannot write to standard output: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
