//! The seq-dense per-session index: for each session, `positions[seq]` is the
//! log position of that event's frame (invariant 2: seqs are dense, so a
//! lookup is one array access, 8 bytes per event). A fork child holds only
//! its own events' positions; seqs below the fork point are looked up in the
//! parent's entry (forking costs no index copy, whatever the prefix length).
//!
//! Session ids are strings; inside the log each has a compact [`SessionId`]
//! assigned densely (0, 1, 2, …) in the order of their `session-define` frames.
//!
//! The store keeps the index behind its own `RwLock` (appenders take it
//! after the commit queue's lock; readers take only it), and [`checkpoint`]
//! writes and reads the derived file that lets open skip rescanning the
//! covered log (FORMAT.md §7; invariant 5).

pub(crate) mod checkpoint;
pub(crate) mod reclaimed;

use std::collections::HashMap;
use std::sync::Arc;

use crate::frame::SessionDefine;
use crate::types::{LogPos, SessionId};

/// One session's index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEntry {
    /// The session's string id.
    pub name: Arc<str>,
    /// Fork parent and the number of events inherited from it.
    pub parent: Option<(SessionId, u64)>,
    /// Where the `session-define` frame sits.
    pub define_pos: LogPos,
    /// The session's own events: `positions[seq - inherited]` = packed
    /// [`LogPos`] of the frame of event `seq` (inherited events are found
    /// through `parent`).
    pub positions: Vec<u64>,
}

impl SessionEntry {
    /// Number of events, inherited ones included.
    pub fn len(&self) -> u64 {
        self.inherited() + self.positions.len() as u64
    }
    /// Whether the session has no events, inherited ones included.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// How many events were inherited from a fork parent.
    pub fn inherited(&self) -> u64 {
        self.parent.map(|(_, n)| n).unwrap_or(0)
    }
}

/// The whole index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    /// Every defined session, indexed by compact id.
    pub sessions: Vec<SessionEntry>,
    /// Compact id of each session by string id (reclaimed ones included).
    pub by_name: HashMap<Arc<str>, SessionId>,
    /// Sessions reclaimed by segment collection (`gc.manifest`, FORMAT.md
    /// §14.2) and how many of their first events they keep: they are not
    /// found by name, and their frames from that seq on are skipped.
    pub reclaimed: reclaimed::Reclaimed,
}

impl Index {
    /// The session named `name`, unless it was reclaimed (§14.2: a
    /// reclaimed session does not exist for readers).
    pub fn get(&self, name: &str) -> Option<(SessionId, &SessionEntry)> {
        let id = *self.by_name.get(name)?;
        if self.reclaimed.contains_key(&id) {
            return None;
        }
        Some((id, &self.sessions[id.0 as usize]))
    }

    /// Install the reclaimed set of `gc.manifest` (§14.2): entries for ids
    /// not defined are ignored; a session's own positions from its `keep`
    /// on are dropped (a checkpoint may hold them).
    pub fn set_reclaimed(&mut self, reclaimed: reclaimed::Reclaimed) {
        for (id, keep) in &reclaimed {
            if let Some(e) = self.sessions.get_mut(id.0 as usize) {
                let own = keep.saturating_sub(e.inherited()) as usize;
                e.positions.truncate(own);
            }
        }
        self.reclaimed = reclaimed;
    }

    /// The entry of session `id`, reclaimed or not; `None` if no such
    /// session is defined.
    pub fn entry(&self, id: SessionId) -> Option<&SessionEntry> {
        self.sessions.get(id.0 as usize)
    }

    /// Positions of the events `range` of session `id` (clamped to its
    /// length), in seq order, following fork parents for inherited seqs.
    pub fn positions_in(&self, id: SessionId, range: std::ops::Range<u64>) -> Vec<u64> {
        self.positions_and_owners_in(id, range).0
    }

