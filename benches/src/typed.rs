//! The fleet turn as typed session-layer events (for the read side and the
//! derive_messages benchmarks): the same positions and sizes as
//! [`crate::workload`], encoded the way `Session::append` encodes them.

use serde_json::json;
use turnstone::session::internals::encode_core;
use turnstone::session::{
    AssistantChunk, AssistantMessage, ContentBlock, EventData, Session, SurfaceOp, ToolCall,
    ToolResult, UserMessage,
};

use crate::workload::{mix, Kind, Workload, CHUNKS};

/// A surface range `0..end` that a compaction may replace without separating
/// a tool use from its result: everything before the second user message.
/// `filled` is the number of workload events the session was filled with;
/// every surface node appended after them is a user message.
pub fn compactable_prefix(s: &Session, wl: &Workload, sess: u32, filled: u64) -> u64 {
    let nodes = &s.surface().nodes;
    let is_user = |seq: u64| seq >= filled || wl.kind(sess, seq) == Kind::UserMessage;
    nodes
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, q)| is_user(**q))
        .map_or(nodes.len() as u64, |(i, _)| i as u64)
}

/// One typed event of the fleet turn.
#[derive(Debug, Clone)]
pub enum TypedEvent {
    User(UserMessage),
    Chunk(AssistantChunk),
    Assistant(AssistantMessage),
    Call(ToolCall),
    Result(ToolResult),
}

/// Event `seq` of session `s` as a typed session event.
pub fn typed_event(wl: &Workload, s: u32, seq: u64) -> TypedEvent {
    let len = wl.payload_len(s, seq);
    let r = mix(((s as u64) << 32) ^ seq);
    // Content sizes roughly match the raw payload sizes (the JSON envelope
    // adds ~60-150 bytes).
    let text = |n: usize| wl.text(r, n.saturating_sub(60).max(8)).to_string();
    let turn = (seq + wl.position(s, 0)) / crate::workload::TURN_LEN;
    let call_id = || format!("call-{s}-{turn}");
    match wl.kind(s, seq) {
        Kind::UserMessage => TypedEvent::User(UserMessage {
            content: vec![ContentBlock::text(text(len))],
        }),
        Kind::AssistantChunk => TypedEvent::Chunk(AssistantChunk {
            index: (wl.position(s, seq) - 1).min(CHUNKS) as u32,
            text: text(len),
        }),
        Kind::AssistantMessage => TypedEvent::Assistant(AssistantMessage {
            content: vec![
                ContentBlock::text(text(len.saturating_sub(80))),
                ContentBlock::ToolUse {
                    id: call_id(),
                    name: "bash".into(),
                    input: json!({"cmd": "ls -la"}),
                    extra: Default::default(),
                },
            ],
            usage: None,
            stop_reason: Some("tool_use".into()),
            extra: Default::default(),
        }),
        Kind::ToolCall => TypedEvent::Call(ToolCall {
            call_id: call_id(),
            name: "bash".into(),
            input: json!({"cmd": "ls -la", "pad": text(len.saturating_sub(40))}),
        }),
        Kind::ToolResult => TypedEvent::Result(ToolResult {
            call_id: call_id(),
            content: vec![ContentBlock::text(text(len))],
            is_error: false,
            status: None,
        }),
    }
}

fn enc<D: EventData>(d: &D, op: Option<SurfaceOp>) -> (u16, Vec<u8>) {
    (D::KIND.code(), encode_core(d, op))
}

impl TypedEvent {
    /// Frame kind code and payload, as `Session::append` would log them.
    pub fn encode(&self) -> (u16, Vec<u8>) {
        let app = Some(SurfaceOp::Append);
        match self {
            TypedEvent::User(d) => enc(d, app),
            TypedEvent::Chunk(d) => enc(d, None),
            TypedEvent::Assistant(d) => enc(d, app),
            TypedEvent::Call(d) => enc(d, None),
            TypedEvent::Result(d) => enc(d, app),
        }
    }
    /// Append through the session layer.
    pub fn append_to(self, s: &mut Session) -> turnstone::Result<u64> {
        match self {
            TypedEvent::User(d) => s.append(d, SurfaceOp::Append),
            TypedEvent::Chunk(d) => s.append(d, ()),
            TypedEvent::Assistant(d) => s.append(d, SurfaceOp::Append),
            TypedEvent::Call(d) => s.append(d, ()),
            TypedEvent::Result(d) => s.append(d, SurfaceOp::Append),
        }
    }
}

/// Append `n` typed events of session `s` of `wl` to `store` under `name`
/// (raw appends of the encoded payloads: the same bytes the session layer
/// logs, without its per-append checks). Returns the payload bytes.
pub fn fill_session(
    store: &turnstone::Store,
    name: &str,
    wl: &Workload,
    s: u32,
    n: u64,
) -> turnstone::Result<u64> {
    let mut bytes = 0;
    for seq in 0..n {
        let (kind, payload) = typed_event(wl, s, seq).encode();
        bytes += payload.len() as u64;
        store.append(name, kind, 0, &payload)?;
    }
    store.sync()?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use turnstone::session::Registry;

    #[test]
    fn typed_session_derives() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
        let wl = Workload::new(1, 2);
        fill_session(&store, "a", &wl, 0, 500).unwrap();
        let mut s = Session::open(store.clone(), "a", Arc::new(Registry::new())).unwrap();
        assert_eq!(s.len(), 500);
        let n = s.derive_messages().len();
        // Three surface events per 24-event turn.
        assert!((55..=70).contains(&n), "{n} messages");
        typed_event(&wl, 0, 500).append_to(&mut s).unwrap();
        s.derive_messages();
        assert!(s.last_derive_work() <= 1);
        for i in 0..3 {
            let end = compactable_prefix(&s, &wl, 0, 500);
            s.compact(&format!("c{i}"), 0, end, "summary").unwrap();
            s.derive_messages();
        }
    }
}
