//! Request headers: resolving the epoch header of the next request, deciding
//! whether a `request/header` must be written (`initial`, `resume`, `change`),
//! and checking a request against the one rebuildable from the log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Difference;

use crate::session::codec::event::{CallConfig, EpochHeader, SystemPrompt, ToolSchema};
use crate::session::fold::messages::Message;

/// What an agent loop asks for before a request.
///
/// As JSON (what the Python and Node packages pass), `explicit` is named
/// `params`; `provider` and `model` are required, every other field is
/// optional, and an unknown field is refused (a misspelt `tool` would
/// otherwise silently send no tools):
///
/// ```json
/// {"provider": "anthropic", "model": "claude-sonnet-4-5",
///  "params": {"max_tokens": 1024}, "system": "Be brief.",
///  "tools": [{"name": "ls", "description": "list files", "input_schema": {"type": "object"}}]}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// Provider name.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// Parameters the caller set explicitly: always kept.
    #[serde(rename = "params", default)]
    pub explicit: BTreeMap<String, Value>,
    /// Parameters the current route's adapter supplies as defaults: used only
    /// where the caller set nothing, and dropped before the next request.
    #[serde(default)]
    pub adapter_defaults: BTreeMap<String, Value>,
    /// The system prompt, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemPrompt>,
    /// Tool schemas.
    #[serde(default)]
    pub tools: Vec<ToolSchema>,
}

impl RequestSpec {
    /// Start the next request from the previous header: explicit values are
    /// kept, the previous route's adapter defaults are dropped (the caller
    /// supplies the new route's defaults).
    pub fn carry_forward(prev: &EpochHeader) -> RequestSpec {
        let explicit = prev
            .config
            .params
            .iter()
            .filter(|(k, _)| !prev.adapter_defaults.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        RequestSpec {
            provider: prev.config.provider.clone(),
            model: prev.config.model.clone(),
            explicit,
            adapter_defaults: BTreeMap::new(),
            system: prev.system.clone(),
            tools: prev.tools.clone(),
        }
    }

    /// Whether this spec resolves to `header` (`self.resolve() == *header`),
    /// without building the resolved header: the check made before every
    /// request, where the answer is nearly always yes.
    pub fn resolves_to(&self, header: &EpochHeader) -> bool {
        let c = &header.config;
        if c.provider != self.provider
            || c.model != self.model
            || header.system != self.system
            || header.tools != self.tools
        {
            return false;
        }
        // The defaults that apply, in the order resolve() lists them.
        let mut from_defaults = self
            .adapter_defaults
            .iter()
            .filter(|(k, _)| !self.explicit.contains_key(*k));
        let mut listed = header.adapter_defaults.iter();
        let mut applied = 0;
        loop {
            match (from_defaults.next(), listed.next()) {
                (None, None) => break,
                (Some((k, v)), Some(name)) if k == name && c.params.get(k) == Some(v) => {
                    applied += 1
                }
                _ => return false,
            }
        }
        c.params.len() == self.explicit.len() + applied
            && self
                .explicit
                .iter()
                .all(|(k, v)| c.params.get(k) == Some(v))
    }

    /// The epoch header this spec resolves to.
    pub fn resolve(&self) -> EpochHeader {
        let mut params = self.explicit.clone();
        let mut from_defaults = Vec::new();
        for (k, v) in &self.adapter_defaults {
            if !params.contains_key(k) {
                params.insert(k.clone(), v.clone());
                from_defaults.push(k.clone());
            }
        }
        EpochHeader {
            config: CallConfig {
                provider: self.provider.clone(),
                model: self.model.clone(),
                params,
            },
            adapter_defaults: from_defaults,
            system: self.system.clone(),
            tools: self.tools.clone(),
        }
    }
}

/// A model request as the log can rebuild it: the current header and the
/// derived messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The latest request header.
    pub header: Option<EpochHeader>,
    /// The derived messages.
    pub messages: Vec<Message>,
}

/// Compare two requests; `None` when equal.
pub fn first_difference(expected: &Request, actual: &Request) -> Option<Difference> {
    let e = serde_json::to_value(expected).expect("request serializes");
    let a = serde_json::to_value(actual).expect("request serializes");
    diff_value(&e, &a, String::new())
}

/// Compare two JSON values (request bodies); `None` when equal, else the
/// first differing path in key order.
pub fn first_json_difference(expected: &Value, actual: &Value) -> Option<Difference> {
    diff_value(expected, actual, String::new())
}

fn short(v: Option<&Value>) -> String {
    match v {
        None => "nothing".into(),
        Some(v) => {
            let s = v.to_string();
            if s.len() > 120 {
                format!(
                    "{}…",
                    &s[..s.char_indices().nth(117).map_or(s.len(), |(i, _)| i)]
                )
            } else {
                s
            }
        }
    }
}

