//! The payload envelope (`format-spec/FORMAT.md` §10): how an event is
//! stored as a frame's payload and read back. Encoding (typed data, JSON
//! values, the caller's own JSON text, plugin events), decoding (strict
//! for the fold, lenient for read-only views), the data checks of each
//! core kind, and the frame flags each kind carries.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;
use crate::frame::FLAG_IGNORABLE;
use crate::session::codec::event::{
    AssistantChunk, AssistantMessage, CompactionEnd, CompactionPrune, CompactionStart,
    CompactionSummary, CoreKind, EventData, EventKind, MetaUpdate, Registry, RequestContext,
    RequestHeader, SessionDelete, SessionEndSeed, SessionEvent, StepEnd, StepStart, ToolCall,
    ToolResult, TurnEnd, TurnStart, UserMessage, KIND_CODE_PLUGIN, SESSION_FORMAT_VERSION,
};
use crate::session::fold::surface::SurfaceOp;
pub use crate::types::now_ms;

/// One event as the log stores it (FORMAT.md §4, §10): the kind code, the
/// frame flags and the payload bytes. Everything the session layer appends
/// is built as one of these and handed to the log as it is; the live state
/// is folded from what decoding it gives (debug builds check that the
/// decoded form the caller built equals it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EncodedEvent {
    pub kind: u16,
    pub flags: u16,
    pub payload: Vec<u8>,
}

impl EncodedEvent {
    /// A core event's bytes, with the flags its kind carries.
    pub(crate) fn core(kind: CoreKind, payload: Vec<u8>) -> EncodedEvent {
        EncodedEvent {
            kind: kind.code(),
            flags: core_flags(kind),
            payload,
        }
    }

    /// A plugin event's bytes.
    pub(crate) fn plugin(ignorable: bool, payload: Vec<u8>) -> EncodedEvent {
        EncodedEvent {
            kind: KIND_CODE_PLUGIN,
            flags: plugin_flags(ignorable),
            payload,
        }
    }
}

/// Frame flags of a core kind: `session/meta` is ignorable (metadata is
/// not needed to fold a session), every other core kind is not.
pub(crate) fn core_flags(kind: CoreKind) -> u16 {
    if kind == CoreKind::SessionMeta {
        FLAG_IGNORABLE
    } else {
        0
    }
}

/// The JSON envelope stored as a frame payload (§10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Session format version; must be [`SESSION_FORMAT_VERSION`].
    pub v: u32,
    /// Plugin kind name (plugin events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The surface op (surface events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<SurfaceOp>,
    /// Wall-clock time of the append, milliseconds since the Unix epoch
    /// (informational: never part of what the model sees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<u64>,
    /// The kind's data.
    pub data: Value,
}

/// Encode a core event's payload.
pub fn encode_core<D: EventData>(data: &D, op: Option<SurfaceOp>) -> Vec<u8> {
    let env = Envelope {
        v: SESSION_FORMAT_VERSION,
        kind: None,
        surface: op,
        ts: Some(now_ms()),
        data: serde_json::to_value(data).expect("event data serializes to JSON"),
    };
    serde_json::to_vec(&env).expect("envelope serializes")
}

/// Encode a core event from its data as JSON, returning the payload and
/// the event that decoding it gives (at `seq`), built from the same value.
pub(crate) fn encode_core_value(
    kind: CoreKind,
    data: Value,
    op: Option<SurfaceOp>,
    seq: u64,
) -> (Vec<u8>, SessionEvent) {
    encode_core_raw(kind, data, None, op, seq)
}

