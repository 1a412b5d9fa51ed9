//! Events given as JSON: what bindings (Python, Node) and other dynamic
//! callers append. The kind is named, the data is the kind's JSON (content
//! blocks in the providers' own shapes), and the typed rules of
//! [`Session::append`] still hold: the data must parse as the kind's type,
//! the three surface kinds need a surface op and every other kind refuses
//! one. Nothing is written when any of that fails.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::session::codec::envelope;
use crate::session::codec::event::{self as ev, CoreKind};
use crate::session::fold::header::RequestSpec;
use crate::session::fold::surface::SurfaceOp;
use crate::session::handle::Session;

fn typed<T: DeserializeOwned>(kind: &str, data: Value) -> Result<T> {
    // Only metadata updates are built typed (their limits are checked there).
    serde_json::from_value(data)
        .map_err(|e| Error::InvalidArgument(format!("{kind} data does not fit the kind: {e}")))
}

/// The message of a data check's failure.
fn shape_detail(e: envelope::DecodeError) -> String {
    match e {
        envelope::DecodeError::Malformed(d) => d,
        other => format!("{other:?}"),
    }
}

fn no_op(kind: &str, surface: Option<SurfaceOp>) -> Result<()> {
    match surface {
        None => Ok(()),
        Some(_) => Err(Error::InvalidArgument(format!(
            "{kind} is not a surface kind and takes no surface op"
        ))),
    }
}

fn op(kind: &str, surface: Option<SurfaceOp>) -> Result<SurfaceOp> {
    surface.ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{kind} is a surface kind: say how it enters the surface ({{\"op\":\"append\"}} or {{\"op\":\"replace\",\"start\":S,\"end\":E}})"
        ))
    })
}

impl Session {
    /// Append one event given by kind name and JSON data (a core kind, or a
    /// registered plugin kind). `surface` is required for `user/message`,
    /// `assistant/message` and `tool/result`, refused for the others.
    /// Returns the event's seq.
    pub fn append_json(
        &mut self,
        kind: &str,
        data: Value,
        surface: Option<SurfaceOp>,
    ) -> Result<u64> {
        self.append_json_inner(kind, data, None, surface)
    }

    /// [`Session::append_json`] with the data as JSON text, as bindings
    /// receive it. The text is parsed once for the checks and the fold, and
    /// written as the envelope's `data` as given (FORMAT.md §10), so a core
    /// event's data is not serialised again. Text that is not one JSON
    /// value is refused (`InvalidArgument`) and nothing is written.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
    /// s.append_json_text("user/message", r#"{"content":[{"type":"text","text":"hi"}]}"#,
    ///     Some(SurfaceOp::Append)).unwrap();
    /// assert!(s.append_json_text("turn/start", "{not json", None).is_err());
    /// assert_eq!(s.len(), 1);
    /// ```
    pub fn append_json_text(
        &mut self,
        kind: &str,
        text: &str,
        surface: Option<SurfaceOp>,
    ) -> Result<u64> {
        let not_json = |e| Error::InvalidArgument(format!("{kind} data is not JSON: {e}"));
        // A surface kind appended to the surface (nearly every message): the
        // text is parsed straight into the typed data the fold takes, with
        // no JSON value in between (the fold and the log need none; a
        // replace goes the general way, its tool-pair check reads values).
        if let (Some(core), Some(SurfaceOp::Append)) = (CoreKind::from_name(kind), surface) {
            if !text.trim_start().starts_with('{') {
                // Not an object: the general path says what it is.
                let data: Value = serde_json::from_str(text).map_err(not_json)?;
                return self.append_json_inner(kind, data, Some(text), surface);
            }
            if let Some(parsed) = envelope::parse_surface(core, text) {
                let parsed = parsed.map_err(|e| {
                    if !e.is_data() {
                        return not_json(e);
                    }
                    // Parsed again as a value, on this failure path only,
                    // for the path of the field at fault.
                    let detail = serde_json::from_str::<Value>(text)
                        .ok()
                        .and_then(|v| envelope::validate_core(core, &v).err())
                        .map_or_else(|| format!("{kind} data: {e}"), shape_detail);
                    Error::InvalidArgument(format!("the data does not fit the kind: {detail}"))
                })?;
                // The decoded event's value is only compared with the
                // logged bytes, in debug builds (`append_decoded`).
                let data = if cfg!(debug_assertions) {
                    serde_json::from_str(text).map_err(not_json)?
                } else {
                    Value::Null
                };
                return self.append_core_raw(
                    core,
                    data,
                    Some(text),
                    Some(SurfaceOp::Append),
                    Some(parsed),
                );
            }
        }
        let data: Value = serde_json::from_str(text).map_err(not_json)?;
        self.append_json_inner(kind, data, Some(text), surface)
    }

