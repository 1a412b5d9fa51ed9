//! The one segment reader of the engine's read path: it walks a run of
//! indexed frames of one segment and lends each payload, choosing a strategy
//! by what the segment is: a sealed segment is mapped once and read from the
//! map; the active segment of a writable store lends the run's span out of
//! its live map (those frames are durable and never written again); a
//! read-only store (whose writer may be another process) copies each frame
//! with plain reads. Every frame is checked the same way whatever the
//! strategy ([`check_frame`]): checksum, seq, owner, kind (FORMAT.md §4).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{Error, Result};
use crate::frame::{
    decode_frame, FrameHeader, Salt, FRAME_HEADER_BYTES, KIND_SESSION_DEFINE, PAYLOAD_BYTES_MAX,
};
use crate::log::segment::segment_path;
use crate::types::{EventRef, LogPos, SegmentId, Seq, SessionId};
use crate::vfs::{MappedBytes, Vfs, VfsFile};

/// One segment's frames of a walk, in seq order.
pub(crate) struct Run<'a> {
    pub seg: SegmentId,
    /// Packed [`LogPos`]es of the frames.
    pub positions: &'a [u64],
    pub first_seq: u64,
    /// The session and its fork ancestors whose frames the run may hold,
    /// sorted by id.
    pub owners: &'a [SessionId],
}

/// Open segment files and maps, shared by every reader of a store.
pub(crate) struct SegmentReader {
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    store_id: [u8; 16],
    read_only: bool,
    /// Segment the flusher writes to; lower ones are sealed.
    active_segment: AtomicU32,
    files: RwLock<HashMap<SegmentId, Arc<dyn VfsFile>>>,
    maps: RwLock<HashMap<SegmentId, MappedBytes>>,
}

impl SegmentReader {
    pub fn new(dir: PathBuf, vfs: Arc<dyn Vfs>, store_id: [u8; 16], read_only: bool) -> Self {
        SegmentReader {
            dir,
            vfs,
            store_id,
            read_only,
            active_segment: AtomicU32::new(0),
            files: RwLock::new(HashMap::new()),
            maps: RwLock::new(HashMap::new()),
        }
    }

    /// `seg` is the segment being written, with `file` open on it (if
    /// known); every lower segment is sealed from now on and may be mapped.
    pub fn set_active(&self, seg: SegmentId, file: Option<Arc<dyn VfsFile>>) {
        let prev = SegmentId(self.active_segment.swap(seg.0, Ordering::SeqCst));
        let mut files = self.files.write();
        if let Some(f) = file {
            files.insert(seg, f);
        }
        if prev != seg {
            files.remove(&prev);
        }
    }

