//! Switching provider (issue 39 §7): a session logged for one API, rendered
//! for another, sends only what the target API accepts (parameters renamed
//! where it has the same one, tools in its shape, blocks it can take) and
//! reports what it dropped; a header for the target's own API passes
//! through as it is.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use turnstone::session::*;

fn session(dir: &std::path::Path) -> Session {
    let store = Arc::new(turnstone::Store::open(dir).unwrap());
    Session::create(store, "s", Arc::new(Registry::new())).unwrap()
}

fn spec(provider: &str, params: Value, tools: Value) -> RequestSpec {
    RequestSpec {
        provider: provider.into(),
        model: "m".into(),
        explicit: serde_json::from_value::<BTreeMap<String, Value>>(params).unwrap(),
        tools: serde_json::from_value(tools).unwrap(),
        ..Default::default()
    }
}

fn dropped(report: &[Dropped]) -> Vec<String> {
    report.iter().map(|d| d.what.clone()).collect()
}

/// An OpenAI Responses session: its parameters, a function tool and a
/// hosted tool, a reasoning item and a block nobody knows.
fn openai_session(s: &mut Session) {
    s.prepare_request(&spec(
        "openai",
        json!({"max_output_tokens": 500, "include": ["reasoning.encrypted_content"], "store": false,
               "reasoning": {"effort": "high"}, "tool_choice": "required", "temperature": 0.2}),
        json!([{"type": "function", "name": "ls", "description": "List.",
                "parameters": {"type": "object"}, "strict": true},
               {"type": "web_search_preview", "name": ""}]),
    ))
    .unwrap();
    s.append_json(
        "user/message",
        json!({"content": [{"type": "input_text", "text": "list"}]}),
        Some(SurfaceOp::Append),
    )
    .unwrap();
    s.append_json(
        "assistant/message",
        json!({"content": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "hologram", "frames": 3},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}
        ]}),
        Some(SurfaceOp::Append),
    )
    .unwrap();
}

#[test]
fn an_openai_session_rendered_for_anthropic_sends_only_what_anthropic_takes() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    openai_session(&mut s);
    let (body, report) = s.request_body_report(Provider::Anthropic);
    for gone in ["include", "store", "reasoning", "max_output_tokens"] {
        assert!(body.get(gone).is_none(), "{gone} in {body}");
    }
    assert_eq!(body["max_tokens"], 500, "max_output_tokens is renamed");
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(
        body["tools"],
        json!([{"name": "ls", "description": "List.", "input_schema": {"type": "object"}}]),
        "the function tool in Anthropic's shape, the hosted tool dropped"
    );
    let content = &body["messages"][1]["content"];
    assert_eq!(
        content,
        &json!([{"type": "tool_use", "id": "c1", "name": "ls", "input": {}}])
    );
    let what = dropped(&report);
    for d in [
        "param include",
        "param store",
        "param reasoning",
        "tool (type web_search_preview)",
        "tool field strict",
        "block reasoning",
        "block hologram",
    ] {
        assert!(what.contains(&d.to_string()), "{d} in {what:?}");
    }
    assert_eq!(report.len(), 7, "{report:?}");
    // What the harness sends is still checked against the same body.
    s.check_request_body(Provider::Anthropic, &body).unwrap();
    assert_eq!(s.request_body(Provider::Anthropic), body);
}

#[test]
fn the_same_session_rendered_for_its_own_api_passes_through() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    openai_session(&mut s);
    let (body, report) = s.request_body_report(Provider::OpenAiResponses);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["store"], false);
    assert_eq!(body["max_output_tokens"], 500);
    let input = body["input"].as_array().unwrap();
    assert!(input.iter().any(|i| i["type"] == "hologram"), "{input:?}");
    assert!(input.iter().any(|i| i["type"] == "reasoning"));
    assert!(report.is_empty(), "{report:?}");
    // "openai" stands for both OpenAI APIs: Chat drops only what it has no block for.
    let (chat, report) = s.request_body_report(Provider::OpenAiChat);
    assert_eq!(
        chat["max_output_tokens"], 500,
        "not renamed within one provider"
    );
    assert_eq!(dropped(&report), ["block reasoning"]);
}

#[test]
fn an_anthropic_session_rendered_for_openai_sends_only_what_openai_takes() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    s.prepare_request(&spec(
        "anthropic",
        json!({"max_tokens": 1024, "top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 2000},
               "tool_choice": {"type": "tool", "name": "ls"}, "stop_sequences": ["END"]}),
        json!([{"name": "ls", "description": "List.", "input_schema": {"type": "object"},
                "cache_control": {"type": "ephemeral"}},
               {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]),
    ))
    .unwrap();
    s.append_json(
        "user/message",
        json!({"content": [{"type": "text", "text": "list"}]}),
        Some(SurfaceOp::Append),
    )
    .unwrap();
    s.append_json(
        "assistant/message",
        json!({"content": [
            {"type": "thinking", "thinking": "hm", "signature": "EqQB"},
            {"type": "text", "text": "Listing."},
            {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}
        ]}),
        Some(SurfaceOp::Append),
    )
    .unwrap();
    let (r, report) = s.request_body_report(Provider::OpenAiResponses);
    assert_eq!(r["max_output_tokens"], 1024);
    for gone in ["max_tokens", "top_k", "thinking", "stop_sequences"] {
        assert!(r.get(gone).is_none(), "{gone} in {r}");
    }
    assert_eq!(r["tool_choice"], json!({"type": "function", "name": "ls"}));
    assert_eq!(
        r["tools"],
        json!([{"type": "function", "name": "ls", "description": "List.", "parameters": {"type": "object"}}])
    );
    let what = dropped(&report);
    for d in [
        "param top_k",
        "param thinking",
        "param stop_sequences",
        "tool field cache_control",
        "tool web_search (type web_search_20250305)",
        "block thinking",
    ] {
        assert!(what.contains(&d.to_string()), "{d} in {what:?}");
    }
    let (c, _) = s.request_body_report(Provider::OpenAiChat);
    assert_eq!(c["max_completion_tokens"], 1024);
    assert_eq!(c["stop"], json!(["END"]));
    assert_eq!(
        c["tool_choice"],
        json!({"type": "function", "function": {"name": "ls"}})
    );
    assert!(c.get("top_k").is_none());
}

#[test]
fn an_unknown_provider_name_passes_through() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    s.prepare_request(&spec(
        "my-gateway",
        json!({"max_tokens": 10, "gateway_route": "eu"}),
        json!([]),
    ))
    .unwrap();
    for p in Provider::ALL {
        let (body, report) = s.request_body_report(p);
        assert_eq!(body["gateway_route"], "eu", "{p}");
        assert!(report.is_empty());
    }
}
