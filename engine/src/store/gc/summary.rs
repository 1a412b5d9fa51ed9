//! Summaries of sealed segments: what a collection needs to know of one to
//! decide (FORMAT.md §14.1, step 1 of §14.4) without reading it again.
//!
//! Invariant: a summary describes a file that never changes. Sealed
//! segments change only by a collection, and an online collection drops
//! the summaries of the files a range replaces when it installs the
//! compacted file, so a kept summary always matches the bytes on disk.

use std::collections::HashMap;

use crate::frame::{Compaction, SegmentHeader, KIND_SESSION_DEFINE};
use crate::types::{SegmentId, SessionId};

use super::read::WalkedFrame;

/// What a collection needs to know of a sealed segment to decide, without
/// reading it again: an online collection keeps these between runs (sealed
/// segments never change but by a collection, which drops the summaries
/// of the files it replaces).
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub(super) header: SegmentHeader,
    pub(super) compaction: Option<Compaction>,
    pub(super) file_len: u64,
    pub(super) data_end: u64,
    /// Padded bytes of define frames (always live).
    pub(super) define_bytes: u64,
    /// Where they lie: (offset, padded length). A rewrite reads only these
    /// of a file that holds no live event.
    pub(super) defines: Vec<(u32, u32)>,
    /// Per session, its event frames here: first seq, last seq, padded
    /// bytes.
    pub(super) sessions: Vec<SessionSpan>,
}

#[derive(Debug, Clone)]
pub(super) struct SessionSpan {
    pub(super) session: SessionId,
    pub(super) first_seq: u64,
    pub(super) last_seq: u64,
    pub(super) bytes: u64,
}

/// Summaries by segment id.
pub(crate) type Summaries = HashMap<SegmentId, Summary>;

pub(super) fn summarize(
    header: SegmentHeader,
    compaction: Option<Compaction>,
    file_len: u64,
    data_end: u64,
    frames: &[WalkedFrame],
) -> Summary {
    let mut define_bytes = 0;
    let mut defines = Vec::new();
    let mut by: std::collections::BTreeMap<SessionId, SessionSpan> = Default::default();
    for f in frames {
        if f.kind == KIND_SESSION_DEFINE {
            define_bytes += f.padded;
            let at = f.payload.0 - crate::frame::FRAME_HEADER_BYTES;
            defines.push((at as u32, f.padded as u32));
            continue;
        }
        let e = by.entry(f.session).or_insert(SessionSpan {
            session: f.session,
            first_seq: f.seq,
            last_seq: f.seq,
            bytes: 0,
        });
        e.first_seq = e.first_seq.min(f.seq);
        e.last_seq = e.last_seq.max(f.seq);
        e.bytes += f.padded;
    }
    Summary {
        header,
        compaction,
        file_len,
        data_end,
        define_bytes,
        defines,
        sessions: by.into_values().collect(),
    }
}
