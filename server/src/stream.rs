//! One stream's in-memory state: what is accepted (pending durability) and
//! what is visible (durable, served to readers), producers, closure,
//! deletion and expiry. Rebuilt from the log on start (`rebuild.rs`).

use std::collections::HashMap;

use tokio::sync::watch;
use turnstone::LogPos;

use crate::offset::Offset;
use crate::record::{CreateRecord, DeleteMode, StateRecord};

/// Why a request failed, mapped to a status by the HTTP layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    NotFound,
    /// Soft-deleted: forks still read through it (410).
    Gone,
    BadRequest(String),
    Conflict(String),
    /// Append to a closed stream (409 with `Stream-Closed` and the tail).
    Closed {
        tail: Offset,
    },
    /// Stale producer epoch (403 with the current epoch).
    StaleEpoch {
        current: u64,
    },
    /// Producer sequence gap (409 with expected and received).
    SeqGap {
        expected: u64,
        received: u64,
    },
    TooLarge(String),
    /// The store cannot take writes (poisoned, closed): nothing of the
    /// request is or will be applied (503).
    Unavailable(String),
    /// A write was handed to the engine but could not be made durable: it
    /// may still be applied (the engine retries a failed batch write) or,
    /// after an fdatasync error, be found after a restart (500 with
    /// `Stream-Outcome: unknown`; an idempotent retry settles it).
    Unknown(String),
    /// Answer the inner failure once `LogPos` is durable: it rests on
    /// accepted state (a create or tombstone) that may not be durable yet.
    After(Box<Fail>, LogPos),
    /// On a shared database: another server instance wrote the stream
    /// since this one folded it, or took its lease; nothing was written.
    /// Fold what the database holds and try again (503 if it escapes).
    Retry,
    Internal(String),
}

impl Fail {
    /// `self`, to be answered once `pos` is durable.
    pub fn after(self, pos: LogPos) -> Fail {
        Fail::After(Box::new(self), pos)
    }

    /// Map an engine error.
    pub fn engine(e: turnstone::Error) -> Fail {
        use turnstone::Error as E;
        match e {
            E::TooLarge { .. } => Fail::TooLarge(e.to_string()),
            E::Poisoned { .. } | E::Closed | E::WriteFailed { .. } | E::ReadOnly => {
                Fail::Unavailable(e.to_string())
            }
            other => Fail::Internal(other.to_string()),
        }
    }

    /// Map an engine error from handing a write to the engine: the engine
    /// took nothing, so anything but a bad request is "not applied" (503).
    pub fn engine_write(e: turnstone::Error) -> Fail {
        use turnstone::Error as E;
        match e {
            E::TooLarge { .. } => Fail::TooLarge(e.to_string()),
            other => Fail::Unavailable(format!("the store takes no writes: {other}")),
        }
    }
}

/// A producer's state: epoch and highest accepted seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer {
    pub epoch: u64,
    pub seq: u64,
}

/// One stream (one engine session).
#[derive(Debug)]
pub struct Stream {
    pub path: String,
    pub session: String,
    /// End of the record that created it: nothing is served before this is
    /// durable.
    pub create_end: LogPos,
    pub state: parking_lot::Mutex<State>,
    /// Bumped when a deletion becomes visible. Readers waiting for data are
    /// woken by the engine ([`turnstone::Subscription::ready_async`]) when a
    /// batch holding this stream's events is durable, not by this.
    pub changed: watch::Sender<u64>,
    /// On a shared database: one fold from the start at a time
    /// ([`crate::streams::Streams::refresh`] of a stale stream), so that an
    /// older one never lands after a newer one.
    pub reload: parking_lot::Mutex<()>,
}

impl Stream {
    /// The state, its visible part brought up to what the log has made
    /// durable. What is durable is asked with the state locked: on a
    /// shared database, "no writer here" means "nothing queued here" only
    /// while no append can queue a group and push it as pending (appends
    /// do both with the state locked); asked before, a writer acquired in
    /// between had its uncommitted group shown (a reader then asked the
    /// database for events it did not hold).
    pub fn visible(&self, log: &crate::log::Log) -> parking_lot::MutexGuard<'_, State> {
        let mut st = self.state.lock();
        st.catch_up(log.durable_for(&self.session));
        st
    }
}

