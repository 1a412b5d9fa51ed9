//! Newtypes for what must not be mixed up: positions, seqs, ids.

use std::fmt;

/// Frame flag: readers that do not know the kind may skip it (FORMAT.md
/// §4).
pub const FLAG_IGNORABLE: u16 = 1;

/// A session's dense event number: 0, 1, 2, … with no gap, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(pub u64);

/// Number of a segment file (`format-spec/FORMAT.md` §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SegmentId(pub u32);

/// Compact id of a session inside the log (the string id is mapped to it by a
/// durable `session-define` frame, `FORMAT.md` §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SessionId(pub u32);

/// A position in the log: segment number and byte offset in that segment's
/// file. Packed into a `u64` as `segment << 32 | offset`, so positions compare
/// in log order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogPos(pub u64);

impl LogPos {
    /// The position `offset` bytes into segment `segment`.
    pub const fn new(segment: SegmentId, offset: u32) -> Self {
        LogPos(((segment.0 as u64) << 32) | offset as u64)
    }
    /// The segment the position lies in.
    pub const fn segment(self) -> SegmentId {
        SegmentId((self.0 >> 32) as u32)
    }
    /// Byte offset in the segment file.
    pub const fn offset(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Debug for LogPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.segment().0, self.offset())
    }
}
impl fmt::Display for LogPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What [`crate::Store::append`] returns at once (before durability).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Compact id of the session appended to.
    pub session: SessionId,
    /// The seq the event got in its session.
    pub seq: Seq,
    /// Where the frame starts.
    pub pos: LogPos,
    /// Where the frame ends; durable once `Store::durable_pos() >= end`.
    pub end: LogPos,
}

/// One event read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event's seq in the session.
    pub seq: Seq,
    /// The event kind (1..=65535, opaque to the engine).
    pub kind: u16,
    /// Frame flags (bit 0: ignorable).
    pub flags: u16,
    /// The event's payload bytes.
    pub payload: Vec<u8>,
    /// Where the event's frame starts in the log (for an inherited event,
    /// the ancestor's frame).
    pub pos: LogPos,
}

impl Event {
    /// Whether the frame carries the `ignorable` flag.
    pub fn ignorable(&self) -> bool {
        self.flags & FLAG_IGNORABLE != 0
    }
}

/// One event lent by [`crate::Store::visit_range`]: the payload borrows the
/// log's bytes for the duration of the visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRef<'a> {
    /// The event's seq in the session.
    pub seq: Seq,
    /// The event kind (1..=65535, opaque to the engine).
    pub kind: u16,
    /// Frame flags (bit 0: ignorable).
    pub flags: u16,
    /// The event's payload bytes.
    pub payload: &'a [u8],
    /// Where the event's frame starts in the log (for an inherited event,
    /// the ancestor's frame).
    pub pos: LogPos,
}

impl EventRef<'_> {
    /// Whether the frame carries the `ignorable` flag.
    pub fn ignorable(&self) -> bool {
        self.flags & FLAG_IGNORABLE != 0
    }
    /// An owned copy.
    pub fn to_event(&self) -> Event {
        Event {
            seq: self.seq,
            kind: self.kind,
            flags: self.flags,
            payload: self.payload.to_vec(),
            pos: self.pos,
        }
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
