//! Errors and conversions at the Python boundary: the `TurnstoneError`
//! exception and how an engine error becomes one, Python values as JSON,
//! provider names, and the plugin registry a harness declares.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use serde_json::Value;
use turnstone::session::{Provider, Registry, SessionEvent};
use turnstone::Error;

create_exception!(
    _native,
    TurnstoneError,
    PyException,
    "An error of the turnstone engine: args are (kind, message, path, offset)."
);

/// The error's kind name, and the file and offset where it has them.
pub(crate) fn describe(e: &Error) -> (&'static str, Option<String>, Option<u64>) {
    let (path, offset) = e.location();
    (e.kind(), path.map(|p| p.display().to_string()), offset)
}

pub(crate) fn err(e: Error) -> PyErr {
    let (kind, path, offset) = describe(&e);
    TurnstoneError::new_err((kind, e.to_string(), path, offset))
}

pub(crate) fn usage(msg: impl Into<String>) -> PyErr {
    TurnstoneError::new_err(("invalid_argument", msg.into(), None::<String>, None::<u64>))
}

/// A Python value as JSON, without going through `json.dumps`: dicts with
/// string keys, lists, tuples, strings, ints, finite floats, bools, None.
/// Anything else is refused with what it is and where (the caller makes it
/// a `TurnstoneError` of kind `invalid_argument` naming the event kind).
/// A string holding a lone surrogate (text cut inside a UTF-16 pair) is
/// kept, with U+FFFD in place of the surrogate: the event is not lost,
/// and JSON (UTF-8) cannot hold the surrogate itself.
pub(crate) fn to_value(obj: &Bound<'_, PyAny>, depth: u32) -> Result<Value, String> {
    use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
    fn text(s: &Bound<'_, PyString>) -> Result<String, String> {
        if let Ok(t) = s.to_cow() {
            return Ok(t.into_owned());
        }
        // Not UTF-8: a lone surrogate. As UTF-16 (surrogates passed
        // through), each lone one becomes one U+FFFD and pairs join.
        let bytes: Vec<u8> = s
            .call_method1("encode", ("utf-16-le", "surrogatepass"))
            .and_then(|b| b.extract())
            .map_err(|e| format!("a string is not text: {e}"))?;
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        Ok(String::from_utf16_lossy(&units))
    }
    if depth > 512 {
        return Err("it nests more than 512 levels (a circular reference?)".into());
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(text(s)?));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        if let Ok(v) = i.extract::<i64>() {
            return Ok(Value::from(v));
        }
        if let Ok(v) = i.extract::<u64>() {
            return Ok(Value::from(v));
        }
        return Err(
            "an int outside the 64-bit range JSON readers keep exactly (send it as a string)"
                .into(),
        );
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| {
                format!(
                    "{} is not JSON (NaN and infinity have no JSON form)",
                    f.value()
                )
            });
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut m = serde_json::Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let k = k.cast::<PyString>().map_err(|_| {
                let ty = k
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                format!("a dict key is a {ty}; JSON keys are strings")
            })?;
            let key = text(k)?;
            let v = to_value(&v, depth + 1).map_err(|e| format!("at {key:?}: {e}"))?;
            m.insert(key, v);
        }
        return Ok(Value::Object(m));
    }
    let items = |it: &mut dyn Iterator<Item = Bound<'_, PyAny>>| -> Result<Value, String> {
        it.enumerate()
            .map(|(i, v)| to_value(&v, depth + 1).map_err(|e| format!("at [{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    };
    if let Ok(l) = obj.cast::<PyList>() {
        return items(&mut l.iter());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return items(&mut t.iter());
    }
    let ty = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    Err(format!("a {ty} is not JSON"))
}

pub(crate) fn provider(format: &str) -> PyResult<Provider> {
    match format {
        "anthropic" => Ok(Provider::Anthropic),
        "openai-responses" | "openai_responses" | "responses" => Ok(Provider::OpenAiResponses),
        "openai-chat" | "openai_chat" | "chat" => Ok(Provider::OpenAiChat),
        other => Err(usage(format!(
            "unknown format {other:?}: expected \"anthropic\", \"openai-responses\" or \"openai-chat\""
        ))),
    }
}

/// The plugin kinds a harness declares: JSON `{"name": ignorable, ...}`.
pub(crate) fn registry_from(plugins: Option<&str>) -> PyResult<Registry> {
    let mut registry = Registry::new();
    if let Some(text) = plugins {
        let map: std::collections::BTreeMap<String, bool> =
            serde_json::from_str(text).map_err(|e| {
                usage(format!(
                    "plugins must map kind names to an ignorable flag: {e}"
                ))
            })?;
        for (name, ignorable) in map {
            registry.register(&name, ignorable).map_err(usage)?;
        }
    }
    Ok(registry)
}

pub(crate) fn event_json(ev: &SessionEvent) -> Value {
    ev.to_json()
}
