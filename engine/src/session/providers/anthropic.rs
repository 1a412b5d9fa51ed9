//! Anthropic Messages request bodies.
//!
//! Anthropic blocks (text with citations, image, document, thinking with its
//! signature, redacted_thinking, tool_use, server tools and their results,
//! tool_result, `cache_control` anywhere) and unknown blocks pass through
//! unchanged. Consecutive messages of one role are merged (the API wants
//! alternating roles, and every tool_result of an assistant turn in the one
//! user message after it, before any other content). OpenAI-shaped blocks
//! are translated; reasoning items are dropped (Anthropic cannot take them),
//! and so are empty text blocks (the API refuses them; the log keeps them).

use serde_json::{json, Map, Value};

use super::switch::Render;
use super::{obj, split_data_url, Segment};
use crate::session::codec::content::{ContentBlock, MediaSource, ToolResultContent};
use crate::session::codec::event::SystemPrompt;

pub(crate) fn body(r: &mut Render<'_>, segments: &[Segment]) -> Value {
    let mut b = r.base();
    if let Some(h) = r.header {
        match &h.system {
            Some(SystemPrompt::Text(t)) => {
                b.insert("system".into(), Value::String(t.clone()));
            }
            Some(SystemPrompt::Blocks(blocks)) => {
                b.insert(
                    "system".into(),
                    blocks.iter().map(|x| x.to_json()).collect(),
                );
            }
            None => {}
        }
    }
    r.insert_tools(&mut b, |t| {
        let mut m = Map::new();
        m.insert("name".into(), Value::String(t.name.clone()));
        if !t.description.is_empty() {
            m.insert("description".into(), Value::String(t.description.clone()));
        }
        if !t.input_schema.is_null() {
            m.insert("input_schema".into(), t.input_schema.clone());
        }
        m.extend(t.extra.clone());
        Value::Object(m)
    });
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for seg in segments {
        let (role, blocks) = match seg {
            Segment::Assistant(x) => ("assistant", x),
            Segment::ToolResults(x) | Segment::User(x) => ("user", x),
        };
        let content: Vec<Value> = blocks.iter().flat_map(|b| convert(r, b)).collect();
        if content.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((r, c)) if *r == role => c.extend(content),
            _ => messages.push((role, content)),
        }
    }
    let messages = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}));
    b.insert("messages".into(), messages.collect());
    Value::Object(b)
}

/// One block in Anthropic's shape (none, one, or several for a Responses
/// message item).
fn convert(r: &mut Render<'_>, b: &ContentBlock) -> Vec<Value> {
    let text = |t: &str| obj([("type", "text".into()), ("text", t.into())]);
    match b {
        // The API refuses an empty text block; the log keeps it.
        ContentBlock::Text { text: t, .. }
        | ContentBlock::OutputText { text: t, .. }
        | ContentBlock::InputText { text: t, .. }
            if t.is_empty() =>
        {
            vec![]
        }
        ContentBlock::OutputText { text: t, .. } | ContentBlock::InputText { text: t, .. } => {
            vec![text(t)]
        }
        ContentBlock::Refusal { refusal, .. } => vec![text(refusal)],
        ContentBlock::Message { content, .. } => {
            content.iter().flat_map(|c| convert(r, c)).collect()
        }
        ContentBlock::Reasoning { .. } => {
            r.drop_block("reasoning");
            vec![]
        }
        ContentBlock::InputFile { .. } => {
            r.drop_block("input_file");
            vec![]
        }
        ContentBlock::Other(v) => {
            if r.keep_unknown(v) {
                vec![v.clone()]
            } else {
                vec![]
            }
        }
        ContentBlock::FunctionCall { call_id, name, .. } => vec![json!({
            "type": "tool_use", "id": call_id, "name": name, "input": b.tool_input(),
        })],
        ContentBlock::Function { id, function, .. } => vec![json!({
            "type": "tool_use", "id": id, "name": function.name, "input": b.tool_input(),
        })],
        ContentBlock::FunctionCallOutput {
            call_id, output, ..
        } => vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": output})],
        ContentBlock::ToolResult {
            content: ToolResultContent::Blocks(inner),
            ..
        } if inner.iter().any(needs_translation) => {
            let mut v = b.to_json();
            v["content"] = inner.iter().flat_map(|c| convert(r, c)).collect();
            vec![v]
        }
        ContentBlock::InputImage { extra } => {
            let url = extra.get("image_url").and_then(Value::as_str);
            let file = extra.get("file_id").and_then(Value::as_str);
            match (url, file) {
                (Some(u), _) => vec![image(u)],
                (None, Some(f)) => {
                    vec![json!({"type": "image", "source": {"type": "file", "file_id": f}})]
                }
                _ => vec![b.to_json()],
            }
        }
        ContentBlock::ImageUrl { image_url, .. } => {
            match image_url.get("url").and_then(Value::as_str) {
                Some(u) => vec![image(u)],
                None => vec![b.to_json()],
            }
        }
        _ => vec![b.to_json()],
    }
}

fn needs_translation(b: &ContentBlock) -> bool {
    matches!(
        b,
        ContentBlock::OutputText { .. }
            | ContentBlock::InputText { .. }
            | ContentBlock::InputImage { .. }
            | ContentBlock::ImageUrl { .. }
    )
}

/// An image block from a URL (a data URL becomes a base64 source).
fn image(url: &str) -> Value {
    let source = match split_data_url(url) {
        Some((media_type, data)) => MediaSource::Base64 {
            media_type: media_type.into(),
            data: data.into(),
        },
        None => MediaSource::Url { url: url.into() },
    };
    json!({"type": "image", "source": source})
}
