//! derive_messages: the model's message history, derived from the surface.
//!
//! `user/message` → user message; `assistant/message` → assistant message
//! (skipped when its content is empty); `tool/result` → user message carrying
//! one tool-result block. One message per surface node, in surface order,
//! never merged. Messages are built once per event (when the event is applied)
//! and shared as `Arc<Message>`, so the list keeps a stable identity between
//! calls. After plain appends only the new nodes are visited; after a replace
//! the list is rebuilt from the per-node cache. A handle that has not derived
//! yet drops the messages of its own appends once they are durable and reads
//! them back from the log at its first derive (see [`MessageCache`]).

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::session::codec::content::ToolResultContent;
use crate::session::codec::event::{
    AssistantMessage, ContentBlock, ToolResult, ToolStatus, UserMessage,
};
use crate::session::fold::surface::Surface;

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A user message (tool results included).
    User,
    /// An assistant message.
    Assistant,
}

/// One model message, immutable once built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// Seq of the surface event it was derived from.
    pub source_seq: u64,
    /// Kind of that event.
    pub kind: String,
    /// The content blocks.
    pub content: Vec<ContentBlock>,
}

/// Text shown to the model for a synthetic tool result.
pub fn status_text(status: ToolStatus) -> &'static str {
    match status {
        ToolStatus::ToolOutcomeUnknown => {
            "TOOL_OUTCOME_UNKNOWN: the session crashed after this tool call was recorded and before its result was. The tool may not have run, may have run partly, or may have finished. Check the external state before repeating a call with side effects."
        }
        ToolStatus::ToolNotStarted => {
            "TOOL_NOT_STARTED: the session stopped before this tool call was recorded, so the tool never ran. It is safe to issue it again if it is still needed."
        }
        ToolStatus::AbortedBeforeDispatch => {
            "ABORTED_BEFORE_DISPATCH: cancelled while the call was being persisted; the tool never ran."
        }
    }
}

pub(crate) fn user_message(seq: u64, m: UserMessage) -> Option<Message> {
    Some(Message {
        role: Role::User,
        source_seq: seq,
        kind: "user/message".into(),
        content: m.content,
    })
}

pub(crate) fn assistant_message(seq: u64, m: AssistantMessage) -> Option<Message> {
    if m.content.is_empty() {
        return None;
    }
    Some(Message {
        role: Role::Assistant,
        source_seq: seq,
        kind: "assistant/message".into(),
        content: m.content,
    })
}

/// The user message carrying a tool result: one `tool_result` block whose
/// content is the result's content as logged — a string when it is one
/// plain text block, else the blocks unchanged (images included). A
/// synthetic result (repair, abort) gets its status text first; it and an
/// error result are marked `is_error`.
pub(crate) fn tool_result_message(seq: u64, mut r: ToolResult) -> Option<Message> {
    let plain =
        |b: &ContentBlock| matches!(b, ContentBlock::Text { extra, .. } if extra.is_empty());
    let content = if let Some(status) = r.status {
        if r.content.iter().all(plain) {
            let mut text = status_text(status).to_string();
            for b in &r.content {
                text.push('\n');
                text.push_str(b.as_text().unwrap_or_default());
            }
            ToolResultContent::Text(text)
        } else {
            let mut blocks = vec![ContentBlock::text(status_text(status))];
            blocks.extend(r.content);
            ToolResultContent::Blocks(blocks)
        }
    } else {
        match r.content.as_slice() {
            [] => ToolResultContent::Text(String::new()),
            // The one text block's string is moved, not copied (a tool
            // result is often the largest event of a turn).
            [b] if plain(b) => match r.content.pop() {
                Some(ContentBlock::Text { text, .. }) => ToolResultContent::Text(text),
                other => ToolResultContent::Blocks(other.into_iter().collect()),
            },
            _ => ToolResultContent::Blocks(r.content),
        }
    };
    Some(Message {
        role: Role::User,
        source_seq: seq,
        kind: "tool/result".into(),
        content: vec![ContentBlock::ToolResult {
            tool_use_id: r.call_id,
            content,
            is_error: (r.is_error || r.status.is_some()).then_some(true),
            extra: Default::default(),
        }],
    })
}

