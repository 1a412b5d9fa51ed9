//! `turnstone verify`: a full, read-only check of every segment and frame.

use std::ops::ControlFlow;
use std::path::Path;
use std::process::ExitCode;

use turnstone::inspect::{self, InspectProblem, Item};
use turnstone::ProblemKind;

use crate::Failure;

/// A problem as a JSON object (fields in this order).
#[derive(Debug, serde::Serialize)]
pub struct ProblemJson {
    pub problem: &'static str,
    pub segment: String,
    pub offset: u64,
    pub bytes: u64,
    pub detail: String,
}

pub fn problem_json(p: &InspectProblem) -> ProblemJson {
    ProblemJson {
        problem: kind_str(p.kind),
        segment: p.segment.display().to_string(),
        offset: p.offset,
        bytes: p.bytes,
        detail: p.detail.clone(),
    }
}

/// `verify --json` output.
#[derive(Debug, serde::Serialize)]
struct VerifyJson {
    path: String,
    ok: bool,
    status: &'static str,
    segments: u64,
    batches: u64,
    frames: u64,
    events: u64,
    sessions: u64,
    payload_bytes: u64,
    clean_close: bool,
    problems: Vec<ProblemJson>,
}

pub fn kind_str(k: ProblemKind) -> &'static str {
    match k {
        ProblemKind::TornTail => "torn-tail",
        ProblemKind::Corruption => "corruption",
    }
}

/// One sentence describing a problem.
pub fn problem_text(p: &InspectProblem) -> String {
    match p.kind {
        ProblemKind::TornTail => format!(
            "torn tail in {} at offset {} ({} bytes): {}; these are unacknowledged writes of an interrupted commit, the next open truncates them",
            p.segment.display(),
            p.offset,
            p.bytes,
            p.detail
        ),
        ProblemKind::Corruption => format!(
            "corruption in {} at offset {}: {}",
            p.segment.display(),
            p.offset,
            p.detail
        ),
    }
}

pub fn run(dir: &Path, json: bool) -> Result<ExitCode, Failure> {
    let mut problems = Vec::new();
    let s = inspect::walk(dir, |item| {
        if let Item::Problem(p) = item {
            problems.push(p);
        }
        ControlFlow::Continue(())
    })
    .map_err(|e| Failure::usage(e.to_string()))?;
    let status = if s.corruptions > 0 {
        "corrupt"
    } else if s.torn_tails > 0 {
        "torn-tail"
    } else {
        "clean"
    };
    if json {
        let out = VerifyJson {
            path: dir.display().to_string(),
            ok: s.corruptions == 0,
            status,
            segments: s.segments,
            batches: s.batches,
            frames: s.frames,
            events: s.events,
            sessions: s.sessions,
            payload_bytes: s.payload_bytes,
            clean_close: s.clean_close,
            problems: problems.iter().map(problem_json).collect(),
        };
        let line = serde_json::to_string(&out)
            .map_err(|e| Failure::io(format!("cannot encode the report: {e}")))?;
        println!("{line}");
    } else {
        for p in &problems {
            println!("{}", problem_text(p));
        }
        let verdict = match status {
            "corrupt" => format!(
                "CORRUPT ({} corruption problem{})",
                s.corruptions,
                if s.corruptions == 1 { "" } else { "s" }
            ),
            "torn-tail" => "ok except for a torn tail (no acknowledged event is lost)".to_string(),
            _ => "ok".to_string(),
        };
        println!(
            "{}: {} segments, {} batches, {} events in {} sessions{}: {verdict}",
            dir.display(),
            s.segments,
            s.batches,
            s.events,
            s.sessions,
            if s.clean_close {
                ", closed cleanly"
            } else {
                ""
            },
        );
    }
    Ok(if s.corruptions > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
