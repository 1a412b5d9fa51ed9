//! `turnstone stats`: what a store holds, read-only: segments, bytes,
//! sessions, events and bytes per kind, largest sessions, open turns.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use turnstone::inspect::{self, Item};
use turnstone::session::internals::KIND_CODE_PLUGIN;
use turnstone::session::CoreKind;

use crate::Failure;

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Store directory (or a single segment file).
    pub dir: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// How many of the largest sessions (and of the open turns) to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
struct KindStats {
    kind: String,
    events: u64,
    bytes: u64,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
struct SessionStats {
    session: String,
    events: u64,
    bytes: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
struct OpenTurn {
    session: String,
    turn_id: String,
    /// Seq of its `turn/start`.
    since_seq: u64,
}

#[derive(Debug, serde::Serialize)]
struct OpenTurns {
    count: u64,
    sessions: Vec<OpenTurn>,
}

#[derive(Debug, serde::Serialize)]
struct StatsJson {
    path: String,
    segments: u64,
    /// Size of the segment files.
    file_bytes: u64,
    /// Bytes of event payloads.
    payload_bytes: u64,
    batches: u64,
    events: u64,
    sessions: u64,
    clean_close: bool,
    torn_tails: u64,
    corruptions: u64,
    /// Per kind, most bytes first.
    kinds: Vec<KindStats>,
    largest_sessions: Vec<SessionStats>,
    open_turns: OpenTurns,
}

#[derive(Default)]
struct Sess {
    name: Option<String>,
    events: u64,
    bytes: u64,
    open_turn: Option<(String, u64)>,
}

/// Human-readable byte count.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn run(args: &StatsArgs) -> Result<ExitCode, Failure> {
    let mut file_bytes = 0u64;
    let mut kinds: BTreeMap<String, KindStats> = BTreeMap::new();
    let mut sessions: HashMap<u32, Sess> = HashMap::new();
    let s = inspect::walk(&args.dir, |item| {
        match item {
            Item::Segment(s) => file_bytes += s.size,
            // Frames of a failing batch are not part of the log.
            Item::Frame(f) if !f.trusted => {}
            Item::Frame(f) => {
                let sess = sessions.entry(f.session.0).or_default();
                if let Some(d) = f.define {
                    sess.name = Some(d.name.clone());
                    return ControlFlow::Continue(());
                }
                if sess.name.is_none() {
                    sess.name = f.session_name.map(str::to_string);
                }
                sess.events += 1;
                sess.bytes += f.payload.len() as u64;
                let name = if f.kind == KIND_CODE_PLUGIN {
                    crate::kinds::decode(f.kind, f.payload).0
                } else {
                    crate::kinds::kind_name(f.kind)
                };
                if f.kind == CoreKind::TurnStart.code() {
                    let (_, env) = crate::kinds::decode(f.kind, f.payload);
                    let id = env
                        .and_then(|e| {
                            e.data
                                .get("turn_id")
                                .and_then(|t| t.as_str())
                                .map(str::to_string)
                        })
                        .unwrap_or_else(|| "?".into());
                    sess.open_turn = Some((id, f.seq));
                } else if f.kind == CoreKind::TurnEnd.code() {
                    sess.open_turn = None;
                }
                let k = kinds.entry(name.clone()).or_insert_with(|| KindStats {
                    kind: name,
                    ..Default::default()
                });
                k.events += 1;
                k.bytes += f.payload.len() as u64;
            }
            _ => {}
        }
        ControlFlow::Continue(())
    })
    .map_err(Failure::from)?;
    let label = |id: &u32, s: &Sess| s.name.clone().unwrap_or_else(|| format!("#{id}"));
    let mut kinds: Vec<KindStats> = kinds.into_values().collect();
    kinds.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.kind.cmp(&b.kind)));
    let mut largest: Vec<SessionStats> = sessions
        .iter()
        .map(|(id, s)| SessionStats {
            session: label(id, s),
            events: s.events,
            bytes: s.bytes,
        })
        .collect();
    largest.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.session.cmp(&b.session)));
    largest.truncate(args.top);
    let mut open: Vec<OpenTurn> = sessions
        .iter()
        .filter_map(|(id, s)| {
            s.open_turn.as_ref().map(|(t, seq)| OpenTurn {
                session: label(id, s),
                turn_id: t.clone(),
                since_seq: *seq,
            })
        })
        .collect();
    open.sort_by(|a, b| a.session.cmp(&b.session));
    let open_count = open.len() as u64;
    open.truncate(args.top);
    let out = StatsJson {
        path: args.dir.display().to_string(),
        segments: s.segments,
        file_bytes,
        payload_bytes: s.payload_bytes,
        batches: s.batches,
        events: s.events,
        sessions: s.sessions,
        clean_close: s.clean_close,
        torn_tails: s.torn_tails,
        corruptions: s.corruptions,
        kinds,
        largest_sessions: largest,
        open_turns: OpenTurns {
            count: open_count,
            sessions: open,
        },
    };
    if args.json {
        let line = serde_json::to_string(&out)
            .map_err(|e| Failure::io(format!("cannot encode the report: {e}")))?;
        println!("{line}");
    } else {
        print_text(&out);
    }
    Ok(if s.corruptions > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_text(s: &StatsJson) {
    println!("store {}", s.path);
    println!(
        "  segments  {} ({} on disk, {} of event payloads)",
        s.segments,
        human_bytes(s.file_bytes),
        human_bytes(s.payload_bytes)
    );
    println!("  sessions  {}", s.sessions);
    println!(
        "  events    {} in {} batches ({:.1} per batch)",
        s.events,
        s.batches,
        if s.batches > 0 {
            s.events as f64 / s.batches as f64
        } else {
            0.0
        }
    );
    let close = if s.clean_close {
        "clean"
    } else {
        "not clean (a writer is running, or the last one crashed)"
    };
    println!("  last run  {close}");
    if s.torn_tails + s.corruptions > 0 {
        println!(
            "  damage    {} torn tail(s), {} corruption(s): run `turnstone verify {}`",
            s.torn_tails, s.corruptions, s.path
        );
    }
    println!();
    println!(
        "  {:<22} {:>10} {:>12} {:>10}",
        "kind", "events", "bytes", "avg bytes"
    );
    for k in &s.kinds {
        println!(
            "  {:<22} {:>10} {:>12} {:>10}",
            k.kind,
            k.events,
            human_bytes(k.bytes),
            k.bytes / k.events.max(1)
        );
    }
    println!();
    println!("  largest sessions (by payload bytes):");
    for l in &s.largest_sessions {
        println!(
            "    {:<24} {:>8} events {:>12}",
            l.session,
            l.events,
            human_bytes(l.bytes)
        );
    }
    println!();
    println!("  sessions with an open turn: {}", s.open_turns.count);
    for t in &s.open_turns.sessions {
        println!(
            "    {:<24} turn {} since seq {}",
            t.session, t.turn_id, t.since_seq
        );
    }
    if s.open_turns.count > s.open_turns.sessions.len() as u64 {
        println!(
            "    … and {} more",
            s.open_turns.count - s.open_turns.sessions.len() as u64
        );
    }
}
