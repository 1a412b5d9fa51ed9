//! Replay and fork (SEMANTICS.md, "Replay, fork, projections, caches, query").
//!
//! Replay streams a session's events in seq order (`assistant/chunk`
//! included, events a fork inherits included) for UI replay; re-deriving the
//! surface and messages is [`crate::session::Session::open`].
//!
//! Fork creates a child whose log is a stable prefix of the source. The
//! child references the parent's frames (a `session-define` with a parent,
//! FORMAT.md §5): no event body is copied, so a fork costs one small frame
//! plus 8 bytes of index per inherited event.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;

use rand::RngCore;

use crate::error::{Error, Result};
use crate::session::codec::envelope;
use crate::session::codec::envelope::decode_error;
use crate::session::codec::event::{CoreKind, Registry, SessionEvent};
use crate::session::log::LogRef;

/// Events read per store call while replaying.
const REPLAY_CHUNK: u64 = 1024;

/// An iterator over a session's events in seq order.
pub struct Replay<'a> {
    log: LogRef<'a>,
    id: String,
    registry: Arc<Registry>,
    next: u64,
    end: u64,
    /// Decoded events of the current chunk; an error ends it (and the walk).
    buf: VecDeque<Result<SessionEvent>>,
}

/// Replay the durable events `from..` of session `id` (as they are now).
///
/// Replay, like every view (query, search, listing), reads only what is
/// durable and never makes anything durable: a reader of a live session
/// sees its events once the writer's group commit has made them durable,
/// and costs the writer no `fdatasync`. The writer's own [`crate::session::Session`]
/// sees its appends at once.
///
/// ```
/// # use std::sync::Arc;
/// # use turnstone::session::*;
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
/// let mut s = Session::create(store.clone(), "s1", Arc::new(Registry::new())).unwrap();
/// s.append(UserMessage { content: vec![ContentBlock::text("hi")] }, SurfaceOp::Append).unwrap();
/// s.append(AssistantChunk { index: 0, text: "hel".into() }, ()).unwrap();
/// s.flush().unwrap();
/// let kinds: Vec<String> = replay(&store, "s1", Arc::new(Registry::new()), 0)
///     .unwrap()
///     .map(|ev| ev.unwrap().kind.name().to_string())
///     .collect();
/// assert_eq!(kinds, ["user/message", "assistant/chunk"]);
/// ```
pub fn replay<'a>(
    log: impl Into<LogRef<'a>>,
    id: &str,
    registry: Arc<Registry>,
    from: u64,
) -> Result<Replay<'a>> {
    replay_range(log, id, registry, from..u64::MAX)
}

/// Replay the durable events of session `id` with seq in `range`, reading
/// nothing past it.
pub fn replay_range<'a>(
    log: impl Into<LogRef<'a>>,
    id: &str,
    registry: Arc<Registry>,
    range: std::ops::Range<u64>,
) -> Result<Replay<'a>> {
    let log = log.into();
    crate::session::lifecycle::delete::check_not_deleted(log, id)?;
    replay_range_of_any(log, id, registry, range)
}

/// [`replay_range`] without the deleted check: for derived indexes, which
/// keep the text of a deleted session that fork children inherit.
pub(crate) fn replay_range_of_any<'a>(
    log: impl Into<LogRef<'a>>,
    id: &str,
    registry: Arc<Registry>,
    range: std::ops::Range<u64>,
) -> Result<Replay<'a>> {
    let log = log.into();
    let durable = log
        .durable_len(id)?
        .ok_or_else(|| Error::UnknownSession(id.to_string()))?;
    let end = durable.min(range.end);
    Ok(Replay {
        log,
        id: id.to_string(),
        registry,
        next: range.start.min(end),
        end,
        buf: VecDeque::new(),
    })
}

