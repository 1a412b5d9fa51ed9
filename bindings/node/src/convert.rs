//! Errors and conversions at the JavaScript boundary: engine errors as
//! thrown JSON messages, provider names, whole numbers from JavaScript
//! doubles, events as JSON.

use napi::bindgen_prelude::*;
use serde_json::{json, Value};
use turnstone::session::{Provider, SessionEvent};
use turnstone::Error as TsError;

pub(crate) fn kind_of(e: &TsError) -> (&'static str, Option<String>, Option<u64>) {
    let (path, offset) = e.location();
    (e.kind(), path.map(|p| p.display().to_string()), offset)
}

pub(crate) fn thrown(
    kind: &str,
    message: String,
    path: Option<String>,
    offset: Option<u64>,
) -> napi::Error {
    let body = json!({"kind": kind, "message": message, "path": path, "offset": offset});
    napi::Error::new(Status::GenericFailure, body.to_string())
}

pub(crate) fn err(e: TsError) -> napi::Error {
    let (kind, path, offset) = kind_of(&e);
    thrown(kind, e.to_string(), path, offset)
}

pub(crate) fn usage(msg: impl Into<String>) -> napi::Error {
    thrown("invalid_argument", msg.into(), None, None)
}

/// A provider by the name the packages use for it.
pub(crate) fn provider(name: &str) -> napi::Result<Provider> {
    match name {
        "anthropic" => Ok(Provider::Anthropic),
        "openai-responses" => Ok(Provider::OpenAiResponses),
        "openai-chat" => Ok(Provider::OpenAiChat),
        other => Err(usage(format!(
            "unknown provider {other:?}: expected \"anthropic\", \"openai-responses\" or \"openai-chat\""
        ))),
    }
}

/// A whole number from JavaScript within `0..=max` (a JavaScript number
/// is a double: a negative, fractional or too large one is refused rather
/// than wrapped or truncated), or a usage error naming `what`.
pub(crate) fn whole(what: &str, v: f64, max: u64) -> napi::Result<u64> {
    if v.fract() == 0.0 && v >= 0.0 && v <= max as f64 {
        Ok(v as u64)
    } else {
        Err(usage(format!(
            "{what} must be a whole number from 0 to {max}, not {v}"
        )))
    }
}

pub(crate) fn event_json(ev: &SessionEvent) -> Value {
    ev.to_json()
}
