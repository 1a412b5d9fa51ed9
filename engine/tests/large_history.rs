//! History longer than one commit batch (`Session::create_with_history`
//! through a staging session): every event arrives, the session exists
//! only once all are durable, a refusal leaves nothing, and a staging
//! session a crash left is deleted by the next staged creation.

use std::sync::Arc;

use serde_json::json;
use turnstone::session::*;
use turnstone::{Options, Store};

const SEGMENT: u32 = 1 << 20;

fn reg() -> Arc<Registry> {
    Arc::new(Registry::new())
}

fn open(dir: &std::path::Path) -> Arc<Store> {
    Arc::new(
        Store::open_with(
            dir,
            Options {
                segment_bytes: SEGMENT,
                ..Options::default()
            },
        )
        .unwrap(),
    )
}

/// `n` user/assistant pairs, each message about `size` bytes of text.
fn history(n: usize, size: usize) -> Vec<HistoryEvent> {
    let mut out = Vec::new();
    for i in 0..n {
        let text = format!("{i:06} {}", "x".repeat(size));
        out.push(HistoryEvent {
            kind: EventKind::Core(CoreKind::UserMessage),
            data: json!({"content": [{"type": "text", "text": text}]}),
            surface: Some(SurfaceOp::Append),
            ts: Some(1_000 + i as u64),
        });
        out.push(HistoryEvent {
            kind: EventKind::Core(CoreKind::AssistantMessage),
            data: json!({"content": [{"type": "text", "text": format!("reply {i}")}], "stop_reason": "end_turn"}),
            surface: Some(SurfaceOp::Append),
            ts: Some(1_000 + i as u64),
        });
    }
    out
}

fn texts(s: &mut Session) -> Vec<String> {
    s.derive_messages()
        .iter()
        .map(|m| serde_json::to_string(&m.content).unwrap())
        .collect()
}

#[test]
fn history_over_one_batch_arrives_whole_and_the_staging_session_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // About 3.3 MiB of history against a group limit under 1 MiB.
    let h = history(200, 16 << 10);
    assert!(store.group_bytes_max() < 1 << 20);
    let host = Host::new(store.clone(), reg());
    let shared = host.create_with_history("big", &h).unwrap();
    let want = {
        let mut s = shared.lock();
        assert_eq!(s.len(), h.len() as u64 + 1, "the events and the marker");
        assert_eq!(s.history_end(), Some(h.len() as u64));
        // The handle is writable and holds the session.
        s.append(
            UserMessage {
                content: vec![ContentBlock::text("after")],
            },
            SurfaceOp::Append,
        )
        .unwrap();
        s.flush().unwrap();
        assert!(matches!(
            Session::open(store.clone(), "big", reg()),
            Err(turnstone::Error::SessionLive { .. })
        ));
        texts(&mut s)
    };
    assert_eq!(want.len(), 401);
    drop(shared);
    // The staging session is deleted; only "big" is listed.
    let names: Vec<String> = list_sessions(&store)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(names, vec!["big".to_string()]);
    let staging: Vec<String> = store
        .sessions()
        .into_iter()
        .map(|i| i.name)
        .filter(|n| n.starts_with(STAGING_PREFIX))
        .collect();
    assert_eq!(staging.len(), 1);
    assert!(deleted_at(&store, &staging[0]).unwrap().is_some());
    // Reopened: the same messages, the same timestamps.
    drop(host);
    drop(store);
    let store = open(dir.path());
    let mut s = Session::open(store.clone(), "big", reg()).unwrap();
    assert_eq!(texts(&mut s), want);
    let e = store.read("big", 399).unwrap();
    let env: turnstone::session::internals::Envelope = serde_json::from_slice(&e.payload).unwrap();
    assert_eq!(env.ts, Some(1_199));
    // A collection keeps what the session reads through the deleted
    // staging session.
    drop(s);
    drop(store);
    gc::collect(dir.path(), &turnstone::gc::CollectOptions::default()).unwrap();
    let store = open(dir.path());
    let mut s = Session::open_read_only(store.clone(), "big", reg()).unwrap();
    assert_eq!(texts(&mut s), want);
}

#[test]
fn a_refusal_in_a_later_batch_leaves_no_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut h = history(200, 16 << 10);
    // A user message without its surface op, in the last batch.
    h.push(HistoryEvent {
        kind: EventKind::Core(CoreKind::UserMessage),
        data: json!({"content": [{"type": "text", "text": "x"}]}),
        surface: None,
        ts: None,
    });
    let host = Host::new(store.clone(), reg());
    let err = host.create_with_history("big", &h).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("\"big\"") && msg.contains("seq 400"), "{msg}");
    // Checked before anything was written: no session, no staging.
    assert!(store.sessions().is_empty());
    // The id is free.
    host.create_with_history("big", &history(200, 16 << 10))
        .unwrap();
}

#[test]
fn a_staging_session_a_crash_left_is_deleted_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let left = format!("{STAGING_PREFIX}1-2-3");
    {
        let mut s = Session::create(store.clone(), &left, reg()).unwrap();
        s.append(
            UserMessage {
                content: vec![ContentBlock::text("half an import")],
            },
            SurfaceOp::Append,
        )
        .unwrap();
        s.flush().unwrap();
    }
    let host = Host::new(store.clone(), reg());
    host.create_with_history("big", &history(200, 16 << 10))
        .unwrap();
    assert!(deleted_at(&store, &left).unwrap().is_some());
}

#[test]
fn staged_creations_at_once_leave_each_other_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let host = Arc::new(Host::new(store.clone(), reg()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let host = host.clone();
            std::thread::spawn(move || {
                for round in 0..3 {
                    let id = format!("big-{t}-{round}");
                    let s = host.create_with_history(&id, &history(120, 16 << 10));
                    assert_eq!(s.unwrap().lock().len(), 241, "{id}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // None of them took another's staging session for a leftover.
    let mut listed: Vec<String> = list_sessions(&store)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    listed.sort();
    assert_eq!(listed.len(), 12, "{listed:?}");
    for id in listed {
        assert!(id.starts_with("big-"), "{id}");
        assert_eq!(deleted_at(&store, &id).unwrap(), None, "{id}");
    }
}
