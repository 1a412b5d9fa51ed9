//! The JSON Schema of each core kind's data, generated from the Rust types
//! that decode it (`turnstone schema`, docs/EVENTS.md): what an `append`
//! from any language must send.

use schemars::{schema_for, JsonSchema};
use serde_json::{json, Value};

use crate::session::codec::event::*;

fn of<T: JsonSchema>(kind: CoreKind) -> Value {
    let mut v = serde_json::to_value(schema_for!(T)).expect("a schema is JSON");
    if let Value::Object(o) = &mut v {
        o.insert("title".into(), Value::from(kind.name()));
        o.insert("x-turnstone-surface".into(), Value::from(kind.is_surface()));
    }
    v
}

/// The JSON Schema (draft 2020-12) of `kind`'s data, titled with the kind's
/// name; `x-turnstone-surface` says whether appending it needs a surface op.
pub fn kind_schema(kind: CoreKind) -> Value {
    match kind {
        CoreKind::TurnStart => of::<TurnStart>(kind),
        CoreKind::TurnEnd => of::<TurnEnd>(kind),
        CoreKind::StepStart => of::<StepStart>(kind),
        CoreKind::StepEnd => of::<StepEnd>(kind),
        CoreKind::UserMessage => of::<UserMessage>(kind),
        CoreKind::AssistantChunk => of::<AssistantChunk>(kind),
        CoreKind::AssistantMessage => of::<AssistantMessage>(kind),
        CoreKind::ToolCall => of::<ToolCall>(kind),
        CoreKind::ToolResult => of::<ToolResult>(kind),
        CoreKind::RequestHeader => of::<RequestHeader>(kind),
        CoreKind::RequestContext => of::<RequestContext>(kind),
        CoreKind::SessionEndSeed => of::<SessionEndSeed>(kind),
        CoreKind::CompactionStart => of::<CompactionStart>(kind),
        CoreKind::CompactionSummary => of::<CompactionSummary>(kind),
        CoreKind::CompactionEnd => of::<CompactionEnd>(kind),
        CoreKind::CompactionPrune => of::<CompactionPrune>(kind),
        CoreKind::SessionMeta => of::<MetaUpdate>(kind),
        CoreKind::SessionDelete => of::<SessionDelete>(kind),
    }
}

/// The schema of the core kind named `name` (`turn/end`), or with `None`
/// every core kind's as one object keyed by name: what `turnstone schema`
/// prints and the packages' `schema()` returns. An unknown name is `Err`
/// with the list of core kinds, for the caller's usage error.
pub fn schema_named(name: Option<&str>) -> Result<Value, String> {
    match name {
        Some(name) => CoreKind::from_name(name).map(kind_schema).ok_or_else(|| {
            let known: Vec<&str> = CoreKind::ALL.iter().map(|k| k.name()).collect();
            format!(
                "{name:?} is not a core kind; the core kinds are {}",
                known.join(", ")
            )
        }),
        None => Ok(Value::Object(
            CoreKind::ALL
                .iter()
                .map(|k| (k.name().to_string(), kind_schema(*k)))
                .collect(),
        )),
    }
}

/// One example of `kind`'s data, as an `append` sends it (each one is
/// checked to decode as the kind by this module's tests).
pub fn kind_example(kind: CoreKind) -> Value {
    match kind {
        CoreKind::TurnStart => json!({"turn_id": "t1"}),
        CoreKind::TurnEnd => json!({"turn_id": "t1", "reason": {"kind": "completed"}}),
        CoreKind::StepStart => json!({"turn_id": "t1", "step_id": "s1"}),
        CoreKind::StepEnd => {
            json!({"turn_id": "t1", "step_id": "s1", "reason": {"kind": "tool_use"}})
        }
        CoreKind::UserMessage => {
            json!({"content": [{"type": "text", "text": "What is in README.md?"}]})
        }
        CoreKind::AssistantChunk => json!({"index": 0, "text": "Let me"}),
        CoreKind::AssistantMessage => json!({
            "content": [
                {"type": "thinking", "thinking": "The user wants the file.", "signature": "EqQBCkgIBRAB"},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "README.md"}}
            ],
            "usage": {"input_tokens": 120, "output_tokens": 40},
            "stop_reason": "tool_use",
            "id": "msg_1",
            "model": "claude-sonnet-4-5"
        }),
        CoreKind::ToolCall => {
            json!({"call_id": "toolu_1", "name": "read_file", "input": {"path": "README.md"}})
        }
        CoreKind::ToolResult => {
            json!({"call_id": "toolu_1", "content": [{"type": "text", "text": "# turnstone"}]})
        }
        CoreKind::RequestHeader => json!({
            "reason": "initial",
            "header": {
                "config": {"provider": "anthropic", "model": "claude-sonnet-4-5", "params": {"max_tokens": 1024}},
                "system": "Be brief.",
                "tools": [{"name": "read_file", "description": "Read a file.",
                           "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
            }
        }),
        CoreKind::RequestContext => {
            json!({"provider": "anthropic", "model": "claude-sonnet-4-5", "context_window": 200000})
        }
        CoreKind::SessionEndSeed => json!({}),
        CoreKind::CompactionStart => json!({"compaction_id": "k1"}),
        CoreKind::CompactionSummary => {
            json!({"compaction_id": "k1", "text": "The user asked for README.md; it was read."})
        }
        CoreKind::CompactionEnd => json!({"compaction_id": "k1"}),
        CoreKind::CompactionPrune => json!({"replaced_seqs": [7], "tokens_saved": 1200}),
        CoreKind::SessionMeta => {
            json!({"title": "Fix the build", "add_tags": ["ci"], "fields": {"user": "ada"}})
        }
        CoreKind::SessionDelete => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_schema_naming_its_required_fields() {
        for &k in CoreKind::ALL {
            let s = kind_schema(k);
            assert_eq!(s["title"], k.name());
            assert_eq!(s["type"], "object", "{}", k.name());
        }
        let end = kind_schema(CoreKind::TurnEnd);
        let required: Vec<&str> = end["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(required, ["turn_id", "reason"]);
        for &k in CoreKind::ALL {
            crate::session::codec::envelope::validate_core(k, &kind_example(k))
                .unwrap_or_else(|e| panic!("{} example: {e:?}", k.name()));
            let required = kind_schema(k)["required"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for field in required {
                assert!(
                    kind_example(k).get(field.as_str().unwrap()).is_some(),
                    "{} example has {field}",
                    k.name()
                );
            }
        }
        let text = end.to_string();
        for variant in ["completed", "cancelled", "error", "interrupted"] {
            assert!(text.contains(variant), "{variant} in {text}");
        }
    }
}
