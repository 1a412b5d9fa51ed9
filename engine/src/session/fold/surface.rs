//! The surface: which logged events the model sees, in which order.
//!
//! An ordered list of node seqs plus `replace_generation`. A surface op is
//! `append` (the new node goes to the tail) or `replace { start, end }` (the
//! new node takes the place of nodes `start..end`, half-open positions in the
//! current list, `start <= end <= len`). Replaced events stay in the log.

use serde::{Deserialize, Serialize};

use crate::error::RangeError;

/// How a surface event enters the surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SurfaceOp {
    /// Add the event at the tail of the surface.
    Append,
    /// The event takes the place of surface positions `start..end`.
    Replace {
        /// First surface position replaced.
        start: u64,
        /// End of the range (excluded).
        end: u64,
    },
}

/// The model-visible node list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Surface {
    /// Seqs of the surface nodes, in order.
    pub nodes: Vec<u64>,
    /// Number of replaces so far.
    pub replace_generation: u64,
}

impl Surface {
    /// Check an op against the current surface without applying it.
    pub fn check(&self, op: SurfaceOp) -> Result<(), RangeError> {
        if let SurfaceOp::Replace { start, end } = op {
            let len = self.nodes.len() as u64;
            if start > end || end > len {
                return Err(RangeError { start, end, len });
            }
        }
        Ok(())
    }

    /// Apply `op` for the event `seq`.
    pub fn apply(&mut self, seq: u64, op: SurfaceOp) -> Result<(), RangeError> {
        self.check(op)?;
        let before = self.nodes.len();
        match op {
            SurfaceOp::Append => self.nodes.push(seq),
            SurfaceOp::Replace { start, end } => {
                self.nodes.splice(start as usize..end as usize, [seq]);
                self.replace_generation += 1;
                // Postcondition: the range became the one new node.
                debug_assert_eq!(self.nodes.len(), before + 1 - (end - start) as usize);
                debug_assert_eq!(self.nodes[start as usize], seq);
            }
        }
        debug_assert!(
            self.nodes.len() <= before + 1,
            "an op adds at most one node"
        );
        Ok(())
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    /// Whether the surface has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_and_replace() {
        let mut s = Surface::default();
        for seq in [10, 11, 12, 13] {
            s.apply(seq, SurfaceOp::Append).unwrap();
        }
        s.apply(14, SurfaceOp::Replace { start: 0, end: 4 })
            .unwrap();
        assert_eq!(s.nodes, vec![14]);
        assert_eq!(s.replace_generation, 1);
        // An empty range inserts.
        s.apply(15, SurfaceOp::Replace { start: 0, end: 0 })
            .unwrap();
        assert_eq!(s.nodes, vec![15, 14]);
        assert!(s
            .apply(16, SurfaceOp::Replace { start: 1, end: 3 })
            .is_err());
        assert!(s
            .apply(16, SurfaceOp::Replace { start: 2, end: 1 })
            .is_err());
        assert_eq!(s.nodes, vec![15, 14]);
    }
}
