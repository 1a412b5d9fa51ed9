//! Writing the index checkpoint and its deltas (FORMAT.md §7): the
//! flusher after a roll, and close.

use super::*;

/// Checkpoint the index up to the durable position (invariant 5: a derived
/// file never leads the log).
pub(crate) fn write_checkpoint(sh: &Shared, why: CheckpointWhy) -> Result<()> {
    let mut chain = sh.checkpoint_lock.lock();
    if sh.gc_active.load(std::sync::atomic::Ordering::SeqCst) {
        // An online collection is moving frames; it writes one when done.
        return Ok(());
    }
    let (covered, next_batch_seq, last) = {
        let st = sh.commit.lock();
        let Some(last) = st.durable_last_batch else {
            return Ok(());
        };
        (st.durable, st.durable_next_batch_seq, last)
    };
    // A delta extends the chain this process wrote, while the deltas stay
    // smaller than the checkpoint they extend (FORMAT.md §7.1); an online
    // collection moved positions, so it writes a whole checkpoint.
    if let Some(c) = chain.as_mut().filter(|_| why != CheckpointWhy::Collect) {
        if c.covered == covered {
            return Ok(());
        }
        let delta = Delta::of(
            &sh.index.read(),
            sh.store_id,
            c.covered,
            covered,
            next_batch_seq,
            last,
        );
        if c.delta_bytes + delta.encoded_len() as u64 <= c.base_bytes {
            let n = c.deltas + 1;
            let written = checkpoint::write_delta(sh.vfs.as_ref(), &sh.dir, n, &delta);
            let bytes = match written {
                Ok(bytes) => bytes,
                Err(e) => {
                    // Whether the file is there is not known: the next one
                    // is a whole checkpoint, which removes it.
                    *chain = None;
                    return Err(e);
                }
            };
            c.covered = covered;
            c.deltas = n;
            c.delta_bytes += bytes;
            let mut st = sh.commit.lock();
            st.stats.checkpoints_written += 1;
            st.stats.checkpoint_deltas += 1;
            st.stats.checkpoint_bytes += bytes;
            st.stats.metadata_syncs += 2;
            return Ok(());
        }
    }
    // Every indexed position before `covered` is durable and never changes.
    let ck = Checkpoint {
        store_id: sh.store_id,
        covered,
        next_batch_seq,
        last_batch: last.0,
        last_batch_flags: last.1,
        index: sh.index.read().prefix_before(covered),
    };
    *chain = None;
    let bytes = checkpoint::write(sh.vfs.as_ref(), &sh.dir, &ck)?;
    // The deltas of the checkpoint it replaced are stale now (a load
    // passes over them; they go so that none is ever taken for one of
    // this chain's).
    checkpoint::remove_deltas(sh.vfs.as_ref(), &sh.dir)?;
    *chain = Some(CheckpointChain {
        covered,
        base_bytes: bytes,
        delta_bytes: 0,
        deltas: 0,
    });
    let mut st = sh.commit.lock();
    st.stats.checkpoints_written += 1;
    st.stats.checkpoint_bytes += bytes;
    st.stats.metadata_syncs += 2;
    Ok(())
}

/// Why an index checkpoint is written ([`write_checkpoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointWhy {
    /// The flusher rolled to a new segment.
    Roll,
    /// The store closes.
    Close,
    /// An online collection moved frames.
    Collect,
}

/// The checkpoint this process wrote last and the deltas after it
/// (FORMAT.md §7.1): a roll writes only the positions added since (about
/// 8 bytes per event of the segment), until the deltas add up to the
/// checkpoint's size; then a whole checkpoint again. So checkpoints cost
/// about twice the index's final size over a store's life, not the whole
/// index at every roll, and an open reads at most about twice the index.
pub(crate) struct CheckpointChain {
    /// Where the last checkpoint or delta ends.
    covered: LogPos,
    base_bytes: u64,
    delta_bytes: u64,
    /// Deltas written after the checkpoint (the last one's number).
    deltas: u64,
}
