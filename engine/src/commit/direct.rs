//! Writing a batch around the page cache ([`crate::Options::direct_writes`]).
//!
//! A direct write must start and end on the device's block boundaries
//! ([`VfsFile::direct_write_align`](crate::vfs::VfsFile::direct_write_align)),
//! but a batch starts wherever the one before it ended. So the write starts
//! at the block boundary before the batch and carries again the bytes this
//! process wrote there last (the end of the batch before, unchanged), then
//! the batch, then the end marker's zeros up to the next boundary
//! (FORMAT.md §6.2 rule 7). [`DirectTail`] keeps those last bytes and stages
//! the aligned buffer.
//!
//! Rewriting bytes with their own values is what the page cache does at
//! every `fdatasync` of a buffered append that ends inside a page (the page
//! goes to the device whole); a direct write does it for at most one block
//! instead of one page. FORMAT.md §6.1 M1 states the assumption both rely
//! on.

/// The largest alignment a direct write may need ([`crate::vfs`] tries 512,
/// then 4096): the bytes kept reach back to the multiple of it before the
/// end of the last batch.
const KEEP_ALIGN: u64 = 4096;

/// The bytes the writer last wrote before the end of its last batch, and
/// the aligned buffer a direct write is staged in.
#[derive(Debug, Default)]
pub(crate) struct DirectTail {
    /// The bytes `at..at + known.len()` of the segment, as written.
    known: Vec<u8>,
    at: u64,
    /// Scratch for the aligned buffer (over-allocated by one alignment).
    stage: Vec<u8>,
}

impl DirectTail {
    /// `data` was written at `offset` (a batch, directly or through the
    /// page cache): keep its bytes from the multiple of [`KEEP_ALIGN`]
    /// before its end, with those kept before it when it follows them.
    pub fn wrote(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        let from = end - end % KEEP_ALIGN;
        if self.at + self.known.len() as u64 != offset || offset <= from {
            self.known.clear();
            self.at = offset;
        }
        let old = (from.saturating_sub(self.at) as usize).min(self.known.len());
        self.known.drain(..old);
        self.at += old as u64;
        let new = from.saturating_sub(offset) as usize;
        self.known.extend_from_slice(&data[new..]);
        if new > 0 {
            self.at = from;
        }
    }

    /// The aligned buffer for writing `data` at `offset` with `zeros` zero
    /// bytes after it, directly: the bytes kept from the block boundary
    /// before `offset`, `data`, the zeros. Returns where the buffer goes and
    /// the buffer; `None` if the write would not end on a multiple of
    /// `align`, or the bytes before `offset` are not known (the first batch
    /// of a segment or of this process, after a failed write).
    pub fn stage(
        &mut self,
        offset: u64,
        data: &[u8],
        zeros: usize,
        align: usize,
    ) -> Option<(u64, &[u8])> {
        let a = align as u64;
        let start = offset - offset % a;
        let end = offset + (data.len() + zeros) as u64;
        if !end.is_multiple_of(a) || align == 0 {
            return None;
        }
        let head = (offset - start) as usize;
        if head > 0 && (self.at > start || self.at + self.known.len() as u64 != offset) {
            return None;
        }
        let len = (end - start) as usize;
        self.stage.clear();
        self.stage.resize(len + align, 0);
        let skew = self.stage.as_ptr().align_offset(align);
        if skew >= align {
            return None;
        }
        let buf = &mut self.stage[skew..skew + len];
        if head > 0 {
            let k = (start - self.at) as usize;
            buf[..head].copy_from_slice(&self.known[k..]);
        }
        buf[head..head + data.len()].copy_from_slice(data);
        Some((start, &self.stage[skew..skew + len]))
    }

    /// Let go of a large staging buffer (bounded like the spare batch
    /// buffers: 4 MiB).
    pub fn trim(&mut self) {
        if self.stage.capacity() > 4 << 20 {
            self.stage = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DirectTail;

    fn bytes(from: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| from.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn a_direct_write_carries_the_bytes_before_the_batch_from_the_block_boundary() {
        let mut t = DirectTail::default();
        // Nothing known yet: only a write that starts on a boundary stages.
        assert!(t.stage(100, &[1; 8], 404, 512).is_none());
        let (at, buf) = t.stage(512, &[1; 8], 504, 512).unwrap();
        assert_eq!((at, buf.len()), (512, 512));
        assert_eq!(buf.as_ptr() as usize % 512, 0);
        // A batch at 64..1064 (the first of a segment: through the page cache).
        let first = bytes(1, 1000);
        t.wrote(64, &first);
        // The next one at 1064: from 1024, 40 bytes of the first, the batch,
        // zeros to 2048.
        let second = bytes(7, 600);
        let (at, buf) = t.stage(1064, &second, 2048 - 1664, 512).unwrap();
        assert_eq!(at, 1024);
        assert_eq!(buf.len(), 1024);
        assert_eq!(&buf[..40], &first[960..]);
        assert_eq!(&buf[40..640], &second[..]);
        assert!(buf[640..].iter().all(|b| *b == 0));
        // A write that would not end on a boundary is not staged.
        assert!(t.stage(1064, &second, 10, 512).is_none());
        // At alignment 4096, the bytes from 0 are needed: 64.. are known,
        // 0..64 (the segment header) are not.
        assert!(t.stage(1064, &second, 4096 - 1664, 4096).is_none());
        t.wrote(1064, &second);
        // Kept from 0 (the multiple of 4096 before 1664)? Only from 64.
        let third = bytes(9, 3000);
        let (at, buf) = t.stage(1664, &third, 4096 * 2 - 4664, 512).unwrap();
        assert_eq!(at, 1536);
        assert_eq!(&buf[..128], &second[472..]);
        assert_eq!(&buf[128..3128], &third[..]);
        t.wrote(1664, &third);
        // Now 4096..4664 is kept: a 4096-aligned write stages.
        let fourth = bytes(3, 8);
        let (at, buf) = t.stage(4664, &fourth, 8192 - 4672, 4096).unwrap();
        assert_eq!(at, 4096);
        assert_eq!(&buf[..568], &third[2432..]);
        // A batch that does not follow what is kept (a retry elsewhere, a
        // new segment) starts over.
        t.wrote(8704, &bytes(5, 16));
        assert!(t.stage(4664, &fourth, 8192 - 4672, 512).is_none());
        assert!(t.stage(8720, &fourth, 9216 - 8728, 512).is_some());
        // A long batch keeps only its end, from the 4096 boundary before it.
        let long = bytes(2, 10_000);
        t.wrote(8720, &long);
        let (at, buf) = t.stage(18720, &fourth, 18944 - 18728, 512).unwrap();
        assert_eq!(at, 18432);
        assert_eq!(&buf[..288], &long[10_000 - 288..]);
        assert_eq!(t.known.len(), 18720 - 16384);
    }
}