/// Like [`encode_core_value`], with `raw` (when given) the JSON text `data`
/// was parsed from: it is written as the envelope's `data` as it is (§10:
/// readers parse `data`, its spelling is the appender's), which spares
/// serialising the value again.
pub(crate) fn encode_core_raw(
    kind: CoreKind,
    data: Value,
    raw: Option<Raw<'_>>,
    op: Option<SurfaceOp>,
    seq: u64,
) -> (Vec<u8>, SessionEvent) {
    let ts = Some(now_ms());
    let payload = match raw {
        Some(raw) => {
            use std::io::Write as _;
            let guess = match raw {
                Raw::Text(text) => text.len(),
                Raw::Typed(parsed) => parsed.text_len() + 160,
            };
            let mut out = Vec::with_capacity(guess + 96);
            write!(out, "{{\"v\":{SESSION_FORMAT_VERSION}").expect("writes to a vector");
            if let Some(op) = &op {
                out.extend_from_slice(b",\"surface\":");
                serde_json::to_writer(&mut out, op).expect("surface op serializes");
            }
            if let Some(ts) = ts {
                write!(out, ",\"ts\":{ts}").expect("writes to a vector");
            }
            out.extend_from_slice(b",\"data\":");
            match raw {
                Raw::Text(text) => out.extend_from_slice(text.as_bytes()),
                Raw::Typed(parsed) => {
                    serde_json::to_writer(&mut out, parsed).expect("event data serializes to JSON")
                }
            }
            out.push(b'}');
            out
        }
        None => {
            let env = EnvelopeRef {
                v: SESSION_FORMAT_VERSION,
                surface: op.as_ref(),
                ts,
                data: &data,
            };
            // One allocation of about the right size instead of a chain of
            // reallocations from serde_json's small default.
            let mut out = Vec::with_capacity(256);
            serde_json::to_writer(&mut out, &env).expect("envelope serializes");
            out
        }
    };
    let ev = SessionEvent {
        seq,
        kind: EventKind::Core(kind),
        ignorable: false,
        surface: op,
        ts,
        data,
    };
    (payload, ev)
}

/// A core event's envelope by reference (same bytes as [`Envelope`]).
#[derive(Serialize)]
struct EnvelopeRef<'a> {
    v: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    surface: Option<&'a SurfaceOp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<u64>,
    data: &'a Value,
}

/// Encode a plugin event's payload.
pub fn encode_plugin(kind: &str, data: &Value) -> Vec<u8> {
    encode_plugin_at(kind, data, Some(now_ms()))
}

/// Encode a plugin event's payload with a given `ts` (history kept from
/// elsewhere keeps when it happened).
pub fn encode_plugin_at(kind: &str, data: &Value, ts: Option<u64>) -> Vec<u8> {
    let env = Envelope {
        v: SESSION_FORMAT_VERSION,
        kind: Some(kind.to_string()),
        surface: None,
        ts,
        data: data.clone(),
    };
    serde_json::to_vec(&env).expect("envelope serializes")
}

/// Why a stored event cannot be restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Unknown kind without the `ignorable` flag.
    UnknownKind(String),
    /// Envelope or data malformed.
    Malformed(String),
    /// A session format version other than 0.
    Version(u32),
}

/// Decode a stored frame into a session event. An unknown kind marked
/// ignorable decodes with its raw data kept.
pub fn decode(
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
    registry: &Registry,
) -> Result<SessionEvent, DecodeError> {
    decode_checked(seq, code, flags, payload, registry, true)
}

/// [`decode`] without checking a core event's data against its type: for
/// the session fold, which parses the data it needs anyway and checks the
/// rest itself ([`validate_core`]), so no event is parsed twice.
pub(crate) fn decode_for_fold(
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
    registry: &Registry,
) -> Result<SessionEvent, DecodeError> {
    decode_checked(seq, code, flags, payload, registry, false)
}

fn decode_checked(
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
    registry: &Registry,
    check_data: bool,
) -> Result<SessionEvent, DecodeError> {
    let ignorable = flags & FLAG_IGNORABLE != 0;
    let env: Envelope = match serde_json::from_slice(payload) {
        Ok(e) => e,
        Err(e) if ignorable => {
            return Ok(SessionEvent {
                seq,
                kind: EventKind::Plugin(format!("unknown/{code}")),
                ignorable,
                surface: None,
                ts: None,
                data: Value::String(format!("undecodable payload: {e}")),
            })
        }
        Err(e) => {
            return Err(DecodeError::Malformed(format!(
                "payload is not a session envelope: {e}"
            )))
        }
    };
    if env.v != SESSION_FORMAT_VERSION {
        return Err(DecodeError::Version(env.v));
    }
    let kind = if code == KIND_CODE_PLUGIN {
        let name = env
            .kind
            .clone()
            .ok_or_else(|| DecodeError::Malformed("plugin event without a kind name".into()))?;
        if !ignorable && !registry.knows(&name) {
            return Err(DecodeError::UnknownKind(name));
        }
        EventKind::Plugin(name)
    } else {
        match CoreKind::from_code(code) {
            Some(k) => EventKind::Core(k),
            None if ignorable => EventKind::Plugin(format!("unknown/{code}")),
            None => return Err(DecodeError::UnknownKind(format!("kind code {code}"))),
        }
    };
    if let EventKind::Core(k) = kind {
        if k.is_surface() != env.surface.is_some() {
            return Err(DecodeError::Malformed(format!(
                "{} event {} a surface op",
                k.name(),
                if k.is_surface() { "without" } else { "with" }
            )));
        }
        if check_data {
            validate_core(k, &env.data)?;
        }
    }
    Ok(SessionEvent {
        seq,
        kind,
        ignorable,
        surface: env.surface,
        ts: env.ts,
        data: env.data,
    })
}

