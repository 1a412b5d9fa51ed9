//! `turnstone messages`: what the model sees for one session
//! (`derive_messages`), read-only.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use turnstone::session::{ContentBlock, Message, Provider, Registry, Session, ToolResultContent};

use crate::style::{ColorChoice, Style};
use crate::Failure;

#[derive(Debug, Args)]
pub struct MessagesArgs {
    /// Store directory, or a postgres:// (postgresql://) URL.
    pub dir: PathBuf,
    /// Session id.
    #[arg(long)]
    pub session: String,
    /// One JSON object per message: {"role","source_seq","kind","content"}
    /// (content blocks exactly as logged).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Print the request body the log rebuilds for this provider API, as one
    /// JSON document: anthropic, openai-responses or openai-chat.
    #[arg(long, value_parser = parse_provider)]
    pub format: Option<Provider>,
    /// Colours in the text output.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

fn parse_provider(s: &str) -> Result<Provider, String> {
    s.parse()
}

/// Open `id` in the store at `dir` read-only and restore it from the log.
pub fn open_session(dir: &std::path::Path, id: &str) -> Result<Session, Failure> {
    if let Some(url) = crate::place::url_of(dir) {
        let log = crate::place::session_log(url, false)?;
        return Session::open_read_only(log, id, Arc::new(Registry::new()))
            .map_err(|e| crate::place::on_url(url, e));
    }
    let store = crate::store_open::read_only(dir)?;
    if store.session_len(id).is_none() {
        return Err(Failure::usage(format!(
            "store {} has no session {id:?} ({} sessions; `turnstone stats {}` lists the largest)",
            dir.display(),
            store.sessions().len(),
            dir.display()
        )));
    }
    Session::open_read_only(store, id, Arc::new(Registry::new())).map_err(Failure::from)
}

/// One line of text for a message.
fn text_line(m: &Message, style: &Style) -> String {
    let mut parts = Vec::new();
    for b in &m.content {
        parts.push(block_text(b));
    }
    let role = format!("{:?}", m.role).to_lowercase();
    format!(
        "{} {:<9} {:<17} {}",
        style.paint(crate::style::DIM, &format!("{:>7}", m.source_seq)),
        role,
        style.paint(Style::kind_color(&m.kind), &m.kind),
        parts.join(" ")
    )
}

/// A short rendering of one block.
fn block_text(b: &ContentBlock) -> String {
    if let Some(t) = b.as_text() {
        return format!("{:?}", crate::dump::clip(t, 100));
    }
    if let (Some((id, name)), Some(input)) = (b.client_tool_use(), b.tool_input()) {
        return format!(
            "[{} {id} {name} {}]",
            b.block_type(),
            crate::dump::clip(&input.to_string(), 60)
        );
    }
    match b {
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            ..
        } => {
            let text = match content {
                ToolResultContent::Text(t) => format!("{:?}", crate::dump::clip(t, 80)),
                ToolResultContent::Blocks(bs) => {
                    bs.iter().map(block_text).collect::<Vec<_>>().join(" ")
                }
            };
            format!(
                "[tool_result {tool_use_id}{} {text}]",
                if *is_error == Some(true) {
                    " error"
                } else {
                    ""
                },
            )
        }
        ContentBlock::Thinking { thinking, .. } => {
            format!("[thinking {} chars, signed]", thinking.chars().count())
        }
        ContentBlock::Message { content, .. } => {
            content.iter().map(block_text).collect::<Vec<_>>().join(" ")
        }
        _ => format!("[{}]", b.block_type()),
    }
}

pub fn run(args: &MessagesArgs) -> Result<ExitCode, Failure> {
    let mut s = open_session(&args.dir, &args.session)?;
    let style = Style::new(args.color);
    let out = io::stdout();
    let mut out = BufWriter::new(out.lock());
    if let Some(provider) = args.format {
        let body = s.request_body(provider);
        let written: io::Result<()> = (|| {
            serde_json::to_writer_pretty(&mut out, &body).map_err(io::Error::other)?;
            writeln!(out)?;
            out.flush()
        })();
        written.map_err(|e| Failure::io(format!("cannot write to standard output: {e}")))?;
        return Ok(ExitCode::SUCCESS);
    }
    let msgs = s.derive_messages();
    let written: io::Result<()> = (|| {
        for m in msgs {
            if args.json {
                let line = serde_json::to_string(&**m).map_err(io::Error::other)?;
                writeln!(out, "{line}")?;
            } else {
                writeln!(out, "{}", text_line(m, &style))?;
            }
        }
        out.flush()
    })();
    written.map_err(|e| Failure::io(format!("cannot write to standard output: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
