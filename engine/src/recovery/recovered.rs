//! What the recovery pass hands the open ([`super::plan::recover`] and
//! [`super::salvage::salvage`] both end in one).

use crate::index::Index;
use crate::types::SegmentId;

use super::RecoveryReport;

/// The result of the pass, for [`crate::Store::open`] to act on.
pub(crate) struct Recovered {
    pub store_id: Option<[u8; 16]>,
    pub index: Index,
    /// Segments that remain, in order.
    pub segments: Vec<SegmentId>,
    /// Where the next batch goes: segment, offset, batch sequence.
    pub tail: Option<(SegmentId, u32, u64)>,
    pub report: RecoveryReport,
    /// Byte ranges to zero before the first append (torn bytes).
    pub zero_ranges: Vec<(SegmentId, u32, u32)>,
    /// Segment files to remove (a torn new segment, or PointInTime discards).
    pub remove_segments: Vec<SegmentId>,
    pub remove_checkpoint: bool,
}