/// Decode for a view (replay, query, a read-only session): like [`decode`],
/// but an event of a kind this process does not know — a plugin kind its
/// registry lacks, a core kind code from a newer build — is returned as an
/// opaque plugin event (`unknown/<code>` for a core code) with its data as
/// stored, instead of refusing. A writable restore still refuses it.
pub fn decode_view(
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
    registry: &Registry,
) -> Result<SessionEvent, DecodeError> {
    match decode(seq, code, flags, payload, registry) {
        Err(DecodeError::UnknownKind(_)) => {
            let env: Envelope = serde_json::from_slice(payload).map_err(|e| {
                DecodeError::Malformed(format!("payload is not a session envelope: {e}"))
            })?;
            let name = match (code, env.kind) {
                (KIND_CODE_PLUGIN, Some(name)) => name,
                _ => format!("unknown/{code}"),
            };
            Ok(SessionEvent {
                seq,
                kind: EventKind::Plugin(name),
                ignorable: flags & FLAG_IGNORABLE != 0,
                surface: env.surface,
                ts: env.ts,
                data: env.data,
            })
        }
        other => other,
    }
}

/// Check a core event's data against its type.
/// A surface kind's data parsed by the check before a live append, handed
/// to the fold so it is not parsed a second time.
pub(crate) enum Parsed {
    User(UserMessage),
    Assistant(AssistantMessage),
    ToolResult(ToolResult),
    /// A chunk appended as the engine's own type: valid by construction
    /// (the fold only checks a chunk's data, so it has nothing to do).
    Chunk(AssistantChunk),
    ToolCall(ToolCall),
}

/// The data, serialised as its own type is.
impl Serialize for Parsed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Parsed::User(d) => d.serialize(s),
            Parsed::Assistant(d) => d.serialize(s),
            Parsed::ToolResult(d) => d.serialize(s),
            Parsed::Chunk(d) => d.serialize(s),
            Parsed::ToolCall(d) => d.serialize(s),
        }
    }
}

impl Parsed {
    /// The bytes of text the data holds (block texts, thinking, a chunk's
    /// delta): the bulk of its JSON, to size the payload's buffer once.
    fn text_len(&self) -> usize {
        let blocks = |c: &[crate::session::codec::content::ContentBlock]| -> usize {
            use crate::session::codec::content::ContentBlock as B;
            c.iter()
                .map(|b| match b {
                    B::Text { text, .. } => text.len(),
                    B::Thinking {
                        thinking,
                        signature,
                        ..
                    } => thinking.len() + signature.len(),
                    _ => 64,
                })
                .sum()
        };
        match self {
            Parsed::User(d) => blocks(&d.content),
            Parsed::Assistant(d) => blocks(&d.content),
            Parsed::ToolResult(d) => blocks(&d.content),
            Parsed::Chunk(d) => d.text.len(),
            Parsed::ToolCall(_) => 256,
        }
    }
}

/// Where the JSON of an appended event's `data` comes from when it is not
/// serialised from its value.
#[derive(Clone, Copy)]
pub(crate) enum Raw<'a> {
    /// The text it was parsed from, written as it is.
    Text(&'a str),
    /// Typed data, serialised straight into the payload.
    Typed(&'a Parsed),
}

/// The data of a live append, for the fold, when `D` is one of the
/// engine's own types for which the fold takes typed data (the surface
/// kinds, `assistant/chunk`, `tool/call`): such data is valid by
/// construction, so it is serialised once, straight into the payload
/// ([`Raw::Typed`]), and never parsed back. `Err` gives any other data back.
pub(crate) fn typed_parsed<D: EventData>(data: D) -> Result<Parsed, D> {
    use std::any::Any;
    fn take<T: 'static>(slot: &mut dyn Any) -> Option<T> {
        slot.downcast_mut::<Option<T>>().and_then(Option::take)
    }
    let mut slot = Some(data);
    let any: &mut dyn Any = &mut slot;
    if let Some(d) = take::<AssistantChunk>(any) {
        return Ok(Parsed::Chunk(d));
    }
    if let Some(d) = take::<UserMessage>(any) {
        return Ok(Parsed::User(d));
    }
    if let Some(d) = take::<AssistantMessage>(any) {
        return Ok(Parsed::Assistant(d));
    }
    if let Some(d) = take::<ToolResult>(any) {
        return Ok(Parsed::ToolResult(d));
    }
    if let Some(d) = take::<ToolCall>(any) {
        return Ok(Parsed::ToolCall(d));
    }
    Err(slot.expect("the data is taken only when it is returned"))
}

