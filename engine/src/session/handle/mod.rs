//! [`Session`]: one agent session over the shared store.
//!
//! Every piece of state here (surface, messages, header, open turn/step/tool
//! calls, seed boundary) is a fold over the session's events, computed by one
//! function (`Session::apply`) both when an event is appended live and when
//! the session is restored from the log. That is how "model-visible iff
//! logged" (invariant 4) holds by construction; the proptest in
//! `tests/model_visible.rs` checks it.

pub mod host;
pub mod repair;

use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::session::codec::event::{
    self, CompactionEnd, CompactionPrune, CompactionStart, CompactionSummary,
    ContentBlock, CoreKind, DecodeError, EncodedEvent, EpochHeader, EventData, EventKind,
    HeaderReason, Intent, Registry, RequestContext, RequestHeader, SessionEvent, ToolResult,
    UserMessage,
};
use crate::session::fold::header::{first_difference, first_json_difference, Request, RequestSpec};
use crate::session::fold::messages::{Keep, Message};
use crate::session::fold::state::{OpenState, State};
use crate::session::fold::state_snapshot::{self, Loaded};
use crate::session::fold::surface::{Surface, SurfaceOp};
use crate::session::log::{AppendEnd, DurabilityPoint, LogHandle, LogRef};
use crate::session::providers::{self, Provider};
use crate::store::Store;
use crate::types::LogPos;

/// A session: append typed events, derive what the model sees.
pub struct Session {
    pub(in crate::session) log: LogHandle,
    pub(in crate::session) id: Arc<str>,
    /// The session's id inside the embedded store, once an append has
    /// told it: later appends skip the name lookup (the store checks that
    /// the id still names this session).
    pub(in crate::session) store_sid: Option<crate::types::SessionId>,
    pub(in crate::session) registry: Arc<Registry>,
    /// Everything the session's events fold into ([`State::apply`]).
    pub(in crate::session) state: State,
    /// This agent loop has written a header (else the next one is `resume`).
    loop_wrote_header: bool,
    /// End of this handle's last append (for durability waits).
    last_end: AppendEnd,
    /// This handle's claim on the session ([`crate::backend::EventLog::claim`];
    /// `None`: a read-only view).
    live_handle: Option<u64>,
    /// The claim took the session over from a writer that did not release
    /// it (a worker that died): repair before going on.
    took_over: bool,
    /// Events covered by the state snapshot on disk, as far as this handle
    /// knows (FORMAT.md §17).
    pub(in crate::session) state_covered: u64,
    /// The state snapshot this handle was restored from (events covered).
    pub(in crate::session) restored_from: Option<u64>,
    /// Why a state snapshot on disk was not used.
    pub(in crate::session) snapshot_discarded: Option<String>,
    /// Messages of restored surface nodes could not be read from the log:
    /// [`Session::derive_messages`] returned nothing, appends are refused.
    pub(in crate::session) messages_error: Option<String>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(h) = self.live_handle {
            self.log.release(&self.id, h);
        }
    }
}

/// One event of prior history a session is created with (see
/// [`Session::create_with_history`]): events that happened elsewhere (an
/// import, a conversation started by another harness) and that the session
/// starts from. The reference design calls this *seed* history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEvent {
    /// The event kind.
    pub kind: EventKind,
    /// The event data (the kind's schema).
    pub data: Value,
    /// Required for the three surface kinds, absent for all others.
    pub surface: Option<SurfaceOp>,
    /// When the event happened, ms since the Unix epoch (an import keeps
    /// the exported `ts`); `None` stamps the time of the append.
    pub ts: Option<u64>,
}

