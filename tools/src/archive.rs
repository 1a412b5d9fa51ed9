//! `turnstone archive` and `turnstone restore`: one session (with its
//! inherited history and its blobs) to one self-contained file and back
//! (FORMAT.md §16); `dump` and `verify` of a lone archive file.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{json, Value};
use turnstone::archive::{self, ArchivedEvent, Record};
use turnstone::blobs::hex;
use turnstone::frame::SESSION_NAME_BYTES_MAX;
use turnstone::session::internals as blob_refs;
use turnstone::Store;

use crate::failure::existing_dir;
use crate::kinds;
use crate::Failure;

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Store directory.
    pub dir: PathBuf,
    /// Session id.
    #[arg(long)]
    pub session: String,
    /// The archive file to write (refused if it exists).
    #[arg(long)]
    pub out: PathBuf,
    /// Delete the session from the store once the archive is durable.
    #[arg(long)]
    pub delete: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// Store directory (it must exist; an empty directory becomes a new store).
    pub dir: PathBuf,
    /// The archive file.
    pub file: PathBuf,
    /// Restore under this id instead of the archived one.
    #[arg(long)]
    pub session: Option<String>,
}

pub fn run_archive(a: &ArchiveArgs) -> Result<ExitCode, Failure> {
    existing_dir(&a.dir)?;
    // --delete writes a tombstone: the store is opened for writing (and
    // locked) from the first read, so nothing is appended in between.
    let store = if a.delete {
        std::sync::Arc::new(Store::open(&a.dir).map_err(Failure::from)?)
    } else {
        crate::store_open::read_only(&a.dir)?
    };
    turnstone::session::internals::check_not_deleted(&store, &a.session)?;
    let len = store
        .session_meta(&a.session)
        .map(|m| m.durable_len)
        .unwrap_or(0);
    let events: Vec<ArchivedEvent> = store
        .read_range(&a.session, 0..len)
        .map_err(Failure::from)?
        .into_iter()
        .map(|e| ArchivedEvent {
            seq: e.seq.0,
            kind: e.kind,
            flags: e.flags,
            payload: e.payload,
        })
        .collect();
    // Every blob the events reference (checked on the way).
    let mut hashes = BTreeSet::new();
    for e in &events {
        hashes.extend(blob_refs::payload_blobs(store.blobs(), &e.payload).map_err(Failure::from)?);
    }
    let mut blobs = Vec::with_capacity(hashes.len());
    for h in &hashes {
        blobs.push((*h, store.blobs().get(h).map_err(Failure::from)?));
    }
    let blob_refs: Vec<([u8; 32], &[u8])> = blobs.iter().map(|(h, b)| (*h, b.as_slice())).collect();
    let size = archive::write_file(
        &a.out,
        &a.session,
        turnstone::session::now_ms(),
        &blob_refs,
        &events,
    )
    .map_err(|e| Failure::from(e).context(format!("writing {}", a.out.display())))?;
    println!(
        "archived session {:?} ({} events, {} blobs) to {} ({size} bytes, fsynced)",
        a.session,
        events.len(),
        blobs.len(),
        a.out.display()
    );
    if a.delete {
        let seq = turnstone::session::delete(&store, &a.session).map_err(|e| {
            Failure::from(e).context(format!(
                "the archive {} is complete, but deleting {:?} failed",
                a.out.display(),
                a.session
            ))
        })?;
        println!(
            "deleted {:?} from {} (tombstone at seq {seq}); its bytes are reclaimable but not reclaimed",
            a.session,
            a.dir.display()
        );
    }
    crate::store_open::close(store, &a.dir)?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_restore(a: &RestoreArgs) -> Result<ExitCode, Failure> {
    crate::failure::dir_or_new(&a.dir)?;
    let arc = archive::read_file(&a.file).map_err(|e| {
        Failure::from(e).context(format!("{} cannot be restored", a.file.display()))
    })?;
    let id = a.session.clone().unwrap_or(arc.header.session.clone());
    if id.is_empty() || id.len() > SESSION_NAME_BYTES_MAX {
        return Err(Failure::usage(format!(
            "session id must be 1 to {SESSION_NAME_BYTES_MAX} bytes"
        )));
    }
    let store = Store::open(&a.dir).map_err(Failure::from)?;
    if store.session_len(&id).is_some() {
        let deleted = matches!(turnstone::session::deleted_at(&store, &id), Ok(Some(_)));
        let e = turnstone::Error::SessionExists(id.clone());
        return Err(Failure::from(e).context(format!(
            "store {} already has a session {id:?}{}; restore under another id with --session; nothing was restored",
            a.dir.display(),
            if deleted { " (deleted, but a name is never reused)" } else { "" }
        )));
    }
    // Blobs first, each durable before any event that references it.
    for (h, bytes) in &arc.blobs {
        store.blobs().put_hashed(h, bytes).map_err(Failure::from)?;
    }
    let group: Vec<(u16, u16, &[u8])> = arc
        .events
        .iter()
        .map(|e| (e.kind, e.flags, e.payload.as_slice()))
        .collect();
    // All or nothing: one batch, or a staging session `id` then forks.
    let store = std::sync::Arc::new(store);
    turnstone::session::internals::create_from_raw(&store, &id, &group)
        .map_err(|e| Failure::from(e).context("making the restore durable".into()))?;
    let store = std::sync::Arc::into_inner(store).expect("the only handle");
    store.close().map_err(Failure::from)?;
    println!(
        "restored {} events and {} blobs from {} into {} as session {id:?} (seqs 0..{})",
        arc.events.len(),
        arc.blobs.len(),
        a.file.display(),
        a.dir.display(),
        arc.events.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `dump` of a lone archive file: one line (or JSON object) per record.
pub fn dump(path: &std::path::Path, json_out: bool, show_blobs: bool) -> Result<ExitCode, Failure> {
    use std::io::Write;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut write_err = None;
    let r = archive::visit(path, |offset, rec| {
        let line = match rec {
            Record::Blob { sha256, bytes } => {
                if json_out {
                    let mut o = json!({"record": "blob", "offset": offset, "sha256": hex(sha256), "bytes": bytes.len()});
                    if show_blobs {
                        o["data"] = serde_json::from_slice::<Value>(bytes).unwrap_or_else(|_| {
                            Value::String(String::from_utf8_lossy(bytes).into())
                        });
                    }
                    o.to_string()
                } else {
                    format!("@{offset} blob {} ({} bytes)", hex(sha256), bytes.len())
                }
            }
            Record::Event(e) => {
                let (name, env) = kinds::decode(e.kind, &e.payload);
                if json_out {
                    let mut o = json!({"record": "event", "offset": offset, "seq": e.seq, "kind": name, "ignorable": e.flags & 1 != 0});
                    match env {
                        Some(env) => {
                            if let Some(s) = env.surface {
                                o["surface"] = serde_json::to_value(s).unwrap_or(Value::Null);
                            }
                            if let Some(ts) = env.ts {
                                o["ts"] = ts.into();
                            }
                            o["data"] = env.data;
                        }
                        None => {
                            use base64::Engine as _;
                            o["data"] = base64::engine::general_purpose::STANDARD
                                .encode(&e.payload)
                                .into();
                            o["encoding"] = "base64".into();
                        }
                    }
                    o.to_string()
                } else {
                    format!("@{offset} seq {} {name} ({} bytes)", e.seq, e.payload.len())
                }
            }
        };
        if write_err.is_none() {
            if let Err(e) = writeln!(out, "{line}") {
                write_err = Some(e);
            }
        }
    });
    let flushed = out.flush();
    if let Some(e) = write_err.or(flushed.err()) {
        return Err(Failure::io(format!("cannot write to standard output: {e}")));
    }
    match r {
        Ok(h) => {
            if !json_out {
                println!(
                    "archive of session {:?}: complete, every checksum holds",
                    h.session
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let f = Failure::from(e);
            eprintln!("turnstone: {}", f.msg);
            Ok(ExitCode::from(1))
        }
    }
}

/// `verify` of a lone archive file.
pub fn verify(path: &std::path::Path, json_out: bool) -> Result<ExitCode, Failure> {
    let (mut events, mut blobs, mut bytes) = (0u64, 0u64, 0u64);
    let r = archive::visit(path, |_, rec| match rec {
        Record::Blob { bytes: b, .. } => {
            blobs += 1;
            bytes += b.len() as u64;
        }
        Record::Event(e) => {
            events += 1;
            bytes += e.payload.len() as u64;
        }
    });
    let (ok, session, problem) = match r {
        Ok(h) => (true, Some(h.session), None),
        Err(e) => {
            let (file, offset) = e.location();
            let p = json!({
                "problem": e.kind(),
                "file": file.map(|f| f.display().to_string()),
                "offset": offset,
                "detail": e.to_string(),
            });
            (false, None, Some((p, e)))
        }
    };
    if json_out {
        let mut o = json!({
            "path": path.display().to_string(),
            "archive": true,
            "ok": ok,
            "status": if ok { "clean" } else { "corrupt" },
            "events": events,
            "blobs": blobs,
            "payload_bytes": bytes,
        });
        if let Some(s) = &session {
            o["session"] = s.clone().into();
        }
        if let Some((p, _)) = &problem {
            o["problems"] = json!([p]);
        }
        println!("{o}");
    } else if let Some((_, e)) = &problem {
        println!(
            "archive {}: CORRUPT after {events} events and {blobs} blobs: {e}",
            path.display()
        );
    } else {
        println!(
            "archive {} of session {:?}: clean ({events} events, {blobs} blobs, {bytes} payload bytes)",
            path.display(),
            session.unwrap_or_default()
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
