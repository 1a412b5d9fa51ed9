//! Switching provider: a session whose header was written for one API,
//! rendered for another. Each adapter then emits only what its API accepts
//! (parameters renamed where the other API has the same one under another
//! name, tools in its shape, blocks it can take) and reports the rest as
//! [`Dropped`]. A header written for the same API (or for a provider name
//! turnstone does not know) passes through as it is: the harness knows its
//! API, new parameters included.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::Provider;
use crate::session::codec::event::{EpochHeader, ToolSchema};

/// Something an adapter left out of a request body, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dropped {
    /// What: `param reasoning`, `tool web_search (type web_search_preview)`,
    /// `block reasoning`, `tool field cache_control`.
    pub what: String,
    /// Why it cannot be sent.
    pub why: String,
    /// How many times (a block type dropped from several messages).
    pub count: usize,
}

/// The rendering of one body: the header, whether it was written for
/// another API, and what was dropped.
pub(crate) struct Render<'a> {
    pub header: Option<&'a EpochHeader>,
    pub target: Provider,
    /// The header names a known API other than `target`.
    pub foreign: bool,
    pub dropped: Vec<Dropped>,
}

/// The APIs a provider name in a header stands for (`None`: not known).
fn apis(name: &str) -> Option<&'static [Provider]> {
    let n = name.to_ascii_lowercase();
    if n.starts_with("anthropic") {
        Some(&[Provider::Anthropic])
    } else if matches!(n.as_str(), "openai-chat" | "openai_chat" | "chat") {
        Some(&[Provider::OpenAiChat])
    } else if matches!(
        n.as_str(),
        "openai-responses" | "openai_responses" | "responses"
    ) {
        Some(&[Provider::OpenAiResponses])
    } else if n == "openai" || n.starts_with("azure") {
        Some(&[Provider::OpenAiResponses, Provider::OpenAiChat])
    } else {
        None
    }
}

impl<'a> Render<'a> {
    pub fn new(target: Provider, header: Option<&'a EpochHeader>) -> Render<'a> {
        let foreign = header
            .and_then(|h| apis(&h.config.provider))
            .is_some_and(|a| !a.contains(&target));
        Render {
            header,
            target,
            foreign,
            dropped: Vec::new(),
        }
    }

    /// Record a drop (counted when the same thing is dropped again).
    pub fn drop(&mut self, what: String, why: &str) {
        match self.dropped.iter_mut().find(|d| d.what == what) {
            Some(d) => d.count += 1,
            None => self.dropped.push(Dropped {
                what,
                why: why.to_string(),
                count: 1,
            }),
        }
    }

    /// A block `kind` this API cannot take.
    pub fn drop_block(&mut self, kind: &str) {
        let why = format!("{} has no such block", self.target.api_name());
        self.drop(format!("block {kind}"), &why);
    }

    /// A block of a type nobody knows: sent to the API it was logged for,
    /// dropped (and reported) when the header is another API's.
    pub fn keep_unknown(&mut self, b: &Value) -> bool {
        if !self.foreign {
            return true;
        }
        let kind = b.get("type").and_then(Value::as_str).unwrap_or("(untyped)");
        let why = format!(
            "an unknown block logged for another API; {} may refuse it",
            self.target.api_name()
        );
        self.drop(format!("block {kind}"), &why);
        false
    }

    /// `model` and the call parameters, at the top level of the body.
    pub fn base(&mut self) -> Map<String, Value> {
        let mut m = Map::new();
        let Some(h) = self.header else {
            return m;
        };
        m.insert("model".into(), Value::String(h.config.model.clone()));
        for (k, v) in &h.config.params {
            if !self.foreign {
                m.insert(k.clone(), v.clone());
                continue;
            }
            match translate(self.target, k, v) {
                Some((name, value)) if accepts(self.target, &name) => {
                    m.insert(name, value);
                }
                _ => {
                    let why = format!("not a parameter of {}", self.target.api_name());
                    self.drop(format!("param {k}"), &why);
                }
            }
        }
        m
    }

    /// The header's tools in the target's shape (`shape`), into `b` as
    /// `tools` unless there are none: as written for the target's own API,
    /// through [`Render::foreign_tool`] for a foreign header.
    pub fn insert_tools(
        &mut self,
        b: &mut Map<String, Value>,
        shape: impl Fn(&ToolSchema) -> Value,
    ) {
        let Some(h) = self.header else { return };
        let tools: Vec<Value> = if self.foreign {
            h.tools
                .iter()
                .filter_map(|t| self.foreign_tool(t))
                .map(|t| shape(&t))
                .collect()
        } else {
            h.tools.iter().map(shape).collect()
        };
        if !tools.is_empty() {
            b.insert("tools".into(), Value::Array(tools));
        }
    }

    /// A tool of the header for a foreign header: `None` when the target
    /// cannot take it (another API's hosted tool), else its fields the
    /// target takes (the caller shapes it).
    pub fn foreign_tool(&mut self, t: &ToolSchema) -> Option<ToolSchema> {
        let kind = t.extra.get("type").and_then(Value::as_str);
        if kind.is_some_and(|k| k != "function" && k != "custom") {
            let why = format!(
                "another API's hosted tool; {} has no such tool",
                self.target.api_name()
            );
            let what = match t.name.as_str() {
                "" => format!("tool (type {})", kind.unwrap_or("")),
                name => format!("tool {name} (type {})", kind.unwrap_or("")),
            };
            self.drop(what, &why);
            return None;
        }
        let mut out = ToolSchema {
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
            extra: Map::new(),
        };
        if out.input_schema.is_null() {
            if let Some(p) = t.extra.get("parameters") {
                out.input_schema = p.clone();
            }
        }
        let keep: &[&str] = match self.target {
            Provider::Anthropic => &[],
            Provider::OpenAiResponses | Provider::OpenAiChat => &["strict"],
        };
        for (k, v) in &t.extra {
            if keep.contains(&k.as_str()) {
                out.extra.insert(k.clone(), v.clone());
            } else if k != "type" && k != "parameters" {
                let why = format!("not a tool field of {}", self.target.api_name());
                self.drop(format!("tool field {k}"), &why);
            }
        }
        Some(out)
    }
}

impl Provider {
    fn api_name(self) -> &'static str {
        match self {
            Provider::Anthropic => "Anthropic Messages",
            Provider::OpenAiResponses => "OpenAI Responses",
            Provider::OpenAiChat => "OpenAI Chat Completions",
        }
    }
}