    /// [`Index::positions_in`], plus the sessions whose own frames those
    /// positions are (the session and the fork ancestors it reads through),
    /// sorted by id. Walks the parent chain iteratively (no recursion, so a
    /// fork chain of any depth fits the stack) and only as far up as `range`
    /// reaches: the cost is the number of positions plus the ancestors
    /// passed on the way, never a walk per position.
    pub fn positions_and_owners_in(
        &self,
        id: SessionId,
        range: std::ops::Range<u64>,
    ) -> (Vec<u64>, Vec<SessionId>) {
        let Some(e) = self.entry(id) else {
            return (Vec::new(), Vec::new());
        };
        let end = range.end.min(e.len());
        let start = range.start.min(end);
        // Pieces from the child upwards: (session, own slice); emitted in
        // reverse so that positions come out in seq order.
        let mut pieces: Vec<(SessionId, &[u64])> = Vec::new();
        let (mut cur, mut cur_end) = (id, end);
        while let Some(e) = self.entry(cur) {
            let inherited = e.inherited();
            let own_start = start.max(inherited);
            if own_start < cur_end {
                let own =
                    &e.positions[(own_start - inherited) as usize..(cur_end - inherited) as usize];
                pieces.push((cur, own));
            }
            match e.parent {
                Some((p, upto)) if start < inherited && p < cur => {
                    // Parents precede children (dense ids in define order),
                    // so the walk ends. Skip ancestors that hold none of
                    // the inherited prefix (forked below their own events).
                    let mut p = p;
                    while let Some(pe) = self.entry(p) {
                        match pe.parent {
                            Some((gp, _)) if upto <= pe.inherited() && gp < p => p = gp,
                            _ => break,
                        }
                    }
                    cur = p;
                    cur_end = cur_end.min(upto);
                }
                _ => break,
            }
        }
        let mut positions = Vec::with_capacity((end - start) as usize);
        let mut owners = Vec::with_capacity(pieces.len());
        for (sid, own) in pieces.iter().rev() {
            positions.extend_from_slice(own);
            owners.push(*sid);
        }
        (positions, owners)
    }

    /// Position of event `seq` of session `id` (an iterative walk up the
    /// fork chain).
    pub fn position(&self, id: SessionId, seq: u64) -> Option<u64> {
        let mut cur = id;
        loop {
            let e = self.entry(cur)?;
            let inherited = e.inherited();
            match e.parent {
                Some((p, _)) if seq < inherited && p < cur => cur = p,
                _ => {
                    return e
                        .positions
                        .get((seq.checked_sub(inherited)?) as usize)
                        .copied()
                }
            }
        }
    }

    /// Position of the session's last event (inherited ones included).
    pub fn last_position(&self, id: SessionId) -> Option<u64> {
        let e = self.entry(id)?;
        e.len().checked_sub(1).and_then(|l| self.position(id, l))
    }

    /// How many of the session's first events have frames before `end`
    /// (an iterative walk up the fork chain).
    pub fn len_before(&self, id: SessionId, end: LogPos) -> u64 {
        let mut cur = id;
        let mut cap = u64::MAX;
        loop {
            let Some(e) = self.entry(cur) else {
                return 0;
            };
            let own = e.positions.partition_point(|p| *p < end.0) as u64;
            match e.parent {
                // Inherited frames lie before the define, which lies before
                // every own frame.
                _ if own > 0 => return (e.inherited() + own).min(cap),
                Some((p, n)) if p < cur => {
                    cap = cap.min(n);
                    cur = p;
                }
                _ => return 0,
            }
        }
    }

