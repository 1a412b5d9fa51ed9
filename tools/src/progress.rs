//! Progress bars on stderr, only when stderr is a terminal.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Stores smaller than this finish before a bar would be any use.
pub const LARGE_STORE_BYTES: u64 = 16 << 20;

/// A bar of `len` units (`bytes`: shown as sizes), hidden unless stderr is a
/// terminal and `wanted`.
pub fn bar(len: u64, what: &str, bytes: bool, wanted: bool) -> ProgressBar {
    if !wanted || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let template = if bytes {
        format!("{{spinner}} {what} [{{bar:40}}] {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, eta {{eta}})")
    } else {
        format!("{{spinner}} {what} [{{bar:40}}] {{pos}}/{{len}} ({{per_sec}}, eta {{eta}})")
    };
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Total size of the segment files at `path` (a store directory or one file).
pub fn segment_bytes(path: &Path) -> u64 {
    if path.is_dir() {
        std::fs::read_dir(path)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.path().extension().is_some_and(|x| x == "tseg"))
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    } else {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }
}
