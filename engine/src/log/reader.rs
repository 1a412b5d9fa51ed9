//! The one segment reader of the engine's read path: it walks a run of
//! indexed frames of one segment and lends each payload, choosing a strategy
//! by what the segment is and how the run lies in it:
//! - a sparse run (a session's frames scattered among everyone else's, the
//!   common case in a fleet; [`is_sparse`]) of a sealed segment, or of the
//!   active segment of a writable store, that the page cache does not hold
//!   whole ([`run_cached`]) is fetched by reads that the
//!   index's positions order and coalesce, each fetching only its frames'
//!   bytes ([`VfsFile::read_sparse`]: no read-ahead window per frame
//!   touched) into one buffer reused for the walk;
//! - a dense run of a sealed segment that the page cache does not hold is
//!   fetched the same way (exact reads of up to 1 MiB, no read-ahead window
//!   past the run);
//! - a segment whose exact reads have cost as much as reading it whole
//!   would ([`scan_due`]: many sessions of a cold segment read back, an
//!   export, a replay of everything) is read whole once, in order, through
//!   the page cache (the active segment: its durable bytes below the run),
//!   and its runs are then read from its map;
//! - any other run of a sealed segment (the page cache holds it) is read
//!   from the segment's map, mapped once;
//! - any other run of the active segment of a writable store is lent as one
//!   span out of its live map (those frames are durable and never written
//!   again);
//! - a read-only store (whose writer may be another process) copies each
//!   frame of the active segment with plain reads.
//!
//! Every frame is checked the same way whatever the strategy
//! ([`check_frame`]): checksum, seq, owner, kind (FORMAT.md §4).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
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
    /// Sealed segments opened for sparse reads (at most
    /// [`SEALED_FILES_OPEN_MAX`]).
    pub(crate) sealed_files: RwLock<HashMap<SegmentId, Arc<dyn VfsFile>>>,
    /// Runs walked by each strategy, for tests and diagnostics.
    pub(crate) counts: ReadCounts,
    /// Whether sparse runs are fetched sparsely (tests turn it off to read
    /// the same runs through the maps).
    pub(crate) sparse_enabled: AtomicBool,
    /// Whether a segment is read whole once its exact reads are due
    /// ([`scan_due`]; tests turn it off to count the reads without).
    pub(crate) scan_enabled: AtomicBool,
    /// What the exact reads of each sealed segment with a file open in
    /// `sealed_files`, and of the active segment, have cost since they were
    /// last read whole.
    heat: parking_lot::Mutex<HashMap<SegmentId, Heat>>,
}

/// What the exact reads of one segment have cost ([`scan_due`]).
#[derive(Debug, Default, Clone, Copy)]
struct Heat {
    /// Bytes charged: each read's bytes plus [`SCAN_READ_CHARGE_BYTES`].
    charged: u64,
    /// A walk is reading the segment whole now.
    scanning: bool,
    /// The active segment: the end of what was read whole last (its
    /// durable bytes grow; each scan reads on from here).
    scanned_to: u64,
}

/// How many runs each strategy walked, and the reads the sparse one made.
#[derive(Debug, Default)]
pub(crate) struct ReadCounts {
    pub mapped_runs: AtomicU64,
    pub sparse_runs: AtomicU64,
    pub sparse_reads: AtomicU64,
    /// Segments read whole ([`scan_due`]), and the bytes read.
    pub scans: AtomicU64,
    pub scan_bytes: AtomicU64,
}

/// A sparse walk fetches frames whose starts lie at most this far apart
/// with one read (the bytes of other sessions between them cost less than
/// another device round trip).
const SPARSE_MERGE_BYTES: u64 = 8 << 10;
/// The longest read of a sparse walk; also the span past which a dense run
/// is read from the map instead (there the kernel's read-ahead fetches what
/// the walk needs, in large reads, and the payloads are lent without a copy).
const SPARSE_READ_BYTES_MAX: u64 = 1 << 20;
/// Bytes a sparse read fetches at least from the start of its last frame,
/// whose length is not known before its header is read (a longer frame costs
/// one more read for its rest). Most events of a session are shorter.
const SPARSE_TAIL_BYTES: u64 = 512;
/// A sparse read ends on a multiple of this (a device sector), so that the
/// read of a longer frame's rest starts on the sector where it ended instead
/// of fetching that sector again.
const SPARSE_ALIGN_BYTES: u64 = 512;

