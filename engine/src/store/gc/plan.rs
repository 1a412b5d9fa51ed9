//! Step 1 of FORMAT.md §14.4: decide, before anything changes, which
//! sessions are dead and their `need` (§14.1), how many live and dead bytes
//! each sealed segment holds, and which ranges of sealed segments to
//! rewrite ([`make_plan`]).
//!
//! Invariant: planning only reads. It works from a census of the sessions
//! taken at one moment and from the sealed segments (never the active one,
//! where appends go); its result, a [`Plan`], is what every later step
//! (manifest, checkpoint removal, rewrite) acts on, so a frame is live in
//! the rewrite exactly when §14.1 says so here.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::frame::{Compaction, SegmentHeader, KIND_SESSION_DEFINE};
use crate::index::reclaimed::Reclaimed;
use crate::log::{read_segment, segment_path, SegmentBytes};
use crate::types::{LogPos, SegmentId, SessionId};
use crate::vfs::Vfs;

use super::read::{frame_at, load_segment, WalkedFrame};
use super::summary::{summarize, Summaries};
use super::throttle::Throttle;
use super::{CollectCandidate, CollectOptions, CollectReport};

pub(super) struct Sealed {
    pub(super) id: SegmentId,
    pub(super) header: SegmentHeader,
    pub(super) compaction: Option<Compaction>,
    pub(super) file_len: u64,
    pub(super) data_end: u64,
    pub(super) live_bytes: u64,
    pub(super) dead_bytes: u64,
    /// It holds a live event frame (not only defines).
    pub(super) live_events: bool,
    /// Its define frames: (offset, padded length).
    pub(super) defines: Vec<(u32, u32)>,
}

/// One session as a collection sees it, copied out of the index.
pub(super) struct CensusEntry {
    pub(super) name: Arc<str>,
    pub(super) len: u64,
    pub(super) parent: Option<(SessionId, u64)>,
    pub(super) first: Option<u64>,
    pub(super) last: Option<u64>,
    /// Whether the session may be declared dead now (an online collection
    /// only decides on what is durable).
    pub(super) eligible: bool,
    /// A writable handle holds it in this process (online only).
    pub(super) held: bool,
}

/// The sessions of a store at one moment (§14.1's input).
pub(super) struct Census {
    pub(super) sessions: Vec<CensusEntry>,
    pub(super) reclaimed: Reclaimed,
}

impl Census {
    pub(super) fn of(ix: &crate::index::Index, eligible: impl Fn(Option<u64>) -> bool) -> Census {
        let sessions = ix
            .sessions
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let id = SessionId(i as u32);
                let last = ix.last_position(id);
                CensusEntry {
                    name: e.name.clone(),
                    len: e.len(),
                    parent: e.parent,
                    first: ix.position(id, e.inherited()),
                    last,
                    eligible: eligible(last),
                    held: false,
                }
            })
            .collect();
        Census {
            sessions,
            reclaimed: ix.reclaimed.clone(),
        }
    }
}

/// What a collection decided before it changes anything.
pub(super) struct Plan {
    pub(super) manifest: Reclaimed,
    pub(super) need: Vec<u64>,
    pub(super) sealed: Vec<Sealed>,
    pub(super) ranges: Vec<std::ops::Range<usize>>,
    /// `first_batch_seq` of the segment after the last sealed one.
    pub(super) tail_first_batch_seq: u64,
    /// Session names by compact id (for `moved_defines`).
    pub(super) names: Vec<Arc<str>>,
}

impl Plan {
    pub(super) fn live(&self, f: &WalkedFrame) -> bool {
        f.kind == KIND_SESSION_DEFINE
            || self
                .need
                .get(f.session.0 as usize)
                .is_none_or(|n| f.seq < *n)
    }
}

