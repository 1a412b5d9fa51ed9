//! `turnstone dump`: the frames of a store or segment file, in log order.
//! Read-only: it never takes the lock and never changes a byte.

use std::collections::HashMap;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use base64::Engine as _;
use clap::Args;
use serde_json::Value;
use turnstone::inspect::{self, FrameInfo, InspectProblem, Item, SegmentInfo};
use turnstone::session::internals::Envelope;
use turnstone::session::SurfaceOp;
use turnstone::ProblemKind;

use crate::kinds::{self, KindFilter};
use crate::style::{self, ColorChoice, Style};
use crate::verify::{problem_json, problem_text};
use crate::Failure;

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Store directory, or one segment file (also a lone copy outside its store), or an archive file.
    pub path: PathBuf,
    /// Only frames of this session id.
    #[arg(long)]
    pub session: Option<String>,
    /// Only events with seq >= A.
    #[arg(long, value_name = "A")]
    pub from_seq: Option<u64>,
    /// Only events with seq <= B.
    #[arg(long, value_name = "B")]
    pub to_seq: Option<u64>,
    /// Only these kinds: names (tool/call, a plugin kind, session/define) or codes, comma-separated.
    #[arg(long, value_name = "K1,K2")]
    pub kind: Option<String>,
    /// One JSON object per frame (and per problem) instead of text.
    #[arg(long, conflicts_with = "raw")]
    pub json: bool,
    /// Hex dump of segment, batch and frame headers and bytes (format debugging).
    #[arg(long)]
    pub raw: bool,
    /// Keep printing frames as a live writer appends them (like tail -f); stop with Ctrl-C.
    #[arg(long)]
    pub follow: bool,
    /// How often --follow looks for new frames, in milliseconds.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    pub interval_ms: u64,
    /// Resolve blob references (FORMAT.md §15): show the blocks' bytes in place of the references.
    #[arg(long)]
    pub blobs: bool,
    /// Colours in the text output.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// One `dump --json` frame line (fields in this order).
#[derive(Debug, serde::Serialize)]
struct FrameJson {
    session: String,
    seq: u64,
    kind: String,
    ignorable: bool,
    segment: String,
    offset: u64,
    len: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    surface: Option<SurfaceOp>,
    /// Append time of a session event, ms since the Unix epoch (when recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<u64>,
    data: Value,
    /// Present (`"base64"`) when `data` holds the raw payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    encoding: Option<&'static str>,
    /// Present (`false`) for a frame that checks on its own inside a
    /// failing batch: shown, but recovery does not trust it.
    #[serde(skip_serializing_if = "Option::is_none")]
    trusted: Option<bool>,
}

/// Which frames to print.
#[derive(Debug, Default)]
struct Filter {
    session: Option<String>,
    from: Option<u64>,
    to: Option<u64>,
    kinds: Option<KindFilter>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.session.is_none() && self.from.is_none() && self.to.is_none() && self.kinds.is_none()
    }

    fn accepts(&self, f: &FrameInfo<'_>, name: &str, json: bool) -> bool {
        if let Some(s) = &self.session {
            if f.session_name != Some(s.as_str()) {
                return false;
            }
        }
        if f.is_define() {
            // Engine bookkeeping: shown in text unless filtered by seq or
            // kind, in JSON only when asked for by kind.
            return match &self.kinds {
                Some(k) => k.wants_define(),
                None => !json && self.from.is_none() && self.to.is_none(),
            };
        }
        if self.from.is_some_and(|a| f.seq < a) || self.to.is_some_and(|b| f.seq > b) {
            return false;
        }
        self.kinds.as_ref().is_none_or(|k| k.matches(f.kind, name))
    }
}

