//! Colours for human output: only when stdout is a terminal (and `NO_COLOR`
//! is not set), unless forced with `--color`.

use std::io::IsTerminal;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colours when standard output is a terminal and NO_COLOR is not set.
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub on: bool,
}

pub const BOLD: &str = "1";
pub const DIM: &str = "2";
pub const RED: &str = "1;31";
pub const GREEN: &str = "32";
pub const YELLOW: &str = "33";
pub const BLUE: &str = "34";
pub const MAGENTA: &str = "35";
pub const CYAN: &str = "36";

impl Style {
    pub fn new(choice: ColorChoice) -> Style {
        let on = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        };
        Style { on }
    }

    /// `text` in the SGR colour `code` (when colours are on).
    pub fn paint(&self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// The colour of an event kind's name.
    pub fn kind_color(kind: &str) -> &'static str {
        match kind {
            "turn/start" | "turn/end" => BLUE,
            "step/start" | "step/end" => BLUE,
            "user/message" => GREEN,
            "assistant/chunk" | "assistant/message" => CYAN,
            "tool/call" | "tool/result" => YELLOW,
            k if k.starts_with("request/") || k.starts_with("compaction/") => MAGENTA,
            _ => DIM,
        }
    }
}