/// Step 1 of §14.4: decide the dead sessions and `need` (§14.1), walk the
/// sealed segments `sealed_ids` (every segment before `tail_seg`) and
/// select the ranges to rewrite.
#[allow(clippy::too_many_arguments)]
pub(super) fn make_plan(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: [u8; 16],
    census: &Census,
    sealed_ids: &[SegmentId],
    tail_seg: SegmentId,
    opts: &CollectOptions,
    is_dead: &dyn Fn(&CollectCandidate<'_>) -> bool,
    report: &mut CollectReport,
    throttle: &mut Throttle<'_>,
    summaries: &mut Summaries,
) -> Result<Plan> {
    let at = Place { vfs, dir, store_id };
    let listed = list_sealed(&at, sealed_ids, throttle, summaries)?;
    let dead = decide_dead(&at, census, &listed, summaries, opts, is_dead, report)?;
    let need = needs(census, &dead);
    let n = census.sessions.len();
    let manifest: Reclaimed = (0..n)
        .filter(|i| dead[*i])
        .map(|i| (SessionId(i as u32), need[i]))
        .collect();
    let mut plan = Plan {
        manifest,
        need,
        sealed: Vec::new(),
        ranges: Vec::new(),
        tail_first_batch_seq: 0,
        names: census.sessions.iter().map(|e| e.name.clone()).collect(),
    };
    weigh_sealed(&at, &mut plan, &listed, summaries, report, throttle)?;
    plan.ranges = select_ranges(&plan.sealed, opts);
    if !plan.ranges.is_empty() {
        let path = segment_path(dir, tail_seg);
        let b = read_segment(vfs, &path, true)?;
        plan.tail_first_batch_seq = SegmentHeader::decode(&b)
            .map(|h| h.first_batch_seq)
            .map_err(|e| Error::corrupt(&path, 0, format!("segment header: {e}")))?;
    } else {
        report.sessions_reclaimed = 0; // nothing written: nothing reclaimed yet
    }
    Ok(plan)
}

/// Where a collection reads: the store's files and its id.
struct Place<'a> {
    vfs: &'a dyn Vfs,
    dir: &'a Path,
    store_id: [u8; 16],
}

/// The sealed segments to examine, their summaries loaded into
/// `summaries` (read once; an online collection keeps them). A file inside
/// the range of a compacted file before it is superseded (§14.3; an
/// interrupted removal) and skipped.
fn list_sealed(
    at: &Place<'_>,
    sealed_ids: &[SegmentId],
    throttle: &mut Throttle<'_>,
    summaries: &mut Summaries,
) -> Result<Vec<SegmentId>> {
    let Place { vfs, dir, store_id } = *at;
    let mut listed: Vec<SegmentId> = Vec::new();
    let mut covered_to: Option<SegmentId> = None;
    for id in sealed_ids.iter().copied() {
        if covered_to.is_some_and(|c| id <= c) {
            continue;
        }
        let sum = match summaries.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let (bytes, frames, data_end, header, compaction) =
                    load_segment(vfs, dir, store_id, id)?;
                throttle.consume(data_end)?;
                v.insert(summarize(
                    header,
                    compaction,
                    bytes.len() as u64,
                    data_end,
                    &frames,
                ))
            }
        };
        covered_to = sum.compaction.map(|c| c.last_segment);
        listed.push(id);
    }

    Ok(listed)
}