/// A surface kind's data parsed from JSON text (`None`: not a surface kind).
pub(crate) fn parse_surface(k: CoreKind, text: &str) -> Option<Result<Parsed, serde_json::Error>> {
    Some(match k {
        CoreKind::UserMessage => serde_json::from_str(text).map(Parsed::User),
        CoreKind::AssistantMessage => serde_json::from_str(text).map(Parsed::Assistant),
        CoreKind::ToolResult => serde_json::from_str(text).map(Parsed::ToolResult),
        _ => return None,
    })
}

/// The JSON type of a value, as an error names it.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Data given for a core kind must be a JSON object: serde reads a struct
/// from an array too, which no caller means. Checked where events are
/// appended, not where they are decoded (the log is the truth, whatever
/// wrote it).
pub(crate) fn check_object(k: CoreKind, v: &Value) -> Result<(), DecodeError> {
    if v.is_object() {
        Ok(())
    } else {
        Err(DecodeError::Malformed(format!(
            "{} data must be a JSON object, got {}",
            k.name(),
            json_type(v)
        )))
    }
}

/// Why `v` does not fit `D`, in one message: the kind, the path of the
/// field at fault and what was expected there (serde's error `e` is taken
/// again with the path tracked, on this failure path only).
fn shape_error<D: EventData>(v: &Value, e: serde_json::Error) -> DecodeError {
    let kind = D::KIND.name();
    let detail = match serde_path_to_error::deserialize::<_, D>(v) {
        Err(pe) if pe.path().to_string() != "." => {
            format!("{kind} data: at `{}`: {}", pe.path(), pe.inner())
        }
        Err(pe) => format!("{kind} data: {}", pe.inner()),
        Ok(_) => format!("{kind} data: {e}"),
    };
    DecodeError::Malformed(detail)
}

/// [`validate_core`], keeping the parsed data of the surface kinds.
pub(crate) fn validate_core_parsed(
    k: CoreKind,
    data: &Value,
) -> Result<Option<Parsed>, DecodeError> {
    fn parse<D: EventData>(v: &Value) -> Result<D, DecodeError> {
        D::deserialize(v).map_err(|e| shape_error::<D>(v, e))
    }
    Ok(match k {
        CoreKind::UserMessage => Some(Parsed::User(parse(data)?)),
        CoreKind::AssistantMessage => Some(Parsed::Assistant(parse(data)?)),
        CoreKind::ToolResult => Some(Parsed::ToolResult(parse(data)?)),
        other => {
            validate_core(other, data)?;
            None
        }
    })
}

pub(crate) fn validate_core(k: CoreKind, data: &Value) -> Result<(), DecodeError> {
    fn check<D: EventData>(v: &Value) -> Result<(), DecodeError> {
        D::deserialize(v)
            .map(|_| ())
            .map_err(|e| shape_error::<D>(v, e))
    }
    match k {
        CoreKind::TurnStart => check::<TurnStart>(data),
        CoreKind::TurnEnd => check::<TurnEnd>(data),
        CoreKind::StepStart => check::<StepStart>(data),
        CoreKind::StepEnd => check::<StepEnd>(data),
        CoreKind::UserMessage => check::<UserMessage>(data),
        CoreKind::AssistantChunk => check::<AssistantChunk>(data),
        CoreKind::AssistantMessage => check::<AssistantMessage>(data),
        CoreKind::ToolCall => check::<ToolCall>(data),
        CoreKind::ToolResult => check::<ToolResult>(data),
        CoreKind::RequestHeader => check::<RequestHeader>(data),
        CoreKind::RequestContext => check::<RequestContext>(data),
        CoreKind::SessionEndSeed => check::<SessionEndSeed>(data),
        CoreKind::CompactionStart => check::<CompactionStart>(data),
        CoreKind::CompactionSummary => check::<CompactionSummary>(data),
        CoreKind::CompactionEnd => check::<CompactionEnd>(data),
        CoreKind::CompactionPrune => check::<CompactionPrune>(data),
        CoreKind::SessionMeta => check::<MetaUpdate>(data),
        CoreKind::SessionDelete => check::<SessionDelete>(data),
    }
}

