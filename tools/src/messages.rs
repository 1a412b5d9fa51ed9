//! `turnstone messages`: what the model sees for one session
//! (`derive_messages`), read-only.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use turnstone::session::{ContentBlock, Message, Registry, Session};

use crate::style::{ColorChoice, Style};
use crate::Failure;

#[derive(Debug, Args)]
pub struct MessagesArgs {
    /// Store directory.
    pub dir: PathBuf,
    /// Session id.
    #[arg(long)]
    pub session: String,
    /// One JSON object per message: {"role","source_seq","kind","content"}.
    #[arg(long)]
    pub json: bool,
    /// Colours in the text output.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// Open `id` in the store at `dir` read-only and restore it from the log.
pub fn open_session(dir: &std::path::Path, id: &str) -> Result<Session, Failure> {
    let store = crate::store_open::read_only(dir)?;
    if store.session_len(id).is_none() {
        return Err(Failure::usage(format!(
            "store {} has no session {id:?} ({} sessions; `turnstone stats {}` lists the largest)",
            dir.display(),
            store.sessions().len(),
            dir.display()
        )));
    }
    Session::open(store, id, Arc::new(Registry::new())).map_err(Failure::from)
}

/// One line of text for a message.
fn text_line(m: &Message, style: &Style) -> String {
    let mut parts = Vec::new();
    for b in &m.content {
        parts.push(match b {
            ContentBlock::Text { text } => format!("{:?}", crate::dump::clip(text, 100)),
            ContentBlock::ToolUse { id, name, input } => format!(
                "[tool_use {id} {name} {}]",
                crate::dump::clip(&input.to_string(), 60)
            ),
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => format!(
                "[tool_result {tool_use_id}{} {:?}]",
                if *is_error { " error" } else { "" },
                crate::dump::clip(content, 80)
            ),
        });
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

pub fn run(args: &MessagesArgs) -> Result<ExitCode, Failure> {
    let mut s = open_session(&args.dir, &args.session)?;
    let style = Style::new(args.color);
    let out = io::stdout();
    let mut out = BufWriter::new(out.lock());
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
