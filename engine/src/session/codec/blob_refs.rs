//! Large content blocks out of line: blob references in event payloads
//! (FORMAT.md §10 and §15, issue 17 §3).
//!
//! When a session appends an event whose payload exceeds the store's blob
//! threshold ([`crate::blobs::BlobDir::threshold`], 256 KiB by default),
//! every content block in its `data` (an object with a string `"type"`,
//! element of a JSON array, at any depth) whose compact JSON is larger
//! than the threshold is written to a blob file (innermost first: an image
//! inside a tool result goes out, the tool result stays) and replaced by a
//! reference `{"type":"turnstone/blob","sha256":"<hex>","bytes":n}`. The
//! blob holds the block's compact JSON text. The event is then written
//! with envelope version `v: 1`, which means "holds blob references": a
//! build that predates blobs refuses the event (a session format version
//! it does not read) rather than show a reference as content. A block
//! that already has type `turnstone/blob` in a `v: 1` event is always
//! stored as a blob itself, so no reference is ever confused with content.
//!
//! Reading resolves: [`resolve`] turns a `v: 1` payload back into the
//! `v: 0` payload it was made from (the same JSON value; spelling and key
//! order are serde_json's), reading and checking each blob. A missing or
//! damaged blob is [`Error::Corrupt`] naming its hash. `v: 0` payloads are
//! returned as they are, without being parsed.

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::blobs::{hex, parse_hex, BlobDir, BlobPin};
use crate::error::{Error, Result};
use crate::session::codec::envelope::Envelope;
use crate::session::codec::event::SESSION_FORMAT_VERSION;

/// The `"type"` of a blob reference.
pub const BLOB_REF_TYPE: &str = "turnstone/blob";
/// The envelope version of an event that holds blob references.
pub const ENVELOPE_VERSION_BLOBS: u32 = 1;

fn is_block(v: &Value) -> bool {
    v.get("type").is_some_and(Value::is_string)
}

fn ref_of(v: &Value) -> Option<&Value> {
    (v.get("type").and_then(Value::as_str) == Some(BLOB_REF_TYPE)).then_some(v)
}

fn outline_value<'a>(
    blobs: &'a BlobDir,
    v: &mut Value,
    threshold: usize,
    pins: &mut Vec<BlobPin<'a>>,
) -> Result<usize> {
    let mut n = 0;
    match v {
        Value::Array(items) => {
            for it in items.iter_mut() {
                n += outline_value(blobs, it, threshold, pins)?;
                if !is_block(it) {
                    continue;
                }
                let escape = ref_of(it).is_some();
                let bytes = serde_json::to_vec(it).expect("JSON serializes");
                if escape || bytes.len() > threshold {
                    let (h, pin) = blobs.put_pinned(&bytes)?;
                    pins.push(pin);
                    *it = json!({"type": BLOB_REF_TYPE, "sha256": hex(&h), "bytes": bytes.len()});
                    n += 1;
                }
            }
        }
        Value::Object(m) => {
            for x in m.values_mut() {
                n += outline_value(blobs, x, threshold, pins)?;
            }
        }
        _ => {}
    }
    Ok(n)
}

/// The payload to log for `payload` (a session envelope): `None` when it
/// stays as it is (not larger than the threshold, not a `v: 0` envelope,
/// or no block large enough), else the `v: 1` payload with its large
/// blocks out of line. Every blob is durable before this returns, and
/// pinned in `pins`: hold them until the event is appended, so that an
/// online collection does not remove a blob in between.
pub fn outline<'a>(
    blobs: &'a BlobDir,
    payload: &[u8],
    pins: &mut Vec<BlobPin<'a>>,
) -> Result<Option<Vec<u8>>> {
    let threshold = blobs.threshold();
    if payload.len() <= threshold {
        return Ok(None);
    }
    let Ok(mut env) = serde_json::from_slice::<Envelope>(payload) else {
        return Ok(None);
    };
    if env.v != SESSION_FORMAT_VERSION {
        return Ok(None);
    }
    if outline_value(blobs, &mut env.data, threshold, pins)? == 0 {
        return Ok(None);
    }
    env.v = ENVELOPE_VERSION_BLOBS;
    Ok(Some(serde_json::to_vec(&env).expect("envelope serializes")))
}

fn bad_ref(blobs: &BlobDir, v: &Value, why: &str) -> Error {
    Error::Corrupt {
        file: blobs.dir().to_path_buf(),
        offset: 0,
        detail: format!("malformed blob reference {v}: {why}"),
    }
}

/// The hash a reference names, checked.
fn ref_hash(blobs: &BlobDir, r: &Value) -> Result<([u8; 32], Option<u64>)> {
    let h = r
        .get("sha256")
        .and_then(Value::as_str)
        .and_then(parse_hex)
        .ok_or_else(|| bad_ref(blobs, r, "no sha256 of 64 lowercase hex digits"))?;
    Ok((h, r.get("bytes").and_then(Value::as_u64)))
}