/// When the message of a folded surface event may be dropped, to be read
/// back from the log by the next derive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Keep it (an event folded from the log at open).
    Hold,
    /// The handle's own append, durable once the log is durable up to this
    /// position (an embedded store's byte offset): droppable from then on
    /// while the handle has not derived.
    UntilDurable(u64),
    /// Read back from the log just now (durable): droppable at once while
    /// the handle has not derived.
    Durable,
}

/// The tool-use ids of a message: `(true, id)` for a use, `(false, id)` for
/// an answer.
pub(crate) type ToolIds = Box<[(bool, Box<str>)]>;

/// The tool-use ids a message uses (true) and answers (false).
fn tool_ids(m: &Message) -> ToolIds {
    m.content
        .iter()
        .filter_map(|b| match (b.client_tool_use(), b.answers_tool_use()) {
            (Some((id, _)), _) => Some((true, id.into())),
            (None, Some(id)) => Some((false, id.into())),
            (None, None) => None,
        })
        .collect()
}

/// What the cache holds for one surface node.
#[derive(Debug)]
enum Node {
    /// The node derives no message.
    Skipped,
    /// Its message, kept.
    Kept(Arc<Message>),
    /// Its message was dropped once durable (to be read from the log by the
    /// next derive); the tool-use ids it uses and answers stay.
    Dropped(ToolIds),
}

/// Incremental message list over a surface.
///
/// A handle that has never derived (a recorder, a fleet worker) does not
/// keep the messages of its own appends once they are durable: it keeps
/// only their tool-use ids (for the pair check of a replace) and reads the
/// messages back from the log at its first derive, as it does for the
/// nodes of a state snapshot. From the first derive on, every message is
/// kept, so derives stay incremental.
#[derive(Debug, Default)]
pub struct MessageCache {
    /// Every node on the surface, except those `pending`.
    nodes: HashMap<u64, Node>,
    /// How many of `nodes` are [`Node::Dropped`].
    dropped: usize,
    list: Vec<Arc<Message>>,
    nodes_done: usize,
    generation: u64,
    /// Nodes visited by the last `derive` (for tests and benchmarks).
    pub last_work: usize,
    /// Surface nodes restored from a state snapshot whose message is still
    /// to be read from the log (the session loads them before deriving).
    pending: Vec<u64>,
    /// Whether this handle has derived: from then on messages are kept.
    derived: bool,
    /// Kept messages of this handle's appends that are not known durable
    /// yet: (seq, log position that makes it durable), in append order.
    unsettled: std::collections::VecDeque<(u64, u64)>,
}

impl MessageCache {
    /// Record the message of a new surface node.
    pub fn insert(&mut self, seq: u64, msg: Option<Message>) {
        self.insert_kept(seq, msg, Keep::Hold);
    }

    /// Record the message of a surface node, kept as `keep` says.
    pub(crate) fn insert_kept(&mut self, seq: u64, msg: Option<Message>, keep: Keep) {
        let node = match (msg, keep) {
            (None, _) => Node::Skipped,
            (Some(m), Keep::Durable) if !self.derived => {
                self.dropped += 1;
                Node::Dropped(tool_ids(&m))
            }
            (Some(m), Keep::UntilDurable(pos)) if !self.derived => {
                self.unsettled.push_back((seq, pos));
                Node::Kept(Arc::new(m))
            }
            (Some(m), _) => Node::Kept(Arc::new(m)),
        };
        if let Some(Node::Dropped(_)) = self.nodes.insert(seq, node) {
            self.dropped -= 1;
        }
    }

    /// Whether some kept message waits for the log to be durable.
    pub(crate) fn has_unsettled(&self) -> bool {
        !self.unsettled.is_empty()
    }

    /// The log is durable up to `durable`: drop the kept messages of this
    /// handle's appends it covers (keeping their tool-use ids).
    pub(crate) fn settle(&mut self, durable: u64) {
        while let Some(&(seq, pos)) = self.unsettled.front() {
            if pos > durable {
                break;
            }
            self.unsettled.pop_front();
            // Gone when a replace took the node off the surface since.
            if let Some(node) = self.nodes.get_mut(&seq) {
                if let Node::Kept(m) = node {
                    *node = Node::Dropped(tool_ids(m));
                    self.dropped += 1;
                }
            }
        }
    }

    /// The tool-use ids of a node whose message was dropped once durable:
    /// `(true, id)` for a use, `(false, id)` for an answer.
    pub(crate) fn dropped_ids(&self, seq: u64) -> Option<&[(bool, Box<str>)]> {
        match self.nodes.get(&seq) {
            Some(Node::Dropped(ids)) => Some(ids),
            _ => None,
        }
    }

