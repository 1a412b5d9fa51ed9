//! Rebuild the registry from the log when the server starts: every `ds/`
//! session is replayed from its own first event (a fork's inherited prefix
//! belongs to its source). A session whose first own event is not a create
//! record was cut short by a crash between the fork and its create group and
//! is ignored. Sliding TTL windows restart at startup (reads renew them
//! without being logged, so a stream never expires early).

use std::ops::ControlFlow;
use std::sync::Arc;

use tokio::sync::watch;
use turnstone::session::CoreKind;
use turnstone::Store;

use crate::log::Log;

use crate::offset::Offset;
use crate::record::{
    self, CreateRecord, DeleteMode, DeleteRecord, StateRecord, KIND_CREATE, KIND_DATA, KIND_DELETE,
    KIND_STATE,
};
use crate::stream::{Fail, State, Stream};
use crate::streams::Registry;

/// What the rebuild found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RebuildReport {
    pub streams: usize,
    pub deleted: usize,
    /// Sessions without a create record (crash between fork and create).
    pub incomplete: usize,
    /// Soft-deleted sources released at startup (no fork left).
    pub released: usize,
}

/// Replay the store into a registry.
pub fn rebuild(store: &Arc<Store>, now_ms: u64) -> Result<(Registry, RebuildReport), String> {
    let log = Log::Embedded(store.clone());
    let mut reg = Registry::default();
    let mut report = RebuildReport::default();
    let mut order: Vec<Arc<Stream>> = Vec::new();
    // Incarnations a collection reclaimed are never reused (their names
    // are refused by the store).
    for name in store.reclaimed_names() {
        if let Some(n) = record::parse_session_name(&name) {
            reg.next_incarnation = reg.next_incarnation.max(n + 1);
        }
    }
    for info in store.sessions() {
        let Some(n) = record::parse_session_name(&info.name) else {
            continue;
        };
        reg.next_incarnation = reg.next_incarnation.max(n + 1);
        let own_start = info.parent.as_ref().map_or(0, |(_, upto)| *upto);
        let replayed =
            replay(&log, &info.name, own_start, info.len, now_ms).map_err(|f| match f {
                Fail::Internal(m) => m,
                other => format!("reading session {}: {other:?}", info.name),
            })?;
        let Some(state) = replayed else {
            report.incomplete += 1;
            continue;
        };
        if state.deleted == Some(DeleteMode::Hard) {
            report.deleted += 1;
            continue;
        }
        let (changed, _) = watch::channel(0u64);
        let s = Arc::new(Stream {
            path: state.config.path.clone(),
            session: info.name.clone(),
            create_end: turnstone::LogPos(0),
            state: parking_lot::Mutex::new(state),
            changed,
            reload: parking_lot::Mutex::new(()),
        });
        reg.by_path.insert(s.path.clone(), s.clone());
        reg.by_session.insert(s.session.clone(), s.clone());
        order.push(s);
    }
    // A path maps to its newest incarnation; older ones survive only as fork
    // sources (soft-deleted).
    for s in &order {
        let parent = s.state.lock().fork_source();
        if let Some(p) = parent.and_then(|p| reg.by_session.get(&p).cloned()) {
            p.state.lock().forks += 1;
        }
    }
    // Release soft-deleted sources that no fork reads through any more: a
    // worklist, so that a chain of them is released in one pass (linear in
    // the number of streams, whatever the chain's depth).
    let mut release: Vec<Arc<Stream>> = reg
        .by_session
        .values()
        .filter(|s| {
            let st = s.state.lock();
            st.deleted == Some(DeleteMode::Soft) && st.forks == 0
        })
        .cloned()
        .collect();
    while let Some(s) = release.pop() {
        let parent = {
            let mut st = s.state.lock();
            st.deleted = Some(DeleteMode::Hard);
            st.vis_deleted = st.deleted;
            st.fork_source()
        };
        if reg.by_path.get(&s.path).is_some_and(|x| Arc::ptr_eq(x, &s)) {
            reg.by_path.remove(&s.path);
        }
        reg.by_session.remove(&s.session);
        report.released += 1;
        if let Some(p) = parent.and_then(|p| reg.by_session.get(&p).cloned()) {
            let mut pst = p.state.lock();
            pst.forks = pst.forks.saturating_sub(1);
            if pst.forks == 0 && pst.deleted == Some(DeleteMode::Soft) {
                drop(pst);
                release.push(p);
            }
        }
    }
    report.streams = reg.by_path.len();
    Ok((reg, report))
}

