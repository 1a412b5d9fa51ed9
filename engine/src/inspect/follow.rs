//! Following a live store read-only, like `tail -f`: only whole batches that
//! validate through the shared scanner are reported; a batch still being
//! written is simply not there yet.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::frame::{
    self, BatchHeader, Salt, SegmentHeader, SessionDefine, BATCH_HEADER_BYTES, KIND_SESSION_DEFINE,
    SEGMENT_HEADER_BYTES,
};
use crate::recovery::check_batch;
use crate::types::SegmentId;
use crate::vfs::Vfs;

use super::{BatchInfo, FrameInfo, Item, SegmentInfo, Tail};

/// Follows a store as a live writer appends to it, read-only (like
/// `tail -f`): start from the [`Tail`] of a [`walk`](super::walk), then [`Follower::poll`]
/// now and then. It reads only whole batches that validate; a batch still
/// being written is simply not there yet. When the writer rolls to the next
/// segment (created only after the last batch of this one was durable), it
/// moves on.
pub struct Follower<'v> {
    vfs: &'v dyn Vfs,
    dir: PathBuf,
    tail: Tail,
    file: Option<std::sync::Arc<dyn crate::vfs::VfsFile>>,
    sessions: HashMap<u32, (String, Option<SessionDefine>)>,
}

impl<'v> Follower<'v> {
    /// `names`: compact session id → string id, from the frames seen so far.
    pub fn new(vfs: &'v dyn Vfs, dir: &Path, tail: Tail, names: HashMap<u32, String>) -> Self {
        Follower {
            vfs,
            dir: dir.to_path_buf(),
            tail,
            file: None,
            sessions: names.into_iter().map(|(k, v)| (k, (v, None))).collect(),
        }
    }

    /// Where the next batch is expected.
    pub fn tail(&self) -> &Tail {
        &self.tail
    }

    /// Report every batch and frame appended since the last poll (and a
    /// [`Item::Segment`] when the writer moved to a new segment). Returns the
    /// number of frames reported; stops early when `visit` breaks.
    pub fn poll(&mut self, visit: &mut dyn FnMut(Item<'_>) -> ControlFlow<()>) -> Result<u64> {
        let mut n = 0;
        let mut rechecked = false;
        loop {
            let path = self.tail.segment.clone();
            let file = match &self.file {
                Some(f) => f.clone(),
                None => {
                    let f = self
                        .vfs
                        .open(&path, false)
                        .map_err(|e| Error::io("open segment", &path, e))?;
                    self.file = Some(f.clone());
                    f
                }
            };
            let salt = Salt {
                store_id: self.tail.store_id,
                segment: self.tail.segment_id,
            };
            let mut head = [0u8; BATCH_HEADER_BYTES];
            let got = file
                .read_at(&mut head, self.tail.offset)
                .map_err(|e| Error::io("read segment", &path, e))?;
            if got == BATCH_HEADER_BYTES && head.iter().any(|b| *b != 0) {
                let Ok(h) = BatchHeader::decode(&head, &salt) else {
                    return Ok(n); // still being written
                };
                let total = BATCH_HEADER_BYTES + h.body_len as usize;
                let mut buf = vec![0u8; total];
                let got = file
                    .read_at(&mut buf, self.tail.offset)
                    .map_err(|e| Error::io("read segment", &path, e))?;
                if got < total {
                    return Ok(n);
                }
                let Ok((h, frames)) = check_batch(&buf, &salt, 0, Some(self.tail.next_batch_seq))
                else {
                    return Ok(n);
                };
                let base = self.tail.offset;
                let mut stop = (visit)(Item::Batch(BatchInfo {
                    segment: &path,
                    offset: base,
                    header: h,
                    raw_header: &buf[..BATCH_HEADER_BYTES],
                }))
                .is_break();
                for f in &frames {
                    let fh = &f.header;
                    let at = f.pos.offset() as usize;
                    if fh.kind == KIND_SESSION_DEFINE {
                        if let Ok(def) = SessionDefine::decode(f.payload) {
                            self.sessions
                                .insert(fh.session.0, (def.name.clone(), Some(def)));
                        }
                    }
                    if stop {
                        continue;
                    }
                    let state = self.sessions.get(&fh.session.0);
                    let item = Item::Frame(FrameInfo {
                        segment: &path,
                        segment_id: salt.segment,
                        offset: base + at as u64,
                        len: fh.frame_len,
                        batch_seq: h.batch_seq,
                        session: fh.session,
                        session_name: state.map(|s| s.0.as_str()),
                        seq: fh.seq,
                        kind: fh.kind,
                        flags: fh.flags,
                        payload: f.payload,
                        define: if fh.kind == KIND_SESSION_DEFINE {
                            state.and_then(|s| s.1.as_ref())
                        } else {
                            None
                        },
                        raw: &buf[at..at + fh.frame_len as usize],
                        trusted: true,
                    });
                    n += 1;
                    stop = (visit)(item).is_break();
                }
                self.tail.offset += total as u64;
                self.tail.next_batch_seq += 1;
                if stop {
                    return Ok(n);
                }
                continue;
            }
            // Nothing new here: has the writer moved on to the next segment?
            let next_id = SegmentId(self.tail.segment_id.0 + 1);
            let next = self.dir.join(frame::segment_file_name(next_id));
            if !self.vfs.exists(&next) {
                return Ok(n);
            }
            let nf = self
                .vfs
                .open(&next, false)
                .map_err(|e| Error::io("open segment", &next, e))?;
            let mut hb = [0u8; SEGMENT_HEADER_BYTES];
            let got = nf
                .read_at(&mut hb, 0)
                .map_err(|e| Error::io("read segment", &next, e))?;
            let Ok(hdr) = SegmentHeader::decode(&hb[..got]) else {
                return Ok(n); // being created
            };
            if hdr.store_id != self.tail.store_id || hdr.first_batch_seq < self.tail.next_batch_seq
            {
                return Ok(n);
            }
            if hdr.first_batch_seq > self.tail.next_batch_seq {
                // A batch landed here after the read above: read this segment again.
                if rechecked {
                    return Ok(n);
                }
                rechecked = true;
                continue;
            }
            let size = nf.len().map_err(|e| Error::io("stat segment", &next, e))?;
            let stop = (visit)(Item::Segment(SegmentInfo {
                file: &next,
                id: Some(next_id),
                size,
                header: Some(hdr),
                last: true,
                raw_header: &hb,
                span: None,
            }))
            .is_break();
            self.tail = Tail {
                segment: next,
                segment_id: next_id,
                offset: SEGMENT_HEADER_BYTES as u64,
                next_batch_seq: self.tail.next_batch_seq,
                store_id: self.tail.store_id,
            };
            self.file = Some(nf);
            rechecked = false;
            if stop {
                return Ok(n);
            }
        }
    }
}