    /// Apply a `session-define` frame. The id must be the next dense one, the
    /// name new, and a fork parent must exist and hold the inherited events.
    pub fn apply_define(
        &mut self,
        id: SessionId,
        def: &SessionDefine,
        pos: LogPos,
    ) -> Result<(), String> {
        if id.0 as usize != self.sessions.len() {
            return Err(format!(
                "session-define for compact id {} but the next id is {}",
                id.0,
                self.sessions.len()
            ));
        }
        if self.by_name.contains_key(def.name.as_str()) {
            return Err(format!("session {:?} defined twice", def.name));
        }
        // §14.2: a reclaimed (dead) fork may inherit more than its dead
        // parent keeps; its upto is not checked.
        if let (Some((p, upto)), false) = (def.parent, self.reclaimed.contains_key(&id)) {
            let parent = self
                .sessions
                .get(p.0 as usize)
                .ok_or_else(|| format!("fork parent {} does not exist", p.0))?;
            if upto > parent.len() {
                return Err(format!(
                    "fork inherits {upto} events but the parent has {}",
                    parent.len()
                ));
            }
        }
        let positions = Vec::new();
        let name: Arc<str> = Arc::from(def.name.as_str());
        self.by_name.insert(name.clone(), id);
        self.sessions.push(SessionEntry {
            name,
            parent: def.parent,
            define_pos: pos,
            positions,
        });
        Ok(())
    }

    /// Apply an event frame: its seq must be exactly the session's length.
    pub fn apply_frame(&mut self, session: SessionId, seq: u64, pos: LogPos) -> Result<(), String> {
        let entry = self
            .sessions
            .get_mut(session.0 as usize)
            .ok_or_else(|| format!("frame for undefined session id {}", session.0))?;
        if self
            .reclaimed
            .get(&session)
            .is_some_and(|keep| seq >= *keep)
        {
            return Ok(()); // §14.2: garbage no live session reads
        }
        if seq != entry.len() {
            return Err(format!(
                "session {:?}: frame has seq {seq} but the next seq is {} (seqs must be dense)",
                entry.name,
                entry.len()
            ));
        }
        entry.positions.push(pos.0);
        Ok(())
    }

    /// Number of events over all sessions (inherited ones counted per child).
    pub fn event_count(&self) -> u64 {
        self.sessions.iter().map(|s| s.len()).sum()
    }

    /// Number of positions held (each frame once: inherited events are
    /// not counted again for the children).
    pub fn own_event_count(&self) -> u64 {
        self.sessions.iter().map(|s| s.positions.len() as u64).sum()
    }

