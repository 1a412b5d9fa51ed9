//! The segmented append-only log: segment files (create, preallocate, name,
//! list, zero a torn tail) and the one segment reader that the read path
//! uses. Frames and headers are laid out by [`crate::frame`]; batches are
//! written by [`crate::commit`].
//!
//! Invariant kept here: bytes the reader lends are checked frame by frame
//! (FORMAT.md §4) whatever the read strategy, and a segment is durable and
//! empty before the first batch goes into it (FORMAT.md §6.2 rule 2).

mod pool;
mod reader;
mod segment;

pub(crate) use pool::SegmentPool;
#[cfg(test)]
pub(crate) use reader::SEALED_FILES_OPEN_MAX;
pub(crate) use reader::{Run, SegmentReader};
pub(crate) use segment::{create_segment, segment_path, zero_range, CreateError, SegmentSpec};
pub use segment::{list_segments, read_segment, SegmentBytes};
