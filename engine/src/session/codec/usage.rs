//! Token usage of a model response: the provider's own fields kept as
//! sent, and the normalised counts the engine sums.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::session::codec::content::Extra;

/// Token usage of a model response, in the provider's own fields plus the
/// common ones the engine sums.
///
/// `input_tokens`, `output_tokens`, `cache_read_input_tokens`,
/// `cache_creation_input_tokens` and `reasoning_tokens` are the normalised
/// counts; every other field the provider sent (OpenAI's `prompt_tokens`,
/// `*_tokens_details`, Anthropic's `server_tool_use`, …) is kept in `extra`
/// and stored unchanged. [`Usage::from_provider`] fills the normalised
/// counts from an Anthropic, Responses or Chat Completions usage object.
/// Note the providers differ: OpenAI's input count includes cached tokens,
/// Anthropic's does not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Input tokens, as the provider counts them.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: Option<u64>,
    /// Input tokens written to the prompt cache.
    pub cache_creation_input_tokens: Option<u64>,
    /// Reasoning tokens, when reported.
    pub reasoning_tokens: Option<u64>,
    /// Every other field, unchanged.
    pub extra: Extra,
}

const USAGE_FIELDS: [&str; 5] = [
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "reasoning_tokens",
];

impl Usage {
    /// Input and output counts only.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            ..Default::default()
        }
    }

    /// Read a provider's usage object, keeping every field: the normalised
    /// counts are filled from whichever shape it has (Anthropic's own
    /// names; Responses' `input_tokens_details.cached_tokens` and
    /// `output_tokens_details.reasoning_tokens`; Chat's `prompt_tokens`,
    /// `completion_tokens` and their details).
    ///
    /// ```
    /// use serde_json::json;
    /// use turnstone::session::Usage;
    /// let chat = json!({"prompt_tokens": 30, "completion_tokens": 9,
    ///                   "prompt_tokens_details": {"cached_tokens": 20}});
    /// let u = Usage::from_provider(&chat);
    /// assert_eq!((u.input_tokens, u.cache_read_input_tokens), (30, Some(20)));
    /// assert_eq!(serde_json::to_value(&u).unwrap()["prompt_tokens"], 30); // kept
    /// ```
    pub fn from_provider(v: &Value) -> Usage {
        let mut u: Usage = serde_json::from_value(v.clone()).unwrap_or_default();
        let num = |path: &[&str]| {
            let mut cur = v;
            for p in path {
                cur = cur.get(p)?;
            }
            cur.as_u64()
        };
        if !u.extra.is_empty() {
            if let Some(n) = num(&["prompt_tokens"]) {
                u.input_tokens = n;
            }
            if let Some(n) = num(&["completion_tokens"]) {
                u.output_tokens = n;
            }
            u.cache_read_input_tokens = u
                .cache_read_input_tokens
                .or_else(|| num(&["input_tokens_details", "cached_tokens"]))
                .or_else(|| num(&["prompt_tokens_details", "cached_tokens"]));
            u.reasoning_tokens = u
                .reasoning_tokens
                .or_else(|| num(&["output_tokens_details", "reasoning_tokens"]))
                .or_else(|| num(&["completion_tokens_details", "reasoning_tokens"]));
        }
        u
    }
}

/// The JSON Schema of usage (`turnstone schema`): the provider's usage
/// object as sent; the normalised counts are read when they are unsigned
/// integers and every field is kept.
impl schemars::JsonSchema for Usage {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Usage".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Token usage, every field kept as sent. `input_tokens`, `output_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens` and `reasoning_tokens` are read as the normalised counts when they are unsigned integers (a response body logged with its provider maps OpenAI's `prompt_tokens`, `completion_tokens` and `*_tokens_details` to them).",

            "type": "object",
            "additionalProperties": true,
            "examples": [{"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100}]
        })
    }
}

impl Serialize for Usage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = self.extra.clone();
        m.insert("input_tokens".into(), self.input_tokens.into());
        m.insert("output_tokens".into(), self.output_tokens.into());
        let opt = [
            ("cache_read_input_tokens", self.cache_read_input_tokens),
            (
                "cache_creation_input_tokens",
                self.cache_creation_input_tokens,
            ),
            ("reasoning_tokens", self.reasoning_tokens),
        ];
        for (k, v) in opt {
            if let Some(v) = v {
                m.insert(k.into(), v.into());
            }
        }
        m.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Usage {
    /// The normalised counts are taken only when they are unsigned
    /// integers; any other value (a `null`, say) stays in `extra` as sent.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut extra = Extra::deserialize(d)?;
        let mut take = |k: &str| match extra.get(k).and_then(Value::as_u64) {
            Some(n) => {
                extra.remove(k);
                Some(n)
            }
            None => None,
        };
        let [a, b, c, e, r] = USAGE_FIELDS.map(&mut take);
        Ok(Usage {
            input_tokens: a.unwrap_or(0),
            output_tokens: b.unwrap_or(0),
            cache_read_input_tokens: c,
            cache_creation_input_tokens: e,
            reasoning_tokens: r,
            extra,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_keeps_every_field_and_normalises() {
        let anthropic = json!({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7, "service_tier": "standard", "server_tool_use": {"web_search_requests": 1}});
        let u = Usage::from_provider(&anthropic);
        assert_eq!(
            (
                u.input_tokens,
                u.cache_read_input_tokens,
                u.cache_creation_input_tokens
            ),
            (10, Some(100), Some(7))
        );
        assert_eq!(serde_json::to_value(&u).unwrap(), anthropic);
        let chat = json!({"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39, "prompt_tokens_details": {"cached_tokens": 20}, "completion_tokens_details": {"reasoning_tokens": 4}});
        let u = Usage::from_provider(&chat);
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_input_tokens,
                u.reasoning_tokens
            ),
            (30, 9, Some(20), Some(4))
        );
        let v = serde_json::to_value(&u).unwrap();
        for (k, x) in chat.as_object().unwrap() {
            assert_eq!(&v[k], x, "{k} kept");
        }
        let responses = json!({"input_tokens": 50, "output_tokens": 8, "total_tokens": 58, "input_tokens_details": {"cached_tokens": 40}, "output_tokens_details": {"reasoning_tokens": 6}});
        let u = Usage::from_provider(&responses);
        assert_eq!(
            (u.cache_read_input_tokens, u.reasoning_tokens),
            (Some(40), Some(6))
        );
        // A null stays as sent.
        let odd = json!({"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": null});
        let u: Usage = serde_json::from_value(odd.clone()).unwrap();
        assert_eq!(serde_json::to_value(&u).unwrap(), odd);
    }
}
