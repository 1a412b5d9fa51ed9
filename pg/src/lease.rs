//! Writers and their leases: [`PgLog::acquire`] takes a session's lease
//! (incrementing its epoch), a [`Writer`] queues appends on its session's
//! lane and waits for their commits, and the renewer thread keeps this
//! process's live leases from running out.
//!
//! Invariant: every acquisition increments the session's epoch and a writer
//! keeps the epoch it acquired, so a writer from an earlier acquisition is
//! fenced at its next commit; a writer hands out dense seqs from the length
//! it acquired at, and once broken (fenced, deleted, failed, closed) it
//! queues nothing more.

use std::sync::Arc;
use std::time::Duration;

use postgres::{Client, NoTls};

use crate::commit::{Broken, Pending, WriterState};
use crate::error::{db, PgError, Result};
use crate::pool::Inner;
use crate::PgLog;

impl PgLog {
    /// Take the lease of `session` for `owner` (creating the session when
    /// `create`), and a writer that appends at its end. Succeeds when the
    /// session has no lease, its lease expired, or `owner` holds it; every
    /// success increments the epoch, so a writer from an earlier
    /// acquisition (by anyone, `owner` included) is fenced from now on.
    pub fn acquire(&self, session: &str, owner: &str, create: bool) -> Result<Acquired> {
        let ttl_ms = self.inner.opts.lease_ttl.as_millis() as i64;
        let (epoch, len, previous) = self.with_client(|c| {
            let mut tx = c.transaction().map_err(db("begin acquire"))?;
            if create {
                tx.execute(
                    "INSERT INTO turnstone_sessions (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
                    &[&session],
                )
                .map_err(db("create session"))?;
            }
            let before = tx
                .query_opt(
                    "SELECT lease_owner, deleted,
                            (extract(epoch FROM (lease_expires - now())) * 1000)::bigint
                       FROM turnstone_sessions WHERE id = $1 FOR UPDATE",
                    &[&session],
                )
                .map_err(db("read lease"))?;
            let Some(before) = before else {
                return Err(PgError::UnknownSession(session.to_string()));
            };
            let (prev_owner, deleted, remaining): (Option<String>, bool, Option<i64>) =
                (before.get(0), before.get(1), before.get(2));
            if deleted {
                return Err(PgError::SessionDeleted(session.to_string()));
            }
            if let (Some(o), Some(r)) = (&prev_owner, remaining) {
                if o != owner && r > 0 {
                    return Err(PgError::LeaseHeld {
                        session: session.to_string(),
                        owner: o.clone(),
                        remaining_ms: r,
                    });
                }
            }
            let row = tx
                .query_one(
                    "UPDATE turnstone_sessions
                        SET lease_owner = $2, lease_epoch = lease_epoch + 1,
                            lease_expires = now() + $3::bigint * interval '1 millisecond'
                      WHERE id = $1 RETURNING lease_epoch, len",
                    &[&session, &owner, &ttl_ms],
                )
                .map_err(db("take lease"))?;
            tx.commit().map_err(db("commit acquire"))?;
            let (epoch, len): (i64, i64) = (row.get(0), row.get(1));
            Ok((epoch, len as u64, prev_owner))
        })?;
        let lane = self.inner.lane_of(session);
        let mut q = self.inner.lanes[lane].queue.lock();
        let id = q.next_writer;
        q.next_writer += 1;
        q.writers.insert(
            id,
            WriterState {
                session: session.to_string(),
                epoch,
                committed: len,
                next: len,
                broken: None,
                dropped: false,
            },
        );
        drop(q);
        Ok(Acquired {
            writer: Writer {
                log: self.clone(),
                lane,
                id,
                session: session.to_string(),
                epoch,
            },
            previous_owner: previous,
        })
    }
}

/// The writer of a session and who held it before.
pub struct Acquired {
    pub writer: Writer,
    /// The owner of the lease taken over (`None`: the session was free).
    /// A takeover from another owner is where a session layer repairs.
    pub previous_owner: Option<String>,
}

