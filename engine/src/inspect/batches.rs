//! The walker inside one segment: batch after batch through the shared
//! scanner ([`crate::recovery::check_batch`]), each stop classified by
//! [`crate::recovery::classify_stop`] like recovery does; after damage it
//! resynchronises on the next valid batch and goes on. Frames are checked
//! against the session rules of FORMAT.md §4 and §5 in log order.

use std::path::Path;

use crate::frame::{
    Salt, SessionDefine, BATCH_FLAG_CLEAN_CLOSE, BATCH_HEADER_BYTES, KIND_SESSION_DEFINE,
    SEGMENT_HEADER_BYTES,
};
use crate::recovery::{
    check_batch, classify_stop, evidence_after, probe_after, ProblemKind, ScannedFrame, StopFacts,
};
use crate::types::{LogPos, SegmentId, SessionId};

use super::hop::{body_frames, checksum_at, BodyFrame};
use super::walker::{SessionState, Walker};
use super::{BatchInfo, ChecksumMismatch, DamagedFrame, FrameInfo, InspectProblem, Item, Tail};

impl Walker<'_, '_> {
    /// Walk the batches of one segment from the header on, resynchronising
    pub(super) fn walk_batches(&mut self, path: &Path, bytes: &[u8], salt: &Salt, last: bool) {
        let len = bytes.len();
        let mut off = SEGMENT_HEADER_BYTES;
        // End of the last valid batch (`None` once damage made it unknown).
        let mut end = Some(off as u32);
        let mut damaged = false;
        while !self.stop && off <= len {
            let at_end = off + BATCH_HEADER_BYTES > len
                || bytes[off..off + BATCH_HEADER_BYTES].iter().all(|b| *b == 0);
            let failure = if at_end {
                None
            } else {
                match check_batch(bytes, salt, off, self.expected_batch) {
                    Ok((h, frames)) => {
                        self.summary.batches += u64::from(!self.quiet);
                        self.summary.clean_close = h.flags & BATCH_FLAG_CLEAN_CLOSE != 0;
                        self.emit(Item::Batch(BatchInfo {
                            segment: path,
                            offset: off as u64,
                            header: h,
                            raw_header: &bytes[off..off + BATCH_HEADER_BYTES],
                        }));
                        for f in &frames {
                            self.frame(path, salt.segment, h.batch_seq, f, bytes);
                        }
                        damaged |= self.compacted_batch_flags(path, off, len, h.flags);
                        // In a compacted segment every batch has the
                        // header's first_batch_seq (FORMAT.md §14.3).
                        self.expected_batch = Some(if self.compacted.is_some() {
                            h.batch_seq
                        } else {
                            h.batch_seq + 1
                        });
                        off += BATCH_HEADER_BYTES + h.body_len as usize;
                        end = Some(off as u32);
                        continue;
                    }
                    Err(f) => Some(f),
                }
            };
            // Stopped: at a clean end of data, or at a batch that fails.
            let min_seq = self.expected_batch.unwrap_or(0);
            let (later, nonzero_end) = probe_after(bytes, salt, off as u32, min_seq);
            let nonzero_end = evidence_after(bytes, off as u32, failure.is_some(), nonzero_end);
            if let Some(l) = later {
                let detail = match &failure {
                    Some(f) => format!(
                        "{}; a valid later batch at offset {l} proves this region was durable",
                        f.detail
                    ),
                    None => format!(
                        "unreadable bytes between offset {off} and a valid later batch at offset {l}"
                    ),
                };
                let skipped = l as u64 - off as u64;
                let sum = failure.as_ref().and_then(|_| checksum_at(bytes, salt, off));
                let row = classify_stop(&StopFacts {
                    last_segment: last,
                    failure: failure.as_ref().map(|f| f.certain),
                    later_batch: true,
                    nonzero_after: true,
                    checkpoint_covers: false,
                });
                let kind = row.kind().unwrap_or(ProblemKind::Corruption);
                if failure.is_some() {
                    self.batch_problem(kind, path, bytes, salt, off, skipped, detail, sum);
                } else {
                    self.problem_with(kind, path, off as u64, skipped, detail, sum);
                }
                self.lose_track();
                damaged = true;
                off = l as usize;
                continue;
            }
            if failure.is_none() && self.compacted_fill(path, off, len) {
                damaged = true;
                break;
            }
            let torn = nonzero_end.map_or(0, |nz| (nz as u64).saturating_sub(off as u64));
            let proven = if last {
                self.proven_durable(LogPos::new(salt.segment, off as u32))
            } else {
                None
            };
            let row = classify_stop(&StopFacts {
                last_segment: last,
                failure: failure.as_ref().map(|f| f.certain),
                later_batch: false,
                nonzero_after: torn > 0,
                checkpoint_covers: proven.is_some(),
            });
            if let Some(kind) = row.kind() {
                let sum = failure.as_ref().and_then(|_| checksum_at(bytes, salt, off));
                let failed = failure.is_some();
                let mut detail = match failure {
                    Some(f) => f.detail,
                    None if torn > 0 => "non-zero bytes after the last valid batch".to_string(),
                    None => "the log ends here".to_string(),
                };
                if let Some(c) = proven {
                    detail.push_str(&format!(
                        "; an intact index checkpoint covers the log up to {c}, so this region was durable"
                    ));
                }
                if kind == ProblemKind::Corruption {
                    if !last {
                        detail.push_str(" (in a sealed segment: a later segment exists)");
                    }
                    damaged = true;
                }
                if failed {
                    self.batch_problem(kind, path, bytes, salt, off, torn, detail, sum);
                } else {
                    self.problem_with(kind, path, off as u64, torn, detail, sum);
                }
            }
            break;
        }
        if damaged {
            end = None;
        }
        if damaged || self.stop {
            self.lose_track();
        }
        self.prev_end = end;
        self.summary.tail = match (end, self.expected_batch, self.stop) {
            (Some(end), Some(next), false) => Some(Tail {
                segment: path.to_path_buf(),
                segment_id: salt.segment,
                offset: end as u64,
                next_batch_seq: next,
                store_id: salt.store_id,
            }),
            _ => None,
        };
    }

