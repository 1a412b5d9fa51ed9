//! OpenAI Chat Completions request bodies.
//!
//! The system prompt is the first message; an assistant message carries
//! its text as `content` (a string for one text part, parts for several,
//! `null` with none), its tool calls as `tool_calls` and a refusal as
//! `refusal`; each tool result is a `tool` message right after the
//! assistant message that called it. A user message with one plain text
//! block sends a string, else content parts. Thinking and reasoning cannot
//! be sent to this API and are dropped.

use serde_json::{json, Map, Value};

use super::switch::Render;
use super::{data_url, obj, Segment};
use crate::session::codec::content::{ContentBlock, MediaSource, ToolResultContent};
use crate::session::codec::event::SystemPrompt;

pub(crate) fn body(r: &mut Render<'_>, segments: &[Segment]) -> Value {
    let mut b = r.base();
    let mut messages: Vec<Value> = Vec::new();
    if let Some(h) = r.header {
        match &h.system {
            Some(SystemPrompt::Text(t)) => messages.push(json!({"role": "system", "content": t})),
            Some(SystemPrompt::Blocks(blocks)) => {
                let parts: Vec<Value> = blocks.iter().filter_map(|x| user_part(r, x)).collect();
                messages.push(json!({"role": "system", "content": parts}));
            }
            None => {}
        }
    }
    r.insert_tools(&mut b, tool);
    for seg in segments {
        match seg {
            Segment::Assistant(blocks) => {
                if let Some(m) = assistant(r, blocks) {
                    messages.push(m);
                }
            }
            Segment::ToolResults(blocks) => {
                for x in blocks {
                    messages.push(result(r, x));
                }
            }
            Segment::User(blocks) => {
                let content = match blocks.as_slice() {
                    [ContentBlock::Text { text, extra }] if extra.is_empty() => {
                        Value::String(text.clone())
                    }
                    _ => {
                        let parts: Vec<Value> =
                            blocks.iter().filter_map(|x| user_part(r, x)).collect();
                        if parts.is_empty() {
                            continue;
                        }
                        Value::Array(parts)
                    }
                };
                messages.push(json!({"role": "user", "content": content}));
            }
        }
    }
    b.insert("messages".into(), Value::Array(messages));
    Value::Object(b)
}

fn tool(t: &crate::session::codec::event::ToolSchema) -> Value {
    if t.extra.get("type").is_some_and(|x| x != "function") {
        return Value::Object(t.extra.clone());
    }
    let mut f = Map::new();
    f.insert("name".into(), Value::String(t.name.clone()));
    if !t.description.is_empty() {
        f.insert("description".into(), Value::String(t.description.clone()));
    }
    f.insert("parameters".into(), t.input_schema.clone());
    for (k, v) in &t.extra {
        if k != "type" {
            f.insert(k.clone(), v.clone());
        }
    }
    json!({"type": "function", "function": f})
}

fn assistant(r: &mut Render<'_>, blocks: &[ContentBlock]) -> Option<Value> {
    let mut parts: Vec<Value> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut refusal: Option<String> = None;
    let mut visit = |b: &ContentBlock, parts: &mut Vec<Value>| match b {
        ContentBlock::Text { text, .. } | ContentBlock::OutputText { text, .. } => {
            parts.push(obj([
                ("type", "text".into()),
                ("text", text.as_str().into()),
            ]))
        }
        ContentBlock::Refusal { refusal: r, .. } => refusal = Some(r.clone()),
        ContentBlock::Function { .. } => calls.push(b.to_json()),
        ContentBlock::ToolUse { id, name, .. }
        | ContentBlock::FunctionCall {
            call_id: id, name, ..
        } => {
            let args = match b {
                ContentBlock::FunctionCall { arguments, .. } => arguments.clone(),
                _ => b.tool_input().unwrap_or(Value::Null).to_string(),
            };
            calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}));
        }
        ContentBlock::Thinking { .. }
        | ContentBlock::RedactedThinking { .. }
        | ContentBlock::Reasoning { .. }
        | ContentBlock::ServerToolUse { .. }
        | ContentBlock::WebSearchToolResult { .. } => r.drop_block(b.block_type()),
        ContentBlock::Other(v) if !r.keep_unknown(v) => {}
        _ => parts.push(b.to_json()),
    };
    for b in blocks {
        if let ContentBlock::Message { content, .. } = b {
            for c in content {
                visit(c, &mut parts);
            }
        } else {
            visit(b, &mut parts);
        }
    }
    if parts.is_empty() && calls.is_empty() && refusal.is_none() {
        return None;
    }
    let content = match parts.as_slice() {
        [] => Value::Null,
        [p] if p.get("type").is_some_and(|t| t == "text")
            && p.as_object().is_some_and(|o| o.len() == 2) =>
        {
            p["text"].clone()
        }
        _ => Value::Array(parts),
    };
    let mut m = Map::new();
    m.insert("role".into(), "assistant".into());
    m.insert("content".into(), content);
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(r) = refusal {
        m.insert("refusal".into(), Value::String(r));
    }
    Some(Value::Object(m))
}

fn result(rd: &mut Render<'_>, r: &ContentBlock) -> Value {
    let (id, content) = match r {
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } => (
            tool_use_id.clone(),
            match content {
                ToolResultContent::Text(t) => Value::String(t.clone()),
                ToolResultContent::Blocks(b) => b.iter().filter_map(|x| user_part(rd, x)).collect(),
            },
        ),
        ContentBlock::FunctionCallOutput {
            call_id, output, ..
        } => (call_id.clone(), output.clone()),
        _ => return r.to_json(),
    };
    json!({"role": "tool", "tool_call_id": id, "content": content})
}

/// A user content part in Chat's shape.
fn user_part(r: &mut Render<'_>, b: &ContentBlock) -> Option<Value> {
    let image = |url: String| json!({"type": "image_url", "image_url": {"url": url}});
    Some(match b {
        ContentBlock::Other(v) if !r.keep_unknown(v) => return None,
        ContentBlock::InputText { text, .. } | ContentBlock::OutputText { text, .. } => {
            obj([("type", "text".into()), ("text", text.as_str().into())])
        }
        ContentBlock::Image { source, .. } => match source {
            MediaSource::Base64 { media_type, data } => image(data_url(media_type, data)),
            MediaSource::Url { url } => image(url.clone()),
            _ => b.to_json(),
        },
        ContentBlock::InputImage { extra } => {
            match extra.get("image_url").and_then(Value::as_str) {
                Some(u) => image(u.to_string()),
                None => b.to_json(),
            }
        }
        _ => b.to_json(),
    })
}
