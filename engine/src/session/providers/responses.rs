//! OpenAI Responses request bodies (`input` items).
//!
//! Output items logged as the API returned them (`message`, `reasoning`
//! with its encrypted content, `function_call`) and unknown items pass
//! through unchanged, which is what a stateless (`store: false`) request
//! sends back. Tool results become `function_call_output` items right after
//! the calls they answer. Loose text of an assistant message becomes an
//! assistant `message` item; Anthropic-only blocks (thinking, server tools)
//! are dropped.

use serde_json::{json, Map, Value};

use super::switch::Render;
use super::{data_url, obj, Segment};
use crate::session::codec::content::{ContentBlock, MediaSource, ToolResultContent};

pub(crate) fn body(r: &mut Render<'_>, segments: &[Segment]) -> Value {
    let mut b = r.base();
    if let Some(h) = r.header {
        if let Some(s) = &h.system {
            b.insert("instructions".into(), Value::String(s.text()));
        }
    }
    r.insert_tools(&mut b, tool);
    let mut input: Vec<Value> = Vec::new();
    for seg in segments {
        match seg {
            Segment::Assistant(blocks) => assistant(r, blocks, &mut input),
            Segment::ToolResults(blocks) => {
                for x in blocks {
                    input.push(result(r, x));
                }
            }
            Segment::User(blocks) => {
                let parts: Vec<Value> = blocks.iter().filter_map(|x| user_part(r, x)).collect();
                if !parts.is_empty() {
                    input.push(json!({"role": "user", "content": parts}));
                }
            }
        }
    }
    b.insert("input".into(), Value::Array(input));
    Value::Object(b)
}

fn tool(t: &crate::session::codec::event::ToolSchema) -> Value {
    if t.extra.get("type").is_some_and(|x| x != "function") {
        // A provider tool (web_search, file_search, …): as configured.
        let mut m = t.extra.clone();
        if !t.name.is_empty() {
            m.insert("name".into(), Value::String(t.name.clone()));
        }
        return Value::Object(m);
    }
    let mut m = Map::new();
    m.insert("type".into(), "function".into());
    m.insert("name".into(), Value::String(t.name.clone()));
    if !t.description.is_empty() {
        m.insert("description".into(), Value::String(t.description.clone()));
    }
    m.insert("parameters".into(), t.input_schema.clone());
    for (k, v) in &t.extra {
        if k != "type" {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m)
}

fn assistant(r: &mut Render<'_>, blocks: &[ContentBlock], input: &mut Vec<Value>) {
    // Loose text parts gather into one assistant message item.
    let mut parts: Vec<Value> = Vec::new();
    let flush = |parts: &mut Vec<Value>, input: &mut Vec<Value>| {
        if !parts.is_empty() {
            input.push(
                json!({"type": "message", "role": "assistant", "content": std::mem::take(parts)}),
            );
        }
    };
    for b in blocks {
        match b {
            ContentBlock::Text { text, .. } => {
                parts.push(json!({"type": "output_text", "text": text, "annotations": []}))
            }
            ContentBlock::OutputText { .. } | ContentBlock::Refusal { .. } => {
                parts.push(b.to_json())
            }
            ContentBlock::Thinking { .. }
            | ContentBlock::RedactedThinking { .. }
            | ContentBlock::ServerToolUse { .. }
            | ContentBlock::WebSearchToolResult { .. } => r.drop_block(b.block_type()),
            ContentBlock::Other(v) if !r.keep_unknown(v) => {}
            ContentBlock::ToolUse { id, name, .. }
            | ContentBlock::Function {
                id,
                function: crate::session::codec::content::ChatFunction { name, .. },
                ..
            } => {
                flush(&mut parts, input);
                let args = match b {
                    ContentBlock::Function { function, .. } => function.arguments.clone(),
                    _ => b.tool_input().unwrap_or(Value::Null).to_string(),
                };
                input.push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": args}));
            }
            _ => {
                flush(&mut parts, input);
                input.push(b.to_json());
            }
        }
    }
    flush(&mut parts, input);
}

fn result(rd: &mut Render<'_>, r: &ContentBlock) -> Value {
    match r {
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } => {
            let output = match content {
                ToolResultContent::Text(t) => Value::String(t.clone()),
                ToolResultContent::Blocks(b) => b.iter().filter_map(|x| user_part(rd, x)).collect(),
            };
            json!({"type": "function_call_output", "call_id": tool_use_id, "output": output})
        }
        _ => r.to_json(),
    }
}

/// A user content part in Responses' shape.
fn user_part(r: &mut Render<'_>, b: &ContentBlock) -> Option<Value> {
    let text = |t: &str| obj([("type", "input_text".into()), ("text", t.into())]);
    Some(match b {
        ContentBlock::Other(v) if !r.keep_unknown(v) => return None,
        ContentBlock::Text { text: t, .. } | ContentBlock::OutputText { text: t, .. } => text(t),
        ContentBlock::Image { source, .. } => match source {
            MediaSource::Base64 { media_type, data } => {
                json!({"type": "input_image", "image_url": data_url(media_type, data), "detail": "auto"})
            }
            MediaSource::Url { url } => {
                json!({"type": "input_image", "image_url": url, "detail": "auto"})
            }
            MediaSource::File { file_id } => {
                json!({"type": "input_image", "file_id": file_id, "detail": "auto"})
            }
            _ => b.to_json(),
        },
        ContentBlock::Document { source, .. } => match source {
            MediaSource::Base64 { media_type, data } => {
                json!({"type": "input_file", "file_data": data_url(media_type, data)})
            }
            MediaSource::File { file_id } => json!({"type": "input_file", "file_id": file_id}),
            MediaSource::Url { url } => json!({"type": "input_file", "file_url": url}),
            MediaSource::Text { data, .. } => text(data),
            _ => b.to_json(),
        },
        ContentBlock::ImageUrl { image_url, .. } => {
            let mut m = Map::new();
            m.insert("type".into(), "input_image".into());
            m.insert(
                "image_url".into(),
                image_url.get("url").cloned().unwrap_or(Value::Null),
            );
            m.insert(
                "detail".into(),
                image_url
                    .get("detail")
                    .cloned()
                    .unwrap_or_else(|| "auto".into()),
            );
            Value::Object(m)
        }
        _ => b.to_json(),
    })
}