    /// The message of a surface node (None: not on the surface, skipped, or
    /// still to be read from the log).
    pub fn node(&self, seq: u64) -> Option<&Arc<Message>> {
        match self.nodes.get(&seq) {
            Some(Node::Kept(m)) => Some(m),
            _ => None,
        }
    }

    /// Nodes `removed` left the surface in the replace that made surface
    /// generation `generation`: their messages are dropped now rather than
    /// at the next [`MessageCache::derive`], so a session that appends
    /// without deriving (a recorder, the fleet) holds only the messages of
    /// its surface, however long its log.
    pub(crate) fn replaced(&mut self, removed: &[u64], generation: u64) {
        for seq in removed {
            if let Some(Node::Dropped(_)) = self.nodes.remove(seq) {
                self.dropped -= 1;
            }
        }
        if !self.pending.is_empty() {
            let gone: std::collections::HashSet<u64> = removed.iter().copied().collect();
            self.pending.retain(|seq| !gone.contains(seq));
        }
        self.list.clear();
        self.nodes_done = 0;
        self.generation = generation;
    }

    /// Nodes whose message (or its absence) is held, and nodes whose
    /// message was dropped once durable.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        (self.nodes.len() - self.dropped, self.dropped)
    }

    /// Start from the keys of a state snapshot: every node of `surface`
    /// derives a message still to be read, except those in `no_message`
    /// (ascending), which derive none.
    pub(crate) fn restore_keys(&mut self, surface: &Surface, no_message: &[u64]) {
        self.pending.reserve(surface.nodes.len());
        for &seq in &surface.nodes {
            if no_message.binary_search(&seq).is_ok() {
                self.nodes.insert(seq, Node::Skipped);
            } else {
                self.pending.push(seq);
            }
        }
    }

    /// Take the nodes whose message is still to be read: those restored
    /// from a state snapshot, and with `dropped` those dropped once durable
    /// (which keep their tool-use ids until their message is back).
    pub(crate) fn take_pending(&mut self, dropped: bool) -> Vec<u64> {
        let mut seqs = std::mem::take(&mut self.pending);
        if dropped && self.dropped > 0 {
            seqs.extend(
                self.nodes
                    .iter()
                    .filter(|(_, n)| matches!(n, Node::Dropped(_)))
                    .map(|(seq, _)| *seq),
            );
        }
        seqs
    }

    /// Whether a derive has a message to read from the log first.
    pub(crate) fn has_unread(&self) -> bool {
        !self.pending.is_empty() || self.dropped > 0
    }

    /// Put back nodes whose message could not be read.
    pub(crate) fn put_back_pending(&mut self, seqs: Vec<u64>) {
        self.pending
            .extend(seqs.into_iter().filter(|seq| !self.nodes.contains_key(seq)));
    }

    /// Whether some node's message is still to be read.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Nodes of `surface` that derive no message, ascending (the keys a
    /// state snapshot stores besides the surface itself).
    pub(crate) fn no_message_nodes(&self, surface: &Surface) -> Vec<u64> {
        let mut out: Vec<u64> = surface
            .nodes
            .iter()
            .copied()
            .filter(|seq| matches!(self.nodes.get(seq), Some(Node::Skipped)))
            .collect();
        out.sort_unstable();
        out
    }

    /// Bring the list up to date with `surface` and return it. Every
    /// pending message must have been loaded.
    pub fn derive(&mut self, surface: &Surface) -> &[Arc<Message>] {
        debug_assert!(!self.has_unread(), "messages not loaded");
        // Kept from now on: a handle that derives once derives again.
        self.derived = true;
        self.unsettled.clear();
        if self.generation != surface.replace_generation || self.nodes_done > surface.nodes.len() {
            self.list.clear();
            self.nodes_done = 0;
            self.generation = surface.replace_generation;
            // Forget messages of nodes no longer on the surface.
            let live: std::collections::HashSet<u64> = surface.nodes.iter().copied().collect();
            self.nodes.retain(|seq, _| live.contains(seq));
        }
        let new = &surface.nodes[self.nodes_done..];
        self.last_work = new.len();
        for seq in new {
            if let Some(Node::Kept(m)) = self.nodes.get(seq) {
                self.list.push(m.clone());
            }
        }
        self.nodes_done = surface.nodes.len();
        &self.list
    }
}
