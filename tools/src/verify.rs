//! `turnstone verify`: a full, read-only check of every segment and frame,
//! reported per segment.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use indicatif::ProgressBar;
use turnstone::inspect::{self, ChecksumOf, InspectProblem, Item, Summary};
use turnstone::ProblemKind;

use crate::Failure;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Store directory (or a single segment file, or an archive file).
    pub dir: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A problem as a JSON object (fields in this order).
#[derive(Debug, serde::Serialize)]
pub struct ProblemJson {
    pub problem: &'static str,
    pub segment: String,
    pub offset: u64,
    pub bytes: u64,
    pub detail: String,
    /// The checksum stored in the file, when a checksum is what failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// The checksum of the bytes as found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
    /// Which checksum failed: `segment-header`, `batch-header`, `batch-body`
    /// or `frame`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<ChecksumOf>,
    /// Inside a failing batch: the frames that fail their own checksum.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damaged_frames: Vec<DamagedFrameJson>,
    /// Inside a failing batch: how many frames check on their own (`dump`
    /// shows them, marked not trusted).
    #[serde(skip_serializing_if = "is_zero")]
    pub untrusted_frames: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One frame of a failing batch that fails its own checksum.
#[derive(Debug, serde::Serialize)]
pub struct DamagedFrameJson {
    pub offset: u64,
    pub len: u64,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
}

pub fn problem_json(p: &InspectProblem) -> ProblemJson {
    ProblemJson {
        problem: kind_str(p.kind),
        segment: p.segment.display().to_string(),
        offset: p.offset,
        bytes: p.bytes,
        detail: p.detail.clone(),
        expected: p.checksum.map(|c| format!("{:#010x}", c.stored)),
        found: p.checksum.map(|c| format!("{:#010x}", c.computed)),
        checksum: p.checksum.map(|c| c.of),
        damaged_frames: p
            .damaged_frames
            .iter()
            .map(|d| DamagedFrameJson {
                offset: d.offset,
                len: d.len,
                detail: d.detail.clone(),
                expected: d.checksum.map(|c| format!("{:#010x}", c.stored)),
                found: d.checksum.map(|c| format!("{:#010x}", c.computed)),
            })
            .collect(),
        untrusted_frames: p.untrusted_frames,
    }
}

/// The frames of a failing batch, in words: which fail their own checksum
/// and how many around them check.
fn frames_text(p: &InspectProblem) -> String {
    if p.damaged_frames.is_empty() && p.untrusted_frames == 0 {
        return String::new();
    }
    let damaged: Vec<String> = p
        .damaged_frames
        .iter()
        .map(|d| format!("offset {} ({} bytes): {}", d.offset, d.len, d.detail))
        .collect();
    let list = if damaged.is_empty() {
        "none fails its own checksum".to_string()
    } else {
        format!("damaged frames at {}", damaged.join(", "))
    };
    format!(
        "; inside the batch: {list}; {} frames around them check on their own (shown by dump, not trusted by recovery)",
        p.untrusted_frames
    )
}

pub fn kind_str(k: ProblemKind) -> &'static str {
    match k {
        ProblemKind::TornTail => "torn-tail",
        ProblemKind::Corruption => "corruption",
    }
}

/// One sentence describing a problem.
pub fn problem_text(p: &InspectProblem) -> String {
    let sum = p
        .checksum
        .map(|c| {
            let of = match c.of {
                ChecksumOf::SegmentHeader => "segment header",
                ChecksumOf::BatchHeader => "batch header",
                ChecksumOf::BatchBody => "batch body",
                ChecksumOf::Frame => "frame",
            };
            format!(
                " [{of} checksum: expected {:#010x}, found {:#010x}]",
                c.stored, c.computed
            )
        })
        .unwrap_or_default();
    let sum = format!("{sum}{}", frames_text(p));
    match p.kind {
        ProblemKind::TornTail => format!(
            "torn tail in {} at offset {} ({} bytes): {}{sum}; these are unacknowledged writes of an interrupted commit, the next writable open truncates them",
            p.segment.display(),
            p.offset,
            p.bytes,
            p.detail
        ),
        ProblemKind::Corruption => format!(
            "corruption in {} at offset {} ({} bytes skipped): {}{sum}",
            p.segment.display(),
            p.offset,
            p.bytes,
            p.detail
        ),
    }
}

