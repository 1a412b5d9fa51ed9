//! `NativeSession`: one session handle (appends, flushes, requests,
//! compaction, turns, messages, events), and `flush_all`, the one durability
//! wait for many sessions.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use serde_json::Value;
use turnstone::session::{self as ts, SharedSession, SurfaceOp};
use turnstone::{Error, Store};

use crate::aio;
use crate::convert::{err, event_json, provider, to_value, usage};

/// One session handle.
#[pyclass(frozen, module = "turnstone._native")]
pub(crate) struct NativeSession {
    /// `None` once closed (`close()`): the claim on the session is released.
    s: Mutex<Option<SharedSession>>,
}

impl NativeSession {
    pub(crate) fn new(s: SharedSession) -> NativeSession {
        NativeSession {
            s: Mutex::new(Some(s)),
        }
    }

    /// The shared session, unless this handle is closed.
    pub(crate) fn shared(&self) -> PyResult<SharedSession> {
        self.s
            .lock()
            .clone()
            .ok_or_else(|| usage("this session handle is closed"))
    }
}

#[pymethods]
impl NativeSession {
    #[getter]
    fn id(&self) -> PyResult<String> {
        Ok(self.shared()?.lock().id().to_string())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.shared()?.lock().len() as usize)
    }

    /// Release this handle: the session is no longer held for writing here
    /// (another handle may open it, `delete` may delete it). What it
    /// appended stays appended; flush first to wait for durability. Later
    /// calls on this handle raise; closing twice does nothing.
    fn close(&self) {
        self.s.lock().take();
    }

    /// Append one event: kind name, data as JSON text, surface op as JSON
    /// text (required for the three surface kinds). Returns its seq.
    #[pyo3(signature = (kind, data, surface = None))]
    fn append(
        &self,
        py: Python<'_>,
        kind: &str,
        data: &Bound<'_, PyAny>,
        surface: Option<&str>,
    ) -> PyResult<u64> {
        let data = to_value(data, 0).map_err(|e| usage(format!("{kind} data: {e}")))?;
        let s = self.shared()?;
        // Parsing, checking and encoding run without the GIL: other Python
        // threads go on meanwhile.
        py.detach(move || {
            let surface: Option<SurfaceOp> = match surface {
                None => None,
                Some(t) => Some(
                    serde_json::from_str(t)
                        .map_err(|e| usage(format!("surface op is not valid: {e}")))?,
                ),
            };
            s.lock().append_json(kind, data, surface).map_err(err)
        })
    }

    /// Append several core events as one atomic group (after a crash all
    /// or none exist): a list of (kind, data, surface op as JSON text or
    /// None); surface kinds may only append. Returns their seqs.
    fn append_group(
        &self,
        py: Python<'_>,
        events: Vec<(String, Bound<'_, PyAny>, Option<String>)>,
    ) -> PyResult<Vec<u64>> {
        let mut values = Vec::with_capacity(events.len());
        for (kind, data, surface) in &events {
            let value = to_value(data, 0).map_err(|e| usage(format!("{kind} data: {e}")))?;
            values.push((kind.clone(), value, surface.clone()));
        }
        let s = self.shared()?;
        py.detach(move || {
            let mut group = Vec::with_capacity(values.len());
            for (kind, data, surface) in values {
                let op: Option<SurfaceOp> = match surface {
                    None => None,
                    Some(t) => Some(
                        serde_json::from_str(&t)
                            .map_err(|e| usage(format!("surface op is not valid: {e}")))?,
                    ),
                };
                group.push((kind, data, op));
            }
            s.lock().append_json_group(group).map_err(err)
        })
    }

    /// Record the tool calls of one assistant message as one atomic group
    /// (JSON array of {call_id, name, input}); returns their seqs.
    fn record_tool_calls(&self, py: Python<'_>, calls: &str) -> PyResult<Vec<u64>> {
        let calls: Vec<ts::ToolCall> = serde_json::from_str(calls).map_err(|e| {
            usage(format!(
                "tool calls must be [{{call_id, name, input}}]: {e}"
            ))
        })?;
        let s = self.shared()?;
        py.detach(move || {
            let mut g = s.lock();
            let first = g.len();
            g.record_tool_calls(&calls)?;
            Ok::<_, Error>((first..g.len()).collect())
        })
        .map_err(err)
    }

    /// The session's metadata (title, tags, fields) as JSON.
    fn metadata(&self) -> PyResult<String> {
        Ok(serde_json::to_string(self.shared()?.lock().metadata()).unwrap_or_else(|_| "{}".into()))
    }

    /// [`flush`] as a future for asyncio (`Session.aflush`): woken by the
    /// flusher after the fdatasync that covers it, it holds no thread.
    fn flush_wait(&self) -> PyResult<aio::NativeWait> {
        let point = self.shared()?.lock().durability_point();
        let wait = point.wait_async();
        Ok(aio::NativeWait::new(Box::pin(async move {
            wait.await?;
            Ok(None)
        })))
    }

    /// Wait until everything this handle appended is durable (GIL released).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.shared()?;
        py.detach(move || {
            // Take the durable target under the lock, wait without it.
            let point = s.lock().durability_point();
            point.wait()
        })
        .map_err(err)
    }

    /// Append a provider's response body as an `assistant/message`
    /// (`AssistantMessage::from_response`: the content blocks or output
    /// items as sent, the usage normalised with every field kept, every
    /// other field in `extra`). Returns its seq.
    fn append_response(
        &self,
        py: Python<'_>,
        provider_name: &str,
        body: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let p = provider(provider_name)?;
        let body = to_value(body, 0).map_err(|e| usage(format!("response body: {e}")))?;
        let s = self.shared()?;
        py.detach(move || {
            let m = ts::AssistantMessage::from_response(p, &body);
            s.lock().append(m, SurfaceOp::Append)
        })
        .map_err(err)
    }

    /// Resolve the next request's header from a spec (JSON: provider,
    /// model, params, adapter_defaults, system, tools) and write a
    /// `request/header` when needed. Returns the reason written
    /// (`"initial"`, `"resume"`, `"change"`) or `None`.
    fn prepare_request(
        &self,
        py: Python<'_>,
        spec: &Bound<'_, PyAny>,
    ) -> PyResult<Option<&'static str>> {
        let spec = to_value(spec, 0).map_err(|e| usage(format!("request spec: {e}")))?;
        let s = self.shared()?;
        let reason = py
            .detach(move || s.lock().prepare_request_json(spec))
            .map_err(err)?;
        Ok(reason.map(|r| match r {
            ts::HeaderReason::Initial => "initial",
            ts::HeaderReason::Resume => "resume",
            ts::HeaderReason::Change => "change",
        }))
    }

    /// A new agent loop takes over this session: the next header is `resume`.
    fn begin_loop(&self) -> PyResult<()> {
        self.shared()?.lock().begin_loop();
        Ok(())
    }

    /// Check a request body against the one the log rebuilds for a
    /// provider; the error (`request_mismatch`) names the first differing path.
    fn check_request_body(
        &self,
        py: Python<'_>,
        format: &str,
        body: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let p = provider(format)?;
        let body = to_value(body, 0).map_err(|e| usage(format!("request body: {e}")))?;
        let s = self.shared()?;
        py.detach(move || s.lock().check_request_body(p, &body))
            .map_err(err)
    }

    /// Replace surface nodes `start..end` by a summary, atomically (the
    /// originals stay in the log). Returns the summary message's seq.
    fn compact(
        &self,
        py: Python<'_>,
        compaction_id: String,
        start: u64,
        end: u64,
        summary: String,
    ) -> PyResult<u64> {
        let s = self.shared()?;
        py.detach(move || s.lock().compact(&compaction_id, start, end, &summary))
            .map_err(err)
    }

    /// Replace the messages of ended turn `turn_id` by a summary,
    /// atomically. Returns the summary message's seq.
    fn compact_turn(
        &self,
        py: Python<'_>,
        compaction_id: String,
        turn_id: String,
        summary: String,
    ) -> PyResult<u64> {
        let s = self.shared()?;
        py.detach(move || s.lock().compact_turn(&compaction_id, &turn_id, &summary))
            .map_err(err)
    }

    /// Replace the tool result at surface position `at` by a shorter text,
    /// atomically (the original stays in the log). Returns its seq.
    fn prune_tool_result(
        &self,
        py: Python<'_>,
        at: u64,
        replacement: String,
        tokens_saved: u64,
    ) -> PyResult<u64> {
        let s = self.shared()?;
        py.detach(move || s.lock().prune_tool_result(at, &replacement, tokens_saved))
            .map_err(err)
    }

    /// Every turn of the session, in order, as a JSON array.
    fn turns(&self) -> PyResult<String> {
        let s = self.shared()?;
        let g = s.lock();
        Ok(serde_json::to_string(g.turns()).unwrap_or_else(|_| "[]".into()))
    }

    /// Fork after the end of turn `turn_id` (durable events only): the
    /// child's id and the number of events it holds.
    #[pyo3(signature = (turn_id, child = None))]
    fn fork_after_turn(
        &self,
        py: Python<'_>,
        turn_id: String,
        child: Option<String>,
    ) -> PyResult<(String, u64)> {
        let s = self.shared()?;
        let f = py
            .detach(move || s.lock().fork_after_turn(&turn_id, child.as_deref()))
            .map_err(err)?;
        Ok((f.child, f.upto))
    }

    /// What `request_body(format)` leaves out because the header was
    /// written for another API, as a JSON array of `{what, why, count}`.
    fn dropped(&self, py: Python<'_>, format: &str) -> PyResult<String> {
        let p = provider(format)?;
        let s = self.shared()?;
        Ok(py.detach(move || {
            let (_, dropped) = s.lock().request_body_report(p);
            serde_json::to_string(&dropped).unwrap_or_else(|_| "[]".into())
        }))
    }

    /// The messages the model sees (`None`), or the request body for a
    /// provider (`"anthropic"`, `"openai-responses"`, `"openai-chat"`), as JSON.
    #[pyo3(signature = (format = None))]
    fn messages(&self, py: Python<'_>, format: Option<&str>) -> PyResult<String> {
        let provider = format.map(provider).transpose()?;
        let s = self.shared()?;
        Ok(py.detach(move || {
            let mut g = s.lock();
            match provider {
                Some(p) => g.request_body(p).to_string(),
                None => {
                    let msgs: Vec<&ts::Message> =
                        g.derive_messages().iter().map(|m| &**m).collect();
                    serde_json::to_string(&msgs).unwrap_or_else(|_| "[]".into())
                }
            }
        }))
    }

    /// This session's events `start..end` as seen by this handle (appended
    /// ones included), as a JSON array.
    #[pyo3(signature = (start = 0, end = None))]
    fn events(&self, py: Python<'_>, start: u64, end: Option<u64>) -> PyResult<String> {
        let s = self.shared()?;
        let events = py
            .detach(move || {
                let g = s.lock();
                let end = end.unwrap_or(g.len()).min(g.len());
                g.events(start.min(end)..end)
            })
            .map_err(err)?;
        Ok(Value::Array(events.iter().map(event_json).collect()).to_string())
    }
}

/// Wait until everything each of `sessions` appended is durable: one
/// wait per store (for the furthest position), with the GIL released
/// once for the whole list. What a waiter that serves many asyncio tasks
/// calls, instead of one `flush` per session (each of which would have to
/// take the GIL back from a busy event loop).
#[pyfunction]
pub(crate) fn flush_all(py: Python<'_>, sessions: Vec<PyRef<'_, NativeSession>>) -> PyResult<()> {
    let handles = sessions
        .iter()
        .map(|s| s.shared())
        .collect::<PyResult<Vec<SharedSession>>>()?;
    drop(sessions);
    py.detach(move || {
        let mut targets: Vec<(Arc<Store>, turnstone::LogPos)> = Vec::new();
        for h in handles {
            let (store, end) = {
                let g = h.lock();
                match g.durability_point().log_pos() {
                    Some(t) => t,
                    // Nothing appended by this handle.
                    None => continue,
                }
            };
            match targets.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &store)) {
                Some((_, e)) => *e = (*e).max(end),
                None => targets.push((store, end)),
            }
        }
        for (store, end) in targets {
            store.wait_durable(end)?;
        }
        Ok::<_, Error>(())
    })
    .map_err(err)
}
