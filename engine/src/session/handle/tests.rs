//! The handle's own tests: replaces, recorders, fork children.

use super::*;
use crate::session::{AssistantMessage, ContentBlock, ToolResult, UserMessage};

fn user(s: &mut Session, text: impl Into<String>) {
    s.append(
        UserMessage {
            content: vec![ContentBlock::text(text.into())],
        },
        SurfaceOp::Append,
    )
    .unwrap();
}

fn tool_use(id: &str) -> AssistantMessage {
    AssistantMessage {
        content: vec![ContentBlock::tool_use(id, "shell", serde_json::json!({}))],
        usage: None,
        stop_reason: None,
        extra: Default::default(),
    }
}

fn tool_result(id: &str, text: String) -> ToolResult {
    ToolResult {
        call_id: id.into(),
        content: vec![ContentBlock::text(text)],
        is_error: false,
        status: None,
    }
}

/// A tool use, its call and its result (`text`).
fn tool_round(s: &mut Session, id: &str, text: String) {
    s.append(tool_use(id), SurfaceOp::Append).unwrap();
    s.append(
        crate::session::ToolCall {
            call_id: id.into(),
            name: "shell".into(),
            input: serde_json::json!({}),
        },
        (),
    )
    .unwrap();
    s.append(tool_result(id, text), SurfaceOp::Append).unwrap();
}

fn derived(s: &mut Session) -> Vec<Message> {
    s.derive_messages().iter().map(|m| (**m).clone()).collect()
}

/// What a fresh open of session `id` derives.
fn derived_fresh(store: Arc<Store>, id: &str) -> Vec<Message> {
    derived(&mut Session::open(store, id, Arc::new(Registry::new())).unwrap())
}

/// A session that appends without ever deriving its messages holds the
/// messages of its surface only: a compaction drops the messages it
/// replaced there and then (before, they stayed until the next derive,
/// and the fleet, which never derives, grew with its log).
#[test]
fn a_replace_drops_the_messages_it_took_off_the_surface() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store.clone(), "s", Arc::new(Registry::new())).unwrap();
    for round in 0..20u64 {
        for i in 0..10 {
            user(&mut s, format!("round {round} message {i}"));
        }
        // Keep the last 5 nodes; the rest becomes one summary.
        let end = s.surface().len() as u64 - 5;
        s.compact(&format!("c{round}"), 0, end, &format!("summary {round}"))
            .unwrap();
        assert_eq!(s.surface().len(), 6);
        let (kept, settled) = s.state.messages.held();
        assert_eq!(kept + settled, s.surface().len(), "round {round}");
    }
    // What the session derives is what a fresh open of the log derives.
    let live = derived(&mut s);
    drop(s);
    assert_eq!(live.len(), 6);
    assert_eq!(live, derived_fresh(store, "s"));
}

/// A handle that only appends (a recorder) keeps none of its durable
/// messages; its first derive reads them back from the log, blobs
/// resolved, equal to what a fresh open derives, and keeps them from
/// then on.
#[test]
fn a_recorder_keeps_no_durable_message_and_derives_them_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    store.blobs().set_threshold(1024);
    let mut s = Session::create(store.clone(), "s", Arc::new(Registry::new())).unwrap();
    for turn in 0..8u64 {
        user(&mut s, format!("turn {turn}"));
        // Every other result goes out of line, as a blob.
        let body = "x".repeat(if turn % 2 == 0 { 4096 } else { 16 });
        tool_round(&mut s, &format!("c{turn}"), format!("{turn}{body}"));
        s.flush().unwrap();
    }
    // The last turn's messages settle at the next append.
    user(&mut s, "last");
    let (kept, settled) = s.state.messages.held();
    assert_eq!(settled, 8 * 3, "durable messages dropped");
    assert_eq!(kept, 1, "only the newest, not yet durable, is kept");
    assert_eq!(kept + settled, s.surface().len());
    assert_eq!(derived(&mut s).len(), 8 * 3 + 1);
    assert_eq!(s.state.messages.held(), (8 * 3 + 1, 0), "kept once derived");
    // Appends after a derive keep their messages, durable or not.
    s.append(tool_result("nobody", "stray".into()), SurfaceOp::Append)
        .unwrap();
    s.flush().unwrap();
    user(&mut s, "after");
    assert_eq!(s.state.messages.held().1, 0);
    let live = derived(&mut s);
    drop(s);
    assert_eq!(live, derived_fresh(store, "s"));
    match &live[2].content[0] {
        ContentBlock::ToolResult { content, .. } => {
            assert_eq!(
                serde_json::to_value(content).unwrap(),
                format!("0{}", "x".repeat(4096))
            );
        }
        other => panic!("not a tool result: {other:?}"),
    }
}

/// The pair check of a replace sees the tool-use ids of messages
/// dropped once durable: a compaction that would take a durable tool
/// result off the surface without its tool use is refused, and one that
/// takes both is not.
#[test]
fn a_replace_cannot_split_a_pair_whose_messages_were_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    tool_round(&mut s, "c1", "ok".into());
    s.flush().unwrap();
    user(&mut s, "next");
    assert_eq!(
        s.state.messages.held(),
        (1, 2),
        "the pair's messages dropped"
    );
    let err = s.compact("k1", 1, 2, "summary").unwrap_err();
    assert!(err.to_string().contains("\"c1\""), "{err}");
    s.compact("k2", 0, 2, "summary").unwrap();
    crate::session::validate_messages(s.derive_messages()).unwrap();
    assert_eq!(s.derive_messages().len(), 2);
}

/// A fork child's own appends are dropped once durable like any
/// recorder's, here waited for with `flush_async`; its first derive reads
/// them back through the fork (inherited events from the parent's
/// frames) and equals a fresh open's.
#[test]
fn a_fork_child_recording_with_async_flushes_derives_what_a_fresh_open_does() {
    use crate::session::codec::event::{TurnEnd, TurnEndReason, TurnStart};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let reg = Arc::new(Registry::new());
    let mut parent = Session::create(store.clone(), "p", reg.clone()).unwrap();
    parent
        .append(
            TurnStart {
                turn_id: "t0".into(),
            },
            (),
        )
        .unwrap();
    user(&mut parent, "inherited");
    let end = TurnEnd {
        turn_id: "t0".into(),
        reason: TurnEndReason::Completed,
    };
    parent.append(end, ()).unwrap();
    parent.flush().unwrap();
    let f = crate::session::fork(&store, "p", None, Some("c")).unwrap();
    let mut child = Session::open(store.clone(), &f.child, reg).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for i in 0..5 {
        tool_round(&mut child, &format!("c{i}"), format!("result {i}"));
        rt.block_on(child.flush_async()).unwrap();
    }
    user(&mut child, "next");
    // The inherited message was folded at open (kept); the child's own
    // ten are dropped; the newest is kept until durable.
    assert_eq!(child.state.messages.held(), (2, 10));
    let live = derived(&mut child);
    assert_eq!(live.len(), 12);
    drop(child);
    assert_eq!(live, derived_fresh(store, &f.child));
}