    /// The part of the index covering only positions before `end` (used to
    /// checkpoint exactly what is durable).
    pub fn prefix_before(&self, end: LogPos) -> Index {
        let mut out = Index::default();
        for (i, s) in self.sessions.iter().enumerate() {
            if s.define_pos >= end {
                break; // defines are in log order, so all later ones are too
            }
            // Own frames follow the define; inherited ones are the parent's
            // (kept there, since a parent's define precedes its children's).
            let keep = s.positions.partition_point(|p| *p < end.0);
            let entry = SessionEntry {
                name: s.name.clone(),
                parent: s.parent,
                define_pos: s.define_pos,
                positions: s.positions[..keep].to_vec(),
            };
            out.by_name.insert(entry.name.clone(), SessionId(i as u32));
            out.sessions.push(entry);
        }
        out.reclaimed = self.reclaimed.clone();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SegmentId;

    fn pos(o: u32) -> LogPos {
        LogPos::new(SegmentId(1), o)
    }

    #[test]
    fn dense_seqs_and_forks() {
        let mut ix = Index::default();
        let def = |n: &str, parent| SessionDefine {
            name: n.into(),
            parent,
        };
        ix.apply_define(SessionId(0), &def("a", None), pos(64))
            .unwrap();
        ix.apply_frame(SessionId(0), 0, pos(100)).unwrap();
        ix.apply_frame(SessionId(0), 1, pos(200)).unwrap();
        assert!(ix.apply_frame(SessionId(0), 3, pos(300)).is_err());
        assert!(ix.apply_frame(SessionId(5), 0, pos(300)).is_err());
        assert!(ix
            .apply_define(SessionId(2), &def("b", None), pos(300))
            .is_err());
        assert!(ix
            .apply_define(SessionId(1), &def("a", None), pos(300))
            .is_err());
        ix.apply_define(SessionId(1), &def("b", Some((SessionId(0), 1))), pos(300))
            .unwrap();
        // The child holds no copy of the inherited position.
        assert!(ix.get("b").unwrap().1.positions.is_empty());
        assert_eq!(ix.get("b").unwrap().1.len(), 1);
        assert_eq!(ix.position(SessionId(1), 0), Some(pos(100).0));
        assert!(ix
            .apply_define(SessionId(2), &def("c", Some((SessionId(1), 3))), pos(300))
            .is_err());
        ix.apply_frame(SessionId(1), 1, pos(400)).unwrap();
        assert!(ix.apply_frame(SessionId(1), 1, pos(410)).is_err());
        ix.apply_frame(SessionId(1), 2, pos(420)).unwrap();
        // A fork of the fork: b's seqs 0..2 = a's 0, b's own 1.
        ix.apply_define(SessionId(2), &def("c", Some((SessionId(1), 2))), pos(500))
            .unwrap();
        ix.apply_frame(SessionId(2), 2, pos(600)).unwrap();
        assert_eq!(
            ix.positions_in(SessionId(2), 0..10),
            vec![pos(100).0, pos(400).0, pos(600).0]
        );
        assert_eq!(ix.positions_in(SessionId(2), 1..2), vec![pos(400).0]);
        assert_eq!(ix.positions_in(SessionId(2), 2..3), vec![pos(600).0]);
        assert_eq!(ix.positions_in(SessionId(2), 5..9), Vec::<u64>::new());
        assert_eq!(ix.position(SessionId(2), 3), None);
        assert_eq!(ix.last_position(SessionId(2)), Some(pos(600).0));
        assert_eq!(ix.last_position(SessionId(1)), Some(pos(420).0));
        // Durable counts: a child without durable own frames counts the
        // durable part of what it inherits.
        assert_eq!(ix.len_before(SessionId(2), pos(150)), 1);
        assert_eq!(ix.len_before(SessionId(2), pos(450)), 2);
        assert_eq!(ix.len_before(SessionId(2), pos(700)), 3);
        assert_eq!(ix.len_before(SessionId(1), pos(410)), 2);
        assert_eq!(ix.event_count(), 2 + 3 + 3);
        assert_eq!(ix.own_event_count(), 2 + 2 + 1);
        let p = ix.prefix_before(pos(250));
        assert_eq!(p.sessions.len(), 1);
        assert_eq!(p.sessions[0].positions.len(), 2);
        let p = ix.prefix_before(pos(410));
        assert_eq!(p.sessions.len(), 2);
        assert_eq!(p.sessions[1].positions, vec![pos(400).0]);
        assert_eq!(p.sessions[1].len(), 2);

        // A fork below its parent's own events reads through the parent to
        // the grandparent: d = fork of c at 1 (a's event 0 only).
        ix.apply_define(SessionId(3), &def("d", Some((SessionId(2), 1))), pos(700))
            .unwrap();
        ix.apply_frame(SessionId(3), 1, pos(800)).unwrap();
        assert_eq!(
            ix.positions_and_owners_in(SessionId(3), 0..2),
            (
                vec![pos(100).0, pos(800).0],
                vec![SessionId(0), SessionId(3)]
            )
        );
        assert_eq!(
            ix.positions_and_owners_in(SessionId(2), 0..3),
            (
                vec![pos(100).0, pos(400).0, pos(600).0],
                vec![SessionId(0), SessionId(1), SessionId(2)]
            )
        );
        assert_eq!(ix.position(SessionId(3), 0), Some(pos(100).0));
        assert_eq!(ix.len_before(SessionId(3), pos(750)), 1);
        assert_eq!(ix.len_before(SessionId(3), pos(50)), 0);
    }
}