impl Iterator for Replay<'_> {
    type Item = Result<SessionEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            if self.next >= self.end {
                return None;
            }
            let to = (self.next + REPLAY_CHUNK).min(self.end);
            let (id, registry, buf) = (&self.id, &self.registry, &mut self.buf);
            // Decode straight from the log's bytes (no payload copies). Events
            // before a bad one are still yielded, then its error.
            let walked = self.log.visit(id, self.next..to, |e| {
                let payload = match e.payload {
                    Ok(p) => p,
                    Err(err) => {
                        buf.push_back(Err(err));
                        return ControlFlow::Break(());
                    }
                };
                match envelope::decode_view(e.seq, e.kind, e.flags, &payload, registry) {
                    Ok(ev) => {
                        buf.push_back(Ok(ev));
                        ControlFlow::Continue(())
                    }
                    Err(err) => {
                        buf.push_back(Err(decode_error(id, e.seq, err)));
                        ControlFlow::Break(())
                    }
                }
            });
            match walked {
                Ok(_) if !matches!(buf.back(), Some(Err(_))) => self.next = to,
                Ok(_) => self.next = self.end,
                Err(e) => {
                    self.next = self.end;
                    buf.push_back(Err(e));
                }
            }
        }
        self.buf.pop_front()
    }
}

/// Where a fork may cut: whether a turn is open at `limit` (the child holds
/// seqs `< limit`), and the largest boundary `<= limit` at which no turn is
/// open. A turn is open at `b` when the last `turn/start` or `turn/end`
/// before `b` is a `turn/start`.
///
/// Walks back from `limit` and stops at the first marker that decides (a
/// `turn/end`, or the start of the log): the cost is the length of the last
/// turn, not of the session.
fn closed_boundaries(log: LogRef<'_>, id: &str, limit: u64) -> Result<(u64, bool)> {
    let (start, end) = (CoreKind::TurnStart.code(), CoreKind::TurnEnd.code());
    // The earliest turn/start seen so far with only turn/starts after it
    // (up to `limit`): once one is seen, a turn is open at `limit`, and the
    // last closed boundary is the earliest such start whose previous marker
    // is a turn/end (or none).
    let mut open_since: Option<u64> = None;
    let mut hi = limit;
    let mut chunk = 32;
    while hi > 0 {
        let lo = hi.saturating_sub(chunk);
        // Only kinds are needed: collect them without copying payloads.
        let mut kinds = Vec::with_capacity((hi - lo) as usize);
        log.visit(id, lo..hi, |e| {
            kinds.push((e.seq, e.kind));
            ControlFlow::Continue(())
        })?;
        for (seq, kind) in kinds.into_iter().rev() {
            if kind == end {
                return Ok(match open_since {
                    None => (limit, true),
                    Some(s) => (s, false),
                });
            }
            if kind == start {
                open_since = Some(seq);
            }
        }
        hi = lo;
        chunk = (chunk * 2).min(REPLAY_CHUNK);
    }
    Ok(match open_since {
        None => (limit, true),
        Some(s) => (s, false),
    })
}

/// Whether a turn is open at the end of session `id`: its last `turn/start`
/// or `turn/end` is a `turn/start` (the rule [`fork`] cuts by). Reads back
/// from the end only as far as the last turn marker.
pub fn turn_open<'a>(log: impl Into<LogRef<'a>>, id: &str) -> Result<bool> {
    let log = log.into();
    let len = log
        .appended_len(id)?
        .ok_or_else(|| Error::UnknownSession(id.to_string()))?;
    Ok(!closed_boundaries(log, id, len)?.1)
}

/// What [`fork`] created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forked {
    /// The child's id.
    pub child: String,
    /// The child holds the source's events `0..upto`.
    pub upto: u64,
}

