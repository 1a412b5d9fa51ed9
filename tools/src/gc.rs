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
    /// Store directory, or a PostgreSQL URL (postgres://…): there, the
    /// events of deleted sessions that no fork reads are removed.
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
    /// Also rewrite sealed segments without garbage, grouping each session's frames together (locality for cold reads of one session).
    #[arg(long)]
    pub regroup: bool,
    /// Retention: also collect sessions whose last event is older than this (e.g. 30d, 12h, 90s, 500ms).
    #[arg(long, value_parser = parse_duration_ms)]
    pub expire_after: Option<u64>,
    /// Retention: also collect sessions whose first event is older than this (e.g. 90d).
    #[arg(long, value_parser = parse_duration_ms)]
    pub max_age: Option<u64>,
    /// Retention: keep at most this many bytes of live frames (e.g. 500G, 64M), evicting the sessions whose last event is oldest first.
    #[arg(long, value_parser = parse_bytes)]
    pub max_bytes: Option<u64>,
}

/// `N` optionally followed by `K`, `M`, `G` or `T` (powers of 1024), in bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected a number, then optionally K, M, G or T"))?;
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (K, M, G, T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?}: too large"))
}

/// `N` followed by `ms`, `s`, `m`, `h` or `d`, in milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{s:?}: give a unit (ms, s, m, h, d)"))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected a number, then a unit (ms, s, m, h, d)"))?;
    let mul = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h, d)")),
    };
    n.checked_mul(mul)
        .ok_or_else(|| format!("{s:?}: too large"))
}

pub fn run(a: &GcArgs) -> Result<ExitCode, Failure> {
    if let Some(url) = crate::place::url_of(&a.dir) {
        return run_pg(a, url);
    }
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
        regroup: a.regroup,
        ..Default::default()
    };
    let retention = turnstone::session::gc::Retention {
        expire_after_ms: a.expire_after,
        max_age_ms: a.max_age,
        max_bytes: a.max_bytes,
        now_ms: None,
    };
    // Deleted streams of `turnstone serve` by its rule, every other
    // session by the session layer's.
    #[cfg(feature = "serve")]
    let rule = &turnstone_server::collect::is_dead_with;
    #[cfg(not(feature = "serve"))]
    let rule = &streams_kept;
    let r = turnstone::session::gc::collect_with_rule(&a.dir, &opts, &retention, rule)?;
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

/// `turnstone gc postgres://…`: remove the events of deleted sessions that
/// no fork reads, and their snapshots (turnstone-pg's `collect_deleted`).
fn run_pg(a: &GcArgs, url: &str) -> Result<ExitCode, Failure> {
    let store_only = [
        (a.dry_run, "--dry-run"),
        (a.regroup, "--regroup"),
        (a.expire_after.is_some(), "--expire-after"),
        (a.max_age.is_some(), "--max-age"),
        (a.max_bytes.is_some(), "--max-bytes"),
    ];
    if let Some((_, flag)) = store_only.iter().find(|(set, _)| *set) {
        return Err(Failure::usage(format!(
            "{flag} applies to a store directory; on a database gc removes deleted sessions' events"
        )));
    }
    let log = crate::place::connect_reader(url)?;
    let r = log
        .collect_deleted()
        .map_err(|e| crate::place::pg_failure(url, e))?;
    log.close();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "deleted_sessions": r.deleted_sessions,
                "events_removed": r.events_removed,
                "snapshots_removed": r.snapshots_removed,
            })
        );
    } else {
        println!(
            "{} deleted session(s) examined; removed {} event(s) and {} snapshot(s) no fork reads (PostgreSQL's vacuum makes their space reusable)",
            r.deleted_sessions, r.events_removed, r.snapshots_removed
        );
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
    if r.blobs_examined > 0 {
        println!(
            "{} blob file(s) examined; {verb} {} unreferenced ({})",
            r.blobs_examined,
            r.blobs_removed,
            mib(r.blob_bytes_reclaimed)
        );
    }
    println!(
        "{verb} {} of segments ({} -> {}) in {:.3} s{}",
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

#[cfg(test)]
mod tests {
    #[test]
    fn durations_parse_with_units_only() {
        assert_eq!(super::parse_duration_ms("30d"), Ok(30 * 86_400_000));
        assert_eq!(super::parse_duration_ms("500ms"), Ok(500));
        assert_eq!(super::parse_duration_ms("2h"), Ok(7_200_000));
        assert!(super::parse_duration_ms("30").is_err());
        assert!(super::parse_duration_ms("x3s").is_err());
        assert!(super::parse_duration_ms("3w").is_err());
    }
}

/// The rule of a CLI built without `turnstone serve` (the Python package's):
/// a stream of the server (a session `ds/` + 16 digits) is never dead, so
/// this build neither frees nor evicts one (the server's own rule needs its
/// records; `cargo install`'s CLI or the server itself applies it); every
/// other session by the session layer's rule.
#[cfg(not(feature = "serve"))]
fn streams_kept(
    c: &turnstone::gc::CollectCandidate<'_>,
    policy: &turnstone::session::retention::Policy,
    now: u64,
) -> bool {
    let stream = c
        .name
        .strip_prefix("ds/")
        .is_some_and(|d| d.len() == 16 && d.bytes().all(|b| b.is_ascii_digit()));
    !stream && turnstone::session::gc::is_dead(c, policy, now)
}
