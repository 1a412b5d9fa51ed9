//! Coordinates: turns, and conversions between the three ways a harness
//! points into a session — a message index (what the model sees), a surface
//! position (what a surface op takes) and a seq (what the log and fork
//! take) — so that compaction and fork can be asked for by message index
//! or by turn.

use serde::Serialize;

use crate::session::codec::event::TurnEndReason;

/// One turn of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnInfo {
    /// The turn id of its `turn/start`.
    pub turn_id: String,
    /// Seq of its `turn/start`.
    pub start_seq: u64,
    /// Seq of its `turn/end` (None while it runs, or if it was never closed).
    pub end_seq: Option<u64>,
    /// How it ended (`interrupted` only when repair closed it).
    pub reason: Option<TurnEndReason>,
}

impl TurnInfo {
    /// The seqs the turn spans, `turn/end` included (to the end of the log
    /// while it runs).
    pub fn seqs(&self, len: u64) -> std::ops::Range<u64> {
        self.start_seq..self.end_seq.map_or(len, |e| e + 1)
    }
}