fn diff_value(e: &Value, a: &Value, path: String) -> Option<Difference> {
    match (e, a) {
        (Value::Object(eo), Value::Object(ao)) => {
            let mut keys: Vec<&String> = eo.keys().chain(ao.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{path}/{k}");
                match (eo.get(k), ao.get(k)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = diff_value(x, y, p) {
                            return Some(d);
                        }
                    }
                    (x, y) => {
                        return Some(Difference {
                            path: p,
                            expected: short(x),
                            actual: short(y),
                        })
                    }
                }
            }
            None
        }
        (Value::Array(ea), Value::Array(aa)) => {
            for i in 0..ea.len().max(aa.len()) {
                let p = format!("{path}/{i}");
                match (ea.get(i), aa.get(i)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = diff_value(x, y, p) {
                            return Some(d);
                        }
                    }
                    (x, y) => {
                        return Some(Difference {
                            path: p,
                            expected: short(x),
                            actual: short(y),
                        })
                    }
                }
            }
            None
        }
        _ if e == a => None,
        _ => Some(Difference {
            path: if path.is_empty() { "/".into() } else { path },
            expected: short(Some(e)),
            actual: short(Some(a)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn params() -> impl Strategy<Value = BTreeMap<String, Value>> {
        prop::collection::btree_map(
            prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(String::from),
            (0..3i64).prop_map(|n| json!(n)),
            0..4,
        )
    }

    fn spec() -> impl Strategy<Value = RequestSpec> {
        (
            prop::sample::select(vec!["p1", "p2"]),
            prop::sample::select(vec!["m1", "m2"]),
            params(),
            params(),
            prop::option::of(prop::sample::select(vec!["s1", "s2"])),
            0..3usize,
        )
            .prop_map(
                |(p, m, explicit, adapter_defaults, system, tools)| RequestSpec {
                    provider: p.into(),
                    model: m.into(),
                    explicit,
                    adapter_defaults,
                    system: system.map(SystemPrompt::from),
                    tools: (0..tools)
                        .map(|i| ToolSchema::new(format!("t{i}"), "", json!({})))
                        .collect(),
                },
            )
    }

    /// `h` with one field changed (`tweak` says which).
    fn tweaked(mut h: EpochHeader, tweak: u8) -> EpochHeader {
        match tweak {
            0 => {
                h.config.params.insert("z".into(), json!(1));
            }
            1 => {
                h.config.params.pop_first();
            }
            2 => h.adapter_defaults.reverse(),
            3 => h.adapter_defaults.push("a".into()),
            4 => {
                h.adapter_defaults.pop();
            }
            5 => {
                if let Some((_, v)) = h.config.params.iter_mut().last() {
                    *v = json!(9);
                }
            }
            _ => h.tools.clear(),
        }
        h
    }

    proptest! {
        /// `resolves_to` answers what comparing `resolve()` answers: for a
        /// spec's own header, another spec's header, and that header with
        /// one of its fields changed.
        #[test]
        fn resolves_to_is_resolve_then_compare(
            a in spec(),
            b in spec(),
            tweak in 0..7u8,
        ) {
            let own = a.resolve();
            prop_assert!(a.resolves_to(&own));
            let other = b.resolve();
            prop_assert_eq!(a.resolves_to(&other), a.resolve() == other);
            for h in [tweaked(other, tweak), tweaked(own, tweak)] {
                prop_assert_eq!(a.resolves_to(&h), a.resolve() == h);
            }
        }
    }

    #[test]
    fn adapter_defaults_are_dropped_and_explicit_kept() {
        let spec = RequestSpec {
            provider: "p1".into(),
            model: "m1".into(),
            explicit: [("temperature".to_string(), json!(0.2))].into(),
            adapter_defaults: [
                ("temperature".to_string(), json!(1.0)),
                ("max_tokens".to_string(), json!(4096)),
            ]
            .into(),
            system: Some("sys".into()),
            tools: vec![],
        };
        let h = spec.resolve();
        assert_eq!(h.config.params["temperature"], json!(0.2));
        assert_eq!(h.config.params["max_tokens"], json!(4096));
        assert_eq!(h.adapter_defaults, vec!["max_tokens".to_string()]);
        let mut next = RequestSpec::carry_forward(&h);
        assert!(!next.explicit.contains_key("max_tokens"));
        assert_eq!(next.explicit["temperature"], json!(0.2));
        next.model = "m2".into();
        next.adapter_defaults = [("top_p".to_string(), json!(0.9))].into();
        let h2 = next.resolve();
        assert!(!h2.config.params.contains_key("max_tokens"));
        assert_eq!(h2.adapter_defaults, vec!["top_p".to_string()]);
    }

    #[test]
    fn first_difference_names_the_path() {
        let a = Request {
            header: None,
            messages: vec![],
        };
        let mut b = a.clone();
        assert!(first_difference(&a, &b).is_none());
        b.header = Some(EpochHeader::default());
        let d = first_difference(&a, &b).unwrap();
        assert_eq!(d.path, "/header");
    }
}
