//! `NativeSession`: one session handle (appends, flushes, requests,
//! compaction, turns, messages, events).

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;
use parking_lot::Mutex;
use serde_json::Value;
use turnstone::session::{self as ts, SharedSession, SurfaceOp};

use crate::convert::{err, event_json, provider, usage, whole};
use crate::job::Job;

/// One session handle.
#[napi]
pub struct NativeSession {
    /// `None` once closed (`close()`): the claim on the session is released.
    s: Mutex<Option<SharedSession>>,
    report: String,
}

pub(crate) fn session_handle(s: SharedSession, report: String) -> NativeSession {
    NativeSession {
        s: Mutex::new(Some(s)),
        report,
    }
}

impl NativeSession {
    /// The shared session, unless this handle is closed.
    fn shared(&self) -> napi::Result<SharedSession> {
        self.s.lock().clone().ok_or_else(closed)
    }

    /// Run `f` on the session, unless this handle is closed.
    fn with<R>(&self, f: impl FnOnce(&mut ts::Session) -> napi::Result<R>) -> napi::Result<R> {
        let outer = self.s.lock();
        let shared = outer.as_ref().ok_or_else(closed)?;
        let mut g = shared.lock();
        f(&mut g)
    }
}

/// A surface op given as JSON (`None`: none).
fn surface_op(text: Option<&str>) -> napi::Result<Option<SurfaceOp>> {
    Ok(match text {
        None => None,
        // The common op without a parse.
        Some(r#"{"op":"append"}"#) => Some(SurfaceOp::Append),
        Some(t) => Some(
            serde_json::from_str(t).map_err(|e| usage(format!("surface op is not valid: {e}")))?,
        ),
    })
}

fn closed() -> napi::Error {
    usage("this session handle is closed")
}

#[napi]
impl NativeSession {
    /// The session id.
    #[napi(getter, catch_unwind)]
    pub fn id(&self) -> napi::Result<String> {
        self.with(|s| Ok(s.id().to_string()))
    }

    /// Number of events.
    #[napi(getter, catch_unwind)]
    pub fn length(&self) -> napi::Result<i64> {
        self.with(|s| Ok(s.len() as i64))
    }

    /// Release this handle: the session is no longer held for writing
    /// here (another handle may open it, `delete` may delete it). What it
    /// appended stays appended; call `flush` first to wait for durability.
    /// Every later call on this handle fails; closing twice does nothing.
    #[napi(catch_unwind)]
    pub fn close(&self) {
        self.s.lock().take();
    }

    /// The repair report of `openSession`, as JSON (`null`: none).
    #[napi(catch_unwind)]
    pub fn repair_report(&self) -> String {
        self.report.clone()
    }

    /// Append one event: kind name, data as UTF-8 JSON in the first `len`
    /// bytes of a Buffer (the package writes into one reused Buffer: cheaper
    /// than converting a string across N-API), surface op as JSON for the
    /// three surface kinds. The JSON text is parsed once and written as
    /// given. Returns the event's seq.
    #[napi(catch_unwind)]
    pub fn append_utf8(
        &self,
        kind: String,
        data: BufferSlice,
        len: u32,
        surface: Option<String>,
    ) -> napi::Result<i64> {
        let bytes = data
            .get(..len as usize)
            .ok_or_else(|| usage(format!("{len} bytes asked of a {}-byte buffer", data.len())))?;
        let text = std::str::from_utf8(bytes)
            .map_err(|e| usage(format!("event data is not UTF-8: {e}")))?;
        let surface = surface_op(surface.as_deref())?;
        self.with(|s| {
            s.append_json_text(&kind, text, surface)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Resolves once everything this handle appended is durable. The wait
    /// is the engine's future, woken by the flusher: it holds no thread
    /// (not one of libuv's four, which idle followers would otherwise
    /// take).
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn flush(&self, env: Env) -> napi::Result<AsyncBlock<()>> {
        let wait = self.with(|g| Ok(g.durability_point()))?.wait_async();
        AsyncBlockBuilder::new(async move { wait.await.map_err(err) }).build(&env)
    }

    /// Append a provider's response body (UTF-8 JSON in `data[..len]`) as
    /// an `assistant/message` (`AssistantMessage::from_response`: the
    /// content blocks or output items as sent, the usage normalised with
    /// every field kept, every other field in `extra`). Returns its seq.
    #[napi(catch_unwind)]
    pub fn append_response(
        &self,
        provider_name: String,
        data: BufferSlice,
        len: u32,
    ) -> napi::Result<i64> {
        let p = provider(&provider_name)?;
        let bytes = data
            .get(..len as usize)
            .ok_or_else(|| usage(format!("{len} bytes asked of a {}-byte buffer", data.len())))?;
        let body: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| usage(format!("the response body is not JSON: {e}")))?;
        let m = ts::AssistantMessage::from_response(p, &body);
        self.with(|s| {
            s.append(m, ts::SurfaceOp::Append)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Several core events as one atomic group: a JSON array of
    /// `{"kind", "data", "surface"}` (surface kinds may only append).
    /// Returns their seqs; nothing is written when one is refused.
    #[napi(catch_unwind)]
    pub fn append_group(&self, events: String) -> napi::Result<Vec<i64>> {
        let bad = |e: String| usage(format!("a group is a list of [kind, data, options]: {e}"));
        let events: Vec<Value> = serde_json::from_str(&events).map_err(|e| bad(e.to_string()))?;
        let mut group = Vec::with_capacity(events.len());
        for mut e in events {
            let kind = e["kind"]
                .as_str()
                .ok_or_else(|| bad("a kind is not a string".into()))?;
            let kind = kind.to_string();
            let surface = match e["surface"].take() {
                Value::Null => None,
                op => Some(serde_json::from_value(op).map_err(|e| bad(e.to_string()))?),
            };
            group.push((kind, e["data"].take(), surface));
        }
        self.with(|s| {
            s.append_json_group(group)
                .map(|v| v.into_iter().map(|s| s as i64).collect())
                .map_err(err)
        })
    }

    /// Resolve the next request's header from a spec (JSON: provider,
    /// model, params, adapter_defaults, system, tools) and write a
    /// `request/header` when needed: the reason written (`initial`,
    /// `resume`, `change`), or null.
    #[napi(catch_unwind)]
    pub fn prepare_request(&self, spec: String) -> napi::Result<Option<String>> {
        let spec: Value = serde_json::from_str(&spec)
            .map_err(|e| usage(format!("the request spec is not JSON: {e}")))?;
        self.with(|g| {
            let reason = g.prepare_request_json(spec).map_err(err)?;
            Ok(reason.map(|r| {
                match r {
                    ts::HeaderReason::Initial => "initial",
                    ts::HeaderReason::Resume => "resume",
                    ts::HeaderReason::Change => "change",
                }
                .to_string()
            }))
        })
    }

    /// A new agent loop takes over this session: the next header is `resume`.
    #[napi(catch_unwind)]
    pub fn begin_loop(&self) -> napi::Result<()> {
        self.with(|g| {
            g.begin_loop();
            Ok(())
        })
    }

    /// Check a request body (JSON) against the one the log rebuilds for a
    /// provider; the error (`request_mismatch`) names the first differing path.
    #[napi(catch_unwind)]
    pub fn check_request_body(&self, format: String, body: String) -> napi::Result<()> {
        let p = provider(&format)?;
        let body: Value = serde_json::from_str(&body)
            .map_err(|e| usage(format!("the request body is not JSON: {e}")))?;
        self.with(|g| g.check_request_body(p, &body).map_err(err))
    }

    /// Replace surface nodes `start..end` by a summary, atomically (the
    /// originals stay in the log). Returns the summary message's seq.
    #[napi(catch_unwind)]
    pub fn compact(
        &self,
        compaction_id: String,
        start: f64,
        end: f64,
        summary: String,
    ) -> napi::Result<i64> {
        let start = whole("start", start, u32::MAX as u64)?;
        let end = whole("end", end, u32::MAX as u64)?;
        self.with(|g| {
            g.compact(&compaction_id, start, end, &summary)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Replace the messages of ended turn `turn_id` by a summary,
    /// atomically. Returns the summary message's seq.
    #[napi(catch_unwind)]
    pub fn compact_turn(
        &self,
        compaction_id: String,
        turn_id: String,
        summary: String,
    ) -> napi::Result<i64> {
        self.with(|g| {
            g.compact_turn(&compaction_id, &turn_id, &summary)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Replace the tool result at surface position `at` by a shorter text,
    /// atomically (the original stays in the log). Returns its seq.
    #[napi(catch_unwind)]
    pub fn prune_tool_result(
        &self,
        at: f64,
        replacement: String,
        tokens_saved: f64,
    ) -> napi::Result<i64> {
        let at = whole("at", at, u32::MAX as u64)?;
        let saved = whole("tokensSaved", tokens_saved, 1 << 53)?;
        self.with(|g| {
            g.prune_tool_result(at, &replacement, saved)
                .map(|s| s as i64)
                .map_err(err)
        })
    }

    /// Every turn of the session, in order, as a JSON array.
    #[napi(catch_unwind)]
    pub fn turns(&self) -> napi::Result<String> {
        self.with(|g| Ok(serde_json::to_string(g.turns()).unwrap_or_else(|_| "[]".into())))
    }

    /// Fork after the end of turn `turn_id` (durable events only), as JSON
    /// `{"child", "upto"}`.
    #[napi(catch_unwind)]
    pub fn fork_after_turn(&self, turn_id: String, child: Option<String>) -> napi::Result<String> {
        self.with(|g| {
            let f = g.fork_after_turn(&turn_id, child.as_deref()).map_err(err)?;
            Ok(serde_json::json!({"child": f.child, "upto": f.upto}).to_string())
        })
    }

    /// What `requestBody(format)` leaves out because the header was
    /// written for another API, as a JSON array of `{what, why, count}`.
    #[napi(catch_unwind)]
    pub fn dropped(&self, format: String) -> napi::Result<String> {
        let p = provider(&format)?;
        self.with(|g| {
            let (_, dropped) = g.request_body_report(p);
            Ok(serde_json::to_string(&dropped).unwrap_or_else(|_| "[]".into()))
        })
    }

    /// The messages (no format) or a provider request body, as JSON.
    #[napi(catch_unwind)]
    pub fn messages(&self, format: Option<String>) -> napi::Result<String> {
        let provider = format.as_deref().map(provider).transpose()?;
        self.with(|g| {
            Ok(match provider {
                Some(p) => g.request_body(p).to_string(),
                None => {
                    let msgs: Vec<&ts::Message> =
                        g.derive_messages().iter().map(|m| &**m).collect();
                    serde_json::to_string(&msgs).unwrap_or_else(|_| "[]".into())
                }
            })
        })
    }

    /// This handle's events `start..end`, as a JSON array (read off the
    /// event loop).
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn events(
        &self,
        start: Option<i64>,
        end: Option<i64>,
    ) -> napi::Result<AsyncTask<Job<String>>> {
        let s = self.shared()?;
        Ok(Job::new(move || {
            let g = s.lock();
            let len = g.len();
            let end = end.map_or(len, |e| (e.max(0) as u64).min(len));
            let start = (start.unwrap_or(0).max(0) as u64).min(end);
            let events = g.events(start..end).map_err(err)?;
            Ok(Value::Array(events.iter().map(event_json).collect()).to_string())
        }))
    }

    /// Record the tool calls of one assistant message as one atomic group
    /// (JSON array of {call_id, name, input}); returns the first seq.
    #[napi(catch_unwind)]
    pub fn record_tool_calls(&self, calls: String) -> napi::Result<i64> {
        let calls: Vec<ts::ToolCall> = serde_json::from_str(&calls).map_err(|e| {
            usage(format!(
                "tool calls must be [{{call_id, name, input}}]: {e}"
            ))
        })?;
        self.with(|g| {
            let first = g.len();
            g.record_tool_calls(&calls).map_err(err)?;
            Ok(first as i64)
        })
    }

    /// The session's metadata, as JSON.
    #[napi(catch_unwind)]
    pub fn metadata(&self) -> napi::Result<String> {
        self.with(|g| Ok(serde_json::to_string(g.metadata()).unwrap_or_else(|_| "{}".into())))
    }
}
