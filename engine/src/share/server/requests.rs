//! One request of a client, answered: appends (pipelined, group commit
//! across processes), syncs, reads, follows and searches, each on the
//! host's store.

use super::*;

pub(super) fn result_reply<T>(r: Result<T>, ok: impl FnOnce(T) -> Reply) -> Reply {
    match r {
        Ok(v) => ok(v),
        Err(e) => Reply::Err(WireError::from(&e)),
    }
}

/// A stored payload as a client sees it: blob references resolved.
pub(super) fn resolved(
    store: &Store,
    seq: u64,
    kind: u16,
    flags: u16,
    payload: Vec<u8>,
) -> Result<WireEvent> {
    let payload = match crate::session::codec::blob_refs::resolve(store.blobs(), &payload)? {
        std::borrow::Cow::Borrowed(_) => payload,
        std::borrow::Cow::Owned(p) => p,
    };
    Ok(WireEvent {
        seq,
        kind,
        flags,
        payload,
    })
}

pub(super) fn handle(inner: &Arc<Inner>, conn: &Arc<Conn>, store: Arc<Store>, req: Request) {
    let Request { id, op } = req;
    let log: &dyn EventLog = &*store;
    let reply = match op {
        Op::Hello { .. } => Reply::Err(WireError::from(&Error::InvalidArgument(
            "a second hello".into(),
        ))),
        Op::CreateSession { session } => {
            result_reply(log.create_session(&session), |_| Reply::Unit)
        }
        Op::Fork {
            parent,
            upto,
            child,
        } => result_reply(log.fork(&parent, upto, &child), |_| Reply::Unit),
        Op::Append {
            session,
            events,
            expect_len: None,
        } => {
            let group: Vec<(u16, u16, &[u8])> =
                events.iter().map(|(k, f, p)| (*k, *f, &p[..])).collect();
            result_reply(log.append_group(&session, &group), Reply::Seq)
        }
        Op::Append {
            session,
            events,
            expect_len: Some(len),
        } => return append_pipelined(conn, &store, session, &events, len),
        Op::Sync { session } => match sync(inner, conn, &store, id, session) {
            Some(r) => r,
            None => return,
        },
        Op::DurableLen { session } => result_reply(log.durable_len(&session), Reply::Len),
        Op::AppendedLen { session } => result_reply(log.appended_len(&session), Reply::Len),
        Op::Parent { session } => result_reply(log.parent(&session), Reply::Parent),
        Op::Sessions => result_reply(log.sessions(), Reply::Names),
        Op::Listing => result_reply(log.listing(), |l| {
            Reply::Listing(
                l.into_iter()
                    .map(|l| (l.name, l.durable_len, l.parent))
                    .collect(),
            )
        }),
        Op::ReadRange {
            session,
            start,
            end,
        } => result_reply(read_range(&store, &session, start..end), Reply::Events),
        Op::Claim { session } => {
            let r = log.claim(&session);
            if let Ok(c) = &r {
                conn.claims.lock().push((session.clone(), c.id));
            }
            result_reply(r, |c| Reply::Claim {
                id: c.id,
                took_over: c.took_over,
            })
        }
        Op::Release { session, claim } => {
            conn.claims
                .lock()
                .retain(|(s, c)| !(s == &session && *c == claim));
            log.release(&session, claim);
            Reply::Unit
        }
        Op::Follow { session, from } => {
            return start_follow(inner, conn, store, id, &session, from)
        }
        Op::Unfollow { follow } => {
            if let Some(c) = conn.follows.lock().remove(&follow) {
                c.store(true, Ordering::Relaxed);
            }
            return;
        }
        Op::MarkDeleted { session } => result_reply(log.mark_deleted(&session), |_| Reply::Unit),
        Op::Search {
            query,
            limit,
            session,
        } => {
            // It may read the whole log to bring the index up to date.
            let conn = conn.clone();
            inner.pool.run(Box::new(move || {
                let r = search(&store, &query, limit as usize, session.as_deref());
                conn.send(id, result_reply(r, hits_reply));
            }));
            return;
        }
    };
    conn.send(id, reply);
}

/// A pipelined append: answered only by the session's next flush, which
/// reports a failure kept in `conn.failed`.
pub(super) fn append_pipelined(
    conn: &Arc<Conn>,
    store: &Store,
    session: String,
    events: &[(u16, u16, Vec<u8>)],
    len: u64,
) {
    if conn.failed.lock().contains_key(&session) {
        return;
    }
    let group: Vec<(u16, u16, &[u8])> = events.iter().map(|(k, f, p)| (*k, *f, &p[..])).collect();
    let failure = match store.append_group_at_len(&session, None, len, &group, |_| {}) {
        Ok(Ok(())) => return,
        Ok(Err(actual)) => Error::Fenced {
            session: session.clone(),
            detail: format!(
                "this process appended as if it held {len} events, it holds {actual}: another writer appended"
            ),
        },
        Err(e) => e,
    };
    conn.failed
        .lock()
        .insert(session, WireError::from(&failure));
}