    fn append_json_inner(
        &mut self,
        kind: &str,
        data: Value,
        raw: Option<&str>,
        surface: Option<SurfaceOp>,
    ) -> Result<u64> {
        let Some(core) = CoreKind::from_name(kind) else {
            no_op(kind, surface)?;
            return self.append_plugin(kind, &data);
        };
        let surface_kind = matches!(
            core,
            CoreKind::UserMessage | CoreKind::AssistantMessage | CoreKind::ToolResult
        );
        let op = if surface_kind {
            Some(op(kind, surface)?)
        } else {
            no_op(kind, surface)?;
            None
        };
        envelope::check_object(core, &data).map_err(|e| {
            Error::InvalidArgument(format!(
                "the data does not fit the kind: {}",
                shape_detail(e)
            ))
        })?;
        match core {
            // The limits of a metadata update are checked where it is built.
            CoreKind::SessionMeta => {
                return self.update_metadata(typed::<ev::MetaUpdate>(kind, data)?);
            }
            CoreKind::SessionDelete => {
                return Err(Error::InvalidArgument(
                    "session/delete is written by delete(), which waits for it to be durable and checks that no writer holds the session".into(),
                ))
            }
            _ => {}
        }
        // One typed check by reference, then the JSON as given is what is
        // written (no second serialisation).
        let parsed = envelope::validate_core_parsed(core, &data).map_err(|e| {
            Error::InvalidArgument(format!(
                "the data does not fit the kind: {}",
                shape_detail(e)
            ))
        })?;
        self.append_core_raw(core, data, raw, op, parsed)
    }
}

impl Session {
    /// Append several events given by kind name and JSON data as one
    /// atomic group: one commit batch, so after a crash either all of them
    /// exist or none (what a harness needs for the items of one model
    /// response, say a function call and its reasoning). Core kinds only;
    /// each follows the rules of [`Session::append_json`], and a surface
    /// kind may only `append` (a replace inside a group would be checked
    /// against a surface the group itself changes). Nothing is written
    /// when any event is refused. Returns the seqs.
    pub fn append_json_group(
        &mut self,
        events: Vec<(String, Value, Option<SurfaceOp>)>,
    ) -> Result<Vec<u64>> {
        let mut checked = Vec::with_capacity(events.len());
        for (kind, data, surface) in events {
            let core = CoreKind::from_name(&kind).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{kind:?} in a group: only core kinds are appended in groups"
                ))
            })?;
            if matches!(core, CoreKind::SessionMeta | CoreKind::SessionDelete) {
                return Err(Error::InvalidArgument(format!(
                    "{kind} is not appended in groups"
                )));
            }
            let surface_kind = matches!(
                core,
                CoreKind::UserMessage | CoreKind::AssistantMessage | CoreKind::ToolResult
            );
            let op = if surface_kind {
                let op = op(&kind, surface)?;
                if op != SurfaceOp::Append {
                    return Err(Error::InvalidArgument(format!(
                        "{kind} in a group: only the append surface op is allowed"
                    )));
                }
                Some(op)
            } else {
                no_op(&kind, surface)?;
                None
            };
            envelope::check_object(core, &data)
                .and_then(|()| envelope::validate_core(core, &data))
                .map_err(|e| {
                    Error::InvalidArgument(format!(
                        "{kind}: the data does not fit the kind: {}",
                        shape_detail(e)
                    ))
                })?;
            checked.push((core, data, op));
        }
        self.append_core_values(checked)
    }
}