/// Appends to one session under one lease epoch.
pub struct Writer {
    log: PgLog,
    lane: usize,
    id: u64,
    session: String,
    epoch: i64,
}

impl Writer {
    pub fn session(&self) -> &str {
        &self.session
    }

    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The length the database holds for this writer's session, as far as
    /// this writer knows (its own commits included, others' fenced).
    pub fn committed(&self) -> u64 {
        self.log.inner.lanes[self.lane].queue.lock().writers[&self.id].committed
    }

    /// Wait until events `0..len` of the session are committed (blocking
    /// [`Writer::poll_sync`]); an error if the writer broke first.
    pub fn sync_to(&self, len: u64) -> Result<()> {
        let inner = &self.log.inner.lanes[self.lane];
        let mut q = inner.queue.lock();
        loop {
            let st = &q.writers[&self.id];
            // Committed first: a later group's failure (a fence) breaks the
            // writer, but what it committed before stays committed.
            if st.committed >= len {
                return Ok(());
            }
            if let Some(b) = &st.broken {
                return Err(broken_error(&self.session, b));
            }
            inner.done.wait(&mut q);
        }
    }

    /// Whether the writer can write no more (fenced, deleted, failed or
    /// closed): its queued events that are not committed never will be.
    pub fn is_broken(&self) -> bool {
        self.log.inner.lanes[self.lane].queue.lock().writers[&self.id]
            .broken
            .is_some()
    }