/// What verify found in one segment file.
#[derive(Debug, Default, serde::Serialize)]
pub struct SegmentReport {
    pub file: String,
    pub size: u64,
    /// Format version from the header (`None`: the header does not decode).
    pub format_version: Option<u32>,
    pub first_batch_seq: Option<u64>,
    /// Made from a free file (FORMAT.md §6.2 rule 7): bytes after its end
    /// of data are stale. Left out of the JSON when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub recycled: bool,
    pub batches: u64,
    pub frames: u64,
    pub events: u64,
    pub payload_bytes: u64,
    pub torn_tails: u64,
    pub corruptions: u64,
    /// `ok`, `torn-tail` or `corrupt`.
    pub status: &'static str,
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
    per_segment: Vec<SegmentReport>,
    problems: Vec<ProblemJson>,
    /// Blob files present (FORMAT.md §15).
    blobs: u64,
    /// Damaged blob files, and blobs an event references that are missing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    blob_problems: Vec<BlobProblem>,
}

/// One blob that fails its checks.
#[derive(Debug, serde::Serialize)]
struct BlobProblem {
    blob: String,
    file: String,
    detail: String,
}

/// Check every blob file of the store at `dir` and that every blob the
/// events reference (`refs`, and references inside blobs) is present.
fn check_blobs(
    dir: &Path,
    mut refs: std::collections::BTreeSet<[u8; 32]>,
) -> (u64, Vec<BlobProblem>) {
    use turnstone::blobs::{hex, BlobDir};
    let blobs = BlobDir::new(dir);
    let mut problems = Vec::new();
    let present = match blobs.list() {
        Ok(l) => l,
        Err(e) => {
            problems.push(BlobProblem {
                blob: String::new(),
                file: blobs.dir().display().to_string(),
                detail: e.to_string(),
            });
            Vec::new()
        }
    };
    for h in &present {
        match blobs.get(h) {
            Ok(bytes) => refs.extend(turnstone::session::internals::refs_in_blob(&bytes)),
            Err(e) => problems.push(BlobProblem {
                blob: hex(h),
                file: blobs.path(h).display().to_string(),
                detail: e.to_string(),
            }),
        }
    }
    let have: std::collections::BTreeSet<_> = present.iter().collect();
    for h in &refs {
        if !have.contains(h) {
            problems.push(BlobProblem {
                blob: hex(h),
                file: blobs.path(h).display().to_string(),
                detail: format!("blob {} is referenced but missing", hex(h)),
            });
        }
    }
    (present.len() as u64, problems)
}

fn status_of(torn: u64, corrupt: u64) -> &'static str {
    if corrupt > 0 {
        "corrupt"
    } else if torn > 0 {
        "torn-tail"
    } else {
        "ok"
    }
}

