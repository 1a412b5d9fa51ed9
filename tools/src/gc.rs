//! `turnstone gc`: segment collection (FORMAT.md §14). Takes the store's
//! lock, rewrites sealed segments whose live fraction is below the
//! threshold, and reports what it examined and freed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use turnstone::gc::{CollectOptions, CollectReport};

use crate::failure::existing_dir;
use crate::Failure;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Store directory.
    pub dir: PathBuf,
    /// Decide and report what a collection would free; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Rewrite a sealed segment when its live bytes are below this fraction of its data (0 to 1).
    #[arg(long, default_value_t = 0.5)]
    pub threshold: f64,
}

pub fn run(a: &GcArgs) -> Result<ExitCode, Failure> {
    existing_dir(&a.dir)?;
    if !(0.0..=1.0).contains(&a.threshold) {
        return Err(Failure::usage(format!(
            "--threshold {} is not between 0 and 1",
            a.threshold
        )));
    }
    let opts = CollectOptions {
        threshold: a.threshold,
        dry_run: a.dry_run,
        ..Default::default()
    };
    let r = turnstone::session::gc::collect(&a.dir, &opts)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&r).map_err(|e| Failure::io(e.to_string()))?
        );
    } else {
        print_text(&r);
    }
    Ok(ExitCode::SUCCESS)
}

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1 << 20) as f64)
}

fn print_text(r: &CollectReport) {
    let verb = if r.dry_run { "would free" } else { "freed" };
    println!(
        "{} sealed segments examined ({}, {} live); {} range(s) rewritten, {} file(s) removed; {} newly deleted session(s) reclaimed",
        r.segments_examined,
        mib(r.bytes_before),
        mib(r.bytes_live),
        r.ranges_rewritten,
        r.segment_files_removed,
        r.sessions_reclaimed
    );
    println!(
        "{verb} {} ({} -> {}) in {:.3} s{}",
        mib(r.bytes_reclaimed),
        mib(r.bytes_before),
        mib(r.bytes_after),
        r.duration_us as f64 / 1e6,
        if r.dry_run {
            " (dry run: nothing changed)"
        } else {
            ""
        }
    );
}