/// `s` cut to at most `max` characters (with `…`), control characters escaped.
pub fn clip(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A short one-line preview of raw payload bytes.
fn preview_bytes(payload: &[u8]) -> String {
    match std::str::from_utf8(payload) {
        Ok(s) => clip(s, 60),
        Err(_) => {
            let n = payload.len().min(24);
            let hex: String = payload[..n].iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}{}", if payload.len() > n { "…" } else { "" })
        }
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("?")
}

/// The text of content blocks, tool uses and results named.
fn content_preview(blocks: &Value) -> String {
    let Some(blocks) = blocks.as_array() else {
        return String::new();
    };
    if blocks.is_empty() {
        return "(empty)".into();
    }
    let parts: Vec<String> = blocks
        .iter()
        .map(|b| match str_of(b, "type") {
            "text" => format!("{:?}", clip(str_of(b, "text"), 50)),
            "tool_use" => format!("[tool_use {} {}]", str_of(b, "name"), str_of(b, "id")),
            "tool_result" => format!("[tool_result {}]", str_of(b, "tool_use_id")),
            other => format!("[{other}]"),
        })
        .collect();
    parts.join(" ")
}

/// A short preview of a session event.
fn preview_event(name: &str, env: &Envelope) -> String {
    let d = &env.data;
    let reason = |d: &Value| {
        d.get("reason")
            .and_then(|r| r.get("kind"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    let text = match name {
        "turn/start" => format!("turn {}", str_of(d, "turn_id")),
        "turn/end" => format!("turn {} {}", str_of(d, "turn_id"), reason(d)),
        "step/start" => format!(
            "turn {} step {}",
            str_of(d, "turn_id"),
            str_of(d, "step_id")
        ),
        "step/end" => format!(
            "turn {} step {} {}",
            str_of(d, "turn_id"),
            str_of(d, "step_id"),
            reason(d)
        ),
        "user/message" | "assistant/message" => content_preview(&d["content"]),
        "assistant/chunk" => format!("{:?}", clip(str_of(d, "text"), 50)),
        "tool/call" => format!(
            "{} {} {}",
            str_of(d, "call_id"),
            str_of(d, "name"),
            clip(&d["input"].to_string(), 40)
        ),
        "tool/result" => {
            let status = d
                .get("status")
                .and_then(Value::as_str)
                .map(|s| format!(" {s}"))
                .unwrap_or_default();
            let err = if d.get("is_error") == Some(&Value::Bool(true)) {
                " error"
            } else {
                ""
            };
            format!(
                "{}{status}{err} {}",
                str_of(d, "call_id"),
                content_preview(&d["content"])
            )
        }
        "request/header" => format!(
            "{} {}/{}",
            str_of(d, "reason"),
            str_of(&d["header"]["config"], "provider"),
            str_of(&d["header"]["config"], "model")
        ),
        "request/context" => format!(
            "{}/{} window {}",
            str_of(d, "provider"),
            str_of(d, "model"),
            d["context_window"]
        ),
        "compaction/summary" => format!(
            "{} {:?}",
            str_of(d, "compaction_id"),
            clip(str_of(d, "text"), 50)
        ),
        "compaction/start" | "compaction/end" => str_of(d, "compaction_id").to_string(),
        "compaction/prune" => format!(
            "replaces seqs {} ({} tokens)",
            d["replaced_seqs"], d["tokens_saved"]
        ),
        _ => d.to_string(),
    };
    let op = match env.surface {
        Some(SurfaceOp::Replace { start, end }) => format!("[replace {start}..{end}] "),
        _ => String::new(),
    };
    clip(&format!("{op}{text}"), 90)
}

fn session_label(f: &FrameInfo<'_>) -> String {
    match f.session_name {
        Some(n) => n.to_string(),
        None => format!("#{}", f.session.0),
    }
}

/// The JSON object of one frame.
fn frame_json(f: &FrameInfo<'_>, name: String, env: Option<Envelope>) -> FrameJson {
    let (surface, ts, data, encoding) = match (env, f.define) {
        (Some(e), _) => (e.surface, e.ts, e.data, None),
        (None, Some(d)) => (
            None,
            None,
            serde_json::json!({
                "name": d.name,
                "parent": d.parent.map(|(p, upto)| serde_json::json!({"session": p.0, "upto": upto})),
            }),
            None,
        ),
        (None, None) => (
            None,
            None,
            Value::String(base64::engine::general_purpose::STANDARD.encode(f.payload)),
            Some("base64"),
        ),
    };
    FrameJson {
        session: session_label(f),
        seq: f.seq,
        kind: name,
        ignorable: f.ignorable(),
        segment: f.segment.display().to_string(),
        offset: f.offset,
        len: f.len,
        surface,
        ts,
        data,
        encoding,
        trusted: (!f.trusted).then_some(false),
    }
}

/// Prints items; remembers what `--follow` needs.
struct Printer<'a> {
    args: &'a DumpArgs,
    filter: Filter,
    style: Style,
    out: BufWriter<io::StdoutLock<'static>>,
    /// Compact session id → string id (for --follow).
    names: HashMap<u32, String>,
    /// Torn tails are a live writer's batch in flight while following.
    hold_torn: bool,
    held: Vec<InspectProblem>,
    corrupt: u64,
    error: Option<io::Error>,
    /// With --blobs: the store's blob directory.
    blobs: Option<turnstone::blobs::BlobDir>,
}

impl Printer<'_> {
    fn segment_line(&self, s: &SegmentInfo<'_>) -> String {
        let name = s.file.display();
        let body = match &s.header {
            Some(h) => {
                let id: String = h.store_id.iter().map(|b| format!("{b:02x}")).collect();
                let seg = s.id.unwrap_or(h.segment).0;
                let span = match s.span {
                    Some(sp) => match (sp.first, sp.last) {
                        (Some(a), Some(b)) => format!(
                            ", frames {seg}:{a} .. {seg}:{b} ({} frames), data ends at {seg}:{}",
                            sp.frames, sp.data_end
                        ),
                        _ => format!(", no frames, data ends at {seg}:{}", sp.data_end),
                    },
                    None => String::new(),
                };
                format!(
                    "== segment {name}: format {}, {} bytes, store {id}, segment {}, first batch {}, previous segment ended at {}{}{span}{}",
                    h.version,
                    s.size,
                    h.segment.0,
                    h.first_batch_seq,
                    h.prev_segment_end,
                    if turnstone::frame::header_is_recycled(s.raw_header) {
                        ", recycled (bytes after the end of data are stale)"
                    } else {
                        ""
                    },
                    if s.last { " (last)" } else { "" }
                )
            }
            None => format!(
                "== segment {name}: {} bytes, header does not decode",
                s.size
            ),
        };
        self.style.paint(style::BOLD, &body)
    }

    fn frame_line(&self, f: &FrameInfo<'_>, name: &str, env: Option<&Envelope>) -> String {
        let pos = format!("{}:{}", f.segment_id.0, f.offset);
        let label = session_label(f);
        let st = &self.style;
        let pos = st.paint(style::DIM, &format!("{pos:<12}"));
        let kind = st.paint(Style::kind_color(name), &format!("{name:<18}"));
        if f.is_define() {
            let what = match f.define {
                Some(d) => match d.parent {
                    Some((p, upto)) => format!(
                        "defines {:?} as #{}, fork of #{} up to seq {upto}",
                        d.name, f.session.0, p.0
                    ),
                    None => format!("defines {:?} as #{}", d.name, f.session.0),
                },
                None => "undecodable session-define payload".to_string(),
            };
            return format!("{pos} {label:<16} {:>8} {kind} {:>6}  {what}", "-", f.len);
        }
        let preview = match env {
            Some(e) => preview_event(name, e),
            None => preview_bytes(f.payload),
        };
        format!(
            "{pos} {label:<16} {:>8} {kind} {:>6}{} {preview}",
            format!("seq {}", f.seq),
            f.len,
            if f.ignorable() { " ign" } else { "" },
        )
    }

    fn problem(&mut self, p: &InspectProblem) -> Option<String> {
        if p.kind == ProblemKind::Corruption {
            self.corrupt += 1;
        }
        if self.hold_torn && p.kind == ProblemKind::TornTail {
            self.held.push(p.clone());
            return None;
        }
        if self.args.json {
            return serde_json::to_string(&problem_json(p)).ok();
        }
        let mut text = self
            .style
            .paint(style::RED, &format!("!! {}", problem_text(p)));
        if self.args.raw {
            let mut buf = vec![0u8; 64];
            if let Ok(f) = std::fs::File::open(&p.segment) {
                use std::os::unix::fs::FileExt;
                let n = f.read_at(&mut buf, p.offset).unwrap_or(0);
                buf.truncate(n);
                text.push('\n');
                text.push_str(crate::raw::hexdump(&buf, p.offset, "   ").trim_end());
            }
        }
        Some(text)
    }

    fn item(&mut self, item: Item<'_>) -> ControlFlow<()> {
        let text = match item {
            Item::Segment(s) => {
                if self.args.json {
                    None
                } else if self.args.raw {
                    Some(format!(
                        "{}\n{}",
                        self.segment_line(&s),
                        crate::raw::segment_header(s.raw_header, s.header.as_ref()).trim_end()
                    ))
                } else {
                    Some(self.segment_line(&s))
                }
            }
            Item::Batch(b) => (self.args.raw && self.filter.is_empty()).then(|| {
                let mut t = format!(
                    "-- batch {} at {}:{}: {} frames, {} body bytes{}",
                    b.header.batch_seq,
                    b.segment
                        .file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                    b.offset,
                    b.header.frame_count,
                    b.header.body_len,
                    if b.clean_close() { ", clean close" } else { "" }
                );
                t.push('\n');
                t.push_str(crate::raw::batch_header(b.raw_header, b.offset).trim_end());
                t
            }),
            Item::Frame(f) => {
                if let Some(d) = f.define.filter(|_| f.trusted) {
                    self.names.insert(f.session.0, d.name.clone());
                }
                let resolved = match &self.blobs {
                    Some(b) if turnstone::session::internals::has_refs(f.payload) => {
                        match turnstone::session::internals::resolve(b, f.payload) {
                            Ok(p) => Some(p.into_owned()),
                            Err(e) => {
                                eprintln!(
                                    "turnstone: seq {} of the frame at {} offset {}: {e}",
                                    f.seq,
                                    f.segment.display(),
                                    f.offset
                                );
                                self.corrupt += 1;
                                None
                            }
                        }
                    }
                    _ => None,
                };
                let (name, env) = kinds::decode(f.kind, resolved.as_deref().unwrap_or(f.payload));
                if !self.filter.accepts(&f, &name, self.args.json) {
                    None
                } else if self.args.json {
                    serde_json::to_string(&frame_json(&f, name, env)).ok()
                } else {
                    let mut t = self.frame_line(&f, &name, env.as_ref());
                    if !f.trusted {
                        t = format!(
                            "{} {t}",
                            self.style
                                .paint(style::RED, "?? not trusted (in a failing batch):")
                        );
                    }
                    if self.args.raw {
                        t.push('\n');
                        t.push_str(crate::raw::frame(f.raw, f.offset).trim_end());
                    }
                    Some(t)
                }
            }
            Item::Problem(p) => self.problem(&p),
        };
        let Some(text) = text else {
            return ControlFlow::Continue(());
        };
        match writeln!(self.out, "{text}") {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }

    fn flush(&mut self) -> Result<(), Failure> {
        let r = match self.error.take() {
            Some(e) => Err(e),
            None => self.out.flush(),
        };
        r.map_err(|e| Failure::io(format!("cannot write to standard output: {e}")))
    }
}

pub fn run(args: &DumpArgs) -> Result<ExitCode, Failure> {
    if turnstone::archive::is_archive(&args.path) {
        return crate::archive::dump(&args.path, args.json, args.blobs);
    }
    let kinds = match &args.kind {
        Some(k) => Some(KindFilter::parse(k).map_err(Failure::usage)?),
        None => None,
    };
    if let (Some(a), Some(b)) = (args.from_seq, args.to_seq) {
        if a > b {
            return Err(Failure::usage(format!(
                "--from-seq {a} is after --to-seq {b}: the range is empty"
            )));
        }
    }
    if args.follow && !args.path.is_dir() {
        return Err(Failure::usage(format!(
            "--follow needs a store directory; {} is not one",
            args.path.display()
        )));
    }
    if args.follow {
        crate::signals::catch_sigint();
    }
    let total = crate::progress::segment_bytes(&args.path);
    let want_bar =
        !args.follow && total >= crate::progress::LARGE_STORE_BYTES && !io::stdout().is_terminal();
    let bar = crate::progress::bar(total, "dump", true, want_bar);
    let mut p = Printer {
        args,
        filter: Filter {
            session: args.session.clone(),
            from: args.from_seq,
            to: args.to_seq,
            kinds,
        },
        style: Style::new(args.color),
        out: BufWriter::with_capacity(1 << 16, io::stdout().lock()),
        names: HashMap::new(),
        hold_torn: args.follow,
        held: Vec::new(),
        corrupt: 0,
        error: None,
        blobs: args.blobs.then(|| {
            let store_dir = if args.path.is_dir() {
                args.path.clone()
            } else {
                args.path
                    .parent()
                    .map_or_else(|| PathBuf::from("."), |p| p.to_path_buf())
            };
            turnstone::blobs::BlobDir::new(&store_dir)
        }),
    };
    let mut done = 0u64;
    let mut seg_size = 0u64;
    let summary = inspect::walk(&args.path, |item| {
        match &item {
            Item::Segment(s) => {
                done += seg_size;
                seg_size = s.size;
                bar.set_position(done);
            }
            Item::Batch(b) => bar.set_position(done + b.offset),
            _ => {}
        }
        p.item(item)
    });
    bar.finish_and_clear();
    let summary = summary.map_err(Failure::from)?;
    p.flush()?;
    if args.follow {
        let Some(tail) = summary.tail.clone() else {
            return Err(Failure::usage(format!(
                "cannot follow {}: the end of its log is damaged or unknown (see `turnstone verify`)",
                args.path.display()
            )));
        };
        for t in std::mem::take(&mut p.held) {
            eprintln!(
                "turnstone: note: an incomplete batch at {} offset {} ({} bytes) is taken as a live writer's commit in flight; following from there",
                t.segment.display(),
                t.offset,
                t.bytes
            );
        }
        let names = std::mem::take(&mut p.names);
        let mut follower = inspect::Follower::new(&turnstone::vfs::OsVfs, &args.path, tail, names);
        while !crate::signals::interrupted() {
            let n = follower
                .poll(&mut |item| p.item(item))
                .map_err(Failure::from)?;
            p.flush()?;
            if n == 0 {
                std::thread::sleep(Duration::from_millis(args.interval_ms.max(1)));
            }
        }
        p.flush()?;
    }
    Ok(if p.corrupt > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews() {
        assert_eq!(preview_bytes(b"a\nb"), "a\\nb");
        assert!(preview_bytes(&[0xff; 40]).starts_with("0xffff"));
        assert_eq!(clip("abcdef", 3), "abc…");
        let env = Envelope {
            v: 0,
            kind: None,
            ts: None,
            surface: Some(SurfaceOp::Replace { start: 0, end: 4 }),
            data: serde_json::json!({"content": [{"type": "text", "text": "hello"}]}),
        };
        assert_eq!(
            preview_event("user/message", &env),
            "[replace 0..4] \"hello\""
        );
        let env = Envelope {
            v: 0,
            kind: None,
            ts: None,
            surface: Some(SurfaceOp::Append),
            data: serde_json::json!({"content": []}),
        };
        assert_eq!(preview_event("assistant/message", &env), "(empty)");
    }
}
