//! `turnstone recover`: open a store for writing (the recovery pass), then
//! repair every session left open by a crash, and say exactly what was done.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use turnstone::session::{Host, Registry, RepairReport};
use turnstone::RecoveryMode;
use turnstone::{Options, Problem, Store};

use crate::failure::existing_dir;
use crate::verify::kind_str;
use crate::Failure;

#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// Store directory.
    pub dir: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Salvage: on corruption, keep the log up to the first damage and
    /// discard everything after it (default: refuse to open a corrupt store).
    #[arg(long)]
    pub point_in_time: bool,
}

#[derive(Debug, serde::Serialize)]
struct ProblemOut {
    problem: &'static str,
    segment: String,
    offset: u64,
    bytes: u64,
    detail: String,
    action: String,
}

#[derive(Debug, serde::Serialize)]
struct ToolOut {
    session: String,
    call_id: String,
}

#[derive(Debug, serde::Serialize)]
struct ErrorOut {
    session: String,
    error: String,
}

/// `recover --json` output.
#[derive(Debug, serde::Serialize)]
struct RecoverJson {
    path: String,
    /// The previous run closed the store cleanly.
    clean_shutdown: bool,
    torn_bytes_truncated: u64,
    problems: Vec<ProblemOut>,
    sessions: u64,
    sessions_repaired: u64,
    turns_interrupted: u64,
    steps_closed: u64,
    tools_outcome_unknown: Vec<ToolOut>,
    tools_not_started: Vec<ToolOut>,
    events_appended: u64,
    /// Staging sessions interrupted imports left, deleted now.
    staging_deleted: Vec<String>,
    /// Sessions that could not be restored (and so were not repaired).
    errors: Vec<ErrorOut>,
}

fn problem_out(p: &Problem) -> ProblemOut {
    ProblemOut {
        problem: kind_str(p.kind),
        segment: p.file.display().to_string(),
        offset: p.offset,
        bytes: p.bytes,
        detail: p.detail.clone(),
        action: p.action.clone(),
    }
}