/// Mutable state of a stream.
#[derive(Debug)]
pub struct State {
    pub config: CreateRecord,
    pub json: bool,
    /// Accepted: the tail after every append taken so far.
    pub tail: Offset,
    pub closed: bool,
    /// End of the last engine write for this stream.
    pub last_end: LogPos,
    /// Visible: durable and served.
    pub vis: Offset,
    pub vis_closed: bool,
    /// Appends taken but not yet visible, in order: where each one's bytes
    /// end in the log, the tail after it and whether it closed the stream.
    /// Each becomes visible once the log is durable past its end, whoever
    /// notices first: the writer after its durability wait ([`crate::streams::Streams::publish`])
    /// or a reader the engine woke ([`Stream::visible`]).
    pub pending: std::collections::VecDeque<(LogPos, Offset, bool)>,
    pub producers: HashMap<String, Producer>,
    pub stream_seq: Option<String>,
    /// Producer tuple of the append that closed the stream (dedupes retries).
    pub closed_by: Option<(String, u64, u64)>,
    /// Accepted deletion (its tombstone is written, maybe not yet durable):
    /// writes are refused from here on.
    pub deleted: Option<DeleteMode>,
    /// Visible deletion: the tombstone is durable, readers are refused.
    pub vis_deleted: Option<DeleteMode>,
    /// Live forks whose data reads through this stream.
    pub forks: u32,
    /// Last access (sliding TTL), ms since the epoch.
    pub last_access_ms: u64,
    /// On a shared database: the last access this instance recorded there.
    pub touched_db_ms: u64,
    /// On a shared database: a queued write of this instance failed, so
    /// the accepted state is not what the database holds; it is folded
    /// again from the start before anything else ([`crate::streams::Streams::refresh`]).
    pub stale: bool,
    /// How many times it was marked stale (a mark made while a fold from
    /// the start runs keeps the stream stale after it).
    pub stale_marks: u64,
}

impl State {
    pub fn new(config: CreateRecord, start: Offset, end: LogPos, now_ms: u64) -> State {
        let json = crate::headers::is_json(&config.content_type);
        let closed = config.closed;
        State {
            config,
            json,
            tail: start,
            closed,
            last_end: end,
            vis: start,
            vis_closed: closed,
            pending: Default::default(),
            producers: HashMap::new(),
            stream_seq: None,
            closed_by: None,
            deleted: None,
            vis_deleted: None,
            forks: 0,
            last_access_ms: now_ms,
            touched_db_ms: 0,
            stale: false,
            stale_marks: 0,
        }
    }

    /// Make visible every pending append whose bytes are durable.
    pub fn catch_up(&mut self, durable: LogPos) {
        while let Some(&(end, tail, closed)) = self.pending.front() {
            if end > durable {
                break;
            }
            self.pending.pop_front();
            self.show(tail, closed);
        }
    }

    /// `tail` is durable (and the stream closed there, if `closed`).
    pub fn show(&mut self, tail: Offset, closed: bool) {
        if tail.seq > self.vis.seq {
            self.vis = tail;
        }
        if closed && self.vis.seq >= tail.seq {
            self.vis_closed = true;
        }
        while self
            .pending
            .front()
            .is_some_and(|p| p.1.seq <= self.vis.seq)
        {
            self.pending.pop_front();
        }
    }

    /// Apply a logged state change (on append and on rebuild).
    pub fn apply(&mut self, rec: &StateRecord) {
        if let Some(p) = &rec.producer {
            self.producers.insert(
                p.id.clone(),
                Producer {
                    epoch: p.epoch,
                    seq: p.seq,
                },
            );
        }
        if let Some(s) = &rec.stream_seq {
            self.stream_seq = Some(s.clone());
        }
        if rec.closed {
            self.closed = true;
            self.closed_by = rec
                .producer
                .as_ref()
                .map(|p| (p.id.clone(), p.epoch, p.seq));
        }
    }