pub fn run(args: &VerifyArgs) -> Result<ExitCode, Failure> {
    let dir: &Path = &args.dir;
    if turnstone::archive::is_archive(dir) {
        return crate::archive::verify(dir, args.json);
    }
    let total = crate::progress::segment_bytes(dir);
    let bar = crate::progress::bar(
        total,
        "verify",
        true,
        total >= crate::progress::LARGE_STORE_BYTES,
    );
    let (s, walked) = walk_segments(dir, &bar);
    let Walked {
        mut segs,
        problems,
        refs,
    } = walked;
    bar.finish_and_clear();
    let s = s.map_err(Failure::from)?;
    for r in &mut segs {
        r.status = status_of(r.torn_tails, r.corruptions);
    }
    let (blob_count, blob_problems) = if dir.is_dir() {
        check_blobs(dir, refs)
    } else {
        (0, Vec::new())
    };
    let corruptions = s.corruptions + blob_problems.len() as u64;
    let status = match status_of(s.torn_tails, corruptions) {
        "ok" => "clean",
        other => other,
    };
    if args.json {
        let out = VerifyJson {
            path: dir.display().to_string(),
            ok: corruptions == 0,
            status,
            segments: s.segments,
            batches: s.batches,
            frames: s.frames,
            events: s.events,
            sessions: s.sessions,
            payload_bytes: s.payload_bytes,
            clean_close: s.clean_close,
            per_segment: segs,
            problems: problems.iter().map(problem_json).collect(),
            blobs: blob_count,
            blob_problems,
        };
        let line = serde_json::to_string(&out)
            .map_err(|e| Failure::io(format!("cannot encode the report: {e}")))?;
        println!("{line}");
    } else {
        for r in &segs {
            print_segment(r);
        }
        for p in &problems {
            println!("{}", problem_text(p));
        }
        for b in &blob_problems {
            println!("blob {}: CORRUPT: {}", b.blob, b.detail);
        }
        print_verdict(dir, &s, blob_count, status, corruptions);
    }
    Ok(if corruptions > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// What the walk over a store's segments gathered for the report.
struct Walked {
    /// One report per segment file, in log order.
    segs: Vec<SegmentReport>,
    /// Every problem, in the order the walk found them.
    problems: Vec<InspectProblem>,
    /// The blobs the trusted frames reference, checked against the blob
    /// files afterwards.
    refs: BTreeSet<[u8; 32]>,
}

/// Walk every segment, batch and frame at `dir`, moving `bar` along, and
/// gather the per-segment counts, the problems and the blob references.
/// Apart from [`run`] so that the walk's bookkeeping reads on its own; the
/// walk's own result (its totals, or why it could not run) is returned as
/// it is, for `run` to act on after the bar is cleared.
fn walk_segments(dir: &Path, bar: &ProgressBar) -> (turnstone::Result<Summary>, Walked) {
    let mut problems = Vec::new();
    let mut segs: Vec<SegmentReport> = Vec::new();
    let mut done = 0u64;
    let mut refs = std::collections::BTreeSet::new();
    let s = inspect::walk(dir, |item| {
        match item {
            Item::Segment(s) => {
                if let Some(prev) = segs.last() {
                    done += prev.size;
                }
                bar.set_position(done);
                segs.push(SegmentReport {
                    file: s.file.display().to_string(),
                    size: s.size,
                    format_version: s.header.map(|h| h.version),
                    first_batch_seq: s.header.map(|h| h.first_batch_seq),
                    recycled: turnstone::frame::header_is_recycled(s.raw_header),
                    ..Default::default()
                });
            }
            Item::Batch(b) => {
                bar.set_position(done + b.offset);
                if let Some(r) = segs.last_mut() {
                    r.batches += 1;
                }
            }
            Item::Frame(f) if !f.trusted => {}
            Item::Frame(f) => {
                refs.extend(turnstone::session::internals::direct_refs(f.payload));
                if let Some(r) = segs.last_mut() {
                    r.frames += 1;
                    if !f.is_define() {
                        r.events += 1;
                        r.payload_bytes += f.payload.len() as u64;
                    }
                }
            }
            Item::Problem(p) => {
                let file = p.segment.display().to_string();
                if let Some(r) = segs.iter_mut().rev().find(|r| r.file == file) {
                    match p.kind {
                        ProblemKind::TornTail => r.torn_tails += 1,
                        ProblemKind::Corruption => r.corruptions += 1,
                    }
                }
                problems.push(p);
            }
        }
        ControlFlow::Continue(())
    });
    (
        s,
        Walked {
            segs,
            problems,
            refs,
        },
    )
}

/// The text line of one segment: file name, format version, size, counts
/// and status. Apart from [`run`] to keep the report's layout in one place.
fn print_segment(r: &SegmentReport) {
    let name = Path::new(&r.file)
        .file_name()
        .map_or_else(|| r.file.clone(), |n| n.to_string_lossy().into_owned());
    let version = r
        .format_version
        .map_or_else(|| "header damaged".to_string(), |v| format!("format {v}"));
    println!(
        "{name}  {version}  {} bytes  {} batches  {} events  {}",
        r.size,
        r.batches,
        r.events,
        match r.status {
            "ok" => "ok".to_string(),
            "torn-tail" => "torn tail".to_string(),
            _ => format!(
                "CORRUPT ({} problem{})",
                r.corruptions,
                if r.corruptions == 1 { "" } else { "s" }
            ),
        }
    );
}

/// The text report's last line: the store's totals and the verdict. Apart
/// from [`run`] for the same reason as [`print_segment`].
fn print_verdict(dir: &Path, s: &Summary, blob_count: u64, status: &str, corruptions: u64) {
    let verdict = match status {
        "corrupt" => format!(
            "CORRUPT ({} corruption problem{})",
            corruptions,
            if corruptions == 1 { "" } else { "s" }
        ),
        "torn-tail" => "ok except for a torn tail (no acknowledged event is lost)".to_string(),
        _ => "ok".to_string(),
    };
    println!(
        "{}: {} segments, {} batches, {} events in {} sessions{}{}: {verdict}",
        dir.display(),
        s.segments,
        s.batches,
        s.events,
        s.sessions,
        if blob_count > 0 {
            format!(", {blob_count} blobs")
        } else {
            String::new()
        },
        if s.clean_close {
            ", closed cleanly"
        } else {
            ""
        },
    );
}