/// The block a reference stands for, read and checked.
fn fetch(blobs: &BlobDir, r: &Value) -> Result<Value> {
    let (h, len) = ref_hash(blobs, r)?;
    let bytes = blobs.get(&h)?;
    if len.is_some_and(|n| n != bytes.len() as u64) {
        return Err(Error::corrupt(
            blobs.path(&h),
            0,
            format!(
                "blob {} holds {} bytes, its reference says {len:?}",
                hex(&h),
                bytes.len()
            ),
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        Error::corrupt(
            blobs.path(&h),
            0,
            format!("blob {} is not a JSON content block: {e}", hex(&h)),
        )
    })
}

fn resolve_value(blobs: &BlobDir, v: &mut Value) -> Result<()> {
    match v {
        Value::Array(items) => {
            for it in items.iter_mut() {
                if ref_of(it).is_some() {
                    let mut block = fetch(blobs, it)?;
                    // Its children may hold references (an inner block went
                    // out first); the block itself is content, even when its
                    // type is `turnstone/blob` (an escaped one).
                    resolve_children(blobs, &mut block)?;
                    *it = block;
                } else {
                    resolve_value(blobs, it)?;
                }
            }
        }
        Value::Object(m) => {
            for x in m.values_mut() {
                resolve_value(blobs, x)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn resolve_children(blobs: &BlobDir, v: &mut Value) -> Result<()> {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                resolve_value(blobs, x)?;
            }
            Ok(())
        }
        other => resolve_value(blobs, other),
    }
}

/// The envelope version of a payload: `Some(0)` at once for the spelling
/// this build writes (`{"v":0,…`), else parsed; `None` when it is not an
/// envelope.
fn version(payload: &[u8]) -> Option<u32> {
    if payload.starts_with(b"{\"v\":0,") {
        return Some(0);
    }
    #[derive(serde::Deserialize)]
    struct V {
        v: u32,
    }
    serde_json::from_slice::<V>(payload).ok().map(|x| x.v)
}

/// Whether a payload holds blob references (envelope `v: 1`).
pub fn has_refs(payload: &[u8]) -> bool {
    version(payload) == Some(ENVELOPE_VERSION_BLOBS)
}

/// The payload with its blob references resolved: `v: 0` payloads (and
/// anything that is not a `v: 1` envelope) as they are; a `v: 1` payload
/// as the `v: 0` payload it was made from.
pub fn resolve<'a>(blobs: &BlobDir, payload: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    if !has_refs(payload) {
        return Ok(Cow::Borrowed(payload));
    }
    let mut env: Envelope = serde_json::from_slice(payload).map_err(|e| Error::Corrupt {
        file: blobs.dir().to_path_buf(),
        offset: 0,
        detail: format!("an event with blob references is not a session envelope: {e}"),
    })?;
    resolve_value(blobs, &mut env.data)?;
    env.v = SESSION_FORMAT_VERSION;
    Ok(Cow::Owned(
        serde_json::to_vec(&env).expect("envelope serializes"),
    ))
}

/// A stored event with its blob references resolved (see [`resolve`]).
pub fn resolve_event(blobs: &BlobDir, mut e: crate::Event) -> Result<crate::Event> {
    if let Cow::Owned(p) = resolve(blobs, &e.payload)? {
        e.payload = p;
    }
    Ok(e)
}

fn collect(blobs: &BlobDir, v: &Value, out: &mut BTreeSet<[u8; 32]>) -> Result<()> {
    match v {
        Value::Array(items) => {
            for it in items {
                if ref_of(it).is_some() {
                    let (h, _) = ref_hash(blobs, it)?;
                    if out.insert(h) {
                        let mut block = fetch(blobs, it)?;
                        // References inside the block's children.
                        if let Value::Object(m) = &mut block {
                            for x in m.values() {
                                collect(blobs, x, out)?;
                            }
                        }
                    }
                } else {
                    collect(blobs, it, out)?;
                }
            }
        }
        Value::Object(m) => {
            for x in m.values() {
                collect(blobs, x, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn refs_in(v: &Value, out: &mut Vec<[u8; 32]>) {
    match v {
        Value::Array(items) => {
            for it in items {
                if ref_of(it).is_some() {
                    if let Some(h) = it.get("sha256").and_then(Value::as_str).and_then(parse_hex) {
                        out.push(h);
                    }
                } else {
                    refs_in(it, out);
                }
            }
        }
        Value::Object(m) => {
            for x in m.values() {
                refs_in(x, out);
            }
        }
        _ => {}
    }
}

/// The hashes a payload's references name directly, without reading any
/// blob (a reference whose hash is malformed is left out; [`resolve`]
/// reports it).
pub fn direct_refs(payload: &[u8]) -> Vec<[u8; 32]> {
    let mut out = Vec::new();
    if has_refs(payload) {
        if let Ok(env) = serde_json::from_slice::<Envelope>(payload) {
            refs_in(&env.data, &mut out);
        }
    }
    out
}

/// The hashes the references inside a blob's block name (an outer block
/// that went out of line after an inner one did), without reading them.
pub fn refs_in_blob(bytes: &[u8]) -> Vec<[u8; 32]> {
    let mut out = Vec::new();
    if bytes
        .windows(BLOB_REF_TYPE.len())
        .any(|w| w == BLOB_REF_TYPE.as_bytes())
    {
        if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(bytes) {
            for x in m.values() {
                refs_in(x, &mut out);
            }
        }
    }
    out
}

/// The blobs one payload references (directly, and through the blocks of
/// its blobs), each read and checked: a missing or damaged one is
/// [`Error::Corrupt`] naming its hash.
pub fn payload_blobs(blobs: &BlobDir, payload: &[u8]) -> Result<BTreeSet<[u8; 32]>> {
    let mut out = BTreeSet::new();
    if has_refs(payload) {
        if let Ok(env) = serde_json::from_slice::<Envelope>(payload) {
            collect(blobs, &env.data, &mut out)?;
        }
    }
    Ok(out)
}