/// Frame flags for a plugin event of a registered kind.
pub(crate) fn plugin_flags(ignorable: bool) -> u16 {
    if ignorable {
        FLAG_IGNORABLE
    } else {
        0
    }
}

/// A decode failure of event `seq` of session `id` as the session layer's
/// error: the kind, the version or the data, named with where it is.
pub(crate) fn decode_error(id: &str, seq: u64, e: DecodeError) -> Error {
    match e {
        DecodeError::UnknownKind(kind) => Error::UnknownKind {
            session: id.to_string(),
            seq,
            kind,
        },
        DecodeError::Version(found) => Error::SessionFormat {
            session: id.to_string(),
            seq,
            found,
            supported: SESSION_FORMAT_VERSION,
        },
        DecodeError::Malformed(detail) => Error::BadEvent {
            session: id.to_string(),
            seq,
            detail,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::codec::event::SessionMetadata;

    #[test]
    fn kind_codes_roundtrip() {
        for k in CoreKind::ALL {
            assert_eq!(CoreKind::from_code(k.code()), Some(*k));
            assert_eq!(CoreKind::from_name(k.name()), Some(*k));
        }
        assert_eq!(CoreKind::ALL.len(), 18);
    }

    #[test]
    fn decode_refuses_unknown_and_keeps_ignorable() {
        let reg = Registry::new();
        let p = encode_plugin("todo/update", &serde_json::json!({"x": 1}));
        assert_eq!(
            decode(3, KIND_CODE_PLUGIN, 0, &p, &reg),
            Err(DecodeError::UnknownKind("todo/update".into()))
        );
        let e = decode(3, KIND_CODE_PLUGIN, FLAG_IGNORABLE, &p, &reg).unwrap();
        assert_eq!(e.kind, EventKind::Plugin("todo/update".into()));
        let v = serde_json::to_vec(&Envelope {
            v: 1,
            kind: None,
            surface: None,
            ts: None,
            data: Value::Null,
        })
        .unwrap();
        assert_eq!(decode(0, 1, 0, &v, &reg), Err(DecodeError::Version(1)));
    }

    /// The example payloads of FORMAT.md §10 decode to what the spec says.
    #[test]
    fn spec_examples_of_meta_and_delete_decode() {
        let reg = Registry::new();
        let meta = br#"{"v":0,"data":{"title":"t","add_tags":["ci"],"fields":{"cwd":"/src","user":null}}}"#;
        let e = decode(4, 17, FLAG_IGNORABLE, meta, &reg).unwrap();
        assert_eq!(e.kind, EventKind::Core(CoreKind::SessionMeta));
        let u: MetaUpdate = serde_json::from_value(e.data).unwrap();
        let mut m = SessionMetadata::default();
        m.fields.insert("user".into(), "u".into());
        m.apply(&u);
        assert_eq!(m.title.as_deref(), Some("t"));
        assert_eq!(m.tags.iter().collect::<Vec<_>>(), ["ci"]);
        assert_eq!(m.fields, [("cwd".to_string(), "/src".to_string())].into());
        let del = br#"{"v":0,"data":{}}"#;
        let e = decode(5, 18, 0, del, &reg).unwrap();
        assert_eq!(e.kind, EventKind::Core(CoreKind::SessionDelete));
        assert_eq!(core_flags(CoreKind::SessionMeta), FLAG_IGNORABLE);
        assert_eq!(core_flags(CoreKind::SessionDelete), 0);
        // What a build that predates kind 17 does: keeps it as unknown/17.
        assert_eq!(CoreKind::SessionMeta.code(), 17);
        assert_eq!(CoreKind::SessionDelete.code(), 18);
    }

    #[test]
    fn surface_op_must_match_kind() {
        let reg = Registry::new();
        let p = encode_core(
            &TurnStart {
                turn_id: "t".into(),
            },
            Some(SurfaceOp::Append),
        );
        assert!(matches!(
            decode(0, 1, 0, &p, &reg),
            Err(DecodeError::Malformed(_))
        ));
        let p = encode_core(&UserMessage { content: vec![] }, None);
        assert!(matches!(
            decode(0, 5, 0, &p, &reg),
            Err(DecodeError::Malformed(_))
        ));
    }
}
