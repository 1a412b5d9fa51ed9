//! Request adapters: the provider request body a harness sends, rebuilt
//! from the log (the latest `request/header` and the derived messages).
//!
//! One adapter per API: Anthropic Messages ([`anthropic`]), OpenAI
//! Responses ([`responses`]) and OpenAI Chat Completions ([`chat`]). Each
//! applies its provider's rules: blocks in the provider's own shape pass
//! through unchanged (thinking with signatures, reasoning items, unknown
//! blocks); the tool results answering an assistant message come right
//! after it, in the order of its tool uses; empty messages are dropped;
//! roles are merged where the provider needs alternation. Blocks of another
//! provider's shape are translated where a translation exists (a
//! `function_call` becomes a `tool_use`) and dropped where the target
//! cannot take them (an Anthropic `thinking` block in an OpenAI request).
//! A header written for another API is translated (`switch.rs`):
//! parameters renamed or left out, tools reshaped, and what was left out
//! reported as [`Dropped`].
//!
//! The body is the call config's `model` and `params` at the top level, the
//! system prompt and tool schemas from the header, and the messages. What
//! the body looks like for each case is written down in `docs/SESSIONS.md`
//! ("Request bodies").

pub mod anthropic;
pub mod chat;
mod ingest;
pub mod responses;
mod switch;

pub use switch::Dropped;

use std::sync::Arc;

use serde_json::Value;

use crate::session::codec::content::ContentBlock;
use crate::session::codec::event::EpochHeader;
use crate::session::fold::messages::{Message, Role};

/// A provider request API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// OpenAI Responses (`POST /v1/responses`).
    OpenAiResponses,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAiChat,
}

impl Provider {
    /// Every provider, in a fixed order.
    pub const ALL: [Provider; 3] = [
        Provider::Anthropic,
        Provider::OpenAiResponses,
        Provider::OpenAiChat,
    ];
    /// The name used on the command line (`anthropic`, `openai-responses`,
    /// `openai-chat`).
    pub fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAiResponses => "openai-responses",
            Provider::OpenAiChat => "openai-chat",
        }
    }
}

impl std::str::FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Provider::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown provider format {s:?} (expected anthropic, openai-responses or openai-chat)")
            })
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The request body for `provider` from a header and derived messages.
///
/// ```
/// use std::sync::Arc;
/// use turnstone::session::*;
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
/// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
/// s.prepare_request(&RequestSpec { provider: "anthropic".into(), model: "claude-x".into(), ..Default::default() }).unwrap();
/// s.append(UserMessage { content: vec![ContentBlock::text("hi")] }, SurfaceOp::Append).unwrap();
/// let body = s.request_body(Provider::Anthropic);
/// assert_eq!(body["messages"][0]["content"][0]["text"], "hi");
/// ```
pub fn request_body(
    provider: Provider,
    header: Option<&EpochHeader>,
    messages: &[Arc<Message>],
) -> Value {
    request_body_report(provider, header, messages).0
}

/// [`request_body`], and what the adapter left out of it (parameters,
/// tools and blocks the target API cannot take: of another API, when the
/// header was written for it, or that no API of that kind takes).
pub fn request_body_report(
    provider: Provider,
    header: Option<&EpochHeader>,
    messages: &[Arc<Message>],
) -> (Value, Vec<Dropped>) {
    let segments = arrange(messages);
    let mut r = switch::Render::new(provider, header);
    let body = match provider {
        Provider::Anthropic => anthropic::body(&mut r, &segments),
        Provider::OpenAiResponses => responses::body(&mut r, &segments),
        Provider::OpenAiChat => chat::body(&mut r, &segments),
    };
    (body, r.dropped)
}

/// The messages in the order every provider needs, still in the log's
/// blocks: empty messages dropped; consecutive assistant messages merged
/// into one turn; after each assistant turn, the tool results answering it
/// (in the order of its tool uses), then the other user messages of that
/// run.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    /// One assistant message's blocks.
    Assistant(Vec<ContentBlock>),
    /// The tool-result blocks of a run of user messages, ordered.
    ToolResults(Vec<ContentBlock>),
    /// One user message's other blocks.
    User(Vec<ContentBlock>),
}

pub(crate) fn arrange(messages: &[Arc<Message>]) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut last_uses: Vec<String> = Vec::new();
    while i < messages.len() {
        let m = &messages[i];
        if m.content.is_empty() {
            i += 1;
            continue;
        }
        if m.role == Role::Assistant {
            let uses = m
                .content
                .iter()
                .filter_map(|b| b.client_tool_use().map(|(id, _)| id.to_string()));
            // Consecutive assistant messages are one turn.
            if let Some(Segment::Assistant(prev)) = out.last_mut() {
                prev.extend(m.content.iter().cloned());
                last_uses.extend(uses);
            } else {
                last_uses = uses.collect();
                out.push(Segment::Assistant(m.content.clone()));
            }
            i += 1;
            continue;
        }
        // A run of user messages up to the next assistant message.
        let mut results: Vec<ContentBlock> = Vec::new();
        let mut users: Vec<Vec<ContentBlock>> = Vec::new();
        while i < messages.len() && messages[i].role == Role::User {
            let (r, u): (Vec<_>, Vec<_>) = messages[i]
                .content
                .iter()
                .cloned()
                .partition(|b| b.answers_tool_use().is_some());
            results.extend(r);
            if !u.is_empty() {
                users.push(u);
            }
            i += 1;
        }
        // Stable: results of known uses in use order, then any others.
        results.sort_by_key(|b| {
            let id = b.answers_tool_use().unwrap_or_default();
            last_uses.iter().position(|u| u == id).unwrap_or(usize::MAX)
        });
        if !results.is_empty() {
            out.push(Segment::ToolResults(results));
        }
        out.extend(users.into_iter().map(Segment::User));
    }
    out
}

/// A data URL's media type and base64 payload.
pub(crate) fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (media_type, data) = rest.split_once(";base64,")?;
    Some((media_type, data))
}

pub(crate) fn data_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

pub(crate) fn obj(pairs: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}