/// What one exact read costs beyond its own bytes, in bytes of a sequential
/// read: on this project's machine a 4 KiB direct read waits ~41 us, in
/// which a sequential read fetches ~86 KiB (2.1 GB/s); read through the
/// page cache (a copy per page) somewhat less.
const SCAN_READ_CHARGE_BYTES: u64 = 64 << 10;
/// Bytes a segment is read whole with, per read.
const SCAN_CHUNK_BYTES: usize = 1 << 20;
/// The active segment is read whole up to a multiple of this below the
/// run's last frame: bytes in pages that no write touches again (a direct
/// write rewrites the block holding the durable end, FORMAT.md §6.2), for
/// any page size up to 64 KiB.
const SCAN_ACTIVE_ALIGN_BYTES: u64 = 64 << 10;

/// Whether a sealed segment of `len` bytes, whose exact reads since it was
/// last read whole have been charged `charged` bytes (each read's bytes plus
/// [`SCAN_READ_CHARGE_BYTES`]), is to be read whole now: once the exact reads
/// have cost what reading the segment whole costs. That is the rent-or-buy
/// rule: a walk that reads a few sessions of an old segment never reads it
/// whole, and a walk that reads every session of it (256 sessions
/// interleaved, each a few hundred exact reads) spends at most about twice
/// what reading it whole once would have cost, where exact reads alone
/// would fetch the segment's blocks one by one, some many times (a block
/// holds frames of several sessions) and never cache them. A segment whose
/// pages are evicted again is charged again from zero. The active segment
/// is read on from where it was read whole last ([`Heat::scanned_to`]), so
/// `len` is then the length of what is not read yet.
fn scan_due(charged: u64, len: u64) -> bool {
    len > 0 && charged >= len
}

/// Sealed segments kept open for sparse reads at most.
pub(crate) const SEALED_FILES_OPEN_MAX: usize = 32;

/// Offset of a packed position in its segment.
fn offset_of(p: u64) -> u64 {
    LogPos(p).offset() as u64
}

/// Frames `k..=j` of `positions` that one sparse read fetches: the next
/// frames that start within [`SPARSE_MERGE_BYTES`] of the one before, in log
/// order, within [`SPARSE_READ_BYTES_MAX`] of frame `k`.
fn sparse_read_end(positions: &[u64], k: usize) -> usize {
    let first = offset_of(positions[k]);
    let mut j = k;
    while let Some(next) = positions.get(j + 1).map(|p| offset_of(*p)) {
        let prev = offset_of(positions[j]);
        if next <= prev || next - prev > SPARSE_MERGE_BYTES || next - first > SPARSE_READ_BYTES_MAX
        {
            break;
        }
        j += 1;
    }
    j
}

/// Whether the page cache holds the pages of a run's frames (a session
/// written or read a moment ago): then the map serves it without a copy,
/// and without device I/O. Asked of the byte ranges the sparse reads would
/// fetch ([`sparse_read_end`]), in log order, stopping at the first that is
/// not cached: a session whose frames are spread over a whole segment
/// among other sessions' is asked about its own pages, not the segment's
/// (asking about the span was one `mincore` over up to 16k pages per run,
/// whatever the run held).
fn run_cached(file: &dyn VfsFile, positions: &[u64]) -> bool {
    if positions.is_empty() {
        return false;
    }
    let mut k = 0;
    while k < positions.len() {
        let j = sparse_read_end(positions, k);
        let (first, last) = (offset_of(positions[k]), offset_of(positions[j]));
        let Some(span) = last.checked_sub(first) else {
            return false;
        };
        if !file.is_cached(first, (span + SPARSE_TAIL_BYTES) as usize) {
            return false;
        }
        k = j + 1;
    }
    true
}

/// Whether a run of the active segment is read sparsely (a sealed
/// segment's uncached runs always are, dense or not): unless the reads it
/// would make fetch at least half of the span of the run and that span is
/// longer than one sparse read (then the live map serves it better).
fn is_sparse(positions: &[u64]) -> bool {
    let (Some(first), Some(last)) = (positions.first(), positions.last()) else {
        return false;
    };
    let Some(span) = offset_of(*last).checked_sub(offset_of(*first)) else {
        // Out of log order (a damaged index): the map path reports it.
        return false;
    };
    let span = span + SPARSE_TAIL_BYTES;
    if span <= SPARSE_READ_BYTES_MAX {
        return true;
    }
    let mut fetched = 0u64;
    let mut k = 0;
    while k < positions.len() {
        let j = sparse_read_end(positions, k);
        fetched += offset_of(positions[j]) - offset_of(positions[k]) + SPARSE_TAIL_BYTES;
        k = j + 1;
    }
    fetched * 2 < span
}

