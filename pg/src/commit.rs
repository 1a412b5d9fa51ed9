//! Group commit: the commit lanes, their queues of pending events and
//! writers' states, and the committer thread that writes everything a lane
//! has queued in one transaction ([`commit_batch`]).
//!
//! Invariant: a writer's events are written only by the statement that
//! checks its epoch and its session's length (the fence), so a writer whose
//! lease was taken over writes nothing; a session always commits through
//! the same lane, so its batches commit in order; and whatever changes
//! writers' states (a commit, a failure, a stop, a panic) wakes their
//! waiters ([`Lane::settle`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use postgres::{Client, NoTls};

use crate::pool::Inner;
use crate::PgStats;

/// What a writer's state says when it can no longer write.
#[derive(Debug, Clone)]
pub(crate) enum Broken {
    Fenced { held: i64, current: i64 },
    Deleted,
    Failed(String),
    Closed,
}

pub(crate) struct WriterState {
    pub(crate) session: String,
    pub(crate) epoch: i64,
    /// Events the database holds for this writer's session (durable).
    pub(crate) committed: u64,
    /// The next seq this writer hands out.
    pub(crate) next: u64,
    pub(crate) broken: Option<Broken>,
    /// The Writer was dropped with events still queued: they are committed
    /// (appended means written, as in the embedded store) and the state is
    /// removed once they are.
    pub(crate) dropped: bool,
}

impl WriterState {
    pub(crate) fn settled(&self) -> bool {
        self.broken.is_some() || self.committed >= self.next
    }
}

pub(crate) struct Pending {
    pub(crate) writer: u64,
    pub(crate) seq: u64,
    pub(crate) kind: u16,
    pub(crate) flags: u16,
    pub(crate) payload: Vec<u8>,
    /// Searchable text, indexed for [`PgLog::search`](crate::PgLog::search).
    pub(crate) text: Option<String>,
}

#[derive(Default)]
pub(crate) struct Queue {
    pub(crate) pending: Vec<Pending>,
    pub(crate) writers: HashMap<u64, WriterState>,
    pub(crate) next_writer: u64,
    pub(crate) closed: bool,
    pub(crate) stats: PgStats,
    /// Async waits ([`Writer::poll_sync`](crate::Writer::poll_sync)) to
    /// wake after the next commit (or when the lane stops), as `done` wakes
    /// the blocking ones.
    pub(crate) wakers: Vec<std::task::Waker>,
}

/// One commit lane: a queue, its committer thread and connection. A
/// session always commits through the same lane (by a hash of its id), so
/// its batches commit in order while lanes commit side by side.
pub(crate) struct Lane {
    pub(crate) queue: Mutex<Queue>,
    /// The committer waits here for work.
    pub(crate) work: Condvar,
    /// Writers wait here for their commits.
    pub(crate) done: Condvar,
}

impl Lane {
    /// Tell every waiter, blocking or async, that writers' states changed.
    fn settle(&self, mut q: parking_lot::MutexGuard<'_, Queue>) {
        let wakers = std::mem::take(&mut q.wakers);
        drop(q);
        self.done.notify_all();
        for w in wakers {
            w.wake();
        }
    }
}

impl Inner {
    pub(crate) fn lane_of(&self, session: &str) -> usize {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        session.hash(&mut h);
        (h.finish() % self.lanes.len() as u64) as usize
    }
}