impl Session {
    /// [`Session::prepare_request`] with the spec given as JSON (the shape
    /// documented on [`RequestSpec`]): what the Python and Node packages
    /// call. A spec that does not fit is refused naming the field's path,
    /// and nothing is written.
    pub fn prepare_request_json(&mut self, spec: Value) -> Result<Option<ev::HeaderReason>> {
        let spec: RequestSpec = serde_path_to_error::deserialize(spec).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                Error::InvalidArgument(format!("request spec: {}", e.inner()))
            } else {
                Error::InvalidArgument(format!("request spec: at `{path}`: {}", e.inner()))
            }
        })?;
        self.prepare_request(&spec)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::session::codec::event::Registry;
    use crate::Store;

    #[test]
    fn json_events_follow_the_typed_rules_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
        s.append_json("turn/start", json!({"turn_id": "t"}), None)
            .unwrap();
        let content = json!([
            {"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
            {"type": "brand_new_block", "x": [1, 2]}
        ]);
        let seq = s
            .append_json(
                "assistant/message",
                json!({"content": content.clone()}),
                Some(SurfaceOp::Append),
            )
            .unwrap();
        let back = s.events(seq..seq + 1).unwrap();
        assert_eq!(
            back[0].data["content"], content,
            "content crosses unchanged"
        );
        let len = s.len();
        // Each refusal writes nothing.
        for (kind, data, surface) in [
            ("user/message", json!({"content": []}), None),
            ("turn/end", json!({"turn_id": "t"}), Some(SurfaceOp::Append)),
            ("tool/call", json!({"name": 3}), None),
            ("no/such-kind", json!({}), None),
        ] {
            let e = s.append_json(kind, data, surface).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{kind}: {e}");
        }
        assert_eq!(s.len(), len);
    }

    #[test]
    fn json_text_is_written_as_given_and_reads_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::create(store.clone(), "s", Arc::new(Registry::new())).unwrap();
        // Keys out of order, spaces, an unknown block and a text block with
        // an extra field (not the text fast path): all kept.
        let text = r#"{ "content": [ {"text": "b", "type": "text"},
            {"type":"text","text":"c","cache_control":{"type":"ephemeral"}},
            {"type":"brand_new","z":1,"a":[true,null]} ] }"#;
        let seq = s
            .append_json_text("user/message", text, Some(SurfaceOp::Append))
            .unwrap();
        let raw = store.read("s", seq).unwrap().payload;
        let raw = String::from_utf8(raw).unwrap();
        assert!(raw.ends_with(&format!(",\"data\":{text}}}")), "{raw}");
        let want: Value = serde_json::from_str(text).unwrap();
        assert_eq!(s.events(seq..seq + 1).unwrap()[0].data, want);
        // The fold saw the same message as a parse of the value would.
        let mut v = Session::create(store.clone(), "v", Arc::new(Registry::new())).unwrap();
        v.append_json("user/message", want.clone(), Some(SurfaceOp::Append))
            .unwrap();
        let (a, b) = (s.derive_messages(), v.derive_messages());
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].content, b[0].content);
        // After a reopen too.
        drop(s);
        let mut s = Session::open(store, "s", Arc::new(Registry::new())).unwrap();
        assert_eq!(s.derive_messages()[0].content, b[0].content);
    }

    #[test]
    fn json_text_refusals_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
        for (kind, text, surface) in [
            ("user/message", "{\"content\": [", Some(SurfaceOp::Append)),
            (
                "user/message",
                "{\"content\": []} trailing",
                Some(SurfaceOp::Append),
            ),
            ("user/message", "{\"content\": 3}", Some(SurfaceOp::Append)),
            (
                "turn/start",
                "{\"turn_id\": \"t\"}",
                Some(SurfaceOp::Append),
            ),
            ("user/message", "{\"content\": []}", None),
        ] {
            let e = s.append_json_text(kind, text, surface).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{text}: {e}");
        }
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn a_json_group_is_appended_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::create(store.clone(), "g", Arc::new(Registry::new())).unwrap();
        let item = json!({"role": "user", "content": "hi", "unknown_field": [1]});
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"});
        let app = Some(SurfaceOp::Append);
        let seqs = s
            .append_json_group(vec![
                (
                    "user/message".into(),
                    json!({"content": [item.clone()]}),
                    app,
                ),
                (
                    "assistant/message".into(),
                    json!({"content": [call.clone()]}),
                    app,
                ),
            ])
            .unwrap();
        assert_eq!(seqs, vec![0, 1]);
        let back = s.events(0..2).unwrap();
        assert_eq!(back[0].data["content"][0], item);
        assert_eq!(back[1].data["content"][0], call);
        assert_eq!(s.derive_messages().len(), 2);
        // One bad event refuses the whole group: nothing is written.
        for bad in [
            vec![
                (
                    "user/message".into(),
                    json!({"content": [item.clone()]}),
                    app,
                ),
                ("user/message".into(), json!({"content": 3}), app),
            ],
            vec![
                (
                    "user/message".into(),
                    json!({"content": [item.clone()]}),
                    app,
                ),
                (
                    "user/message".into(),
                    json!({"content": [item.clone()]}),
                    Some(SurfaceOp::Replace { start: 0, end: 1 }),
                ),
            ],
            vec![("no/such-kind".into(), json!({}), None)],
            vec![("turn/start".into(), json!({"turn_id": "t"}), app)],
        ] {
            let e = s.append_json_group(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            assert_eq!(s.len(), 2);
        }
        s.flush().unwrap();
        drop(s);
        // Reopened: the group folds to the same surface.
        let s = Session::open_read_only(store, "g", Arc::new(Registry::new())).unwrap();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn a_request_spec_given_as_json_writes_headers_and_names_a_bad_field() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
        let spec = json!({"provider": "anthropic", "model": "m", "params": {"max_tokens": 64},
                          "system": "Be brief.", "tools": [{"name": "ls", "input_schema": {"type": "object"}}]});
        assert_eq!(
            s.prepare_request_json(spec.clone()).unwrap(),
            Some(ev::HeaderReason::Initial)
        );
        assert_eq!(s.prepare_request_json(spec.clone()).unwrap(), None);
        let mut changed = spec.clone();
        changed["params"]["max_tokens"] = json!(128);
        assert_eq!(
            s.prepare_request_json(changed).unwrap(),
            Some(ev::HeaderReason::Change)
        );
        let body = s.request_body(crate::session::Provider::Anthropic);
        assert_eq!(body["max_tokens"], 128);
        assert_eq!(body["system"], "Be brief.");
        assert_eq!(body["tools"][0]["name"], "ls");
        let len = s.len();
        for (bad, needle) in [
            (json!({"provider": "anthropic"}), "missing field `model`"),
            (
                json!({"provider": "a", "model": "m", "tool": []}),
                "unknown field `tool`",
            ),
            (
                json!({"provider": "a", "model": "m", "tools": [{"name": 3}]}),
                "at `tools[0].name`",
            ),
            (
                json!({"provider": "a", "model": "m", "params": [1]}),
                "at `params`",
            ),
        ] {
            let e = s.prepare_request_json(bad).unwrap_err().to_string();
            assert!(e.contains("request spec") && e.contains(needle), "{e}");
        }
        assert_eq!(s.len(), len, "a refused spec writes nothing");
    }
}