/// Old name of [`HistoryEvent`].
#[deprecated(since = "0.1.0", note = "renamed `HistoryEvent`")]
pub type SeedEvent = HistoryEvent;

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("len", &self.state.len)
            .finish()
    }
}

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
    /// On a log shared by several processes (PostgreSQL) the claim is a
    /// lease, taken before the fold so that the fold sees every event of
    /// the previous writer: [`Session::took_over`] then says whether that
    /// writer left without releasing it (repair, as [`crate::session::Host::load`] does).
    pub fn open(log: impl Into<LogHandle>, id: &str, registry: Arc<Registry>) -> Result<Session> {
        let log = log.into();
        let claim = match &log {
            LogHandle::Embedded(_) => None,
            LogHandle::Other(l) => Some(l.claim(id)?),
        };
        let restored = Self::restore(log.clone(), id, registry, false);
        let mut s = match restored {
            Ok(s) => s,
            Err(e) => {
                if let Some(c) = claim {
                    log.release(id, c.id);
                }
                return Err(e);
            }
        };
        match claim {
            Some(c) => {
                s.live_handle = Some(c.id);
                s.took_over = c.took_over;
            }
            None => s.claim()?,
        }
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
    /// the open (see [`event::decode_view`]).
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

    /// Whether opening this handle took the session over from a writer
    /// that held it without releasing it (on PostgreSQL: an expired lease
    /// of a worker that died or stalled). Such a session may have a turn
    /// left open: run [`crate::session::handle::repair()`] before going on.
    pub fn took_over(&self) -> bool {
        self.took_over
    }

    /// Whether this handle is a read-only view.
    pub fn is_read_only(&self) -> bool {
        self.live_handle.is_none()
    }

    fn claim(&mut self) -> Result<()> {
        let c = self.log.claim(&self.id)?;
        self.live_handle = Some(c.id);
        self.took_over = c.took_over;
        Ok(())
    }

    fn restore(log: LogHandle, id: &str, registry: Arc<Registry>, view: bool) -> Result<Session> {
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
                            event::decode_view(e.seq, e.kind, e.flags, &payload, &s.registry)
                                .map_err(|err| {
                                    crate::session::views::replay::decode_error(&s.id, e.seq, err)
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
        // Expired under the store's retention policy: not found either.
        if let Some(store) = log.store() {
            crate::session::lifecycle::retention::check_not_expired(store, id)?;
        }
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

    fn empty(log: LogHandle, id: &str, registry: Arc<Registry>) -> Session {
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

    /// Decode for the fold: [`Session::apply`] checks each core event's data
    /// (parsing what it needs once), so the decode does not parse it too.
    fn decode(&self, seq: u64, code: u16, flags: u16, payload: &[u8]) -> Result<SessionEvent> {
        event::decode_for_fold(seq, code, flags, payload, &self.registry).map_err(|e| match e {
            DecodeError::UnknownKind(kind) => Error::UnknownKind {
                session: self.id.to_string(),
                seq,
                kind,
            },
            DecodeError::Version(found) => Error::SessionFormat {
                session: self.id.to_string(),
                seq,
                found,
                supported: event::SESSION_FORMAT_VERSION,
            },
            DecodeError::Malformed(detail) => Error::BadEvent {
                session: self.id.to_string(),
                seq,
                detail,
            },
        })
    }

    /// Fold one event into the state ([`State::apply`]).
    fn apply(&mut self, ev: &SessionEvent) -> Result<()> {
        self.state.apply(&self.id, ev, None, Keep::Hold)
    }

    /// Append one typed event. Surface kinds take a [`SurfaceOp`], every other
    /// kind takes `()`:
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
    /// s.append(TurnStart { turn_id: "t1".into() }, ()).unwrap();
    /// s.append(UserMessage { content: vec![ContentBlock::text("hi")] }, SurfaceOp::Append).unwrap();
    /// assert_eq!(s.derive_messages().len(), 1);
    /// ```
    ///
    /// A surface event without an op, or any other event with one, does not
    /// compile:
    ///
    /// ```compile_fail
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # fn f(s: &mut Session) {
    /// s.append(TurnStart { turn_id: "t1".into() }, SurfaceOp::Append).unwrap();
    /// # }
    /// ```
    pub fn append<D: EventData>(&mut self, data: D, intent: D::Intent) -> Result<u64> {
        let op = intent.surface_op();
        // The engine's own types are valid by construction: the data is
        // serialised once, straight to the logged text, and the fold takes
        // it as it is, with no JSON value in between (a replace goes the
        // general way: its tool-pair check reads values).
        let data = if matches!(op, None | Some(SurfaceOp::Append)) {
            match event::typed_parsed(data) {
                Ok(parsed) => return self.append_typed(D::KIND, parsed, op),
                Err(data) => data,
            }
        } else {
            data
        };
        // Any other data: one serialisation, the JSON value is both written
        // and folded.
        let value =
            serde_json::to_value(&data).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.append_core_value(D::KIND, value, op)
    }

    /// Append a core event whose data is known to fit its kind (typed, or
    /// checked with `event::validate_core`): the live checks, one encoding,
    /// the fold.
    pub(crate) fn append_core_value(
        &mut self,
        kind: CoreKind,
        value: Value,
        op: Option<SurfaceOp>,
    ) -> Result<u64> {
        self.append_core_raw(kind, value, None, op, None)
    }

    /// A core event of the engine's own type (`event::typed_parsed`):
    /// the live checks, the data serialised straight into the payload, the
    /// fold taking the typed data. Debug builds also build the data's JSON
    /// value, which `append_decoded_parsed` checks against the logged bytes;
    /// release builds carry none.
    fn append_typed(
        &mut self,
        kind: CoreKind,
        parsed: event::Parsed,
        op: Option<SurfaceOp>,
    ) -> Result<u64> {
        let value = if cfg!(debug_assertions) {
            serde_json::to_value(&parsed).map_err(|e| Error::InvalidArgument(e.to_string()))?
        } else {
            Value::Null
        };
        self.state.check_live(kind, &value, op)?;
        let (payload, ev) =
            event::encode_core_raw(kind, value, Some(event::Raw::Typed(&parsed)), op, self.state.len);
        self.append_one(kind, payload, ev, Some(parsed))
    }

    /// [`Session::append_core_value`] with the JSON text `value` was parsed
    /// from, written as it is.
    pub(crate) fn append_core_raw(
        &mut self,
        kind: CoreKind,
        value: Value,
        raw: Option<&str>,
        op: Option<SurfaceOp>,
        parsed: Option<event::Parsed>,
    ) -> Result<u64> {
        self.state.check_live(kind, &value, op)?;
        let (payload, ev) =
            event::encode_core_raw(kind, value, raw.map(event::Raw::Text), op, self.state.len);
        self.append_one(kind, payload, ev, parsed)
    }

    /// One encoded core event and the event it decodes to, appended and
    /// folded (the fold takes `parsed` when given).
    fn append_one(
        &mut self,
        kind: CoreKind,
        payload: Vec<u8>,
        mut ev: SessionEvent,
        parsed: Option<event::Parsed>,
    ) -> Result<u64> {
        let encoded = EncodedEvent::core(kind, payload);
        ev.ignorable = encoded.flags & crate::frame::FLAG_IGNORABLE != 0;
        self.append_decoded_parsed(
            std::slice::from_ref(&encoded),
            std::slice::from_ref(&ev),
            parsed,
        )
    }

    /// Append core events given as JSON values as one atomic group (one
    /// commit batch: after a crash all of them exist or none). Each is
    /// checked as [`Session::append_core_value`] checks one; a surface op
    /// in a group must be `Append` (a replace would be checked against a
    /// surface the group itself changes), which the caller ensures.
    pub(crate) fn append_core_values(
        &mut self,
        events: Vec<(CoreKind, Value, Option<SurfaceOp>)>,
    ) -> Result<Vec<u64>> {
        let mut items = Vec::with_capacity(events.len());
        let mut decoded = Vec::with_capacity(events.len());
        for (i, (kind, value, op)) in events.into_iter().enumerate() {
            debug_assert!(matches!(op, None | Some(SurfaceOp::Append)));
            self.state.check_live(kind, &value, op)?;
            let (payload, mut ev) = event::encode_core_value(kind, value, op, self.state.len + i as u64);
            let encoded = EncodedEvent::core(kind, payload);
            ev.ignorable = encoded.flags & crate::frame::FLAG_IGNORABLE != 0;
            items.push(encoded);
            decoded.push(ev);
        }
        self.append_decoded(items, decoded)
    }

    /// The session's metadata (title, tags, fields): the fold of its
    /// `session/meta` events, a fork child's starting from its parent's at
    /// the fork point. Like every view it is in the log, so it survives a
    /// crash once durable.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
    /// s.set_title("fix the flaky test").unwrap();
    /// s.add_tag("ci").unwrap();
    /// s.set_meta("git_branch", "main").unwrap();
    /// assert_eq!(s.metadata().title.as_deref(), Some("fix the flaky test"));
    /// assert!(s.metadata().tags.contains("ci"));
    /// assert_eq!(s.metadata().fields["git_branch"], "main");
    /// ```
    pub fn metadata(&self) -> &event::SessionMetadata {
        &self.state.metadata
    }

    /// Append one `session/meta` event (checked against the limits of
    /// [`event::MetaUpdate::check`]). Returns its seq.
    pub fn update_metadata(&mut self, update: event::MetaUpdate) -> Result<u64> {
        update.check().map_err(Error::InvalidArgument)?;
        self.append(update, ())
    }

    /// Set the title (`""` clears it).
    pub fn set_title(&mut self, title: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            title: Some(title.to_string()),
            ..Default::default()
        })
    }

    /// Add a tag.
    pub fn add_tag(&mut self, tag: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            add_tags: vec![tag.to_string()],
            ..Default::default()
        })
    }

    /// Remove a tag.
    pub fn remove_tag(&mut self, tag: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            remove_tags: vec![tag.to_string()],
            ..Default::default()
        })
    }

    /// Set a free key/value field (user id, cwd, git branch, model, ...).
    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            fields: [(key.to_string(), Some(value.to_string()))].into(),
            ..Default::default()
        })
    }

    /// Remove a free key/value field.
    pub fn remove_meta(&mut self, key: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            fields: [(key.to_string(), None)].into(),
            ..Default::default()
        })
    }

    /// Delete this session: append the `session/delete` tombstone and wait
    /// until it is durable. From then on the session is not found by
    /// loads ([`Error::SessionDeleted`]), lists or search; its fork children
    /// keep working. The handle is consumed. Returns the tombstone's seq.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let s = Session::create(store.clone(), "s1", Arc::new(Registry::new())).unwrap();
    /// s.delete().unwrap();
    /// let err = Session::open(store, "s1", Arc::new(Registry::new())).unwrap_err();
    /// assert!(err.is_not_found());
    /// ```
    pub fn delete(mut self) -> Result<u64> {
        let (payload, ev) = event::encode_core_value(
            CoreKind::SessionDelete,
            serde_json::json!({}),
            None,
            self.state.len,
        );
        let seqs = self.append_decoded(
            vec![EncodedEvent::core(CoreKind::SessionDelete, payload)],
            vec![ev],
        )?;
        self.flush()?;
        self.log.as_log().mark_deleted(&self.id)?;
        Ok(seqs[0])
    }

    /// Append a plugin event of a registered kind.
    pub fn append_plugin(&mut self, kind: &str, data: &Value) -> Result<u64> {
        let ignorable = self.registry.ignorable(kind).ok_or_else(|| {
            Error::InvalidArgument(format!("plugin kind {kind:?} is not registered"))
        })?;
        let payload = event::encode_plugin(kind, data);
        let seqs = self.append_encoded(vec![EncodedEvent::plugin(ignorable, payload)])?;
        Ok(seqs[0])
    }

    /// Append a harness's own typed event (see [`event::CustomEvent`]); its
    /// kind must be registered.
    pub fn append_custom<E: event::CustomEvent>(&mut self, e: &E) -> Result<u64> {
        let data = event::custom_data(e).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.append_plugin(E::KIND, &data)
    }

    /// Append encoded events atomically (one commit batch), then fold them.
    pub(crate) fn append_encoded(&mut self, items: Vec<EncodedEvent>) -> Result<Vec<u64>> {
        // Decode first: the live state is folded from exactly the bytes logged.
        let mut decoded = Vec::with_capacity(items.len());
        for (i, e) in items.iter().enumerate() {
            decoded.push(self.decode(self.state.len + i as u64, e.kind, e.flags, &e.payload)?);
        }
        self.append_decoded(items, decoded)
    }

    /// Append encoded events whose decoded form the caller already has
    /// (built from the same JSON value the payload was written from, so it
    /// is what decoding the payload gives; debug builds check that).
    fn append_decoded(
        &mut self,
        items: Vec<EncodedEvent>,
        decoded: Vec<SessionEvent>,
    ) -> Result<Vec<u64>> {
        let first = self.append_decoded_parsed(&items, &decoded, None)?;
        Ok((first..first + items.len() as u64).collect())
    }

    /// [`Session::append_decoded`], with the surface data of a lone event
    /// that the caller has parsed already (the fold takes it instead of
    /// parsing). Returns the first seq (the group's are consecutive).
    fn append_decoded_parsed(
        &mut self,
        items: &[EncodedEvent],
        decoded: &[SessionEvent],
        mut pre: Option<event::Parsed>,
    ) -> Result<u64> {
        debug_assert!(pre.is_none() || decoded.len() == 1);
        if self.live_handle.is_none() {
            return Err(Error::Refused(format!(
                "session {:?} was opened read-only; open it for writing to append",
                self.id
            )));
        }
        if let Some(seq) = self.state.deleted {
            return Err(Error::SessionDeleted {
                session: self.id.to_string(),
                seq,
            });
        }
        if let Some(e) = &self.messages_error {
            return Err(Error::Refused(format!(
                "the messages of session {:?} could not be read from the log ({e}); reopen it",
                self.id
            )));
        }
        #[cfg(debug_assertions)]
        for (e, ev) in items.iter().zip(decoded) {
            let again = self.decode(ev.seq, e.kind, e.flags, &e.payload)?;
            debug_assert_eq!(&again, ev, "the live event differs from its logged bytes");
        }
        // A group with a replace is checked against a scratch surface before
        // anything is appended (an append alone is always valid, and copying
        // the surface for it would cost O(session) per event).
        let replaces = decoded
            .iter()
            .any(|ev| matches!(ev.surface, Some(SurfaceOp::Replace { .. })));
        if replaces {
            // The check reads the tool-use ids of the surface's messages.
            self.load_restored_messages()?;
            let mut scratch = self.state.surface.clone();
            for ev in decoded {
                if let Some(op) = ev.surface {
                    scratch.apply(ev.seq, op)?;
                }
            }
            self.state.check_tool_pairs(&scratch, decoded)?;
        }
        // Large content blocks go out of line on the embedded store
        // (FORMAT.md §15); a log that indexes text gets each event's.
        let expected_first = self.state.len;
        let (first, last_end) = self.log.append_group(
            &self.id,
            &mut self.store_sid,
            self.state.len,
            items,
            |i| match &self.log {
                LogHandle::Embedded(_) => None,
                LogHandle::Other(_) => {
                    let ev = &decoded[i];
                    if ev.data.is_null() {
                        // A fast-path append carries no data value (release
                        // builds): the text comes from the logged bytes.
                        let e = &items[i];
                        event::decode(ev.seq, e.kind, e.flags, &e.payload, &self.registry)
                            .ok()
                            .and_then(|ev| crate::session::views::query::searchable_text(&ev))
                    } else {
                        crate::session::views::query::searchable_text(ev)
                    }
                }
            },
        )?;
        if first != Some(expected_first) {
            // Another handle appended to this session: its state is unknown here.
            return Err(Error::Refused(format!(
                "session {:?} was appended to by another handle (expected seq {expected_first}, got {first:?})",
                self.id,
            )));
        }
        self.last_end = last_end;
        // Until this handle derives, the messages of its appends are
        // dropped once durable (an embedded store says when, cheaply).
        let keep = match last_end {
            AppendEnd::At(pos) => Keep::UntilDurable(pos.0),
            _ => Keep::Hold,
        };
        for ev in decoded {
            self.state.apply(&self.id, ev, pre.take(), keep)?;
        }
        if self.state.messages.has_unsettled() {
            if let Some(store) = self.log.store() {
                self.state.messages.settle(store.durable_hint().0);
            }
        }
        Ok(expected_first)
    }

    /// Create a session from prior history: the session, the history
    /// events and the `session/end-seed` marker in one atomic batch (all or
    /// nothing). Events before the marker are [`Session::is_history`]: plugins
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
        if let LogHandle::Other(l) = &log {
            // The claim below needs the session to exist there.
            l.create_session(id)?;
        }
        let mut s = Self::empty(log, id, registry);
        s.claim()?;
        s.append_history(history)?;
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

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Number of events.
    pub fn len(&self) -> u64 {
        self.state.len
    }
    /// Whether the session has no events.
    pub fn is_empty(&self) -> bool {
        self.state.len == 0
    }
    /// The embedded store this session lives in; `None` on another log
    /// ([`Session::log`]).
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.log.store()
    }
    /// The log this session lives in.
    pub fn log(&self) -> &LogHandle {
        &self.log
    }
    /// A borrowed view of the log, for the free functions (replay, fork).
    pub(crate) fn log_ref(&self) -> LogRef<'_> {
        self.log.as_ref()
    }
    /// The current surface: the logged events the model sees, in order (a
    /// replace swaps nodes; replaced events stay in the log). The messages
    /// are derived from it ([`Session::derive_messages`]).
    #[doc(alias = "context")]
    pub fn surface(&self) -> &Surface {
        &self.state.surface
    }
    /// Open turn, step and tool calls.
    pub fn open_state(&self) -> &OpenState {
        &self.state.open
    }
    /// The latest request header in the log.
    pub fn header(&self) -> Option<&EpochHeader> {
        self.state.header.as_ref()
    }
    /// The latest request context in the log.
    pub fn context(&self) -> Option<&RequestContext> {
        self.state.context.as_ref()
    }
    /// Seq of the `session/end-seed` marker, if the session was created
    /// with prior history ([`Session::create_with_history`]).
    pub fn history_end(&self) -> Option<u64> {
        self.state.seed_end
    }
    /// Whether event `seq` belongs to the prior history (before the
    /// `session/end-seed` marker) rather than the current run.
    pub fn is_history(&self, seq: u64) -> bool {
        self.state.seed_end.is_some_and(|s| seq < s)
    }
    /// Old name of [`Session::history_end`].
    #[deprecated(since = "0.1.0", note = "renamed `history_end`")]
    pub fn seed_end(&self) -> Option<u64> {
        self.history_end()
    }
    /// Old name of [`Session::is_history`].
    #[deprecated(since = "0.1.0", note = "renamed `is_history`")]
    pub fn is_seed(&self, seq: u64) -> bool {
        self.is_history(seq)
    }
    /// Where this handle's last append ended in the embedded store's log
    /// (`LogPos(0)`: nothing appended, or another log).
    pub fn last_end(&self) -> LogPos {
        match self.last_end {
            AppendEnd::At(p) => p,
            _ => LogPos(0),
        }
    }

    /// What [`Session::flush`] would wait for, as a value to wait on once
    /// the session's lock is released (so that other appenders share the
    /// same flush): every event this handle appended so far.
    pub fn durability_point(&self) -> DurabilityPoint {
        DurabilityPoint {
            log: self.log.clone(),
            id: self.id.clone(),
            end: self.last_end,
        }
    }

    /// The model's messages, derived from the surface. Incremental: after
    /// plain appends only the new nodes are visited.
    ///
    /// A session restored from a state snapshot reads the messages of its
    /// surface from the log on the first call, and so does a handle that
    /// has appended without deriving, for its appends already durable (it
    /// does not keep their messages in memory until it first derives: a
    /// recorder's memory does not grow with its sessions' surfaces). If
    /// that read fails, this returns no messages, and appends are refused
    /// with the error (see [`Session::try_derive_messages`], which returns
    /// it).
    pub fn derive_messages(&mut self) -> &[Arc<Message>] {
        match self.load_messages() {
            Ok(()) => self.state.messages.derive(&self.state.surface),
            Err(e) => {
                self.messages_error = Some(e.to_string());
                &[]
            }
        }
    }

    /// [`Session::derive_messages`], returning the error of a failed read
    /// of restored messages.
    pub fn try_derive_messages(&mut self) -> Result<&[Arc<Message>]> {
        self.load_messages()?;
        Ok(self.state.messages.derive(&self.state.surface))
    }

    /// Surface nodes visited by the last [`Session::derive_messages`].
    pub fn last_derive_work(&self) -> usize {
        self.state.messages.last_work
    }

    /// Read and decode events `range` from the log (a read-only view shows
    /// kinds this process does not know as opaque events).
    pub fn events(&self, range: std::ops::Range<u64>) -> Result<Vec<SessionEvent>> {
        // Decoded straight from the log's bytes (payloads lent, not copied).
        let mut out =
            Vec::with_capacity((range.end.saturating_sub(range.start)).min(1 << 16) as usize);
        let mut failed = None;
        self.log.as_ref().visit(&self.id, range, |e| {
            let ev = e.payload.and_then(|payload| {
                if self.is_read_only() {
                    event::decode_view(e.seq, e.kind, e.flags, &payload, &self.registry).map_err(
                        |err| crate::session::views::replay::decode_error(&self.id, e.seq, err),
                    )
                } else {
                    self.decode(e.seq, e.kind, e.flags, &payload)
                }
            });
            match ev {
                Ok(ev) => {
                    out.push(ev);
                    std::ops::ControlFlow::Continue(())
                }
                Err(err) => {
                    failed = Some(err);
                    std::ops::ControlFlow::Break(())
                }
            }
        })?;
        match failed {
            Some(err) => Err(err),
            None => Ok(out),
        }
    }

    /// Wait until every event this handle appended is durable (one
    /// `fdatasync` serves every appender waiting at once). This is the
    /// checkpoint of SESSIONS.md: call it before a model request is
    /// dispatched, before a model-initiated tool body runs ([`crate::session::run_tool`]
    /// does), and before the next pre-step; on error, do not go on.
    #[doc(alias = "checkpoint")]
    pub fn flush(&self) -> Result<()> {
        self.log.wait(&self.id, self.last_end)
    }

    /// A new agent loop takes over this session (hot swap): the running turn
    /// stays open, and the next header written is `resume`.
    pub fn begin_loop(&mut self) {
        self.loop_wrote_header = false;
    }

    /// Resolve the header of the next request and write a `request/header`
    /// when needed: `initial` for the session's first, `resume` for the first
    /// of a new agent loop over an existing session, `change` when config,
    /// system or tools changed. Returns the reason written, or `None`.
    pub fn prepare_request(&mut self, spec: &RequestSpec) -> Result<Option<HeaderReason>> {
        // A difference is a `change` even for the first request of a new
        // loop (or of a fork child): the header records what changed.
        let reason = match &self.state.header {
            None => Some(HeaderReason::Initial),
            Some(prev) if !spec.resolves_to(prev) => Some(HeaderReason::Change),
            Some(_) if !self.loop_wrote_header => Some(HeaderReason::Resume),
            Some(_) => None,
        };
        if let Some(reason) = reason {
            self.append(
                RequestHeader {
                    reason,
                    header: spec.resolve(),
                },
                (),
            )?;
        }
        self.loop_wrote_header = true;
        Ok(reason)
    }

    /// Record the current route's capacity (no part of header detection).
    pub fn record_context(&mut self, ctx: RequestContext) -> Result<u64> {
        self.append(ctx, ())
    }

    /// The request rebuildable from the log: current header + messages.
    pub fn rebuild_request(&mut self) -> Request {
        let header = self.state.header.clone();
        Request {
            header,
            messages: self
                .derive_messages()
                .iter()
                .map(|m| (**m).clone())
                .collect(),
        }
    }

    /// The invariant check: the request an agent loop is about to send must
    /// equal the one rebuildable from the log. Reports the first difference.
    pub fn check_request(&mut self, actual: &Request) -> Result<()> {
        self.load_messages()?;
        let expected = self.rebuild_request();
        match first_difference(&expected, actual) {
            None => Ok(()),
            Some(d) => Err(Error::RequestMismatch(d)),
        }
    }

    /// The request body for `provider` that the log rebuilds: the latest
    /// header's model, parameters, system prompt and tools, and the derived
    /// messages arranged by the provider's rules (see
    /// [`crate::session::providers`]).
    pub fn request_body(&mut self, provider: Provider) -> Value {
        let header = self.state.header.clone();
        providers::request_body(provider, header.as_ref(), self.derive_messages())
    }

    /// The invariant check on the wire: the body a harness is about to send
    /// to `provider` must equal the one rebuilt from the log. The error
    /// names the first differing JSON path.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// # let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
    /// s.append(UserMessage { content: vec![ContentBlock::text("hi")] }, SurfaceOp::Append).unwrap();
    /// let mut body = s.request_body(Provider::OpenAiChat);
    /// assert!(s.check_request_body(Provider::OpenAiChat, &body).is_ok());
    /// body["messages"][0]["content"] = "hello".into();
    /// let err = s.check_request_body(Provider::OpenAiChat, &body).unwrap_err();
    /// assert!(err.to_string().contains("/messages/0/content"));
    /// ```
    pub fn check_request_body(&mut self, provider: Provider, body: &Value) -> Result<()> {
        self.load_messages()?;
        let expected = self.request_body(provider);
        match first_json_difference(&expected, body) {
            None => Ok(()),
            Some(d) => Err(Error::RequestMismatch(d)),
        }
    }

    /// Summarise surface nodes `start..end`: `compaction/start`,
    /// `compaction/summary`, the summary `user/message` replacing the range,
    /// `compaction/end`, all in one atomic batch. Returns the summary
    /// message's seq.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
    /// for text in ["a", "b", "c"] {
    ///     s.append(UserMessage { content: vec![ContentBlock::text(text)] }, SurfaceOp::Append).unwrap();
    /// }
    /// // Surface nodes 0..2 become one summary; the originals stay in the log.
    /// s.compact("k1", 0, 2, "a and b").unwrap();
    /// let texts: Vec<String> = s
    ///     .derive_messages()
    ///     .iter()
    ///     .map(|m| m.content[0].as_text().unwrap().to_string())
    ///     .collect();
    /// assert_eq!(texts, ["a and b", "c"]);
    /// ```
    pub fn compact(
        &mut self,
        compaction_id: &str,
        start: u64,
        end: u64,
        summary: &str,
    ) -> Result<u64> {
        self.state.surface.check(SurfaceOp::Replace { start, end })?;
        let id = compaction_id.to_string();
        let items = vec![
            EncodedEvent::core(
                CoreKind::CompactionStart,
                event::encode_core(
                    &CompactionStart {
                        compaction_id: id.clone(),
                    },
                    None,
                ),
            ),
            EncodedEvent::core(
                CoreKind::CompactionSummary,
                event::encode_core(
                    &CompactionSummary {
                        compaction_id: id.clone(),
                        text: summary.to_string(),
                    },
                    None,
                ),
            ),
            EncodedEvent::core(
                CoreKind::UserMessage,
                event::encode_core(
                    &UserMessage {
                        content: vec![ContentBlock::text(summary)],
                    },
                    Some(SurfaceOp::Replace { start, end }),
                ),
            ),
            EncodedEvent::core(
                CoreKind::CompactionEnd,
                event::encode_core(&CompactionEnd { compaction_id: id }, None),
            ),
        ];
        Ok(self.append_encoded(items)?[2])
    }

    /// Prune the tool result at surface position `at`: `compaction/prune`
    /// then a replacement `tool/result` (same call id) that takes its place,
    /// atomically. The original stays in the log. Returns the replacement's seq.
    pub fn prune_tool_result(
        &mut self,
        at: u64,
        replacement: &str,
        tokens_saved: u64,
    ) -> Result<u64> {
        let seq = *self.state.surface.nodes.get(at as usize).ok_or_else(|| {
            Error::InvalidArgument(format!("surface position {at} is out of range"))
        })?;
        let original = self
            .events(seq..seq + 1)?
            .pop()
            .and_then(|e| e.typed::<ToolResult>())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "surface node {at} (seq {seq}) is not a tool/result"
                ))
            })?;
        let items = vec![
            EncodedEvent::core(
                CoreKind::CompactionPrune,
                event::encode_core(
                    &CompactionPrune {
                        replaced_seqs: vec![seq],
                        tokens_saved,
                    },
                    None,
                ),
            ),
            EncodedEvent::core(
                CoreKind::ToolResult,
                event::encode_core(
                    &ToolResult {
                        call_id: original.call_id,
                        content: vec![ContentBlock::text(replacement)],
                        is_error: original.is_error,
                        status: original.status,
                    },
                    Some(SurfaceOp::Replace {
                        start: at,
                        end: at + 1,
                    }),
                ),
            ),
        ];
        Ok(self.append_encoded(items)?[1])
    }

    /// Append a group of encoded events as repair (which may write
    /// `interrupted`), atomically.
    pub(crate) fn append_repair_group(&mut self, items: Vec<EncodedEvent>) -> Result<Vec<u64>> {
        self.append_encoded(items)
    }

    /// Old name of [`Session::append_history`].
    #[deprecated(since = "0.1.0", note = "renamed `append_history`")]
    pub fn append_seed(&mut self, seed: &[HistoryEvent]) -> Result<u64> {
        self.append_history(seed)
    }

    /// Append prior history and then the `session/end-seed` marker,
    /// atomically. Events before the marker are [`Session::is_history`].
    /// History that already holds a marker (an export of an imported
    /// session, imported again) is written as it is, with no second
    /// marker. Each event keeps its `ts` when it has one. Returns the seq
    /// of the last event written.
    pub fn append_history(&mut self, seed: &[HistoryEvent]) -> Result<u64> {
        let mut items = Vec::with_capacity(seed.len() + 1);
        let has_marker = seed
            .iter()
            .any(|e| e.kind == EventKind::Core(CoreKind::SessionEndSeed));
        for e in seed {
            let ts = Some(e.ts.unwrap_or_else(event::now_ms));
            let encoded = match &e.kind {
                EventKind::Core(CoreKind::SessionDelete) => {
                    return Err(Error::InvalidArgument(
                        "seed history cannot hold a session/delete tombstone".into(),
                    ))
                }
                EventKind::Core(k) => EncodedEvent::core(
                    *k,
                    serde_json::to_vec(&event::Envelope {
                        v: event::SESSION_FORMAT_VERSION,
                        kind: None,
                        surface: e.surface,
                        ts,
                        data: e.data.clone(),
                    })
                    .expect("envelope serializes"),
                ),
                EventKind::Plugin(name) => {
                    let ignorable = self.registry.ignorable(name).ok_or_else(|| {
                        Error::InvalidArgument(format!("plugin kind {name:?} is not registered"))
                    })?;
                    EncodedEvent::plugin(ignorable, event::encode_plugin_at(name, &e.data, ts))
                }
            };
            items.push(encoded);
        }
        if !has_marker {
            items.push(EncodedEvent::core(
                CoreKind::SessionEndSeed,
                event::encode_core(&event::SessionEndSeed {}, None),
            ));
        }
        Ok(*self
            .append_encoded(items)?
            .last()
            .expect("at least one event"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{AssistantMessage, ContentBlock, UserMessage};

    fn user(s: &mut Session, text: impl Into<String>) {
        s.append(
            UserMessage {
                content: vec![ContentBlock::text(text.into())],
            },
            SurfaceOp::Append,
        )
        .unwrap();
    }

    fn tool_use(id: &str) -> AssistantMessage {
        AssistantMessage {
            content: vec![ContentBlock::tool_use(id, "shell", serde_json::json!({}))],
            usage: None,
            stop_reason: None,
            extra: Default::default(),
        }
    }

    fn tool_result(id: &str, text: String) -> ToolResult {
        ToolResult {
            call_id: id.into(),
            content: vec![ContentBlock::text(text)],
            is_error: false,
            status: None,
        }
    }

    /// A tool use, its call and its result (`text`).
    fn tool_round(s: &mut Session, id: &str, text: String) {
        s.append(tool_use(id), SurfaceOp::Append).unwrap();
        s.append(
            event::ToolCall {
                call_id: id.into(),
                name: "shell".into(),
                input: serde_json::json!({}),
            },
            (),
        )
        .unwrap();
        s.append(tool_result(id, text), SurfaceOp::Append).unwrap();
    }

    fn derived(s: &mut Session) -> Vec<Message> {
        s.derive_messages().iter().map(|m| (**m).clone()).collect()
    }

    /// What a fresh open of session `id` derives.
    fn derived_fresh(store: Arc<Store>, id: &str) -> Vec<Message> {
        derived(&mut Session::open(store, id, Arc::new(Registry::new())).unwrap())
    }

    /// A session that appends without ever deriving its messages holds the
    /// messages of its surface only: a compaction drops the messages it
    /// replaced there and then (before, they stayed until the next derive,
    /// and the fleet, which never derives, grew with its log).
    #[test]
    fn a_replace_drops_the_messages_it_took_off_the_surface() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::create(store.clone(), "s", Arc::new(Registry::new())).unwrap();
        for round in 0..20u64 {
            for i in 0..10 {
                user(&mut s, format!("round {round} message {i}"));
            }
            // Keep the last 5 nodes; the rest becomes one summary.
            let end = s.surface().len() as u64 - 5;
            s.compact(&format!("c{round}"), 0, end, &format!("summary {round}"))
                .unwrap();
            assert_eq!(s.surface().len(), 6);
            let (kept, settled) = s.state.messages.held();
            assert_eq!(kept + settled, s.surface().len(), "round {round}");
        }
        // What the session derives is what a fresh open of the log derives.
        let live = derived(&mut s);
        drop(s);
        assert_eq!(live.len(), 6);
        assert_eq!(live, derived_fresh(store, "s"));
    }

    /// A handle that only appends (a recorder) keeps none of its durable
    /// messages; its first derive reads them back from the log, blobs
    /// resolved, equal to what a fresh open derives, and keeps them from
    /// then on.
    #[test]
    fn a_recorder_keeps_no_durable_message_and_derives_them_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        store.blobs().set_threshold(1024);
        let mut s = Session::create(store.clone(), "s", Arc::new(Registry::new())).unwrap();
        for turn in 0..8u64 {
            user(&mut s, format!("turn {turn}"));
            // Every other result goes out of line, as a blob.
            let body = "x".repeat(if turn % 2 == 0 { 4096 } else { 16 });
            tool_round(&mut s, &format!("c{turn}"), format!("{turn}{body}"));
            s.flush().unwrap();
        }
        // The last turn's messages settle at the next append.
        user(&mut s, "last");
        let (kept, settled) = s.state.messages.held();
        assert_eq!(settled, 8 * 3, "durable messages dropped");
        assert_eq!(kept, 1, "only the newest, not yet durable, is kept");
        assert_eq!(kept + settled, s.surface().len());
        assert_eq!(derived(&mut s).len(), 8 * 3 + 1);
        assert_eq!(s.state.messages.held(), (8 * 3 + 1, 0), "kept once derived");
        // Appends after a derive keep their messages, durable or not.
        s.append(tool_result("nobody", "stray".into()), SurfaceOp::Append)
            .unwrap();
        s.flush().unwrap();
        user(&mut s, "after");
        assert_eq!(s.state.messages.held().1, 0);
        let live = derived(&mut s);
        drop(s);
        assert_eq!(live, derived_fresh(store, "s"));
        match &live[2].content[0] {
            ContentBlock::ToolResult { content, .. } => {
                assert_eq!(
                    serde_json::to_value(content).unwrap(),
                    format!("0{}", "x".repeat(4096))
                );
            }
            other => panic!("not a tool result: {other:?}"),
        }
    }

    /// The pair check of a replace sees the tool-use ids of messages
    /// dropped once durable: a compaction that would take a durable tool
    /// result off the surface without its tool use is refused, and one that
    /// takes both is not.
    #[test]
    fn a_replace_cannot_split_a_pair_whose_messages_were_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
        tool_round(&mut s, "c1", "ok".into());
        s.flush().unwrap();
        user(&mut s, "next");
        assert_eq!(s.state.messages.held(), (1, 2), "the pair's messages dropped");
        let err = s.compact("k1", 1, 2, "summary").unwrap_err();
        assert!(err.to_string().contains("\"c1\""), "{err}");
        s.compact("k2", 0, 2, "summary").unwrap();
        crate::session::validate_messages(s.derive_messages()).unwrap();
        assert_eq!(s.derive_messages().len(), 2);
    }

    /// A fork child's own appends are dropped once durable like any
    /// recorder's, here waited for with `flush_async`; its first derive reads
    /// them back through the fork (inherited events from the parent's
    /// frames) and equals a fresh open's.
    #[test]
    fn a_fork_child_recording_with_async_flushes_derives_what_a_fresh_open_does() {
        use crate::session::codec::event::{TurnEnd, TurnEndReason, TurnStart};
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let reg = Arc::new(Registry::new());
        let mut parent = Session::create(store.clone(), "p", reg.clone()).unwrap();
        parent
            .append(
                TurnStart {
                    turn_id: "t0".into(),
                },
                (),
            )
            .unwrap();
        user(&mut parent, "inherited");
        let end = TurnEnd {
            turn_id: "t0".into(),
            reason: TurnEndReason::Completed,
        };
        parent.append(end, ()).unwrap();
        parent.flush().unwrap();
        let f = crate::session::fork(&store, "p", None, Some("c")).unwrap();
        let mut child = Session::open(store.clone(), &f.child, reg).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for i in 0..5 {
            tool_round(&mut child, &format!("c{i}"), format!("result {i}"));
            rt.block_on(child.flush_async()).unwrap();
        }
        user(&mut child, "next");
        // The inherited message was folded at open (kept); the child's own
        // ten are dropped; the newest is kept until durable.
        assert_eq!(child.state.messages.held(), (2, 10));
        let live = derived(&mut child);
        assert_eq!(live.len(), 12);
        drop(child);
        assert_eq!(live, derived_fresh(store, &f.child));
    }
}
