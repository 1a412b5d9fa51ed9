//! Provider-native content end to end: each fixture in
//! `tests/fixtures/providers/` (written from the providers' public API
//! references) is a conversation — user messages, raw provider responses,
//! tool results — and the request body a live harness would send next. It
//! goes append → derive → adapter live, and again after close and reopen;
//! both must equal the fixture's body, and every block and usage field the
//! provider sent must come back equal as JSON.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use turnstone::session::fold_arc;
use turnstone::session::internals::first_json_difference;
use turnstone::session::*;
use turnstone::Store;

fn fixtures() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let v = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            (p.file_stem().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn blocks(v: &Value) -> Vec<ContentBlock> {
    serde_json::from_value(v.clone()).unwrap()
}

/// Append the fixture's conversation as a harness would; returns the raw
/// responses in order.
fn play(s: &mut Session, provider: Provider, f: &Value) -> Vec<Value> {
    let h = &f["header"];
    let spec = RequestSpec {
        provider: h["provider"].as_str().unwrap().into(),
        model: h["model"].as_str().unwrap().into(),
        explicit: serde_json::from_value(h["params"].clone()).unwrap_or_default(),
        adapter_defaults: Default::default(),
        system: serde_json::from_value(h["system"].clone()).unwrap_or(None),
        tools: serde_json::from_value(h["tools"].clone()).unwrap_or_default(),
    };
    s.prepare_request(&spec).unwrap();
    let mut responses = Vec::new();
    for step in f["steps"].as_array().unwrap() {
        if let Some(u) = step.get("user") {
            s.append(UserMessage { content: blocks(u) }, SurfaceOp::Append)
                .unwrap();
        } else if let Some(r) = step.get("response") {
            let m = AssistantMessage::from_response(provider, r);
            let calls = m.tool_calls();
            s.append(m, SurfaceOp::Append).unwrap();
            for c in calls {
                s.append(c, ()).unwrap();
            }
            responses.push(r.clone());
        } else if let Some(t) = step.get("tool_result") {
            s.append(
                ToolResult {
                    call_id: t["call_id"].as_str().unwrap().into(),
                    content: blocks(&t["content"]),
                    is_error: t["is_error"].as_bool().unwrap_or(false),
                    status: None,
                },
                SurfaceOp::Append,
            )
            .unwrap();
        } else {
            panic!("unknown step {step}");
        }
    }
    responses
}

fn assert_body(name: &str, when: &str, got: &Value, want: &Value) {
    if let Some(d) = first_json_difference(want, got) {
        panic!(
            "{name} ({when}): {d}\n--- rebuilt body ---\n{}",
            serde_json::to_string_pretty(got).unwrap()
        );
    }
}

#[test]
fn every_fixture_rebuilds_the_request_live_and_after_reopen() {
    let fx = fixtures();
    assert!(fx.len() >= 12, "at least 12 fixtures, found {}", fx.len());
    let providers: std::collections::HashSet<String> = fx
        .iter()
        .map(|(_, f)| f["provider"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(providers.len(), 3, "fixtures for all three APIs");
    for (name, f) in &fx {
        let provider: Provider = f["provider"].as_str().unwrap().parse().unwrap();
        let want = &f["expected_request"];
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let reg = Arc::new(Registry::new());
        let mut s = Session::create(store.clone(), name, reg.clone()).unwrap();
        let responses = play(&mut s, provider, f);
        let live = s.request_body(provider);
        assert_body(name, "live", &live, want);
        s.check_request_body(provider, want).unwrap();
        validate_messages(s.derive_messages()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let live_msgs = serde_json::to_string(
            &s.derive_messages()
                .iter()
                .map(|m| (**m).clone())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        s.flush().unwrap();
        drop(s);
        Arc::try_unwrap(store).ok().unwrap().close().unwrap();

        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut s = Session::open(store.clone(), name, reg.clone()).unwrap();
        assert_body(name, "after reopen", &s.request_body(provider), want);
        assert_eq!(
            serde_json::to_string(
                &s.derive_messages()
                    .iter()
                    .map(|m| (**m).clone())
                    .collect::<Vec<_>>()
            )
            .unwrap(),
            live_msgs,
            "{name}: messages differ after reopen"
        );
        // Every response's blocks and usage fields, as logged, equal what
        // the provider sent.
        let logged: Vec<AssistantMessage> = s
            .events(0..s.len())
            .unwrap()
            .iter()
            .filter_map(|e| e.typed::<AssistantMessage>())
            .collect();
        assert_eq!(logged.len(), responses.len(), "{name}");
        let mut meter = Arc::new(TokenState::default());
        for e in s.events(0..s.len()).unwrap() {
            fold_arc(&TokenMeter, &mut meter, &e);
        }
        let (mut cache_read, mut reasoning) = (0, 0);
        for (m, r) in logged.iter().zip(&responses) {
            let sent = match provider {
                Provider::Anthropic => r["content"].clone(),
                Provider::OpenAiResponses => r["output"].clone(),
                Provider::OpenAiChat => Value::Null,
            };
            if !sent.is_null() {
                let got: Vec<Value> = m.content.iter().map(ContentBlock::to_json).collect();
                assert_eq!(Value::Array(got), sent, "{name}: logged blocks differ");
            }
            let u = serde_json::to_value(m.usage.as_ref().unwrap()).unwrap();
            for (k, v) in r["usage"].as_object().unwrap() {
                assert_eq!(&u[k], v, "{name}: usage field {k}");
            }
            cache_read += m
                .usage
                .as_ref()
                .unwrap()
                .cache_read_input_tokens
                .unwrap_or(0);
            reasoning += m.usage.as_ref().unwrap().reasoning_tokens.unwrap_or(0);
            for k in ["id", "model"] {
                assert_eq!(&m.extra[k], &r[k], "{name}: response field {k} kept");
            }
        }
        assert_eq!(meter.cache_read_input_tokens, cache_read, "{name}");
        assert_eq!(meter.reasoning_tokens, reasoning, "{name}");
    }
}

#[test]
fn a_body_that_differs_names_the_first_path() {
    let (name, f) = fixtures()
        .into_iter()
        .find(|(n, _)| n == "anthropic-thinking-tool-loop")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, &name, Arc::new(Registry::new())).unwrap();
    play(&mut s, Provider::Anthropic, &f);
    // A harness that dropped a thinking signature is caught.
    let mut body = f["expected_request"].clone();
    body["messages"][3]["content"][0]
        .as_object_mut()
        .unwrap()
        .remove("signature");
    let err = s
        .check_request_body(Provider::Anthropic, &body)
        .unwrap_err()
        .to_string();
    assert!(err.contains("/messages/3/content/0/signature"), "{err}");
}
