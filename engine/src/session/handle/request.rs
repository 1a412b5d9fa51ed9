//! What the model is sent: the header of the next request (`initial`,
//! `resume`, `change`), the request and provider body rebuilt from the
//! log with the checks against what a harness sends, and compaction and
//! pruning (surface ranges replaced atomically, originals kept).

use serde_json::Value;

use crate::error::{Error, Result};
use crate::session::codec::envelope;
use crate::session::codec::envelope::EncodedEvent;
use crate::session::codec::event::{
    CompactionEnd, CompactionPrune, CompactionStart, CompactionSummary, ContentBlock, CoreKind,
    HeaderReason, RequestContext, RequestHeader, ToolResult, UserMessage,
};
use crate::session::fold::header::{first_difference, first_json_difference, Request, RequestSpec};
use crate::session::fold::surface::SurfaceOp;
use crate::session::handle::Session;
use crate::session::providers::{self, Provider};

impl Session {
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
    /// [`crate::session::Provider`]).
    pub fn request_body(&mut self, provider: Provider) -> Value {
        let header = self.state.header.clone();
        providers::request_body(provider, header.as_ref(), self.derive_messages())
    }

    /// [`Session::request_body`], and what the adapter left out of it:
    /// parameters, tools and blocks `provider`'s API cannot take (of
    /// another API, when the latest header was written for it; see
    /// [`crate::session::Dropped`]). Empty when nothing was left out.
    pub fn request_body_report(&mut self, provider: Provider) -> (Value, Vec<providers::Dropped>) {
        let header = self.state.header.clone();
        providers::request_body_report(provider, header.as_ref(), self.derive_messages())
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
        self.state
            .surface
            .check(SurfaceOp::Replace { start, end })?;
        let id = compaction_id.to_string();
        let items = vec![
            EncodedEvent::core(
                CoreKind::CompactionStart,
                envelope::encode_core(
                    &CompactionStart {
                        compaction_id: id.clone(),
                    },
                    None,
                ),
            ),
            EncodedEvent::core(
                CoreKind::CompactionSummary,
                envelope::encode_core(
                    &CompactionSummary {
                        compaction_id: id.clone(),
                        text: summary.to_string(),
                    },
                    None,
                ),
            ),
            EncodedEvent::core(
                CoreKind::UserMessage,
                envelope::encode_core(
                    &UserMessage {
                        content: vec![ContentBlock::text(summary)],
                    },
                    Some(SurfaceOp::Replace { start, end }),
                ),
            ),
            EncodedEvent::core(
                CoreKind::CompactionEnd,
                envelope::encode_core(&CompactionEnd { compaction_id: id }, None),
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
                envelope::encode_core(
                    &CompactionPrune {
                        replaced_seqs: vec![seq],
                        tokens_saved,
                    },
                    None,
                ),
            ),
            EncodedEvent::core(
                CoreKind::ToolResult,
                envelope::encode_core(
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
}