    /// The next seq (committed or queued events of this writer).
    pub fn len(&self) -> u64 {
        self.log.inner.lanes[self.lane].queue.lock().writers[&self.id].next
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue one event; it is durable once [`Writer::sync`] returns.
    pub fn append(&self, kind: u16, flags: u16, payload: &[u8]) -> Result<u64> {
        self.append_group(&[(kind, flags, payload)])
    }

    /// Queue several events that commit together or not at all. Returns
    /// the first one's seq.
    pub fn append_group(&self, events: &[(u16, u16, &[u8])]) -> Result<u64> {
        let with_text: Vec<(u16, u16, &[u8], Option<&str>)> =
            events.iter().map(|&(k, f, p)| (k, f, p, None)).collect();
        self.append_group_with_text(&with_text)
    }

    /// [`Writer::append_group`] with each event's searchable text (the
    /// session layer's `searchable_text`), indexed for [`PgLog::search`].
    pub fn append_group_with_text(
        &self,
        events: &[(u16, u16, &[u8], Option<&str>)],
    ) -> Result<u64> {
        let inner = &self.log.inner.lanes[self.lane];
        let mut q = inner.queue.lock();
        if q.closed {
            return Err(PgError::Closed);
        }
        let st = q.writers.get_mut(&self.id).expect("writer state");
        if let Some(b) = &st.broken {
            return Err(broken_error(&self.session, b));
        }
        let first = st.next;
        st.next += events.len() as u64;
        for (i, (kind, flags, payload, text)) in events.iter().enumerate() {
            q.pending.push(Pending {
                writer: self.id,
                seq: first + i as u64,
                kind: *kind,
                flags: *flags,
                payload: payload.to_vec(),
                text: text.map(str::to_string),
            });
        }
        drop(q);
        inner.work.notify_one();
        Ok(first)
    }

    /// Wait until everything this writer queued before the call is
    /// committed: [`Writer::sync_to`] its length now. Events queued by
    /// another thread meanwhile are not waited for, and their failure (a
    /// fence, say) does not turn this wait's committed events into an error.
    pub fn sync(&self) -> Result<()> {
        let target = self.len();
        self.sync_to(target)
    }

    /// [`Writer::sync`] for async callers, up to a point: `Ready` once the
    /// database holds events `0..len` of this session (or the writer is
    /// broken: fenced, deleted, failed or closed, with its error);
    /// otherwise `Pending`, and `cx`'s waker is woken by the lane's next
    /// commit or stop. No thread waits.
    pub fn poll_sync(
        &self,
        len: u64,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        let lane = &self.log.inner.lanes[self.lane];
        let mut q = lane.queue.lock();
        let st = &q.writers[&self.id];
        // Committed first, as in `sync_to`.
        if st.committed >= len {
            return std::task::Poll::Ready(Ok(()));
        }
        if let Some(b) = &st.broken {
            return std::task::Poll::Ready(Err(broken_error(&self.session, b)));
        }
        q.wakers.push(cx.waker().clone());
        std::task::Poll::Pending
    }

    /// Commit what is queued and give the lease up (only if this writer
    /// still holds it).
    pub fn release(self) -> Result<()> {
        self.sync()?;
        // A closed log writes nothing more, a release included (its
        // leases run out instead), even when all it queued was committed.
        if self.log.inner.lanes[self.lane].queue.lock().closed {
            return Err(PgError::Closed);
        }
        let (session, epoch) = (self.session.clone(), self.epoch);
        self.log.with_client(|c| {
            c.execute(
                "UPDATE turnstone_sessions SET lease_owner = NULL, lease_expires = NULL
                  WHERE id = $1 AND lease_epoch = $2",
                &[&session, &epoch],
            )
            .map_err(db("release lease"))?;
            Ok(())
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let mut q = self.log.inner.lanes[self.lane].queue.lock();
        let settled = q.writers.get(&self.id).is_none_or(|st| st.settled());
        if settled {
            q.writers.remove(&self.id);
        } else if let Some(st) = q.writers.get_mut(&self.id) {
            st.dropped = true;
        }
    }
}

fn broken_error(session: &str, b: &Broken) -> PgError {
    match b {
        Broken::Fenced { held, current } => PgError::Fenced {
            session: session.to_string(),
            held: *held,
            current: *current,
        },
        Broken::Deleted => PgError::SessionDeleted(session.to_string()),
        Broken::Failed(detail) => PgError::WriterBroken {
            session: session.to_string(),
            detail: detail.clone(),
        },
        Broken::Closed => PgError::Closed,
    }
}

/// Renews the leases of this process's live writers every third of the
/// lease TTL, in one statement (only where the epoch is still the
/// writer's). Errors are ignored: a lease that lapses is fenced at the next
/// commit, which is what keeps writers apart, not this thread.
pub(crate) fn renewer(inner: Arc<Inner>) {
    let period = (inner.opts.lease_ttl / 3).max(Duration::from_millis(10));
    let ttl_ms = inner.opts.lease_ttl.as_millis() as i64;
    let mut client: Option<Client> = None;
    loop {
        {
            let mut stopped = inner.stopped.lock();
            if !*stopped {
                inner.stop.wait_for(&mut stopped, period);
            }
            if *stopped {
                return;
            }
        }
        let (mut ids, mut epochs) = (Vec::<String>::new(), Vec::<i64>::new());
        for l in &inner.lanes {
            for st in l.queue.lock().writers.values() {
                if st.broken.is_none() && !st.dropped {
                    ids.push(st.session.clone());
                    epochs.push(st.epoch);
                }
            }
        }
        if ids.is_empty() {
            continue;
        }
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = Client::connect(&inner.url, NoTls).ok();
        }
        if let Some(c) = client.as_mut() {
            let r = c.execute(
                "UPDATE turnstone_sessions s
                    SET lease_expires = now() + $3::bigint * interval '1 millisecond'
                   FROM unnest($1::text[], $2::bigint[]) AS v(id, epoch)
                  WHERE s.id = v.id AND s.lease_epoch = v.epoch AND NOT s.deleted",
                &[&ids, &epochs, &ttl_ms],
            );
            if r.is_err() {
                client = None;
            }
        }
    }
}
