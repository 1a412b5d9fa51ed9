//! Opening a session: create, open for writing (the claim, then the fold
//! from the state snapshot and the log), read-only views, prior history.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::session::codec::envelope;
use crate::session::codec::event::Registry;
use crate::session::fold::state::State;
use crate::session::fold::state_snapshot::{self, Loaded};
use crate::session::handle::{staged, HistoryEvent, Session};
use crate::session::log::{AppendEnd, LogHandle};
use crate::store::Store;

impl Session {
    /// Create a new, empty session in `log`: an `Arc<Store>`, or any other
    /// [`crate::backend::EventLog`] (PostgreSQL).
    pub fn create(log: impl Into<LogHandle>, id: &str, registry: Arc<Registry>) -> Result<Session> {
        let log = log.into();
        log.as_log().create_session(id)?;
        let mut s = Self::empty(log, id, registry);
        s.claim()?;
        s.loop_wrote_header = false;
        Ok(s)
    }

    /// Restore an existing session from the log for writing. Refuses (with
    /// kind and seq) an unknown event kind not marked ignorable, and refuses
    /// ([`Error::SessionLive`]) a session that another handle holds for
    /// writing: liveness is a property of the store, so a second host cannot
    /// "repair" a turn that is still running.
    ///
    /// The fold starts from the session's state snapshot when one matches
    /// the log (FORMAT.md §17) and folds only the events after it; when that
    /// tail is [`state_snapshot::STATE_SNAPSHOT_TAIL`] events or more and
    /// all durable, a fresh snapshot is written (a failed write only leaves
    /// the old one). Messages of a snapshot's surface are read from the log
    /// when first derived.
    ///
    /// The claim is taken before the fold, so that the fold sees every
    /// event of the previous writer; on a log shared by several processes
    /// (PostgreSQL) it is a lease: [`Session::took_over`] then says whether that
    /// writer left without releasing it (repair, as [`crate::session::Host::load`] does).
    pub fn open(log: impl Into<LogHandle>, id: &str, registry: Arc<Registry>) -> Result<Session> {
        let log = log.into();
        let claim = log.claim(id)?;
        let mut s = match Self::restore(log.clone(), id, registry, false) {
            Ok(s) => s,
            Err(e) => {
                log.release(id, claim.id);
                return Err(e);
            }
        };
        s.live_handle = Some(claim.id);
        s.took_over = claim.took_over;
        if s.state.len - s.state_covered >= state_snapshot::STATE_SNAPSHOT_TAIL {
            // A cache: the open does not depend on it.
            let _ = s.write_state_snapshot_if_durable();
        }
        Ok(s)
    }

    /// A read-only view of a session, live or not: the same fold (surface,
    /// messages, header, open state) over its durable and appended events,
    /// claiming nothing. Appends are refused. Events of kinds this process
    /// does not know are kept as opaque plugin events instead of refusing
    /// the open (see [`envelope::decode_view`]).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut live = Session::create(store.clone(), "s1", Arc::new(Registry::new())).unwrap();
    /// live.append(UserMessage { content: vec![ContentBlock::text("hi")] }, SurfaceOp::Append).unwrap();
    /// // A second writable open is refused while `live` exists …
    /// assert!(Session::open(store.clone(), "s1", Arc::new(Registry::new())).is_err());
    /// // … a read-only view is not.
    /// let mut view = Session::open_read_only(store, "s1", Arc::new(Registry::new())).unwrap();
    /// assert_eq!(view.derive_messages().len(), 1);
    /// ```
    pub fn open_read_only(
        log: impl Into<LogHandle>,
        id: &str,
        registry: Arc<Registry>,
    ) -> Result<Session> {
        Self::restore(log.into(), id, registry, true)
    }

    pub(in crate::session) fn claim(&mut self) -> Result<()> {
        let c = self.log.claim(&self.id)?;
        self.live_handle = Some(c.id);
        self.took_over = c.took_over;
        Ok(())
    }