    /// The session of the stream this one was forked from, if any.
    pub fn fork_source(&self) -> Option<String> {
        self.config.fork.as_ref().map(|f| f.source_session.clone())
    }

    /// When the stream expires (ms since the epoch), if ever.
    pub fn expires_at_ms(&self) -> Option<u64> {
        let ttl = self
            .config
            .ttl_secs
            .map(|t| self.last_access_ms.saturating_add(t.saturating_mul(1000)));
        let abs = self.config.expires_at_ms.map(|e| e.max(0) as u64);
        match (ttl, abs) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.deleted.is_none() && self.expires_at_ms().is_some_and(|t| t <= now_ms)
    }

    /// Refuse writes on a stream whose deletion is accepted (the answer
    /// waits for the tombstone to be durable: see `write.rs`).
    pub fn check_live(&self) -> Result<(), Fail> {
        deleted_fail(self.deleted)
    }

    /// Refuse reads on a stream whose deletion is durable (a deletion that
    /// is not durable yet hides nothing).
    pub fn check_visible(&self) -> Result<(), Fail> {
        deleted_fail(self.vis_deleted)
    }
}

fn deleted_fail(d: Option<DeleteMode>) -> Result<(), Fail> {
    match d {
        None => Ok(()),
        Some(DeleteMode::Soft) => Err(Fail::Gone),
        Some(DeleteMode::Hard) => Err(Fail::NotFound),
    }
}

/// What a producer's headers mean against its current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerCheck {
    /// New data: accept and record (epoch, seq).
    Accept,
    /// Already accepted: answer 204 with the highest accepted seq.
    Duplicate { highest: u64 },
}

/// Validate `(epoch, seq)` for a producer (protocol §5.2.1).
pub fn check_producer(
    current: Option<Producer>,
    epoch: u64,
    seq: u64,
) -> Result<ProducerCheck, Fail> {
    match current {
        None => {
            if seq != 0 {
                return Err(Fail::SeqGap {
                    expected: 0,
                    received: seq,
                });
            }
            Ok(ProducerCheck::Accept)
        }
        Some(cur) if epoch < cur.epoch => Err(Fail::StaleEpoch { current: cur.epoch }),
        Some(cur) if epoch > cur.epoch => {
            if seq != 0 {
                return Err(Fail::BadRequest(format!(
                    "a new producer epoch must start at Producer-Seq 0, got {seq}"
                )));
            }
            Ok(ProducerCheck::Accept)
        }
        Some(cur) if seq <= cur.seq => Ok(ProducerCheck::Duplicate { highest: cur.seq }),
        Some(cur) if seq == cur.seq + 1 => Ok(ProducerCheck::Accept),
        Some(cur) => Err(Fail::SeqGap {
            expected: cur.seq + 1,
            received: seq,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_rules() {
        let p = |epoch, seq| Some(Producer { epoch, seq });
        assert_eq!(check_producer(None, 0, 0), Ok(ProducerCheck::Accept));
        assert!(matches!(
            check_producer(None, 0, 3),
            Err(Fail::SeqGap { expected: 0, .. })
        ));
        assert_eq!(
            check_producer(p(1, 4), 0, 9),
            Err(Fail::StaleEpoch { current: 1 })
        );
        assert_eq!(check_producer(p(1, 4), 2, 0), Ok(ProducerCheck::Accept));
        assert!(matches!(
            check_producer(p(1, 4), 2, 1),
            Err(Fail::BadRequest(_))
        ));
        assert_eq!(
            check_producer(p(1, 4), 1, 2),
            Ok(ProducerCheck::Duplicate { highest: 4 })
        );
        assert_eq!(check_producer(p(1, 4), 1, 5), Ok(ProducerCheck::Accept));
        assert_eq!(
            check_producer(p(1, 4), 1, 7),
            Err(Fail::SeqGap {
                expected: 5,
                received: 7
            })
        );
    }
}
