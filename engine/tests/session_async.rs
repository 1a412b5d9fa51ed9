//! The async session API: durability waits that hold no thread (flush,
//! checkpoint, the async tool wrapper), typed live subscriptions, and (with
//! the `tokio` feature, on in the workspace build) open/repair/replay on the
//! blocking pool.

use std::sync::Arc;

use serde_json::json;
use turnstone::session::*;
use turnstone::Store;

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

fn user(t: &str) -> UserMessage {
    UserMessage {
        content: vec![ContentBlock::text(t)],
    }
}

fn new_session(dir: &std::path::Path, id: &str) -> (Arc<Store>, Session) {
    let store = Arc::new(Store::open(dir).unwrap());
    let s = Session::create(store.clone(), id, reg()).unwrap();
    (store, s)
}

#[tokio::test(flavor = "current_thread")]
async fn flush_async_makes_appends_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut s) = new_session(dir.path(), "s");
    s.append(user("hi"), SurfaceOp::Append).unwrap();
    let n = s.len();
    s.flush_async().await.unwrap();
    assert_eq!(store.session_meta("s").unwrap().durable_len, n);
    s.append(user("again"), SurfaceOp::Append).unwrap();
    s.flush_async().await.unwrap();
    assert_eq!(store.session_meta("s").unwrap().durable_len, n + 1);
}

#[tokio::test(flavor = "current_thread")]
async fn async_tool_body_runs_only_after_its_call_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut s) = new_session(dir.path(), "s");
    s.append(user("add"), SurfaceOp::Append).unwrap();
    let call_seq = s.len();
    let st = store.clone();
    let out = run_tool_async(
        &mut s,
        ToolScope::model(),
        "c1",
        "add",
        json!({"a": 1}),
        &CancelToken::new(),
        |_| Ok(()),
        async move |_s: &mut Session, scope: ToolScope| {
            let durable = st.session_meta("s").unwrap().durable_len;
            ToolBody {
                content: vec![ContentBlock::text("2")],
                is_error: false,
                value: (durable, scope.depth),
            }
        },
    )
    .await
    .unwrap();
    match out {
        ToolOutcome::Ran { value, result_seq } => {
            assert!(value.0 > call_seq, "body ran before tool/call was durable");
            assert_eq!(value.1, 1, "the body's scope is nested");
            assert_eq!(result_seq, call_seq + 1);
        }
        other => panic!("{other:?}"),
    }
    // Refused by the guard: the body never runs, the call is closed.
    let out = run_tool_async(
        &mut s,
        ToolScope::model(),
        "c2",
        "rm",
        json!({}),
        &CancelToken::new(),
        |_| Err("no".into()),
        async |_s: &mut Session, _| -> ToolBody<()> { panic!("the body ran") },
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        ToolOutcome::Refused {
            reason: "no".into()
        }
    );
    // Cancelled before dispatch.
    let cancel = CancelToken::new();
    cancel.cancel();
    let out = run_tool_async(
        &mut s,
        ToolScope::model(),
        "c3",
        "ls",
        json!({}),
        &cancel,
        |_| Ok(()),
        async |_s: &mut Session, _| -> ToolBody<()> { panic!("the body ran") },
    )
    .await
    .unwrap();
    assert_eq!(out, ToolOutcome::AbortedBeforeDispatch);
    let results: Vec<_> = s
        .events(0..s.len())
        .unwrap()
        .into_iter()
        .filter(|e| e.kind.name() == "tool/result")
        .collect();
    assert_eq!(results.len(), 3, "every call is closed by a result");
}

#[test]
fn typed_subscription_sees_session_events_once_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut s) = new_session(dir.path(), "s");
    s.append(user("one"), SurfaceOp::Append).unwrap();
    s.flush().unwrap();
    let mut sub = subscribe(&store, "s", reg(), 0).unwrap();
    let first = sub.try_next().unwrap().expect("a durable event");
    assert_eq!(first.seq, 0);
    assert_eq!(first.kind.name(), "user/message");
    s.append(user("two"), SurfaceOp::Append).unwrap();
    assert!(sub.try_next().unwrap().is_none(), "not durable yet");
    s.flush().unwrap();
    let second = sub.try_next().unwrap().unwrap();
    assert_eq!((second.seq, second.kind.name()), (1, "user/message"));
    assert_eq!(sub.next_seq(), 2);
    // A follower in a thread sees what comes next, blocking.
    let mut follower = subscribe(&store, "s", reg(), 2).unwrap();
    let h = std::thread::spawn(move || follower.next().unwrap().unwrap().seq);
    s.append(user("three"), SurfaceOp::Append).unwrap();
    s.flush().unwrap();
    assert_eq!(h.join().unwrap(), 2);
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_repair_and_replay_on_the_blocking_pool() {
    use turnstone::session::blocking_pool as ts;
    let dir = tempfile::tempdir().unwrap();
    {
        let (_store, mut s) = new_session(dir.path(), "s");
        s.append(
            TurnStart {
                turn_id: "t".into(),
            },
            (),
        )
        .unwrap();
        s.append(user("q"), SurfaceOp::Append).unwrap();
        s.append(
            ToolCall {
                call_id: "c".into(),
                name: "ls".into(),
                input: json!({}),
            },
            (),
        )
        .unwrap();
        s.flush().unwrap();
        // Crash: the turn and the tool call stay open.
    }
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let (s, report) = ts::open_repaired(store.clone(), "s", reg()).await.unwrap();
    assert_eq!(
        report.tools_outcome_unknown,
        vec!["c".to_string()],
        "{report:?}"
    );
    assert_eq!(report.turns_interrupted, 1, "{report:?}");
    assert!(s.open_state().turn.is_none());
    drop(s);
    let events = ts::replay(store.clone(), "s", reg(), 0).await.unwrap();
    assert!(events.len() > 3);
    assert!(events.iter().any(|e| e.kind.name() == "tool/result"));
    let hits = ts::search(store.clone(), reg(), "q", 10).await.unwrap();
    assert_eq!(
        hits.iter()
            .map(|h| (h.session.as_str(), h.seq))
            .collect::<Vec<_>>(),
        [("s", 1)]
    );
    let ro = ts::open_read_only(store.clone(), "s", reg()).await.unwrap();
    assert_eq!(ro.len() as usize, events.len());
    assert!(matches!(
        ts::open(store, "nope", reg()).await,
        Err(turnstone::Error::UnknownSession(_))
    ));
}

#[test]
fn a_subscription_ends_with_the_sessions_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut s) = new_session(dir.path(), "gone");
    s.append(user("one"), SurfaceOp::Append).unwrap();
    s.flush().unwrap();
    let sub = subscribe(&store, "gone", reg(), 0).unwrap();
    let follower = std::thread::spawn(move || {
        sub.map(|e| e.unwrap().kind.name().to_string())
            .collect::<Vec<_>>()
    });
    s.delete().unwrap();
    assert_eq!(
        follower.join().unwrap(),
        vec!["user/message".to_string(), "session/delete".to_string()],
        "the follower sees the tombstone, then ends"
    );
    assert!(matches!(
        subscribe(&store, "gone", reg(), 0),
        Err(turnstone::Error::SessionDeleted { .. })
    ));
}
