//! What the fleet's agents write: the models they switch between and the
//! request spec of each, the shell tool's schema, the image users and tools
//! attach, and the random text payloads are cut from ([`Gen`]). Kept apart
//! from the agent's turn machine (`agent`) so that the shape of a turn reads
//! without the details of its payloads.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::Rng;
use serde_json::json;
use turnstone::session::{RequestSpec, SystemPrompt, ToolSchema};

/// Bytes of random text each thread draws payload contents from.
const CORPUS_BYTES: usize = 192 * 1024;
pub(super) const MODELS: [(&str, u64); 2] = [("model-large", 200_000), ("model-small", 1_000_000)];

/// The request spec of model `model` (an index into [`MODELS`]) for
/// session `name`.
pub(super) fn build_spec(model: usize, name: &str) -> RequestSpec {
    let (model_name, _) = MODELS[model];
    RequestSpec {
        provider: "provider-a".into(),
        model: model_name.into(),
        explicit: [("temperature".to_string(), json!(0.7))].into(),
        adapter_defaults: [(
            "max_tokens".to_string(),
            json!(if model == 0 { 8192 } else { 4096 }),
        )]
        .into(),
        system: Some(SystemPrompt::from(format!(
            "You are fleet agent {name}. Use the shell tool to inspect the workspace."
        ))),
        tools: vec![tool_schema()],
    }
}

/// Random text for payloads: lowercase words and spaces (ASCII, so any
/// byte range of it is a string: `Gen::text` slices without a UTF-8 check).
pub(super) fn corpus(rng: &mut StdRng) -> String {
    let mut out = String::with_capacity(CORPUS_BYTES + 16);
    while out.len() < CORPUS_BYTES {
        let n = rng.gen_range(1..10);
        for _ in 0..n {
            out.push(char::from(b'a' + rng.gen_range(0..26u8)));
        }
        out.push(' ');
    }
    out.truncate(CORPUS_BYTES);
    out
}

pub(super) struct Gen {
    pub(super) rng: StdRng,
    /// Shared by the tasks of one thread ([`Waits::Async`](super::agent::Waits::Async)).
    pub(super) corpus: Arc<str>,
    /// Longest text that still fits in one segment with its frame.
    pub(super) max_text: usize,
}

impl Gen {
    pub(super) fn text(&mut self, lo: usize, hi: usize) -> String {
        let n = self
            .rng
            .gen_range(lo..=hi)
            .min(self.corpus.len())
            .min(self.max_text);
        let start = self.rng.gen_range(0..=self.corpus.len() - n);
        // ASCII: every index is a char boundary.
        self.corpus
            .get(start..start + n)
            .unwrap_or_default()
            .to_owned()
    }
}

/// A 1×1 PNG, base64: the image the fleet's users and tools attach.
pub(super) const TINY_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn tool_schema() -> ToolSchema {
    ToolSchema {
        name: "shell".into(),
        description: "Run a shell command and return its output.".into(),
        input_schema: json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
        extra: Default::default(),
    }
}