/// §14.1: which sessions are dead (already reclaimed, dead by `is_dead`,
/// or evicted to bring the live bytes under `opts.max_live_bytes`).
fn decide_dead(
    at: &Place<'_>,
    census: &Census,
    listed: &[SegmentId],
    summaries: &Summaries,
    opts: &CollectOptions,
    is_dead: &dyn Fn(&CollectCandidate<'_>) -> bool,
    report: &mut CollectReport,
) -> Result<Vec<bool>> {
    let Place { vfs, dir, store_id } = *at;
    let n = census.sessions.len();
    let mut cache: HashMap<SegmentId, SegmentBytes> = HashMap::new();
    let mut dead: Vec<bool> = (0..n)
        .map(|i| census.reclaimed.contains_key(&SessionId(i as u32)))
        .collect();
    let mut ask = |i: usize, evicting: bool| -> Result<bool> {
        let e = &census.sessions[i];
        let last = match e.last {
            None => None,
            Some(p) => Some(frame_at(vfs, dir, store_id, &mut cache, LogPos(p))?),
        };
        let first = match e.first {
            None => None,
            Some(p) => Some(frame_at(vfs, dir, store_id, &mut cache, LogPos(p))?),
        };
        Ok(is_dead(&CollectCandidate {
            name: &e.name,
            len: e.len,
            first: first.as_ref().map(|(k, p)| (*k, p.as_slice())),
            last: last.as_ref().map(|(k, p)| (*k, p.as_slice())),
            held: e.held,
            evicting,
        }))
    };
    for (i, d) in dead.iter_mut().enumerate() {
        if *d || !census.sessions[i].eligible {
            continue;
        }
        if ask(i, false)? {
            *d = true;
            report.sessions_reclaimed += 1;
        }
    }
    if let Some(max) = opts.max_live_bytes {
        // Over the budget: evict the sessions whose last event is oldest
        // first, as far as the rule lets (an estimate: a session's bytes
        // are counted whole, also where a live fork still reads a prefix).
        let mut own = vec![0u64; n];
        let mut live_total = 0u64;
        for id in listed {
            let sum = &summaries[id];
            live_total += sum.define_bytes;
            for span in &sum.sessions {
                if let Some(b) = own.get_mut(span.session.0 as usize) {
                    *b += span.bytes;
                }
            }
        }
        live_total += (0..n).filter(|i| !dead[*i]).map(|i| own[i]).sum::<u64>();
        let mut order: Vec<usize> = (0..n)
            .filter(|i| !dead[*i] && census.sessions[*i].eligible)
            .collect();
        order.sort_by_key(|i| census.sessions[*i].last.unwrap_or(0));
        for i in order {
            if live_total <= max {
                break;
            }
            if own[i] > 0 && ask(i, true)? {
                dead[i] = true;
                live_total -= own[i];
                report.sessions_reclaimed += 1;
                report.sessions_evicted += 1;
            }
        }
    }
    Ok(dead)
}

/// The live and dead bytes of each listed sealed segment, into
/// `plan.sealed` (a segment where a dead fork parent's prefix ends is
/// counted frame by frame).
fn weigh_sealed(
    at: &Place<'_>,
    plan: &mut Plan,
    listed: &[SegmentId],
    summaries: &Summaries,
    report: &mut CollectReport,
    throttle: &mut Throttle<'_>,
) -> Result<()> {
    let Place { vfs, dir, store_id } = *at;
    for id in listed.iter().copied() {
        let sum = &summaries[&id];
        let (mut live_bytes, mut dead_bytes) = (sum.define_bytes, 0);
        let mut live_events = false;
        let mut partial = false;
        for span in &sum.sessions {
            let need = plan
                .need
                .get(span.session.0 as usize)
                .copied()
                .unwrap_or(u64::MAX);
            if need > span.last_seq {
                live_bytes += span.bytes;
                live_events = true;
            } else if need <= span.first_seq {
                dead_bytes += span.bytes;
            } else {
                partial = true;
            }
        }
        if partial {
            // A dead fork parent's prefix ends inside this segment: count
            // frame by frame.
            let (_, frames, data_end, _, _) = load_segment(vfs, dir, store_id, id)?;
            throttle.consume(data_end)?;
            (live_bytes, dead_bytes, live_events) = (0, 0, false);
            for f in &frames {
                if plan.live(f) {
                    live_bytes += f.padded;
                    live_events |= f.kind != KIND_SESSION_DEFINE;
                } else {
                    dead_bytes += f.padded;
                }
            }
        }
        report.segments_examined += 1;
        report.bytes_before += sum.file_len;
        report.bytes_live += live_bytes;
        plan.sealed.push(Sealed {
            id,
            header: sum.header,
            compaction: sum.compaction,
            file_len: sum.file_len,
            data_end: sum.data_end,
            live_bytes,
            dead_bytes,
            live_events,
            defines: sum.defines.clone(),
        });
    }

    Ok(())
}

/// The runs of selected sealed segments, cut into ranges of at most
/// `opts.max_range_bytes` live bytes (a run's first segment always goes).
fn select_ranges(sealed: &[Sealed], opts: &CollectOptions) -> Vec<std::ops::Range<usize>> {
    // Selected: holds garbage, and no live event or live bytes below the
    // threshold (defines are always live, §14.1).
    let selected = |s: &Sealed| {
        (opts.regroup && s.compaction.is_none())
            || (s.dead_bytes > 0
                && (!s.live_events || (s.live_bytes as f64) < opts.threshold * s.data_end as f64))
    };
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    let mut i = 0;
    while i < sealed.len() {
        if !selected(&sealed[i]) {
            i += 1;
            continue;
        }
        let start = i;
        let mut bytes = 0;
        while i < sealed.len()
            && selected(&sealed[i])
            && (i == start || bytes + sealed[i].live_bytes <= opts.max_range_bytes)
        {
            bytes += sealed[i].live_bytes;
            i += 1;
        }
        ranges.push(start..i);
    }
    ranges
}

/// `need` of §14.1 for every session, given which are dead: a live
/// session's length; a dead one's, the longest prefix its live fork
/// descendants read (never more than the manifest already keeps).
fn needs(census: &Census, dead: &[bool]) -> Vec<u64> {
    let n = census.sessions.len();
    let mut need = vec![0u64; n];
    let mut reach = vec![0u64; n];
    for i in (0..n).rev() {
        let e = &census.sessions[i];
        need[i] = if dead[i] {
            let r = reach[i];
            census
                .reclaimed
                .get(&SessionId(i as u32))
                .map_or(r, |k| r.min(*k))
        } else {
            e.len
        };
        if let Some((p, upto)) = e.parent {
            if (p.0 as usize) < i {
                let r = &mut reach[p.0 as usize];
                *r = (*r).max(need[i].min(upto));
            }
        }
    }
    need
}
