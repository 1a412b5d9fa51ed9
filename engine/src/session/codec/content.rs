//! Provider-native content: message blocks and token usage as the model APIs
//! send them (invariant 4, "model-visible iff logged").
//!
//! A [`ContentBlock`] is typed when the block is one the engine knows —
//! Anthropic Messages blocks, OpenAI Responses items and content parts, Chat
//! Completions parts and tool calls — and [`ContentBlock::Other`] (opaque
//! JSON) otherwise. Every typed variant keeps the fields it does not name in
//! `extra`, and a block is only given a typed variant when serialising that
//! variant gives back exactly the JSON it was read from; anything else stays
//! `Other`. So whatever a provider sends (a new block type, a new field, a
//! `null` where a string was expected) is stored and returned equal as a
//! JSON value, and new provider features need no format change.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Fields of a block that its typed variant does not name.
pub type Extra = Map<String, Value>;

/// A content block (or, for OpenAI Responses, an input/output item) of a
/// message, as the provider sends it.
///
/// Build the common ones with [`ContentBlock::text`],
/// [`ContentBlock::tool_use`], [`ContentBlock::tool_result`],
/// [`ContentBlock::image_base64`], [`ContentBlock::thinking`], or any JSON
/// with [`ContentBlock::from_json`]:
///
/// ```
/// use turnstone::session::ContentBlock;
/// use serde_json::json;
/// let raw = json!({"type": "thinking", "thinking": "…", "signature": "EqQB…"});
/// let b = ContentBlock::from_json(raw.clone());
/// assert!(matches!(b, ContentBlock::Thinking { .. }));
/// assert_eq!(b.to_json(), raw);
/// // A block type nobody knows yet is kept as it is.
/// let new = json!({"type": "hologram", "frames": [1, 2, 3]});
/// assert_eq!(ContentBlock::from_json(new.clone()).to_json(), new);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    // ---- Anthropic Messages ----
    /// `text` (Anthropic; also a Chat Completions text part). `citations`
    /// and `cache_control` stay in `extra`.
    Text {
        /// The text.
        text: String,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `image` with a base64, url or file source.
    Image {
        /// Where the media comes from.
        source: MediaSource,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `document` (PDF, plain text, …) with its source.
    Document {
        /// Where the media comes from.
        source: MediaSource,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `thinking` with the signature the provider needs to see again.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature over it (sent back unchanged).
        signature: String,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `redacted_thinking`: encrypted reasoning, returned as it came.
    RedactedThinking {
        /// The opaque (encrypted) data.
        data: String,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `tool_use`: the model asks the client to run a tool.
    ToolUse {
        /// The tool use id.
        id: String,
        /// The tool name.
        name: String,
        /// The tool input.
        input: Value,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `server_tool_use`: a tool the provider runs itself.
    ServerToolUse {
        /// The tool use id.
        id: String,
        /// The tool name.
        name: String,
        /// The tool input.
        input: Value,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `web_search_tool_result`: the result of a server tool.
    WebSearchToolResult {
        /// The tool use id this result answers.
        tool_use_id: String,
        /// The content.
        content: Value,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `tool_result`: content is a string or an array of blocks.
    ToolResult {
        /// The tool use id this result answers.
        tool_use_id: String,
        /// The content.
        content: ToolResultContent,
        /// Whether the tool failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    // ---- OpenAI Responses items and content parts ----
    /// A Responses `message` item (`id`, `status` in `extra`).
    Message {
        /// The item's role.
        role: String,
        /// The content.
        content: Vec<ContentBlock>,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `output_text` (`annotations`, `logprobs` in `extra`).
    OutputText {
        /// The text.
        text: String,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `input_text`.
    InputText {
        /// The text.
        text: String,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `refusal` (a Responses content part; a Chat message's `refusal`).
    Refusal {
        /// The refusal text.
        refusal: String,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `input_image` (`image_url` or `file_id`, `detail`).
    InputImage {
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// `input_file` (`file_id`, `file_data`, `file_url`, `filename`).
    InputFile {
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// A `reasoning` item: summary parts and the encrypted content that
    /// stateless requests must send back.
    Reasoning {
        /// The reasoning summary parts.
        #[serde(default)]
        summary: Vec<Value>,
        /// The encrypted reasoning, when requested.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// A `function_call` item (`arguments` is a JSON string).
    FunctionCall {
        /// The function call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The arguments, as a JSON string.
        arguments: String,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// A `function_call_output` item.
    FunctionCallOutput {
        /// The function call id.
        call_id: String,
        /// The function's output.
        output: Value,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    // ---- OpenAI Chat Completions ----
    /// An `image_url` content part.
    ImageUrl {
        /// The image URL object (`url`, `detail`).
        image_url: Value,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// One entry of a Chat message's `tool_calls` (`"type": "function"`).
    Function {
        /// The tool call id.
        id: String,
        /// The function called.
        function: ChatFunction,
        /// Every other field of the block, kept and sent unchanged.
        #[serde(flatten)]
        extra: Extra,
    },
    /// Any block the engine does not know (or whose shape differs from the
    /// typed variant's): kept and returned unchanged.
    #[serde(untagged)]
    Other(Value),
}

/// A Chat Completions function call: name and JSON-string arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatFunction {
    /// The function name.
    pub name: String,
    /// The arguments, as a JSON string.
    pub arguments: String,
    /// Every other field, unchanged.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Where an image or document comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MediaSource {
    /// Base64-encoded bytes.
    Base64 {
        /// The MIME type.
        media_type: String,
        /// The opaque (encrypted) data.
        data: String,
    },
    /// A URL the provider fetches.
    Url {
        /// The URL.
        url: String,
    },
    /// A file uploaded to the provider.
    File {
        /// The provider's file id.
        file_id: String,
    },
    /// Plain-text document content.
    Text {
        /// The MIME type.
        media_type: String,
        /// The opaque (encrypted) data.
        data: String,
    },
    /// Document content given as blocks.
    Content {
        /// The content.
        content: Value,
    },
    /// A source of a shape this build does not know, kept as it is.
    #[serde(untagged)]
    Other(Value),
}

/// The content of a `tool_result`: a string or an array of blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolResultContent {
    /// A plain string.
    Text(String),
    /// Content blocks.
    Blocks(Vec<ContentBlock>),
}

impl ToolResultContent {
    /// The content as one string: itself, or its blocks' texts joined by
    /// newlines.
    pub fn text(&self) -> String {
        match self {
            ToolResultContent::Text(t) => t.clone(),
            ToolResultContent::Blocks(b) => {
                let mut out = String::new();
                for x in b {
                    x.visit_text(&mut |t| {
                        if !out.is_empty() {
                            out.push('\n');
                        }
                        out.push_str(t);
                    });
                }
                out
            }
        }
    }
}

impl PartialEq<str> for ToolResultContent {
    fn eq(&self, other: &str) -> bool {
        matches!(self, ToolResultContent::Text(t) if t == other)
    }
}
impl PartialEq<&str> for ToolResultContent {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

/// The JSON Schema of a content block (`turnstone schema`): any JSON
/// value is accepted and stored as it is (a block type nobody knows yet
/// included), so the schema constrains nothing; its description and
/// examples name the blocks the engine knows.
impl schemars::JsonSchema for ContentBlock {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ContentBlock".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A content block (or OpenAI Responses item) in the provider's own shape, stored and returned unchanged: usually an object whose `type` names it. Known: Anthropic `text`, `image`, `document`, `thinking`, `redacted_thinking`, `tool_use`, `server_tool_use`, `tool_result`, `web_search_tool_result`; OpenAI Responses `message`, `output_text`, `input_text`, `refusal`, `input_image`, `input_file`, `reasoning`, `function_call`, `function_call_output`; Chat Completions `image_url` parts and `tool_calls` entries (`\"type\": \"function\"`). Any other value (a block type that does not exist yet) is kept as it is.",
            "examples": [
                {"type": "text", "text": "Hello."},
                {"type": "thinking", "thinking": "…", "signature": "EqQB…"},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "README.md"}},
                {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"README.md\"}"}
            ]
        })
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The derived (remote = "Self") serializer.
        ContentBlock::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ContentBlock::from_json(Value::deserialize(d)?))
    }
}

impl ContentBlock {
    /// The block for any JSON value: typed when its typed variant gives
    /// back exactly this JSON, else [`ContentBlock::Other`]. Never fails.
    pub fn from_json(v: Value) -> ContentBlock {
        // The commonest block, `{"type":"text","text":…}` and nothing else,
        // takes its text without a copy.
        let v = match v {
            Value::Object(mut o)
                if o.len() == 2
                    && o.get("type").and_then(Value::as_str) == Some("text")
                    && o.get("text").is_some_and(Value::is_string) =>
            {
                if let Some(Value::String(text)) = o.remove("text") {
                    return ContentBlock::text(text);
                }
                Value::Object(o) // not reached: `text` was checked to be a string
            }
            other => other,
        };
        match ContentBlock::deserialize(&v) {
            Ok(b)
                if !matches!(b, ContentBlock::Other(_))
                    && (b.exact_by_shape(&v) || b.to_json() == v) =>
            {
                b
            }
            _ => ContentBlock::Other(v),
        }
    }

    /// A fast proof that the typed block serialises back to `v`, for the
    /// common blocks: when nothing went to `extra` and `v` has exactly the
    /// keys the variant names (all required, none optional), every key was
    /// read into a field that writes it back unchanged. Otherwise the caller
    /// compares in full.
    fn exact_by_shape(&self, v: &Value) -> bool {
        let keys = v.as_object().map_or(usize::MAX, |o| o.len());
        match self {
            ContentBlock::Text { extra, .. }
            | ContentBlock::OutputText { extra, .. }
            | ContentBlock::InputText { extra, .. } => extra.is_empty() && keys == 2,
            ContentBlock::Thinking { extra, .. } => extra.is_empty() && keys == 3,
            ContentBlock::ToolUse { extra, .. } | ContentBlock::ServerToolUse { extra, .. } => {
                extra.is_empty() && keys == 4
            }
            _ => false,
        }
    }

    /// The block as JSON, exactly as it was given.
    pub fn to_json(&self) -> Value {
        match self {
            ContentBlock::Other(v) => v.clone(),
            _ => ContentBlock::serialize(self, serde_json::value::Serializer)
                .expect("content blocks serialize to JSON"),
        }
    }

    /// A plain `text` block.
    pub fn text(t: impl Into<String>) -> Self {
        ContentBlock::Text {
            text: t.into(),
            extra: Extra::new(),
        }
    }

    /// A `tool_use` block.
    pub fn tool_use(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
            extra: Extra::new(),
        }
    }

    /// A `tool_result` block with string content.
    pub fn tool_result(tool_use_id: impl Into<String>, content: impl Into<String>) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: ToolResultContent::Text(content.into()),
            is_error: None,
            extra: Extra::new(),
        }
    }

    /// An `image` block with base64 data.
    pub fn image_base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        ContentBlock::Image {
            source: MediaSource::Base64 {
                media_type: media_type.into(),
                data: data.into(),
            },
            extra: Extra::new(),
        }
    }

    /// A `thinking` block with its signature.
    pub fn thinking(thinking: impl Into<String>, signature: impl Into<String>) -> Self {
        ContentBlock::Thinking {
            thinking: thinking.into(),
            signature: signature.into(),
            extra: Extra::new(),
        }
    }

    /// The block's `type` as sent (`"text"`, `"function_call"`, …; `""` for
    /// an opaque value without one).
    pub fn block_type(&self) -> &str {
        match self {
            ContentBlock::Text { .. } => "text",
            ContentBlock::Image { .. } => "image",
            ContentBlock::Document { .. } => "document",
            ContentBlock::Thinking { .. } => "thinking",
            ContentBlock::RedactedThinking { .. } => "redacted_thinking",
            ContentBlock::ToolUse { .. } => "tool_use",
            ContentBlock::ServerToolUse { .. } => "server_tool_use",
            ContentBlock::WebSearchToolResult { .. } => "web_search_tool_result",
            ContentBlock::ToolResult { .. } => "tool_result",
            ContentBlock::Message { .. } => "message",
            ContentBlock::OutputText { .. } => "output_text",
            ContentBlock::InputText { .. } => "input_text",
            ContentBlock::Refusal { .. } => "refusal",
            ContentBlock::InputImage { .. } => "input_image",
            ContentBlock::InputFile { .. } => "input_file",
            ContentBlock::Reasoning { .. } => "reasoning",
            ContentBlock::FunctionCall { .. } => "function_call",
            ContentBlock::FunctionCallOutput { .. } => "function_call_output",
            ContentBlock::ImageUrl { .. } => "image_url",
            ContentBlock::Function { .. } => "function",
            ContentBlock::Other(v) => v.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The text of a text-like block (`text`, `output_text`, `input_text`).
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text, .. }
            | ContentBlock::OutputText { text, .. }
            | ContentBlock::InputText { text, .. } => Some(text),
            _ => None,
        }
    }

    /// A request for the client to run a tool: `(id, name)` of a `tool_use`
    /// (Anthropic), `function_call` (Responses, by `call_id`) or Chat tool
    /// call. Server-side tool uses are not client tool calls.
    pub fn client_tool_use(&self) -> Option<(&str, &str)> {
        match self {
            ContentBlock::ToolUse { id, name, .. } => Some((id, name)),
            ContentBlock::FunctionCall { call_id, name, .. } => Some((call_id, name)),
            ContentBlock::Function { id, function, .. } => Some((id, &function.name)),
            _ => None,
        }
    }

    /// The tool input of a client tool use as JSON (Responses and Chat send
    /// it as a JSON string; one that does not parse is kept as a string).
    pub fn tool_input(&self) -> Option<Value> {
        let parse = |s: &str| serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.into()));
        match self {
            ContentBlock::ToolUse { input, .. } => Some(input.clone()),
            ContentBlock::FunctionCall { arguments, .. } => Some(parse(arguments)),
            ContentBlock::Function { function, .. } => Some(parse(&function.arguments)),
            _ => None,
        }
    }

    /// The tool-use id a result block answers (`tool_result`,
    /// `function_call_output`).
    pub fn answers_tool_use(&self) -> Option<&str> {
        match self {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id),
            ContentBlock::FunctionCallOutput { call_id, .. } => Some(call_id),
            _ => None,
        }
    }

    /// Blocks nested in this one (a Responses message item's parts, a tool
    /// result's blocks).
    pub fn children(&self) -> &[ContentBlock] {
        match self {
            ContentBlock::Message { content, .. } => content,
            ContentBlock::ToolResult {
                content: ToolResultContent::Blocks(b),
                ..
            } => b,
            _ => &[],
        }
    }

    /// Text for search, token estimates and [`ToolResultContent::text`]:
    /// the block's own text (text, refusal, thinking, a string tool or
    /// function-call output, reasoning summaries) and nested blocks' text.
    /// Tool inputs, function-call arguments and opaque blocks
    /// ([`ContentBlock::Other`]) contribute nothing: search does not find
    /// words that appear only there.
    pub fn visit_text(&self, f: &mut dyn FnMut(&str)) {
        match self {
            ContentBlock::Text { text, .. }
            | ContentBlock::OutputText { text, .. }
            | ContentBlock::InputText { text, .. } => f(text),
            ContentBlock::Refusal { refusal, .. } => f(refusal),
            ContentBlock::Thinking { thinking, .. } => f(thinking),
            ContentBlock::ToolResult {
                content: ToolResultContent::Text(t),
                ..
            } => f(t),
            ContentBlock::Message { .. } | ContentBlock::ToolResult { .. } => {
                for c in self.children() {
                    c.visit_text(f)
                }
            }
            ContentBlock::FunctionCallOutput {
                output: Value::String(s),
                ..
            } => f(s),
            ContentBlock::Reasoning { summary, .. } => {
                for s in summary {
                    if let Some(t) = s.get("text").and_then(Value::as_str) {
                        f(t)
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_blocks_are_typed_and_round_trip() {
        let cases = [
            json!({"type": "text", "text": "hi", "citations": null, "cache_control": {"type": "ephemeral"}}),
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}),
            json!({"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}, "title": "A"}),
            json!({"type": "thinking", "thinking": "hmm", "signature": "sig"}),
            json!({"type": "redacted_thinking", "data": "enc"}),
            json!({"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"a": [1, 2.5, null]}}),
            json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}),
            json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "web_search_result", "url": "u", "title": "t", "encrypted_content": "e"}]}),
            json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "x"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}], "is_error": false}),
            json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "t", "annotations": []}]}),
            json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}], "encrypted_content": "gAAA"}),
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get", "arguments": "{\"a\":1}", "status": "completed"}),
            json!({"type": "function_call_output", "call_id": "call_1", "output": "42"}),
            json!({"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "auto"}),
            json!({"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}),
            json!({"type": "function", "id": "call_2", "function": {"name": "get", "arguments": "{}"}}),
        ];
        for v in cases {
            let b = ContentBlock::from_json(v.clone());
            assert!(!matches!(b, ContentBlock::Other(_)), "{v} was not typed");
            assert_eq!(b.to_json(), v);
            let back: ContentBlock =
                serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
            assert_eq!(back, b);
        }
    }

    #[test]
    fn unknown_or_odd_blocks_are_kept_opaque() {
        let cases = [
            json!({"type": "hologram", "frames": [1, 2]}),
            json!({"type": "text", "text": 5}),
            json!({"type": "reasoning", "summary": [], "encrypted_content": null}),
            json!({"no_type": true}),
            json!("a bare string"),
            json!(null),
        ];
        for v in cases {
            let b = ContentBlock::from_json(v.clone());
            assert!(matches!(b, ContentBlock::Other(_)), "{v} was typed: {b:?}");
            assert_eq!(b.to_json(), v);
            let s = serde_json::to_string(&b).unwrap();
            assert_eq!(serde_json::from_str::<Value>(&s).unwrap(), v);
        }
    }
}
