//! Appending: typed, JSON and encoded events, each group one commit
//! batch: the live checks, the log, then the fold ([`State::apply`]).

use serde_json::Value;

use crate::error::{Error, Result};
use crate::session::codec::envelope;
use crate::session::codec::envelope::EncodedEvent;
use crate::session::codec::event::{self, CoreKind, EventData, EventKind, Intent, SessionEvent};
use crate::session::fold::messages::Keep;
use crate::session::fold::surface::SurfaceOp;
use crate::session::handle::{HistoryEvent, Session};
use crate::session::log::AppendEnd;

impl Session {
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
            match envelope::typed_parsed(data) {
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
    /// checked with `envelope::validate_core`): the live checks, one encoding,
    /// the fold.
    pub(crate) fn append_core_value(
        &mut self,
        kind: CoreKind,
        value: Value,
        op: Option<SurfaceOp>,
    ) -> Result<u64> {
        self.append_core_raw(kind, value, None, op, None)
    }

    /// A core event of the engine's own type (`envelope::typed_parsed`):
    /// the live checks, the data serialised straight into the payload, the
    /// fold taking the typed data. Debug builds also build the data's JSON
    /// value, which `append_decoded_parsed` checks against the logged bytes;
    /// release builds carry none.
    pub(in crate::session) fn append_typed(
        &mut self,
        kind: CoreKind,
        parsed: envelope::Parsed,
        op: Option<SurfaceOp>,
    ) -> Result<u64> {
        let value = if cfg!(debug_assertions) {
            serde_json::to_value(&parsed).map_err(|e| Error::InvalidArgument(e.to_string()))?
        } else {
            Value::Null
        };
        self.state.check_live(kind, &value, op, Some(&parsed))?;
        let (payload, ev) = envelope::encode_core_raw(
            kind,
            value,
            Some(envelope::Raw::Typed(&parsed)),
            op,
            self.state.len,
        );
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
        parsed: Option<envelope::Parsed>,
    ) -> Result<u64> {
        self.state.check_live(kind, &value, op, parsed.as_ref())?;
        let (payload, ev) = envelope::encode_core_raw(
            kind,
            value,
            raw.map(envelope::Raw::Text),
            op,
            self.state.len,
        );
        self.append_one(kind, payload, ev, parsed)
    }

    /// One encoded core event and the event it decodes to, appended and
    /// folded (the fold takes `parsed` when given).
    pub(in crate::session) fn append_one(
        &mut self,
        kind: CoreKind,
        payload: Vec<u8>,
        mut ev: SessionEvent,
        parsed: Option<envelope::Parsed>,
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
        // Each event is checked against the state before the group: a tool
        // called twice within the group is caught here.
        self.state.check_new_calls(
            events
                .iter()
                .filter(|(kind, _, _)| *kind == CoreKind::ToolCall)
                .filter_map(|(_, value, _)| value.get("call_id").and_then(Value::as_str)),
        )?;
        for (i, (kind, value, op)) in events.into_iter().enumerate() {
            debug_assert!(matches!(op, None | Some(SurfaceOp::Append)));
            self.state.check_live(kind, &value, op, None)?;
            let (payload, mut ev) =
                envelope::encode_core_value(kind, value, op, self.state.len + i as u64);
            let encoded = EncodedEvent::core(kind, payload);
            ev.ignorable = encoded.flags & crate::frame::FLAG_IGNORABLE != 0;
            items.push(encoded);
            decoded.push(ev);
        }
        self.append_decoded(items, decoded)
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
        let (payload, ev) = envelope::encode_core_value(
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
        let payload = envelope::encode_plugin(kind, data);
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
    pub(in crate::session) fn append_decoded(
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
    pub(in crate::session) fn append_decoded_parsed(
        &mut self,
        items: &[EncodedEvent],
        decoded: &[SessionEvent],
        mut pre: Option<envelope::Parsed>,
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
        self.check_replaces(decoded)?;
        // Large content blocks go out of line where the log keeps blobs
        // (FORMAT.md §15); a log that indexes text gets each event's.
        let expected_first = self.state.len;
        let (first, last_end) =
            self.log
                .append_group(&self.id, &mut self.store_sid, self.state.len, items, |i| {
                    let ev = &decoded[i];
                    if ev.data.is_null() {
                        // A fast-path append carries no data value (release
                        // builds): the text comes from the logged bytes.
                        let e = &items[i];
                        envelope::decode(ev.seq, e.kind, e.flags, &e.payload, &self.registry)
                            .ok()
                            .and_then(|ev| crate::session::views::query::searchable_text(&ev))
                    } else {
                        crate::session::views::query::searchable_text(ev)
                    }
                })?;
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
            if let Some(durable) = self.log.as_log().durable_hint() {
                self.state.messages.settle(durable.0);
            }
        }
        Ok(expected_first)
    }

    /// A group with a replace is checked against a scratch surface before
    /// anything is appended (an append alone is always valid, and copying
    /// the surface for it would cost O(session) per event).
    fn check_replaces(&mut self, decoded: &[SessionEvent]) -> Result<()> {
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
        Ok(())
    }

    /// Fold `items` into this handle's state as one appended group would
    /// be, writing nothing: every check an append makes, so that a group
    /// too large for one batch can be refused before any of it is written.
    pub(in crate::session) fn fold_unwritten(&mut self, items: &[EncodedEvent]) -> Result<()> {
        let base = self.state.len;
        let mut decoded = Vec::with_capacity(items.len());
        for (i, e) in items.iter().enumerate() {
            decoded.push(self.decode(base + i as u64, e.kind, e.flags, &e.payload)?);
        }
        self.check_replaces(&decoded)?;
        for ev in decoded {
            self.state.apply(&self.id, &ev, None, Keep::Hold)?;
        }
        Ok(())
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
        let items = self.encode_history(seed)?;
        Ok(*self
            .append_encoded(items)?
            .last()
            .expect("at least one event"))
    }

    /// The events [`Session::append_history`] appends for `seed`: each
    /// event's bytes, then the `session/end-seed` marker unless the
    /// history holds one.
    pub(in crate::session) fn encode_history(
        &self,
        seed: &[HistoryEvent],
    ) -> Result<Vec<EncodedEvent>> {
        let mut items = Vec::with_capacity(seed.len() + 1);
        let has_marker = seed
            .iter()
            .any(|e| e.kind == EventKind::Core(CoreKind::SessionEndSeed));
        for e in seed {
            let ts = Some(e.ts.unwrap_or_else(envelope::now_ms));
            let encoded = match &e.kind {
                EventKind::Core(CoreKind::SessionDelete) => {
                    return Err(Error::InvalidArgument(
                        "seed history cannot hold a session/delete tombstone".into(),
                    ))
                }
                EventKind::Core(k) => EncodedEvent::core(
                    *k,
                    serde_json::to_vec(&envelope::Envelope {
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
                    EncodedEvent::plugin(ignorable, envelope::encode_plugin_at(name, &e.data, ts))
                }
            };
            items.push(encoded);
        }
        if !has_marker {
            items.push(EncodedEvent::core(
                CoreKind::SessionEndSeed,
                envelope::encode_core(&event::SessionEndSeed {}, None),
            ));
        }
        Ok(items)
    }
}
