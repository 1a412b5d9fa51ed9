//! The seq-dense per-session index: for each session, `positions[seq]` is the
//! log position of that event's frame (invariant 2: seqs are dense, so a
//! lookup is one array access, 8 bytes per event).
//!
//! Session ids are strings; inside the log each has a compact [`SessionId`]
//! assigned densely (0, 1, 2, …) in the order of their `session-define` frames.

use std::collections::HashMap;
use std::sync::Arc;

use crate::frame::SessionDefine;
use crate::types::{LogPos, SessionId};

/// One session's index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEntry {
    pub name: Arc<str>,
    /// Fork parent and the number of events inherited from it.
    pub parent: Option<(SessionId, u64)>,
    /// Where the `session-define` frame sits.
    pub define_pos: LogPos,
    /// `positions[seq]` = packed [`LogPos`] of the frame of event `seq`.
    pub positions: Vec<u64>,
}

impl SessionEntry {
    pub fn len(&self) -> u64 {
        self.positions.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
    /// How many events were inherited from a fork parent.
    pub fn inherited(&self) -> u64 {
        self.parent.map(|(_, n)| n).unwrap_or(0)
    }
}

/// The whole index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    pub sessions: Vec<SessionEntry>,
    pub by_name: HashMap<Arc<str>, SessionId>,
}

impl Index {
    pub fn get(&self, name: &str) -> Option<(SessionId, &SessionEntry)> {
        let id = *self.by_name.get(name)?;
        Some((id, &self.sessions[id.0 as usize]))
    }

    pub fn entry(&self, id: SessionId) -> Option<&SessionEntry> {
        self.sessions.get(id.0 as usize)
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
        let positions = match def.parent {
            None => Vec::new(),
            Some((p, upto)) => {
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
                parent.positions[..upto as usize].to_vec()
            }
        };
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

    /// The part of the index covering only positions before `end` (used to
    /// checkpoint exactly what is durable).
    pub fn prefix_before(&self, end: LogPos) -> Index {
        let mut out = Index::default();
        for (i, s) in self.sessions.iter().enumerate() {
            if s.define_pos >= end {
                break; // defines are in log order, so all later ones are too
            }
            let keep = s.positions.partition_point(|p| *p < end.0);
            // Inherited positions may lie anywhere before the define; they are
            // all before `end` since the define is.
            let keep = keep.max(s.inherited() as usize).min(s.positions.len());
            let entry = SessionEntry {
                name: s.name.clone(),
                parent: s.parent,
                define_pos: s.define_pos,
                positions: s.positions[..keep].to_vec(),
            };
            out.by_name.insert(entry.name.clone(), SessionId(i as u32));
            out.sessions.push(entry);
        }
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
        assert_eq!(ix.get("b").unwrap().1.positions, vec![pos(100).0]);
        ix.apply_frame(SessionId(1), 1, pos(400)).unwrap();
        let p = ix.prefix_before(pos(250));
        assert_eq!(p.sessions.len(), 1);
        assert_eq!(p.sessions[0].positions.len(), 2);
    }
}