/// The committer: takes everything queued, writes it in one transaction,
/// wakes the writers; repeats. While a commit runs, new appends queue
/// up for the next one (group commit).
pub(crate) fn committer(inner: Arc<Inner>, lane: usize) {
    // A panic here must not leave writers waiting forever: the guard
    // breaks every writer and closes the log.
    struct Poison(Arc<Inner>, usize);
    impl Drop for Poison {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let l = &self.0.lanes[self.1];
                let mut q = l.queue.lock();
                q.closed = true;
                for st in q.writers.values_mut() {
                    st.broken
                        .get_or_insert(Broken::Failed("the committer thread panicked".into()));
                }
                l.settle(q);
            }
        }
    }
    let _poison = Poison(inner.clone(), lane);
    let l = &inner.lanes[lane];
    let mut client: Option<Client> = None;
    loop {
        let (batch, heads) = {
            let mut q = l.queue.lock();
            while q.pending.is_empty() && !q.closed {
                l.work.wait(&mut q);
            }
            if q.pending.is_empty() {
                for st in q.writers.values_mut() {
                    st.broken.get_or_insert(Broken::Closed);
                }
                l.settle(q);
                return;
            }
            let mut batch = std::mem::take(&mut q.pending);
            // Events of writers broken since they were queued are not
            // written (their writers have been told).
            batch.retain(|p| {
                q.writers
                    .get(&p.writer)
                    .is_some_and(|st| st.broken.is_none())
            });
            // Per writer in the batch: session, epoch, first seq, count.
            let mut heads: Vec<(u64, String, i64, u64, u64)> = Vec::new();
            let mut at: HashMap<u64, usize> = HashMap::new();
            for p in &batch {
                match at.get(&p.writer) {
                    Some(&i) => heads[i].4 += 1,
                    None => {
                        let st = &q.writers[&p.writer];
                        at.insert(p.writer, heads.len());
                        heads.push((p.writer, st.session.clone(), st.epoch, p.seq, 1));
                    }
                }
            }
            // Rows are updated in session order, so that two processes'
            // statements lock them in the same order.
            heads.sort_by(|a, b| a.1.cmp(&b.1).then(a.2.cmp(&b.2)));
            (batch, heads)
        };
        if batch.is_empty() {
            continue;
        }
        // A deadlock (two processes' transactions, one of them a fenced
        // writer's) rolls the whole transaction back: nothing was written,
        // so it is tried again.
        let mut tries = 0;
        let outcome = loop {
            match commit_batch(&inner, &mut client, &batch, &heads) {
                Err(CommitError::Retry(_)) if tries < 5 => tries += 1,
                Err(CommitError::Retry(d) | CommitError::Failed(d)) => break Err(d),
                Ok(o) => break Ok(o),
            }
        };
        let mut q = l.queue.lock();
        match outcome {
            Ok(results) => {
                for (w, r) in results {
                    if let Some(st) = q.writers.get_mut(&w) {
                        match r {
                            Ok(n) => st.committed += n,
                            Err(b) => {
                                st.broken.get_or_insert(b);
                            }
                        }
                    }
                }
                q.stats.commits += 1;
                q.stats.events += batch.len() as u64;
            }
            Err(detail) => {
                client = None;
                for (w, ..) in &heads {
                    if let Some(st) = q.writers.get_mut(w) {
                        st.broken.get_or_insert(Broken::Failed(detail.clone()));
                    }
                }
            }
        }
        q.writers.retain(|_, st| !(st.dropped && st.settled()));
        l.settle(q);
    }
}

type Outcome = Vec<(u64, std::result::Result<u64, Broken>)>;

enum CommitError {
    /// Rolled back as a whole (deadlock): try again.
    Retry(String),
    /// Failed, or its outcome is unknown (the connection broke).
    Failed(String),
}

fn commit_error(e: postgres::Error) -> CommitError {
    if e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED) {
        CommitError::Retry(e.to_string())
    } else {
        CommitError::Failed(e.to_string())
    }
}