/// What a sparse walk's reads cost, added to its segment's charge when the
/// walk ends, well or not ([`scan_due`]).
struct Charge<'a> {
    reader: &'a SegmentReader,
    seg: SegmentId,
    /// Each read's bytes plus [`SCAN_READ_CHARGE_BYTES`].
    bytes: u64,
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.reader.charge(self.seg, self.bytes);
    }
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
            sealed_files: RwLock::new(HashMap::new()),
            counts: ReadCounts::default(),
            sparse_enabled: AtomicBool::new(true),
            scan_enabled: AtomicBool::new(true),
            heat: parking_lot::Mutex::new(HashMap::new()),
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
            // Sealed now: charged again from zero, for all of it.
            self.heat.lock().remove(&prev);
        }
    }

    /// Drop the open files and maps of segments `first..=last`: an online
    /// collection replaced them (FORMAT.md §14.4), under the store's
    /// collection gate, so no walk uses them meanwhile.
    pub fn forget(&self, first: SegmentId, last: SegmentId) {
        let keep = |id: &SegmentId| *id < first || *id > last;
        self.files.write().retain(|id, _| keep(id));
        self.maps.write().retain(|id, _| keep(id));
        self.sealed_files.write().retain(|id, _| keep(id));
        self.heat.lock().retain(|id, _| keep(id));
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
        let sealed = run.seg < SegmentId(self.active_segment.load(Ordering::SeqCst));
        let enabled = self.sparse_enabled.load(Ordering::Relaxed);
        let sparse = enabled && is_sparse(run.positions);
        // A run of a sealed segment that the page cache does not hold is
        // fetched by exact reads whether it is sparse or dense: a dense run
        // (a session's frames grouped by a regroup, FORMAT.md §14.3) read
        // through the map would fault in a whole read-ahead window past its
        // end (8 MiB here) for a run of 1 MiB.
        if sealed && enabled {
            let file = self.sealed_file(run.seg)?;
            // (Read whole just now, when due: the run is read from the map.)
            if !run_cached(file.as_ref(), run.positions)
                && !self.scan_if_due(&file, run, &path, true)?
            {
                return self.visit_sparse(&file, run, &salt, &path, visit, visited);
            }
        }
        if let Some(map) = self.sealed_bytes(run.seg)? {
            self.counts.mapped_runs.fetch_add(1, Ordering::Relaxed);
            return walk(&map, 0, visited);
        }
        let file = self.active_file(run.seg)?;
        let io = |e| Error::io("read frame", &path, e);
        if !self.read_only && sparse && !run_cached(file.as_ref(), run.positions) {
            // The run's frames are durable (the caller waited) and durable
            // bytes are never written again: fetch only them.
            if !self.scan_if_due(&file, run, &path, false)? {
                return self.visit_sparse(&file, run, &salt, &path, visit, visited);
            }
            // Its durable bytes below the run's last frame read whole just
            // now: the run is lent from the live map.
        }
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

    /// Walk a sparse run of a sealed segment: the frames are fetched in log
    /// order by reads that each cover one group of nearby frames
    /// ([`sparse_read_end`]), into one buffer reused for the walk. Each frame
    /// is checked on the same bytes the map would show from its offset on
    /// (up to its stated length, or the end of the file), so a damaged frame
    /// gives the same error as on the mapped path. The segment is charged
    /// for the reads ([`scan_due`]), whether the walk ends well or not.
    fn visit_sparse(
        &self,
        file: &Arc<dyn VfsFile>,
        run: &Run<'_>,
        salt: &Salt,
        path: &std::path::Path,
        visit: &mut dyn FnMut(EventRef<'_>) -> ControlFlow<()>,
        visited: &mut u64,
    ) -> Result<ControlFlow<()>> {
        self.counts.sparse_runs.fetch_add(1, Ordering::Relaxed);
        let mut charge = Charge {
            reader: self,
            seg: run.seg,
            bytes: 0,
        };
        let io = |e| Error::io("read frame", path, e);
        let file_len = file.len().map_err(|e| Error::io("stat segment", path, e))?;
        // `buf` holds the file's bytes `base..base + buf.len()`.
        let mut buf: Vec<u8> = Vec::new();
        let mut base = 0u64;
        let mut fetch = |buf: &mut Vec<u8>, from: u64, to: u64| -> Result<()> {
            let keep = buf.len();
            buf.resize(keep + (to - from) as usize, 0);
            let n = file.read_sparse(&mut buf[keep..], from).map_err(io)?;
            buf.truncate(keep + n);
            self.counts.sparse_reads.fetch_add(1, Ordering::Relaxed);
            charge.bytes = charge
                .bytes
                .saturating_add(SCAN_READ_CHARGE_BYTES + (to - from));
            Ok(())
        };
        for (k, p) in run.positions.iter().enumerate() {
            let seq = run.first_seq + k as u64;
            let off = offset_of(*p);
            if off > file_len {
                return Err(Error::corrupt(
                    path,
                    off,
                    "indexed frame lies past the end of the segment",
                ));
            }
            let header_end = off + FRAME_HEADER_BYTES as u64;
            if off < base || header_end > base + buf.len() as u64 {
                let j = sparse_read_end(run.positions, k);
                let end = (offset_of(run.positions[j]) + SPARSE_TAIL_BYTES)
                    .next_multiple_of(SPARSE_ALIGN_BYTES)
                    .max(header_end)
                    .min(file_len);
                buf.clear();
                base = off;
                fetch(&mut buf, off, end)?;
            }
            let rel = (off - base) as usize;
            // A frame longer than what was fetched: fetch its rest (up to the
            // end of the file) before checking it.
            if let Some(head) = buf.get(rel..rel + FRAME_HEADER_BYTES) {
                let head: &[u8; FRAME_HEADER_BYTES] = head.try_into().expect("header bytes");
                if let Ok(len) = frame_len(head) {
                    let want = (off + len as u64).min(file_len);
                    let have = base + buf.len() as u64;
                    if want > have {
                        fetch(&mut buf, have, want)?;
                    }
                }
            }
            let (h, payload) = check_frame(&buf[rel..], salt, seq, run.owners)
                .map_err(|d| Error::corrupt(path, off, d))?;
            *visited += 1;
            let flow = visit(event_ref(&h, payload, seq, *p));
            if flow.is_break() {
                return Ok(flow);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Add what a sparse walk of segment `seg` cost to its charge.
    fn charge(&self, seg: SegmentId, charged: u64) {
        let mut heat = self.heat.lock();
        let h = heat.entry(seg).or_default();
        h.charged = h.charged.saturating_add(charged);
    }

    /// Read the segment of `run` whole, in order, through the page cache, if
    /// its exact reads are due ([`scan_due`]) and no other walk is reading
    /// it whole; returns whether it did. Its charge starts again from zero.
    /// A sealed segment is read from its start to its end; the active one
    /// (`sealed` false) on from where it was read whole last up to a
    /// multiple of [`SCAN_ACTIVE_ALIGN_BYTES`] below the run's last frame:
    /// durable bytes (the caller waited for the run) that no write touches
    /// again.
    fn scan_if_due(
        &self,
        file: &Arc<dyn VfsFile>,
        run: &Run<'_>,
        path: &std::path::Path,
        sealed: bool,
    ) -> Result<bool> {
        if !self.scan_enabled.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let end = if sealed {
            file.len().map_err(|e| Error::io("stat segment", path, e))?
        } else {
            let last = run.positions.last().map_or(0, |p| offset_of(*p));
            last / SCAN_ACTIVE_ALIGN_BYTES * SCAN_ACTIVE_ALIGN_BYTES
        };
        let from = {
            let mut heat = self.heat.lock();
            let h = heat.entry(run.seg).or_default();
            let from = if sealed { 0 } else { h.scanned_to };
            if h.scanning || end <= from || !scan_due(h.charged, end - from) {
                return Ok(false);
            }
            h.scanning = true;
            from
        };
        let mut chunk = vec![0u8; SCAN_CHUNK_BYTES];
        let mut at = from;
        let read = loop {
            if at >= end {
                break Ok(());
            }
            let want = SCAN_CHUNK_BYTES.min((end - at) as usize);
            match file.read_at(&mut chunk[..want], at) {
                Ok(0) => break Ok(()),
                Ok(n) => at += n as u64,
                Err(e) => break Err(Error::io("read segment whole", path, e)),
            }
        };
        {
            let mut heat = self.heat.lock();
            let h = heat.entry(run.seg).or_default();
            h.charged = 0;
            h.scanning = false;
            if read.is_ok() {
                h.scanned_to = h.scanned_to.max(at);
            }
        }
        read?;
        self.counts.scans.fetch_add(1, Ordering::Relaxed);
        self.counts
            .scan_bytes
            .fetch_add(at - from, Ordering::Relaxed);
        Ok(true)
    }

    /// A sealed segment's file for sparse reads, kept open for the next
    /// walk; at most [`SEALED_FILES_OPEN_MAX`] are kept (each holds a few
    /// descriptors, and a large store has thousands of segments), a walk
    /// still reading an evicted one keeps it open until it ends.
    fn sealed_file(&self, seg: SegmentId) -> Result<Arc<dyn VfsFile>> {
        if let Some(f) = self.sealed_files.read().get(&seg) {
            return Ok(f.clone());
        }
        let f = self.open_segment(seg)?;
        let mut files = self.sealed_files.write();
        while files.len() >= SEALED_FILES_OPEN_MAX {
            // The lowest segment: the oldest events, the least likely read.
            let Some(old) = files.keys().min().copied() else {
                break;
            };
            files.remove(&old);
            self.heat.lock().remove(&old);
        }
        files.insert(seg, f.clone());
        Ok(f)
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
        let f = self.open_segment(seg)?;
        self.files.write().insert(seg, f.clone());
        Ok(f)
    }

    /// Open segment `seg` for reading.
    fn open_segment(&self, seg: SegmentId) -> Result<Arc<dyn VfsFile>> {
        let path = segment_path(&self.dir, seg);
        self.vfs
            .open(&path, false)
            .map_err(|e| Error::io("open segment", &path, e))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// A file that answers `is_cached` from a set of cached 4 KiB pages
    /// and records what it was asked.
    #[derive(Debug)]
    struct Pages {
        cached: Vec<bool>,
        asked: parking_lot::Mutex<Vec<(u64, usize)>>,
    }

    impl VfsFile for Pages {
        fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<usize> {
            Ok(0)
        }
        fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            Ok(())
        }
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }
        fn len(&self) -> io::Result<u64> {
            Ok(self.cached.len() as u64 * 4096)
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            Ok(())
        }
        fn allocate(&self, _: u64) -> io::Result<()> {
            Ok(())
        }
        fn map(&self) -> io::Result<crate::vfs::MappedBytes> {
            Ok(Arc::new(Vec::<u8>::new()))
        }
        fn is_cached(&self, offset: u64, len: usize) -> bool {
            self.asked.lock().push((offset, len));
            let (first, end) = (offset / 4096, (offset + len as u64).div_ceil(4096));
            (first..end).all(|p| self.cached.get(p as usize) == Some(&true))
        }
    }

    fn at(offset: u64) -> u64 {
        LogPos::new(SegmentId(1), offset as u32).0
    }

    /// A session's frames spread over a segment among other sessions': the
    /// run is cached when the pages of its frames are, whatever the pages
    /// between them hold, and the file is asked about those pages only.
    #[test]
    fn a_run_is_cached_when_the_pages_of_its_frames_are() {
        // 64 MiB; frames every 256 KiB (each its own sparse read).
        let positions: Vec<u64> = (0..256u64).map(|i| at(4096 + i * (256 << 10))).collect();
        let mut cached = vec![false; 16384];
        for p in &positions {
            let page = (offset_of(*p) / 4096) as usize;
            cached[page] = true;
        }
        let file = Pages {
            cached,
            asked: Default::default(),
        };
        assert!(run_cached(&file, &positions));
        let asked: u64 = file.asked.lock().iter().map(|(_, len)| *len as u64).sum();
        assert!(
            asked <= 256 * SPARSE_TAIL_BYTES,
            "asked about {asked} bytes"
        );

        // One frame's page not cached: not cached, and asking stops there.
        let mut cached = file.cached.clone();
        cached[(offset_of(positions[10]) / 4096) as usize] = false;
        let file = Pages {
            cached,
            asked: Default::default(),
        };
        assert!(!run_cached(&file, &positions));
        assert_eq!(file.asked.lock().len(), 11);

        // Frames close together are asked about as one read's bytes.
        let dense: Vec<u64> = (0..64u64).map(|i| at(8192 + i * 512)).collect();
        let file = Pages {
            cached: vec![true; 64],
            asked: Default::default(),
        };
        assert!(run_cached(&file, &dense));
        assert_eq!(
            *file.asked.lock(),
            [(8192, (63 * 512 + SPARSE_TAIL_BYTES) as usize)]
        );
        assert!(!run_cached(&file, &[]));
    }
}