    /// FORMAT.md §14.3: every batch of a compacted segment has flags 0 (the
    /// rule recovery applies); whether the batch at `off` breaks it
    /// (reported).
    fn compacted_batch_flags(&mut self, path: &Path, off: usize, len: usize, flags: u32) -> bool {
        if self.compacted.is_none() || flags == 0 {
            return false;
        }
        let detail = format!("compacted segment: batch flags {flags:#x}, must be 0");
        self.problem(
            ProblemKind::Corruption,
            path,
            off as u64,
            (len - off) as u64,
            detail,
        );
        true
    }

    /// FORMAT.md §14.3: a compacted segment's batches lie back to back to
    /// exactly the end of the file; zero fill inside one (the walk stopped
    /// at `off` before `len`) is corruption, as recovery finds it
    /// (reported).
    fn compacted_fill(&mut self, path: &Path, off: usize, len: usize) -> bool {
        if self.compacted.is_none() || off >= len {
            return false;
        }
        let detail = format!(
            "compacted segment: {} bytes after the last batch (batches must reach the end of the file)",
            len - off
        );
        self.problem(
            ProblemKind::Corruption,
            path,
            off as u64,
            (len - off) as u64,
            detail,
        );
        true
    }

    /// Report the failing batch at `off` as one problem that names the frames
    /// inside it failing their own checksum, then show the frames that check
    /// as not trusted (FORMAT.md §6.5): one flipped byte shows up where it is,
    /// not as the loss of the whole batch.
    #[allow(clippy::too_many_arguments)]
    fn batch_problem(
        &mut self,
        kind: ProblemKind,
        path: &Path,
        bytes: &[u8],
        salt: &Salt,
        off: usize,
        affected: u64,
        detail: String,
        checksum: Option<ChecksumMismatch>,
    ) {
        if self.quiet {
            return;
        }
        let (batch_seq, inside) = body_frames(bytes, salt, off).unwrap_or_default();
        let damaged_frames: Vec<DamagedFrame> = inside
            .iter()
            .filter_map(|f| match f {
                BodyFrame::Damaged(d) => Some(d.clone()),
                BodyFrame::Intact(_) => None,
            })
            .collect();
        let untrusted_frames = (inside.len() - damaged_frames.len()) as u64;
        self.report(InspectProblem {
            kind,
            segment: path.to_path_buf(),
            offset: off as u64,
            bytes: affected,
            detail,
            checksum,
            damaged_frames,
            untrusted_frames,
        });
        for f in &inside {
            if let BodyFrame::Intact(f) = f {
                self.untrusted_frame(path, salt.segment, batch_seq, f, bytes);
            }
        }
    }

    /// Show a frame that checks on its own inside a failing batch. It changes
    /// nothing the walk expects (the batch is not part of the log).
    fn untrusted_frame(
        &mut self,
        path: &Path,
        segment_id: SegmentId,
        batch_seq: u64,
        f: &ScannedFrame<'_>,
        bytes: &[u8],
    ) {
        if self.stop {
            return;
        }
        self.summary.untrusted_frames += 1;
        let h = &f.header;
        let offset = f.pos.offset() as u64;
        let define = (h.kind == KIND_SESSION_DEFINE)
            .then(|| SessionDefine::decode(f.payload).ok())
            .flatten();
        let name = match &define {
            Some(d) => Some(d.name.as_str()),
            None => self
                .sessions
                .get(&h.session.0)
                .and_then(|s| s.name.as_deref()),
        };
        let item = Item::Frame(FrameInfo {
            segment: path,
            segment_id,
            offset,
            len: h.frame_len,
            batch_seq,
            session: h.session,
            session_name: name,
            seq: h.seq,
            kind: h.kind,
            flags: h.flags,
            payload: f.payload,
            define: define.as_ref(),
            raw: bytes
                .get(offset as usize..offset as usize + h.frame_len as usize)
                .unwrap_or(&[]),
            trusted: false,
        });
        if (self.visit)(item).is_break() {
            self.stop = true;
            self.summary.stopped = true;
        }
    }