/// One transaction: check every writer's epoch and expected length, renew
/// their leases, insert the events of those that passed, notify. Writers
/// that did not pass are told why.
fn commit_batch(
    inner: &Inner,
    client: &mut Option<Client>,
    batch: &[Pending],
    heads: &[(u64, String, i64, u64, u64)],
) -> std::result::Result<Outcome, CommitError> {
    if client.is_none() {
        *client = Some(Client::connect(&inner.url, NoTls).map_err(commit_error)?);
    }
    let c = client.as_mut().expect("connected");
    // Two writers of one session in one batch: only the newest epoch can
    // pass; the others are fenced here, before the statement.
    let mut newest: HashMap<&str, i64> = HashMap::new();
    for h in heads {
        let e = newest.entry(h.1.as_str()).or_insert(h.2);
        *e = (*e).max(h.2);
    }
    let mut out: Outcome = Vec::new();
    let (mut ids, mut epochs, mut bases, mut counts) = (vec![], vec![], vec![], vec![]);
    for h in heads {
        let top = newest[h.1.as_str()];
        if h.2 < top {
            out.push((
                h.0,
                Err(Broken::Fenced {
                    held: h.2,
                    current: top,
                }),
            ));
            continue;
        }
        ids.push(h.1.clone());
        epochs.push(h.2);
        bases.push(h.3 as i64);
        counts.push(h.4 as i64);
    }
    let skip: HashSet<u64> = out.iter().map(|o| o.0).collect();
    let head_of: HashMap<u64, &(u64, String, i64, u64, u64)> =
        heads.iter().map(|h| (h.0, h)).collect();
    let (mut es, mut eq, mut ek, mut ef, mut ep, mut ee, mut et) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for p in batch.iter().filter(|p| !skip.contains(&p.writer)) {
        let h = head_of[&p.writer];
        es.push(h.1.as_str());
        eq.push(p.seq as i64);
        ek.push(p.kind as i32);
        ef.push(p.flags as i32);
        ep.push(p.payload.as_slice());
        ee.push(h.2);
        et.push(p.text.as_deref());
    }
    let ttl_ms = inner.opts.lease_ttl.as_millis() as i64;
    // One transaction: check and advance every session (the fence), copy
    // in the events of those that passed, notify, commit (one WAL flush).
    let mut tx = c.transaction().map_err(commit_error)?;
    let rows = tx
        .query(
            "WITH v AS (
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])
                          AS v(id, epoch, base, n))
             UPDATE turnstone_sessions s
                SET len = s.len + v.n,
                    lease_expires = now() + $5::bigint * interval '1 millisecond'
               FROM v
              WHERE s.id = v.id AND s.lease_epoch = v.epoch AND s.len = v.base
                AND NOT s.deleted
             RETURNING s.id, s.len",
            &[&ids, &epochs, &bases, &counts, &ttl_ms],
        )
        .map_err(commit_error)?;
    if !rows.is_empty() {
        let ok: HashSet<&str> = rows.iter().map(|r| r.get::<_, &str>(0)).collect();
        let sink = tx
            .copy_in(
                "COPY turnstone_events (session, seq, kind, flags, payload, epoch, text)
                 FROM STDIN BINARY",
            )
            .map_err(commit_error)?;
        let mut w = BinaryCopyInWriter::new(
            sink,
            &[
                Type::TEXT,
                Type::INT8,
                Type::INT4,
                Type::INT4,
                Type::BYTEA,
                Type::INT8,
                Type::TEXT,
            ],
        );
        for (i, session) in es.iter().enumerate() {
            if ok.contains(session) {
                w.write(&[session, &eq[i], &ek[i], &ef[i], &ep[i], &ee[i], &et[i]])
                    .map_err(commit_error)?;
            }
        }
        w.finish().map_err(commit_error)?;
        let notes: Vec<String> = rows
            .iter()
            .map(|r| format!("{} {}", r.get::<_, &str>(0), r.get::<_, i64>(1)))
            .collect();
        tx.execute(
            "SELECT pg_notify('turnstone_events', x) FROM unnest($1::text[]) AS x",
            &[&notes],
        )
        .map_err(commit_error)?;
    }
    tx.commit().map_err(commit_error)?;
    let passed: HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
    let failed: Vec<&String> = ids.iter().filter(|id| !passed.contains(*id)).collect();
    let mut why: HashMap<String, (i64, bool, i64)> = HashMap::new();
    if !failed.is_empty() {
        for r in c
            .query(
                "SELECT id, lease_epoch, deleted, len FROM turnstone_sessions WHERE id = ANY($1)",
                &[&failed],
            )
            .map_err(commit_error)?
        {
            why.insert(r.get(0), (r.get(1), r.get(2), r.get(3)));
        }
    }
    for h in heads.iter().filter(|h| !skip.contains(&h.0)) {
        if passed.contains(&h.1) {
            out.push((h.0, Ok(h.4)));
            continue;
        }
        let b = match why.get(&h.1) {
            Some((_, true, _)) => Broken::Deleted,
            Some((epoch, false, _)) if *epoch != h.2 => Broken::Fenced {
                held: h.2,
                current: *epoch,
            },
            Some((_, false, len)) => Broken::Failed(format!(
                "the database holds {len} events where this writer expected {}",
                h.3
            )),
            None => Broken::Failed("the session row is gone".into()),
        };
        out.push((h.0, Err(b)));
    }
    Ok(out)
}