/// A flush: the answer now (a pipelined append of the session failed, or
/// the session is unknown), or `None` when the sync thread answers it once
/// the session's end is durable.
pub(super) fn sync(
    inner: &Arc<Inner>,
    conn: &Arc<Conn>,
    store: &Store,
    id: u64,
    session: String,
) -> Option<Reply> {
    if let Some(e) = conn.failed.lock().remove(&session) {
        return Some(Reply::Err(e));
    }
    match store.session_end_pos(&session) {
        Err(e) => Some(Reply::Err(WireError::from(&e))),
        Ok(target) => {
            inner.syncs.waiting.lock().push(SyncWait {
                target,
                conn: conn.clone(),
                id,
                session,
            });
            inner.syncs.cv.notify_one();
            None
        }
    }
}

/// Events of a session, blob references resolved, for a client.
pub(super) fn read_range(
    store: &Store,
    session: &str,
    range: std::ops::Range<u64>,
) -> Result<Vec<WireEvent>> {
    let log: &dyn EventLog = store;
    log.read_range(session, range).and_then(|evs| {
        evs.into_iter()
            .map(|e| resolved(store, e.seq, e.kind, e.flags, e.payload))
            .collect::<Result<Vec<_>>>()
    })
}

/// Start pushing a session's events to the client on a pool worker; a
/// subscription that fails ends the follow at once.
pub(super) fn start_follow(
    inner: &Arc<Inner>,
    conn: &Arc<Conn>,
    store: Arc<Store>,
    id: u64,
    session: &str,
    from: u64,
) {
    let sub = match store.subscribe(session, from) {
        Ok(s) => s,
        Err(e) => {
            conn.send(id, Reply::FollowEnd(WireError::from(&e)));
            return;
        }
    };
    let cancel = Arc::new(AtomicBool::new(false));
    conn.follows.lock().insert(id, cancel.clone());
    let conn = conn.clone();
    let weak = Arc::downgrade(&store);
    drop(store);
    inner
        .pool
        .run(Box::new(move || follow(conn, id, sub, weak, cancel)));
}

/// Search hits as a reply.
pub(super) fn hits_reply(hits: Vec<Hit>) -> Reply {
    Reply::Hits(
        hits.into_iter()
            .map(|h| (h.session, h.seq, h.snippet))
            .collect(),
    )
}

/// The session layer's search of the store's index, for a client: core
/// kinds' text (plugin kinds carry none the index reads).
pub(crate) fn search(
    store: &Store,
    query: &str,
    limit: usize,
    session: Option<&str>,
) -> Result<Vec<Hit>> {
    let registry = crate::session::Registry::new();
    match session {
        Some(s) => crate::session::search_session(store, &registry, s, query, limit),
        None => crate::session::search(store, &registry, query, limit),
    }
}

/// Push a follow's events as they become durable, a batch per frame.
pub(super) fn follow(
    conn: Arc<Conn>,
    id: u64,
    mut sub: crate::store::Subscription,
    store: Weak<Store>,
    cancel: Arc<AtomicBool>,
) {
    // Frames stay well under the limit.
    const BATCH_BYTES: usize = FRAME_MAX / 4;
    loop {
        let first = match sub.next() {
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                conn.send(id, Reply::FollowEnd(WireError::from(&e)));
                return;
            }
            None => {
                conn.send(id, Reply::FollowEnd(WireError::from(&Error::Closed)));
                return;
            }
        };
        if cancel.load(Ordering::Relaxed) || conn.dead.load(Ordering::Relaxed) {
            return;
        }
        let Some(st) = store.upgrade() else {
            conn.send(id, Reply::FollowEnd(WireError::from(&Error::Closed)));
            return;
        };
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(e) = next.take() {
            bytes += e.payload.len();
            match resolved(&st, e.seq.0, e.kind, e.flags, e.payload) {
                Ok(w) => batch.push(w),
                Err(err) => {
                    conn.send(id, Reply::FollowEnd(WireError::from(&err)));
                    return;
                }
            }
            if bytes < BATCH_BYTES {
                next = sub.try_next().ok().flatten();
            }
        }
        drop(st);
        conn.send(id, Reply::Events(batch));
    }
}