/// Fork `source` into a new session holding its events `0..boundary`. The
/// default boundary is the end of the last closed turn (the whole history
/// if no turn is open). A boundary inside an unfinished turn is refused. A
/// child inherits durable events only: a boundary past the source's durable
/// end makes its events durable first, and the child itself is durable
/// when `fork` returns (listed at once; a crash keeps it). The child id
/// defaults to `<source>.fork-<random hex>`.
///
/// ```
/// # use std::sync::Arc;
/// # use turnstone::session::*;
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
/// # let reg = Arc::new(Registry::new());
/// let mut s = Session::create(store.clone(), "s1", reg.clone()).unwrap();
/// s.append(TurnStart { turn_id: "t1".into() }, ()).unwrap();
/// s.append(UserMessage { content: vec![ContentBlock::text("hi")] }, SurfaceOp::Append).unwrap();
/// s.append(TurnEnd { turn_id: "t1".into(), reason: TurnEndReason::Completed }, ()).unwrap();
/// s.append(TurnStart { turn_id: "t2".into() }, ()).unwrap(); // still running
/// // Default boundary: the end of the last closed turn.
/// let f = fork(&store, "s1", None, Some("try-again")).unwrap();
/// assert_eq!(f.upto, 3);
/// // Inside the unfinished turn: refused.
/// assert!(fork(&store, "s1", Some(4), None).is_err());
/// let mut child = Session::open(store, &f.child, reg).unwrap();
/// assert_eq!(child.derive_messages().len(), 1);
/// ```
pub fn fork<'a>(
    log: impl Into<LogRef<'a>>,
    source: &str,
    boundary: Option<u64>,
    child: Option<&str>,
) -> Result<Forked> {
    let log = log.into();
    crate::session::lifecycle::delete::check_not_deleted(log, source)?;
    let len = log
        .appended_len(source)?
        .ok_or_else(|| Error::UnknownSession(source.to_string()))?;
    let upto = match boundary {
        Some(b) if b > len => {
            return Err(Error::SeqOutOfRange {
                session: source.to_string(),
                seq: b,
                len,
            })
        }
        Some(b) => {
            let (_, closed) = closed_boundaries(log, source, b)?;
            if !closed {
                return Err(Error::Refused(format!(
                    "fork boundary {b} of session {source:?} lies inside an unfinished turn"
                )));
            }
            b
        }
        None => {
            let (last_closed, closed) = closed_boundaries(log, source, len)?;
            if closed {
                len
            } else {
                last_closed
            }
        }
    };
    let child = match child {
        Some(c) => c.to_string(),
        None => {
            let mut r = [0u8; 6];
            rand::thread_rng().fill_bytes(&mut r);
            let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
            format!("{source}.fork-{hex}")
        }
    };
    // A fork inherits durable events only: a prefix still being written is
    // made durable first (one flush of the source, shared with its other
    // appenders).
    let durable = log
        .durable_len(source)?
        .ok_or_else(|| Error::UnknownSession(source.to_string()))?;
    if upto > durable {
        log.as_log().sync_session(source)?;
    }
    log.as_log().fork(source, upto, &child)?;
    // The child is durable when the fork returns, on every log (PostgreSQL
    // commits it): listed at once, and kept by a crash.
    log.as_log().sync_session(&child)?;
    Ok(Forked { child, upto })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use rand::{Rng, SeedableRng};

    /// The forward definition: fold every event from seq 0.
    fn forward(kinds: &[u16], limit: u64) -> (u64, bool) {
        let (start, end) = (CoreKind::TurnStart.code(), CoreKind::TurnEnd.code());
        let mut open = false;
        let mut last_closed = 0;
        for (seq, k) in kinds.iter().enumerate().take(limit as usize) {
            if *k == start {
                open = true;
            } else if *k == end {
                open = false;
            }
            if !open {
                last_closed = seq as u64 + 1;
            }
        }
        (last_closed, !open)
    }

    #[test]
    fn backward_walk_agrees_with_the_forward_fold() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (start, end) = (CoreKind::TurnStart.code(), CoreKind::TurnEnd.code());
        for case in 0..40 {
            let id = format!("s{case}");
            // Long runs without markers (past the walk's chunk sizes),
            // repeated starts, stray ends.
            let n = rng.gen_range(0..300);
            let marker_odds = [0.02, 0.1, 0.5][case % 3];
            let mut kinds = Vec::new();
            for _ in 0..n {
                let k = if rng.gen_bool(marker_odds) {
                    if rng.gen_bool(0.5) {
                        start
                    } else {
                        end
                    }
                } else {
                    CoreKind::AssistantChunk.code()
                };
                store.append(&id, k, 0, b"{}").unwrap();
                kinds.push(k);
            }
            if n == 0 {
                store.create_session(&id).unwrap();
            }
            for limit in 0..=n as u64 {
                assert_eq!(
                    closed_boundaries((&store).into(), &id, limit).unwrap(),
                    forward(&kinds, limit),
                    "case {case}, limit {limit}, kinds {kinds:?}"
                );
            }
        }
    }
}