    pub(in crate::session) fn restore(
        log: LogHandle,
        id: &str,
        registry: Arc<Registry>,
        view: bool,
    ) -> Result<Session> {
        let len = log
            .as_ref()
            .appended_len(id)?
            .ok_or_else(|| Error::UnknownSession(id.to_string()))?;
        let mut s = Self::empty(log.clone(), id, registry);
        // Start from the state snapshot when one matches (FORMAT.md §17;
        // files of the embedded store, or the log's own snapshot table).
        match state_snapshot::load(log.as_ref(), id, &s.registry)? {
            Loaded::Use(r) => s.install(*r),
            Loaded::None => {}
            Loaded::Discarded(why) => s.snapshot_discarded = Some(why),
        }
        // Decode straight from the log's bytes (`visit_range` lends each
        // payload; nothing is copied), in chunks so that no walk holds the
        // active segment's map for long.
        const CHUNK: u64 = 4096;
        let mut at = s.state.len;
        while at < len {
            let mut failed: Option<Error> = None;
            log.as_ref().visit(id, at..(at + CHUNK).min(len), |e| {
                let step = e
                    .payload
                    .and_then(|payload| {
                        if view {
                            envelope::decode_view(e.seq, e.kind, e.flags, &payload, &s.registry)
                                .map_err(|err| {
                                    crate::session::codec::envelope::decode_error(&s.id, e.seq, err)
                                })
                        } else {
                            s.decode(e.seq, e.kind, e.flags, &payload)
                        }
                    })
                    .and_then(|ev| s.apply(&ev));
                match step {
                    Ok(()) => std::ops::ControlFlow::Continue(()),
                    Err(err) => {
                        failed = Some(err);
                        std::ops::ControlFlow::Break(())
                    }
                }
            })?;
            if let Some(err) = failed {
                return Err(err);
            }
            at += CHUNK;
        }
        if let Some(seq) = s.state.deleted {
            return Err(Error::SessionDeleted {
                session: id.to_string(),
                seq,
            });
        }
        // Expired under the log's retention policy: not found either.
        crate::session::lifecycle::retention::check_not_expired(log.as_ref(), id)?;
        Ok(s)
    }

    /// Open the session if it exists, else create it.
    pub fn open_or_create(
        log: impl Into<LogHandle>,
        id: &str,
        registry: Arc<Registry>,
    ) -> Result<Session> {
        let log = log.into();
        if log.as_ref().appended_len(id)?.is_some() {
            Self::open(log, id, registry)
        } else {
            Self::create(log, id, registry)
        }
    }

    pub(in crate::session) fn empty(log: LogHandle, id: &str, registry: Arc<Registry>) -> Session {
        Session {
            log,
            id: Arc::from(id),
            store_sid: None,
            registry,
            state: State::default(),
            loop_wrote_header: false,
            last_end: AppendEnd::Nothing,
            live_handle: None,
            took_over: false,
            state_covered: 0,
            restored_from: None,
            snapshot_discarded: None,
            messages_error: None,
        }
    }

    /// Create a session from prior history: the session, the history
    /// events and the `session/end-seed` marker, all or nothing. History
    /// that fits one commit batch is written as one; longer history goes
    /// through a staging session that the new session is then defined as a
    /// fork of (one define frame; see [`STAGING_PREFIX`](crate::session::STAGING_PREFIX)). Events before the marker are [`Session::is_history`]: plugins
    /// can tell open state inherited from that history from open state of
    /// the current run.
    pub fn create_with_history(
        log: impl Into<LogHandle>,
        id: &str,
        registry: Arc<Registry>,
        history: &[HistoryEvent],
    ) -> Result<Session> {
        let log = log.into();
        if log.as_ref().appended_len(id)?.is_some() {
            return Err(Error::SessionExists(id.to_string()));
        }
        let mut s = Self::empty(log, id, registry);
        let items = s.encode_history(history)?;
        let limit = s.log.group_bytes_max();
        if staged::group_bytes(id, items.iter().map(|e| e.payload.len())) > limit {
            return Self::create_staged(s, items, limit);
        }
        if !s.log.as_log().claims_names() {
            // The claim below needs the session to exist there.
            s.log.as_log().create_session(id)?;
        }
        s.claim()?;
        s.append_encoded(items)?;
        Ok(s)
    }

    /// Old name of [`Session::create_with_history`].
    #[deprecated(since = "0.1.0", note = "renamed `create_with_history`")]
    pub fn create_seeded(
        store: Arc<Store>,
        id: &str,
        registry: Arc<Registry>,
        seed: &[HistoryEvent],
    ) -> Result<Session> {
        Self::create_with_history(store, id, registry, seed)
    }
}
