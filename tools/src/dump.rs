//! `turnstone dump`: the frames of a store or segment file, in log order.

use std::io::{self, BufWriter, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::process::ExitCode;

use base64::Engine as _;
use turnstone::inspect::{self, FrameInfo, Item};

use crate::kinds::kind_name;
use crate::verify::{problem_json, problem_text};
use crate::Failure;

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
    data: serde_json::Value,
}

fn session_label(f: &FrameInfo<'_>) -> String {
    match f.session_name {
        Some(n) => n.to_string(),
        None => format!("#{}", f.session.0),
    }
}

/// Payload as JSON if it is UTF-8 JSON, else a base64 string.
fn data_json(payload: &[u8]) -> serde_json::Value {
    match serde_json::from_slice::<serde_json::Value>(payload) {
        Ok(v) => v,
        Err(_) => {
            serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(payload))
        }
    }
}

/// A short one-line preview of a payload.
fn preview(payload: &[u8]) -> String {
    const MAX: usize = 60;
    match std::str::from_utf8(payload) {
        Ok(s) => {
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i >= MAX {
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
        Err(_) => {
            let n = payload.len().min(24);
            let hex: String = payload[..n].iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}{}", if payload.len() > n { "…" } else { "" })
        }
    }
}

fn line(item: Item<'_>, session: Option<&str>, json: bool) -> Option<String> {
    match item {
        Item::Segment(s) => {
            if json {
                return None;
            }
            let name = s.file.display();
            Some(match s.header {
                Some(h) => {
                    let id: String = h.store_id.iter().map(|b| format!("{b:02x}")).collect();
                    format!(
                        "== segment {name}: format {}, {} bytes, store {id}, segment {}, first batch {}, previous segment ended at {}{}",
                        h.version,
                        s.size,
                        h.segment.0,
                        h.first_batch_seq,
                        h.prev_segment_end,
                        if s.last { " (last)" } else { "" }
                    )
                }
                None => format!(
                    "== segment {name}: {} bytes, header does not decode",
                    s.size
                ),
            })
        }
        Item::Batch(_) => None,
        Item::Frame(f) => {
            if session.is_some() && f.session_name != session {
                return None;
            }
            if json {
                if f.is_define() {
                    return None;
                }
                let v = FrameJson {
                    session: session_label(&f),
                    seq: f.seq,
                    kind: kind_name(f.kind),
                    ignorable: f.ignorable(),
                    segment: f.segment.display().to_string(),
                    offset: f.offset,
                    len: f.len,
                    data: data_json(f.payload),
                };
                return serde_json::to_string(&v).ok();
            }
            let pos = format!("{}:{}", f.segment_id.0, f.offset);
            let label = session_label(&f);
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
                return Some(format!(
                    "{pos:<12} {label:<16} {:>8} {:<18} {:>6}  {what}",
                    "-", "session/define", f.len
                ));
            }
            Some(format!(
                "{pos:<12} {label:<16} {:>8} {:<18} {:>6}{} {}",
                format!("seq {}", f.seq),
                kind_name(f.kind),
                f.len,
                if f.ignorable() { " ign" } else { "" },
                preview(f.payload)
            ))
        }
        Item::Problem(p) => Some(if json {
            serde_json::to_string(&problem_json(&p)).unwrap_or_default()
        } else {
            format!("!! {}", problem_text(&p))
        }),
    }
}

pub fn run(path: &Path, session: Option<&str>, json: bool) -> Result<ExitCode, Failure> {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut write_err: Option<io::Error> = None;
    let s = inspect::walk(path, |item| {
        let Some(l) = line(item, session, json) else {
            return ControlFlow::Continue(());
        };
        match writeln!(out, "{l}") {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                write_err = Some(e);
                ControlFlow::Break(())
            }
        }
    })
    .map_err(|e| Failure::usage(e.to_string()))?;
    let flushed = out.flush();
    match write_err.map_or(flushed, Err) {
        Ok(()) => {}
        // The reader went away (`dump | head`): not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(Failure::io(format!("cannot write to standard output: {e}"))),
    }
    Ok(if s.corruptions > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_json_or_base64() {
        assert_eq!(data_json(br#"{"a":1}"#), serde_json::json!({"a": 1}));
        assert_eq!(data_json(&[0xff, 0]), serde_json::json!("/wA="));
        assert_eq!(preview(b"a\nb"), "a\\nb");
        assert!(preview(&[0xff; 40]).starts_with("0xffff"));
    }
}