pub fn run(args: &RecoverArgs) -> Result<ExitCode, Failure> {
    existing_dir(&args.dir)?;
    let has_segments = std::fs::read_dir(&args.dir)
        .map_err(|e| Failure::io(format!("cannot read {}: {e}", args.dir.display())))?
        .filter_map(|e| e.ok())
        .any(|e| e.path().extension().is_some_and(|x| x == "tseg"));
    if !has_segments {
        return Err(Failure::usage(format!(
            "{} is not a turnstone store: no segment files (*.tseg) in the directory",
            args.dir.display()
        )));
    }
    let opts = Options {
        recovery_mode: if args.point_in_time {
            RecoveryMode::PointInTime
        } else {
            RecoveryMode::TolerateTornTail
        },
        ..Default::default()
    };
    let store = Arc::new(Store::open_with(&args.dir, opts).map_err(Failure::from)?);
    let report = store.recovery_report().clone();
    let host = Host::new(store.clone(), Arc::new(Registry::new()));
    let infos = store.sessions();
    let bar = crate::progress::bar(infos.len() as u64, "repair", false, true);
    let mut repairs: Vec<RepairReport> = Vec::new();
    let mut errors = Vec::new();
    // One session at a time (as Host::repair_inactive does), so that a
    // session that cannot be restored does not stop the others' repair.
    for info in &infos {
        match host.load(&info.name) {
            Ok((_, Some(r))) => repairs.push(r),
            Ok((_, None)) => {}
            // Deleted (or expired): nothing to repair, and not an error.
            Err(
                turnstone::Error::SessionDeleted { .. } | turnstone::Error::SessionExpired { .. },
            ) => {}
            Err(e) => errors.push(ErrorOut {
                session: info.name.clone(),
                error: crate::failure::describe(&e),
            }),
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    // What an import interrupted between its batches left (its session
    // was never defined): deleted, so it is neither listed nor kept.
    let staging_deleted = turnstone::session::internals::delete_staging_leftovers(store.clone())
        .map_err(|e| Failure::from(e).context("deleting staging sessions".into()))?;
    let synced = store.sync();
    drop(host);
    synced.map_err(|e| Failure::from(e).context("making the repairs durable".into()))?;
    crate::store_open::close(store, &args.dir)?;

    let repaired: Vec<&RepairReport> = repairs.iter().filter(|r| !r.is_noop()).collect();
    let tools = |f: fn(&RepairReport) -> &Vec<String>| -> Vec<ToolOut> {
        repaired
            .iter()
            .flat_map(|r| {
                f(r).iter().map(|c| ToolOut {
                    session: r.session.clone(),
                    call_id: c.clone(),
                })
            })
            .collect()
    };
    let out = RecoverJson {
        path: args.dir.display().to_string(),
        clean_shutdown: report.clean_shutdown,
        torn_bytes_truncated: report.torn_bytes_truncated,
        problems: report.problems.iter().map(problem_out).collect(),
        sessions: infos.len() as u64,
        sessions_repaired: repaired.len() as u64,
        turns_interrupted: repaired.iter().map(|r| r.turns_interrupted as u64).sum(),
        steps_closed: repaired.iter().map(|r| r.steps_closed as u64).sum(),
        tools_outcome_unknown: tools(|r| &r.tools_outcome_unknown),
        tools_not_started: tools(|r| &r.tools_not_started),
        events_appended: repaired.iter().map(|r| r.appended).sum(),
        staging_deleted,
        errors,
    };
    if args.json {
        let line = serde_json::to_string(&out)
            .map_err(|e| Failure::io(format!("cannot encode the report: {e}")))?;
        println!("{line}");
    } else {
        print_text(&out, &repaired);
    }
    Ok(if out.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_text(o: &RecoverJson, repaired: &[&RepairReport]) {
    println!(
        "recovered {}: {}",
        o.path,
        if o.clean_shutdown {
            "the previous run closed the store cleanly"
        } else {
            "the previous run did not close the store cleanly"
        }
    );
    if o.torn_bytes_truncated > 0 {
        println!(
            "  torn tail truncated: {} bytes (unacknowledged writes of an interrupted commit)",
            o.torn_bytes_truncated
        );
    }
    for p in &o.problems {
        println!(
            "  {} in {} at offset {} ({} bytes): {} -> {}",
            p.problem, p.segment, p.offset, p.bytes, p.detail, p.action
        );
    }
    println!(
        "  sessions: {}, repaired: {}, turns interrupted: {}, steps closed: {}, tools outcome-unknown: {}, tools not-started: {}, events appended: {}",
        o.sessions,
        o.sessions_repaired,
        o.turns_interrupted,
        o.steps_closed,
        o.tools_outcome_unknown.len(),
        o.tools_not_started.len(),
        o.events_appended
    );
    if !o.staging_deleted.is_empty() {
        println!(
            "  staging sessions of interrupted imports deleted: {}",
            o.staging_deleted.join(", ")
        );
    }
    for r in repaired {
        let mut what = Vec::new();
        if r.turns_interrupted > 0 {
            what.push("turn interrupted".to_string());
        }
        if r.steps_closed > 0 {
            what.push("step closed".to_string());
        }
        for c in &r.tools_outcome_unknown {
            what.push(format!("tool {c} TOOL_OUTCOME_UNKNOWN"));
        }
        for c in &r.tools_not_started {
            what.push(format!("tool {c} TOOL_NOT_STARTED"));
        }
        println!("    {}: {}", r.session, what.join(", "));
    }
    for e in &o.errors {
        println!("  NOT REPAIRED {}: {}", e.session, e.error);
    }
    if o.sessions_repaired == 0 && o.errors.is_empty() {
        println!("  nothing to repair");
    }
}