    pub(super) fn frame(
        &mut self,
        path: &Path,
        segment_id: SegmentId,
        batch_seq: u64,
        f: &crate::recovery::ScannedFrame<'_>,
        bytes: &[u8],
    ) {
        let h = &f.header;
        let offset = f.pos.offset() as u64;
        self.summary.frames += u64::from(!self.quiet);
        let mut issue: Option<String> = None;
        if h.kind == KIND_SESSION_DEFINE {
            match SessionDefine::decode(f.payload) {
                Err(e) => issue = Some(format!("session-define frame: {e}")),
                Ok(def) => {
                    self.summary.sessions += u64::from(!self.quiet);
                    issue = self.define(h.session, &def);
                    let next = def.parent.map_or(0, |(_, upto)| upto);
                    self.sessions.insert(
                        h.session.0,
                        SessionState {
                            name: Some(def.name.clone()),
                            define: Some(def),
                            next: Some(next),
                        },
                    );
                }
            }
        } else {
            if !self.quiet {
                self.summary.events += 1;
                self.summary.payload_bytes += f.payload.len() as u64;
            }
            let lost = self.lost_defines;
            match self.sessions.get_mut(&h.session.0) {
                None => {
                    if !lost {
                        issue = Some(format!("frame for undefined session id {}", h.session.0));
                    }
                    self.sessions.insert(
                        h.session.0,
                        SessionState {
                            name: None,
                            define: None,
                            next: Some(h.seq.wrapping_add(1)),
                        },
                    );
                }
                Some(_)
                    if self
                        .reclaimed
                        .get(&h.session.0)
                        .is_some_and(|k| h.seq >= *k) =>
                {
                    // Garbage of a reclaimed session (FORMAT.md §14.2):
                    // recovery skips it; not a seq to check.
                }
                Some(s) => {
                    if let Some(n) = s.next.filter(|n| *n != h.seq) {
                        issue = Some(format!(
                            "session {}: frame has seq {} but the next seq is {n} (seqs must be dense)",
                            s.name.as_deref().map_or_else(|| format!("#{}", h.session.0), |n| format!("{n:?}")),
                            h.seq
                        ));
                    }
                    s.next = Some(h.seq.wrapping_add(1));
                }
            }
        }
        if let Some(detail) = issue {
            self.problem(
                ProblemKind::Corruption,
                path,
                offset,
                h.frame_len as u64,
                detail,
            );
        }
        if self.quiet || self.stop {
            return;
        }
        let state = self.sessions.get(&h.session.0);
        let item = Item::Frame(FrameInfo {
            segment: path,
            segment_id,
            offset,
            len: h.frame_len,
            batch_seq,
            session: h.session,
            session_name: state.and_then(|s| s.name.as_deref()),
            seq: h.seq,
            kind: h.kind,
            flags: h.flags,
            payload: f.payload,
            define: if h.kind == KIND_SESSION_DEFINE {
                state.and_then(|s| s.define.as_ref())
            } else {
                None
            },
            raw: bytes
                .get(offset as usize..offset as usize + h.frame_len as usize)
                .unwrap_or(&[]),
            trusted: true,
        });
        if (self.visit)(item).is_break() {
            self.stop = true;
            self.summary.stopped = true;
        }
    }

    /// Check a `session-define` against what is known; returns the problem.
    pub(super) fn define(&mut self, id: SessionId, def: &SessionDefine) -> Option<String> {
        let mut issue = None;
        if let Some(n) = self.next_define.filter(|n| *n != id.0) {
            issue = Some(format!(
                "session-define for compact id {} but the next id is {n}",
                id.0
            ));
        } else if self.names.get(&def.name).is_some_and(|k| *k != id.0) {
            issue = Some(format!("session {:?} defined twice", def.name));
        } else if self.sessions.contains_key(&id.0) && !self.lost_defines {
            issue = Some(format!("compact session id {} defined twice", id.0));
        } else if let (Some((p, upto)), false) = (def.parent, self.reclaimed.contains_key(&id.0)) {
            match self.sessions.get(&p.0) {
                None if !self.lost_defines => {
                    issue = Some(format!("fork parent {} does not exist", p.0));
                }
                Some(ps) if ps.next.is_some_and(|n| upto > n) => {
                    issue = Some(format!(
                        "fork inherits {upto} events but the parent has {}",
                        ps.next.unwrap_or(0)
                    ));
                }
                _ => {}
            }
        }
        self.next_define = Some(id.0.wrapping_add(1));
        self.names.insert(def.name.clone(), id.0);
        issue
    }
}
