//! docs/EVENTS.md and `turnstone schema` (issue 39 §1): the document is
//! what the generator prints from the engine's types, so it cannot drift;
//! every core kind has a schema; its example is appended as it is.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_turnstone");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn events_md_is_what_the_generator_prints() {
    let (code, printed, _) = run(&["schema", "--markdown"]);
    assert_eq!(code, 0);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/EVENTS.md");
    let file = std::fs::read_to_string(path).unwrap();
    assert!(
        file == printed,
        "docs/EVENTS.md differs from `turnstone schema --markdown`: regenerate it with\n  cargo run -p turnstone-cli -- schema --markdown > docs/EVENTS.md"
    );
    for k in turnstone::session::CoreKind::ALL {
        assert!(
            file.contains(&format!("\n## {}\n", k.name())),
            "{}",
            k.name()
        );
    }
}

#[test]
fn schema_prints_every_kind_and_refuses_an_unknown_one() {
    let (code, all, _) = run(&["schema"]);
    assert_eq!(code, 0);
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    let kinds = all.as_object().unwrap();
    assert_eq!(kinds.len(), turnstone::session::CoreKind::ALL.len());
    assert_eq!(kinds["tool/result"]["x-turnstone-surface"], true);
    assert_eq!(kinds["tool/call"]["x-turnstone-surface"], false);
    let (code, one, _) = run(&["schema", "turn/end"]);
    assert_eq!(code, 0);
    let one: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(one, kinds["turn/end"]);
    assert_eq!(one["required"], serde_json::json!(["turn_id", "reason"]));
    let (code, _, err) = run(&["schema", "turn/ended"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"turn/ended\" is not a core kind"), "{err}");
}

#[test]
fn each_documented_example_is_appended_as_it_is() {
    use std::sync::Arc;
    use turnstone::session::{kind_example, CoreKind, Registry, Session, SurfaceOp};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    // In an order the session's rules accept.
    let order = [
        CoreKind::RequestContext,
        CoreKind::SessionMeta,
        CoreKind::TurnStart,
        CoreKind::UserMessage,
        CoreKind::StepStart,
        CoreKind::RequestHeader,
        CoreKind::AssistantChunk,
        CoreKind::AssistantMessage,
        CoreKind::ToolCall,
        CoreKind::ToolResult,
        CoreKind::StepEnd,
        CoreKind::TurnEnd,
    ];
    for k in order {
        let op = k.is_surface().then_some(SurfaceOp::Append);
        let seq = s
            .append_json(k.name(), kind_example(k), op)
            .unwrap_or_else(|e| panic!("{}: {e}", k.name()));
        let back = s.events(seq..seq + 1).unwrap();
        assert_eq!(back[0].to_json()["data"], kind_example(k), "{}", k.name());
    }
}