/// Replay one session's own events into its state. A read that fails is
/// answered as the log answered it (on a shared database a session deleted
/// meanwhile is [`Fail::NotFound`], the database being down is
/// [`Fail::Unavailable`]); a record that does not fold is
/// [`Fail::Internal`].
pub(crate) fn replay(
    log: &Log,
    session: &str,
    start: u64,
    len: u64,
    now_ms: u64,
) -> Result<Option<State>, Fail> {
    let mut state: Option<State> = None;
    // The first problem, or a session cut short before its create record;
    // either ends the walk.
    let mut stop: Option<Result<(), String>> = None;
    let visited = log
        .visit_range(session, start..len, |e| {
            match apply(session, &mut state, &e, now_ms) {
                Ok(true) => ControlFlow::Continue(()),
                Ok(false) => {
                    stop = Some(Ok(()));
                    ControlFlow::Break(())
                }
                Err(err) => {
                    stop = Some(Err(err));
                    ControlFlow::Break(())
                }
            }
        })
        .map_err(|e| match e {
            Fail::Internal(m) => Fail::Internal(format!("reading session {session}: {m}")),
            other => other,
        })?;
    match stop {
        Some(Err(err)) => return Err(Fail::Internal(err)),
        Some(Ok(())) => return Ok(None),
        None => debug_assert_eq!(visited, len.saturating_sub(start)),
    }
    if let Some(st) = state.as_mut() {
        st.vis = st.tail;
        st.vis_closed = st.closed;
        st.vis_deleted = st.deleted;
    }
    Ok(state)
}

/// Fold one event of a server session into its state. `Ok(false)`: the
/// session does not start with a create record (ignored).
pub(crate) fn apply(
    session: &str,
    state: &mut Option<State>,
    e: &turnstone::EventRef<'_>,
    now_ms: u64,
) -> Result<bool, String> {
    if let Some(st) = state.as_mut() {
        fold(session, st, e)?;
        return Ok(true);
    }
    if e.kind != KIND_CREATE {
        return Ok(false);
    }
    let d = decode(session, e)?;
    let config: CreateRecord =
        serde_json::from_slice(d.body).map_err(|err| bad(session, e, "create", err))?;
    let at = Offset::new(e.seq.0 + 1, d.bytes_before);
    *state = Some(State::new(config, at, turnstone::LogPos(0), now_ms));
    Ok(true)
}

fn decode<'a>(session: &str, e: &turnstone::EventRef<'a>) -> Result<record::Decoded<'a>, String> {
    record::decode(e.payload)
        .ok_or_else(|| format!("session {session} seq {}: not a server record", e.seq.0))
}

fn bad(session: &str, e: &turnstone::EventRef<'_>, what: &str, err: serde_json::Error) -> String {
    format!(
        "session {session} seq {}: bad {what} record: {err}",
        e.seq.0
    )
}

/// Fold one event after the create record into a stream's state.
pub(crate) fn fold(
    session: &str,
    st: &mut State,
    e: &turnstone::EventRef<'_>,
) -> Result<(), String> {
    // A session-layer tombstone (`session/delete`, FORMAT.md §10, written by
    // `turnstone delete --session ds/…` or `session::delete` while the server
    // was down) deletes the stream as the server's own DELETE does: soft
    // while forks read through it, released by the rebuild once none does.
    // It is always the session's last event.
    if e.kind == CoreKind::SessionDelete.code() {
        if st.deleted.is_none() {
            st.deleted = Some(DeleteMode::Soft);
        }
        return Ok(());
    }
    let d = decode(session, e)?;
    let bad = |what: &str, err: serde_json::Error| bad(session, e, what, err);
    match e.kind {
        KIND_DATA => {
            st.tail = Offset::new(e.seq.0 + 1, d.bytes_before + d.body.len() as u64);
        }
        KIND_STATE => {
            let rec: StateRecord =
                serde_json::from_slice(d.body).map_err(|err| bad("state", err))?;
            st.apply(&rec);
            st.tail = Offset::new(e.seq.0 + 1, d.bytes_before);
        }
        KIND_DELETE => {
            let rec: DeleteRecord =
                serde_json::from_slice(d.body).map_err(|err| bad("delete", err))?;
            if st.deleted != Some(DeleteMode::Hard) {
                st.deleted = Some(rec.mode);
            }
            st.tail = Offset::new(e.seq.0 + 1, d.bytes_before);
        }
        other => {
            return Err(format!(
                "session {session} seq {}: unexpected kind {other:#06x}",
                e.seq.0
            ))
        }
    }
    Ok(())
}