/// A parameter of another API under this API's name, with its value in
/// this API's shape (`None`: no equivalent).
fn translate(target: Provider, name: &str, v: &Value) -> Option<(String, Value)> {
    let max = ["max_tokens", "max_output_tokens", "max_completion_tokens"];
    let own = |n: &str| Some((n.to_string(), v.clone()));
    match (target, name) {
        (Provider::Anthropic, n) if max.contains(&n) => own("max_tokens"),
        (Provider::OpenAiResponses, n) if max.contains(&n) => own("max_output_tokens"),
        (Provider::OpenAiChat, n) if max.contains(&n) => own("max_completion_tokens"),
        (Provider::Anthropic, "stop") => Some((
            "stop_sequences".into(),
            match v {
                Value::String(s) => json!([s]),
                other => other.clone(),
            },
        )),
        (Provider::OpenAiChat, "stop_sequences") => own("stop"),
        (Provider::OpenAiResponses, "reasoning_effort") => {
            Some(("reasoning".into(), json!({ "effort": v })))
        }
        (Provider::OpenAiChat, "reasoning") => v
            .get("effort")
            .map(|e| ("reasoning_effort".to_string(), e.clone())),
        (_, "tool_choice") => tool_choice(target, v).map(|c| ("tool_choice".to_string(), c)),
        _ => own(name),
    }
}

/// A `tool_choice` of any of the three APIs in `target`'s shape.
fn tool_choice(target: Provider, v: &Value) -> Option<Value> {
    // (mode, forced tool name)
    let (mode, name): (&str, Option<&str>) = match v {
        Value::String(s) => (s.as_str(), None),
        Value::Object(o) => {
            let kind = o.get("type").and_then(Value::as_str)?;
            let name = o
                .get("name")
                .or_else(|| o.get("function").and_then(|f| f.get("name")))
                .and_then(Value::as_str);
            match kind {
                "tool" | "function" => ("tool", Some(name?)),
                "any" => ("required", None),
                other => (other, None),
            }
        }
        _ => return None,
    };
    Some(match (target, mode, name) {
        (Provider::Anthropic, "tool", Some(n)) => json!({"type": "tool", "name": n}),
        (Provider::Anthropic, "required", _) => json!({"type": "any"}),
        (Provider::Anthropic, m @ ("auto" | "none"), _) => json!({ "type": m }),
        (Provider::OpenAiResponses, "tool", Some(n)) => json!({"type": "function", "name": n}),
        (Provider::OpenAiChat, "tool", Some(n)) => {
            json!({"type": "function", "function": {"name": n}})
        }
        (_, m @ ("auto" | "none" | "required"), _) if target != Provider::Anthropic => json!(m),
        _ => return None,
    })
}

/// Whether a top-level body field is a parameter of `target`'s API.
fn accepts(target: Provider, name: &str) -> bool {
    const ANTHROPIC: &[&str] = &[
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "tool_choice",
        "thinking",
        "stream",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
    ];
    const RESPONSES: &[&str] = &[
        "max_output_tokens",
        "temperature",
        "top_p",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning",
        "include",
        "store",
        "metadata",
        "stream",
        "text",
        "truncation",
        "service_tier",
        "user",
        "previous_response_id",
        "prompt_cache_key",
        "safety_identifier",
        "background",
        "max_tool_calls",
        "top_logprobs",
    ];
    const CHAT: &[&str] = &[
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "seed",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "stream",
        "stream_options",
        "reasoning_effort",
        "service_tier",
        "store",
        "metadata",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
    ];
    match target {
        Provider::Anthropic => ANTHROPIC.contains(&name),
        Provider::OpenAiResponses => RESPONSES.contains(&name),
        Provider::OpenAiChat => CHAT.contains(&name),
    }
}