    /// Walk one segment's run of frames, lending each to `visit`.
    pub fn visit_run(
        &self,
        run: &Run<'_>,
        visit: &mut dyn FnMut(EventRef<'_>) -> ControlFlow<()>,
        visited: &mut u64,
    ) -> Result<ControlFlow<()>> {
        let salt = Salt {
            store_id: self.store_id,
            segment: run.seg,
        };
        let path = segment_path(&self.dir, run.seg);
        // Walk the run over the segment's bytes from offset `base`.
        let mut walk = |bytes: &[u8], base: usize, visited: &mut u64| -> Result<ControlFlow<()>> {
            for (k, p) in run.positions.iter().enumerate() {
                let seq = run.first_seq + k as u64;
                let off = LogPos(*p).offset() as usize;
                // (A position below `base` can only come from a damaged
                // index: it is reported, never read.)
                let frame = off
                    .checked_sub(base)
                    .and_then(|o| bytes.get(o..))
                    .ok_or_else(|| {
                        Error::corrupt(
                            &path,
                            off as u64,
                            "indexed frame lies past the end of the segment",
                        )
                    })?;
                let (h, payload) = check_frame(frame, &salt, seq, run.owners)
                    .map_err(|d| Error::corrupt(&path, off as u64, d))?;
                *visited += 1;
                let flow = visit(event_ref(&h, payload, seq, *p));
                if flow.is_break() {
                    return Ok(flow);
                }
            }
            Ok(ControlFlow::Continue(()))
        };
        if let Some(map) = self.sealed_bytes(run.seg)? {
            return walk(&map, 0, visited);
        }
        let file = self.active_file(run.seg)?;
        let io = |e| Error::io("read frame", &path, e);
        if !self.read_only {
            // The run's frames are durable (the caller waited) and durable
            // bytes are never written again: lend the span from its first
            // frame to the end of its last one out of the live map, once.
            let first = LogPos(run.positions[0]).offset() as u64;
            let last = LogPos(*run.positions.last().expect("a run is not empty")).offset() as u64;
            let mut head = [0u8; FRAME_HEADER_BYTES];
            if file.read_stable(&mut head, last).map_err(io)? < FRAME_HEADER_BYTES {
                return Err(Error::corrupt(
                    &path,
                    last,
                    "indexed frame lies past the end of the segment",
                ));
            }
            let len = frame_len(&head).map_err(|d| Error::corrupt(&path, last, d))?;
            let Some(span) = last.checked_sub(first).map(|d| d as usize + len) else {
                return Err(Error::corrupt(
                    &path,
                    last,
                    "index positions out of log order",
                ));
            };
            let mut out = None;
            let lent = file
                .lend_stable(first, span, &mut |bytes| {
                    out = Some(walk(bytes, first as usize, visited));
                })
                .map_err(io)?;
            return match out {
                Some(r) if lent => r,
                _ => Err(Error::corrupt(
                    &path,
                    last,
                    "frame cut short by the end of the segment",
                )),
            };
        }
        // A read-only store (its writer may be another process): copy each
        // frame with plain system calls.
        let mut buf = Vec::new();
        for (k, p) in run.positions.iter().enumerate() {
            let seq = run.first_seq + k as u64;
            let off = LogPos(*p).offset() as u64;
            let corrupt = |d: String| Error::corrupt(&path, off, d);
            let mut head = [0u8; FRAME_HEADER_BYTES];
            if file.read_at(&mut head, off).map_err(io)? < FRAME_HEADER_BYTES {
                return Err(corrupt(
                    "indexed frame lies past the end of the segment".into(),
                ));
            }
            let len = frame_len(&head).map_err(corrupt)?;
            buf.resize(len, 0);
            if file.read_at(&mut buf, off).map_err(io)? < len {
                return Err(corrupt("frame cut short by the end of the segment".into()));
            }
            let (h, payload) = check_frame(&buf, &salt, seq, run.owners).map_err(corrupt)?;
            *visited += 1;
            let flow = visit(event_ref(&h, payload, seq, *p));
            if flow.is_break() {
                return Ok(flow);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The map of a sealed segment (made once), or `None` for the active one.
    fn sealed_bytes(&self, seg: SegmentId) -> Result<Option<MappedBytes>> {
        let active = SegmentId(self.active_segment.load(Ordering::SeqCst));
        if seg >= active {
            return Ok(None);
        }
        if let Some(m) = self.maps.read().get(&seg) {
            return Ok(Some(m.clone()));
        }
        let path = segment_path(&self.dir, seg);
        let file = self
            .vfs
            .open(&path, false)
            .map_err(|e| Error::io("open segment", &path, e))?;
        let map = file.map().map_err(|e| Error::io("map segment", &path, e))?;
        self.maps.write().insert(seg, map.clone());
        Ok(Some(map))
    }

    fn active_file(&self, seg: SegmentId) -> Result<Arc<dyn VfsFile>> {
        if let Some(f) = self.files.read().get(&seg) {
            return Ok(f.clone());
        }
        let path = segment_path(&self.dir, seg);
        let f = self
            .vfs
            .open(&path, false)
            .map_err(|e| Error::io("open segment", &path, e))?;
        self.files.write().insert(seg, f.clone());
        Ok(f)
    }
}

/// The frame length a frame header states, if it is possible.
fn frame_len(head: &[u8; FRAME_HEADER_BYTES]) -> std::result::Result<usize, String> {
    let len = u32::from_le_bytes(head[0..4].try_into().expect("4")) as usize;
    if !(FRAME_HEADER_BYTES..=FRAME_HEADER_BYTES + PAYLOAD_BYTES_MAX).contains(&len) {
        return Err(format!("impossible frame length {len}"));
    }
    Ok(len)
}

fn event_ref<'a>(h: &FrameHeader, payload: &'a [u8], seq: u64, pos: u64) -> EventRef<'a> {
    EventRef {
        seq: Seq(seq),
        kind: h.kind,
        flags: h.flags,
        payload,
        pos: LogPos(pos),
    }
}

/// Decode the frame at the start of `frame` and check that it is event
/// `seq` of one of `owners` (sorted by id); returns its header and payload.
fn check_frame<'a>(
    frame: &'a [u8],
    salt: &Salt,
    seq: u64,
    owners: &[SessionId],
) -> std::result::Result<(FrameHeader, &'a [u8]), String> {
    let h = decode_frame(frame, salt).map_err(|e| e.to_string())?;
    if h.seq != seq || owners.binary_search(&h.session).is_err() || h.kind == KIND_SESSION_DEFINE {
        return Err(format!(
            "index points at a frame of session {} seq {} (kind {}), expected seq {seq}",
            h.session.0, h.seq, h.kind
        ));
    }
    Ok((h, &frame[FRAME_HEADER_BYTES..h.frame_len as usize]))
}
