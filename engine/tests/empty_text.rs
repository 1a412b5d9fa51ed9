//! An empty text block is kept in the log (model-visible iff logged: the
//! derived messages hold it) but not sent in an Anthropic request body,
//! which the API refuses ("text content blocks must be non-empty"); a
//! message left with no block is not sent either (issue 39 §6).

use std::sync::Arc;

use serde_json::json;
use turnstone::session::*;
use turnstone::Store;

#[test]
fn an_empty_text_block_is_logged_but_not_sent_to_anthropic() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    s.append(
        UserMessage {
            content: vec![ContentBlock::text("hi")],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    // A streamed answer that ended with an empty text block, then one
    // that is nothing but an empty text block.
    let m = AssistantMessage::from_response(
        Provider::Anthropic,
        &json!({"content": [{"type": "text", "text": "Hello."}, {"type": "text", "text": ""}]}),
    );
    s.append(m, SurfaceOp::Append).unwrap();
    s.append(
        UserMessage {
            content: vec![ContentBlock::text("")],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    s.append(
        UserMessage {
            content: vec![ContentBlock::text("more")],
        },
        SurfaceOp::Append,
    )
    .unwrap();
    let messages = s.derive_messages();
    assert_eq!(
        messages[1].content.len(),
        2,
        "the log keeps the empty block"
    );
    let body = s.request_body(Provider::Anthropic);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            {"role": "user", "content": [{"type": "text", "text": "more"}]},
        ])
    );
    assert!(s.check_request_body(Provider::Anthropic, &body).is_ok());
}
