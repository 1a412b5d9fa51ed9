//! Turns and coordinates from the handle's side: the turns of a session,
//! conversions between message index, surface position and seq, and fork
//! by turn or by message.

use crate::error::{Error, Result};
use crate::session::fold::coords::TurnInfo;
use crate::session::handle::Session;
use crate::session::views::replay::{fork, Forked};

impl Session {
    /// Every turn, in log order.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
    /// s.append(TurnStart { turn_id: "t1".into() }, ()).unwrap();
    /// s.append(UserMessage { content: vec![ContentBlock::text("hi")] }, SurfaceOp::Append).unwrap();
    /// s.append(TurnEnd { turn_id: "t1".into(), reason: TurnEndReason::Completed }, ()).unwrap();
    /// assert_eq!(s.turns()[0].end_seq, Some(2));
    /// s.flush().unwrap();
    /// let child = s.fork_after_turn("t1", Some("s1-branch")).unwrap();
    /// assert_eq!(child.upto, 3);
    /// ```
    pub fn turns(&self) -> &[TurnInfo] {
        &self.state.turns
    }

    /// The turn with this id (the last one, if an id was reused).
    pub fn turn(&self, turn_id: &str) -> Option<&TurnInfo> {
        self.state.turns.iter().rev().find(|t| t.turn_id == turn_id)
    }

    /// Surface position of the node logged at `seq` (None: not on the surface).
    pub fn surface_position_of_seq(&self, seq: u64) -> Option<u64> {
        self.surface()
            .nodes
            .iter()
            .position(|s| *s == seq)
            .map(|p| p as u64)
    }

    /// Seq of the event at surface position `pos`.
    pub fn seq_at_surface_position(&self, pos: u64) -> Option<u64> {
        self.surface().nodes.get(pos as usize).copied()
    }

    /// Surface position of message `index` (of [`Session::derive_messages`]).
    pub fn surface_position_of_message(&mut self, index: usize) -> Option<u64> {
        let seq = self.derive_messages().get(index)?.source_seq;
        self.surface_position_of_seq(seq)
    }

    /// Index of the message derived from the node logged at `seq` (None:
    /// not on the surface, or a node that yields no message).
    pub fn message_index_of_seq(&mut self, seq: u64) -> Option<usize> {
        self.derive_messages()
            .iter()
            .position(|m| m.source_seq == seq)
    }

    /// Compact messages `range` (indices of [`Session::derive_messages`]):
    /// the surface nodes from the first message's node to the last one's
    /// (nodes that yield no message in between included) are replaced by
    /// the summary. Returns the summary's seq.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
    /// for t in ["a", "b", "c"] {
    ///     s.append(UserMessage { content: vec![ContentBlock::text(t)] }, SurfaceOp::Append).unwrap();
    /// }
    /// s.compact_messages("k1", 0..2, "a and b").unwrap();
    /// let texts: Vec<_> = s.derive_messages().iter().map(|m| m.content[0].as_text().unwrap().to_string()).collect();
    /// assert_eq!(texts, ["a and b", "c"]);
    /// ```
    pub fn compact_messages(
        &mut self,
        compaction_id: &str,
        range: std::ops::Range<usize>,
        summary: &str,
    ) -> Result<u64> {
        let n = self.derive_messages().len();
        if range.start >= range.end || range.end > n {
            return Err(Error::InvalidArgument(format!(
                "message range {}..{} is invalid for {n} messages",
                range.start, range.end
            )));
        }
        let start = self.surface_position_of_message(range.start);
        let last = self.surface_position_of_message(range.end - 1);
        match (start, last) {
            (Some(a), Some(b)) if a <= b => self.compact(compaction_id, a, b + 1, summary),
            _ => Err(Error::InvalidArgument(format!(
                "messages {}..{} are not in surface order",
                range.start, range.end
            ))),
        }
    }

    /// Compact the surface nodes logged during turn `turn_id` (a finished
    /// turn) into the summary. Returns the summary's seq.
    pub fn compact_turn(
        &mut self,
        compaction_id: &str,
        turn_id: &str,
        summary: &str,
    ) -> Result<u64> {
        let t = self
            .turn(turn_id)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("no turn {turn_id:?}")))?;
        if t.end_seq.is_none() {
            return Err(Error::Refused(format!("turn {turn_id:?} has not ended")));
        }
        let seqs = t.seqs(self.len());
        let positions: Vec<u64> = self
            .surface()
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, s)| seqs.contains(s))
            .map(|(p, _)| p as u64)
            .collect();
        match (positions.first(), positions.last()) {
            (Some(&a), Some(&b)) => self.compact(compaction_id, a, b + 1, summary),
            _ => Err(Error::InvalidArgument(format!(
                "turn {turn_id:?} has nothing on the surface"
            ))),
        }
    }

    /// Fork this session after the end of turn `turn_id`: the child holds
    /// every event up to and including its `turn/end`. Durable events only
    /// are forked, so flush first.
    pub fn fork_after_turn(&self, turn_id: &str, child: Option<&str>) -> Result<Forked> {
        let t = self
            .turn(turn_id)
            .ok_or_else(|| Error::InvalidArgument(format!("no turn {turn_id:?}")))?;
        let end = t
            .end_seq
            .ok_or_else(|| Error::Refused(format!("turn {turn_id:?} has not ended")))?;
        fork(self.log_ref(), self.id(), Some(end + 1), child)
    }

    /// Fork this session just before message `index` ("branch from here",
    /// to edit a message and run again): the child holds the events logged
    /// before the turn that holds that message (before the message itself
    /// when no turn holds it), so it ends at a turn boundary.
    pub fn fork_before_message(&mut self, index: usize, child: Option<&str>) -> Result<Forked> {
        let seq = self
            .derive_messages()
            .get(index)
            .map(|m| m.source_seq)
            .ok_or_else(|| Error::InvalidArgument(format!("no message {index}")))?;
        let len = self.len();
        let boundary = self
            .state
            .turns
            .iter()
            .find(|t| t.seqs(len).contains(&seq))
            .map_or(seq, |t| t.start_seq);
        fork(self.log_ref(), self.id(), Some(boundary), child)
    }
}
