//! Provider responses into `assistant/message` events: the content blocks
//! exactly as sent, the usage normalised with every field kept, the stop
//! reason, and every other field of the response in `extra`.

use serde_json::{Map, Value};

use super::Provider;
use crate::session::codec::content::ContentBlock;
use crate::session::codec::event::AssistantMessage;
use crate::session::codec::usage::Usage;

impl AssistantMessage {
    /// The tool calls this message asks the client to make (Anthropic
    /// `tool_use`, Responses `function_call`, Chat `tool_calls`), in order,
    /// ready for [`crate::session::run_tools_parallel`] or
    /// [`crate::session::Session::record_tool_calls`]; JSON-string arguments
    /// are parsed (kept as a string when they do not parse).
    ///
    /// ```
    /// use serde_json::json;
    /// use turnstone::session::{AssistantMessage, Provider};
    /// let resp = json!({"choices": [{"message": {"role": "assistant", "content": null,
    ///     "tool_calls": [{"id": "call_1", "type": "function",
    ///                     "function": {"name": "get", "arguments": "{\"k\":1}"}}]}}]});
    /// let calls = AssistantMessage::from_response(Provider::OpenAiChat, &resp).tool_calls();
    /// assert_eq!((calls[0].call_id.as_str(), calls[0].input["k"].as_i64()), ("call_1", Some(1)));
    /// ```
    pub fn tool_calls(&self) -> Vec<crate::session::codec::event::ToolCall> {
        self.content
            .iter()
            .filter_map(|b| {
                let (id, name) = b.client_tool_use()?;
                Some(crate::session::codec::event::ToolCall {
                    call_id: id.to_string(),
                    name: name.to_string(),
                    input: b.tool_input()?,
                })
            })
            .collect()
    }

    /// The event for a provider's (non-streamed) response body:
    ///
    /// - Anthropic Messages: `content` blocks as they are; `stop_reason`.
    /// - OpenAI Responses: the `output` items as they are (reasoning,
    ///   message, function_call, …), which is what a stateless request sends
    ///   back; `status` as the stop reason.
    /// - OpenAI Chat Completions: the first choice's message as blocks —
    ///   `content` (a string becomes one `text` block, parts stay parts), a
    ///   `refusal` block, each `tool_calls` entry as it is; `finish_reason`.
    ///
    /// Nothing is dropped: every other field (ids, model, the choice's and
    /// message's other fields) is kept in `extra`.
    ///
    /// ```
    /// use serde_json::json;
    /// use turnstone::session::{AssistantMessage, ContentBlock, Provider};
    /// let resp = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
    ///     "content": [{"type": "thinking", "thinking": "…", "signature": "sig"},
    ///                 {"type": "text", "text": "hi"}],
    ///     "stop_reason": "end_turn", "stop_sequence": null,
    ///     "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 100}});
    /// let m = AssistantMessage::from_response(Provider::Anthropic, &resp);
    /// assert!(matches!(m.content[0], ContentBlock::Thinking { .. }));
    /// assert_eq!(m.usage.unwrap().cache_read_input_tokens, Some(100));
    /// assert_eq!(m.extra["id"], "msg_1");
    /// ```
    pub fn from_response(provider: Provider, response: &Value) -> AssistantMessage {
        let empty = Map::new();
        let top = response.as_object().unwrap_or(&empty);
        let rest = |skip: &[&str]| -> Map<String, Value> {
            top.iter()
                .filter(|(k, _)| !skip.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let usage = top
            .get("usage")
            .filter(|u| u.is_object())
            .map(Usage::from_provider);
        let blocks = |v: Option<&Value>| -> Vec<ContentBlock> {
            v.and_then(Value::as_array)
                .map(|a| a.iter().cloned().map(ContentBlock::from_json).collect())
                .unwrap_or_default()
        };
        let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        match provider {
            Provider::Anthropic => AssistantMessage {
                content: blocks(top.get("content")),
                usage,
                stop_reason: string(top.get("stop_reason")),
                extra: rest(&["content", "usage", "stop_reason"]),
            },
            Provider::OpenAiResponses => AssistantMessage {
                content: blocks(top.get("output")),
                usage,
                stop_reason: string(top.get("status")),
                extra: rest(&["output", "usage", "status"]),
            },
            Provider::OpenAiChat => {
                let choice = top
                    .get("choices")
                    .and_then(|c| c.get(0))
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let message = choice
                    .get("message")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let mut content = match message.get("content") {
                    Some(Value::String(s)) => vec![ContentBlock::text(s.clone())],
                    Some(v @ Value::Array(_)) => blocks(Some(v)),
                    _ => vec![],
                };
                if let Some(Value::String(r)) = message.get("refusal") {
                    content.push(ContentBlock::Refusal {
                        refusal: r.clone(),
                        extra: Map::new(),
                    });
                }
                content.extend(blocks(message.get("tool_calls")));
                let mut extra = rest(&["choices", "usage"]);
                let mut choice_rest: Map<String, Value> = choice
                    .iter()
                    .filter(|(k, _)| *k != "message" && *k != "finish_reason")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let message_rest: Map<String, Value> = message
                    .iter()
                    .filter(|(k, _)| !["content", "refusal", "tool_calls"].contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                choice_rest.insert("message".into(), Value::Object(message_rest));
                extra.insert("choice".into(), Value::Object(choice_rest));
                AssistantMessage {
                    content,
                    usage,
                    stop_reason: string(choice.get("finish_reason")),
                    extra,
                }
            }
        }
    }
}
