//! The store's reads and listings: a session's place in the log, its
//! events, and the sessions the index holds (read-side locks only: the
//! index's, and the collection gate's read side while positions are
//! walked).

use std::ops::ControlFlow;

use super::*;

impl Store {
    /// The log position past `session`'s last frame: once the log is
    /// durable there, every event of it appended so far is.
    pub(crate) fn session_end_pos(&self, session: &str) -> Result<LogPos> {
        let ix = self.shared.index.read();
        let (_, e) = ix
            .get(session)
            .ok_or_else(|| Error::UnknownSession(session.to_string()))?;
        // The last own frame, or else the define (which follows every
        // inherited frame).
        Ok(match e.positions.last() {
            Some(p) => LogPos(*p + 1),
            None => LogPos(e.define_pos.0 + 1),
        })
    }

    /// Facts about one session, including how much of it is durable.
    pub fn session_meta(&self, session: &str) -> Option<SessionMeta> {
        // Durable first: it only grows, so the count below never overstates.
        let durable = self.shared.commit.durable();
        let ix = self.shared.index.read();
        let (id, e) = ix.get(session)?;
        let durable_len = ix.len_before(id, durable);
        Some(SessionMeta {
            id,
            len: e.len(),
            durable_len: if self.shared.opts.read_only {
                e.len()
            } else {
                durable_len
            },
            define_pos: e.define_pos,
            parent: e
                .parent
                .map(|(p, n)| (ix.sessions[p.0 as usize].name.to_string(), n)),
        })
    }

    /// Number of events in `session`, if it exists.
    pub fn session_len(&self, session: &str) -> Option<u64> {
        self.shared.index.read().get(session).map(|(_, e)| e.len())
    }

    /// Every listed session with its durable length (inherited events
    /// included) and fork parent, in creation order, under one read of the
    /// index ([`crate::backend::EventLog::listing`]).
    pub(crate) fn listing(&self) -> Vec<crate::backend::Listing> {
        // Durable first: it only grows, so the counts never overstate.
        let durable = self.shared.commit.durable();
        let ix = self.shared.index.read();
        ix.sessions
            .iter()
            .enumerate()
            .filter(|(i, _)| !ix.reclaimed.contains_key(&SessionId(*i as u32)))
            .map(|(i, s)| crate::backend::Listing {
                name: s.name.to_string(),
                durable_len: ix.len_before(SessionId(i as u32), durable),
                parent: s
                    .parent
                    .map(|(p, n)| (ix.sessions[p.0 as usize].name.to_string(), n)),
            })
            .collect()
    }

    /// All sessions, in creation order.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        let ix = self.shared.index.read();
        ix.sessions
            .iter()
            .enumerate()
            .filter(|(i, _)| !ix.reclaimed.contains_key(&SessionId(*i as u32)))
            .map(|(i, s)| SessionInfo {
                name: s.name.to_string(),
                id: SessionId(i as u32),
                len: s.len(),
                parent: s
                    .parent
                    .map(|(p, n)| (ix.sessions[p.0 as usize].name.to_string(), n)),
            })
            .collect()
    }

    /// The sessions with a frame (their `session-define` or an own event) at
    /// or after log position `since`, in creation order, as
    /// `(name, meta)`: what a derived index must look at again after it has
    /// folded everything durable before `since`. One pass over the index's
    /// integers; names are cloned only for the sessions returned. Also
    /// returns the durable position the `durable_len`s are counted against:
    /// the `since` of the next call (a session with frames past it is
    /// returned again then).
    pub fn sessions_touched_since(&self, since: LogPos) -> (LogPos, Vec<(String, SessionMeta)>) {
        let durable = self.shared.commit.durable();
        let ix = self.shared.index.read();
        let read_only = self.shared.opts.read_only;
        let touched = ix
            .sessions
            .iter()
            .enumerate()
            .filter(|(i, e)| {
                (e.define_pos >= since || e.positions.last().is_some_and(|p| *p >= since.0))
                    && !ix.reclaimed.contains_key(&SessionId(*i as u32))
            })
            .map(|(i, e)| {
                let id = SessionId(i as u32);
                let meta = SessionMeta {
                    id,
                    len: e.len(),
                    durable_len: if read_only {
                        e.len()
                    } else {
                        ix.len_before(id, durable)
                    },
                    define_pos: e.define_pos,
                    parent: e
                        .parent
                        .map(|(p, n)| (ix.sessions[p.0 as usize].name.to_string(), n)),
                };
                (e.name.to_string(), meta)
            })
            .collect();
        (durable, touched)
    }

    /// Which positions this handle's index hands out: `(handle, generation)`,
    /// where `handle` is different for every open of a store (in this
    /// process) and `generation` grows each time an online collection
    /// ([`Store::collect`]) moved frames or reclaimed sessions. A view that
    /// remembers positions or log ranges (such as
    /// [`crate::session::Catalog`]) re-checks every session when it changed.
    pub fn collection_epoch(&self) -> (u64, u64) {
        (
            Arc::as_ptr(&self.shared) as u64,
            self.shared
                .gc_generation
                .load(std::sync::atomic::Ordering::SeqCst),
        )
    }

    /// Names of the sessions a collection reclaimed (FORMAT.md §14.2): they
    /// are not listed by [`Store::sessions`], and appends, forks and
    /// creations under these names are refused. A layer that numbers its
    /// sessions (as `turnstone serve` does) must not reuse them.
    pub fn reclaimed_names(&self) -> Vec<String> {
        let ix = self.shared.index.read();
        ix.reclaimed
            .keys()
            .filter_map(|id| ix.sessions.get(id.0 as usize))
            .map(|e| e.name.to_string())
            .collect()
    }

    /// Read one event.
    pub fn read(&self, session: &str, seq: u64) -> Result<Event> {
        let mut v = self.read_range(session, seq..seq + 1)?;
        v.pop().ok_or_else(|| Error::SeqOutOfRange {
            session: session.to_string(),
            seq,
            len: self.session_len(session).unwrap_or(0),
        })
    }

    /// Read the events of `session` with seq in `range` (clamped to the
    /// session's length), in seq order. Events not yet written are made
    /// durable first.
    pub fn read_range(&self, session: &str, range: std::ops::Range<u64>) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        self.visit_range(session, range, |e| {
            out.push(e.to_event());
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Visit the events of `session` with seq in `range` (clamped to the
    /// session's length), in seq order, lending each payload instead of
    /// copying it: out of the segment's map (sealed segments), or out of the
    /// active segment's live map (lent once per walk, for the span of the
    /// walk's frames, which are durable and never written again). Checks are those of
    /// [`Store::read_range`] (checksum, seq, owner); events not yet written
    /// are made durable first. The visitor stops the walk with
    /// `ControlFlow::Break`. Returns the number of events visited.
    pub fn visit_range(
        &self,
        session: &str,
        range: std::ops::Range<u64>,
        visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64> {
        self.shared.visit_range(session, range, visit)
    }
}
