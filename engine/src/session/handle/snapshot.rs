//! A session's state snapshot from the handle's side (FORMAT.md §17):
//! installing one at open, reading back the messages of the surface nodes
//! it restored (and those a recorder dropped once durable), and writing
//! one when every event is durable and folded.

use crate::error::{Error, Result};
use crate::session::codec::envelope;
use crate::session::codec::event::Registry;
use crate::session::codec::event::{
    AssistantMessage, CoreKind, EventKind, ToolResult, UserMessage,
};
use crate::session::fold::messages::{self, Keep};
use crate::session::fold::state_snapshot::{save, Parts, Restored, STATE_SNAPSHOT_TAIL};
use crate::session::handle::Session;

impl Session {
    /// Take the state of a snapshot (the fold then goes on from `r.len`).
    pub(in crate::session) fn install(&mut self, r: Restored) {
        self.state.len = r.len;
        self.state.messages.restore_keys(&r.surface, &r.no_message);
        self.state.surface = r.surface;
        self.state.header = r.header;
        self.state.context = r.context;
        self.state.seed_end = r.seed_end;
        self.state.open = r.open;
        self.state.turns = r.turns;
        self.state.metadata = r.metadata;
        self.state.deleted = r.deleted;
        self.state.kinds = r.kinds;
        self.state.answered = r.answered;
        self.state_covered = r.len;
        self.restored_from = Some(r.len);
    }

    /// Read from the log the messages of surface nodes restored from a
    /// snapshot and of those dropped once durable (nodes close together
    /// share one walk of the index), and keep them: a derive follows.
    pub(in crate::session) fn load_messages(&mut self) -> Result<()> {
        self.load_messages_kept(true)
    }

    /// [`Session::load_messages`] for the tool-pair check of a replace:
    /// only the nodes restored from a snapshot, whose tool-use ids are not
    /// known; a handle that has not derived keeps only their ids.
    pub(in crate::session) fn load_restored_messages(&mut self) -> Result<()> {
        self.load_messages_kept(false)
    }

    fn load_messages_kept(&mut self, for_derive: bool) -> Result<()> {
        let unread = if for_derive {
            self.state.messages.has_unread()
        } else {
            self.state.messages.has_pending()
        };
        if !unread {
            return Ok(());
        }
        let mut seqs = self.state.messages.take_pending(for_derive);
        seqs.sort_unstable();
        seqs.dedup();
        let mut loaded = Vec::with_capacity(seqs.len());
        let view = self.is_read_only();
        let mut i = 0;
        while i < seqs.len() {
            let mut j = i + 1;
            while j < seqs.len() && seqs[j] - seqs[j - 1] <= 16 {
                j += 1;
            }
            let want = &seqs[i..j];
            let mut k = 0;
            let mut failed: Option<Error> = None;
            let (id, registry) = (&self.id, &self.registry);
            let walked = self
                .log
                .as_ref()
                .visit(id, want[0]..want[want.len() - 1] + 1, |e| {
                    if k < want.len() && e.seq == want[k] {
                        k += 1;
                        // Blob references resolved, as on every read (FORMAT.md §15).
                        let m = e.payload.and_then(|payload| {
                            message_of(id, registry, view, e.seq, e.kind, e.flags, &payload)
                        });
                        match m {
                            Ok(m) => loaded.push((e.seq, m)),
                            Err(err) => {
                                failed = Some(err);
                                return std::ops::ControlFlow::Break(());
                            }
                        }
                    }
                    std::ops::ControlFlow::Continue(())
                });
            let err = match (walked, failed) {
                (Err(e), _) | (Ok(_), Some(e)) => Some(e),
                (Ok(_), None) if k < want.len() => Some(Error::BadEvent {
                    session: self.id.to_string(),
                    seq: want[k],
                    detail: "a state snapshot's surface node is not in the log".into(),
                }),
                (Ok(_), None) => None,
            };
            if let Some(e) = err {
                self.state.messages.put_back_pending(seqs);
                return Err(e);
            }
            i = j;
        }
        let keep = if for_derive {
            Keep::Hold
        } else {
            Keep::Durable
        };
        for (seq, m) in loaded {
            self.state.messages.insert_kept(seq, m, keep);
        }
        Ok(())
    }

    /// The fold's parts a state snapshot is made of.
    fn parts(&self) -> Parts<'_> {
        Parts {
            len: self.state.len,
            surface: &self.state.surface,
            no_message: self.state.messages.no_message_nodes(&self.state.surface),
            header: self.state.header.as_ref(),
            context: self.state.context.as_ref(),
            seed_end: self.state.seed_end,
            open: &self.state.open,
            turns: &self.state.turns,
            metadata: &self.state.metadata,
            deleted: self.state.deleted,
            kinds: &self.state.kinds,
            answered: &self.state.answered,
        }
    }

    /// Write a state snapshot of this handle's fold if every event of the
    /// session is durable and this handle has folded all of them. Returns
    /// whether one was written.
    pub(in crate::session) fn write_state_snapshot_if_durable(&mut self) -> Result<bool> {
        let log = self.log.as_ref();
        if self.is_read_only()
            || log.as_log().is_read_only()
            || self.state.len == self.state_covered
        {
            return Ok(false);
        }
        let missing = || Error::UnknownSession(self.id.to_string());
        let len = log.appended_len(&self.id)?.ok_or_else(missing)?;
        let durable = log.durable_len(&self.id)?.ok_or_else(missing)?;
        if len != self.state.len || durable != self.state.len {
            return Ok(false);
        }
        if !save(log, &self.id, &self.parts())? {
            // This log keeps no snapshots.
            return Ok(false);
        }
        self.state_covered = self.state.len;
        Ok(true)
    }

    /// Write a snapshot of this session's state (FORMAT.md §17) covering
    /// every event, after waiting until this handle's appends are durable;
    /// the next [`Session::open`] starts from it. Returns `false` when there
    /// is nothing new to cover, or when events of the session are not yet
    /// durable or not folded by this handle. Refused on a read-only view.
    pub fn save_state_snapshot(&mut self) -> Result<bool> {
        if self.is_read_only() {
            return Err(Error::Refused(format!(
                "session {:?} was opened read-only; state snapshots are written by writable handles",
                self.id
            )));
        }
        self.flush()?;
        self.write_state_snapshot_if_durable()
    }

    /// Close the handle: wait until its appends are durable, write a state
    /// snapshot when [`STATE_SNAPSHOT_TAIL`] events or more lie past the one
    /// on disk, and release the session. Dropping a handle releases it too,
    /// without the wait or the snapshot.
    pub fn close(mut self) -> Result<()> {
        if self.is_read_only() {
            return Ok(());
        }
        self.flush()?;
        if self.state.len - self.state_covered >= STATE_SNAPSHOT_TAIL {
            self.write_state_snapshot_if_durable()?;
        }
        Ok(())
    }

    /// Events covered by the state snapshot this handle was restored from
    /// (`None`: folded from seq 0).
    pub fn restored_from_snapshot(&self) -> Option<u64> {
        self.restored_from
    }

    /// Why a state snapshot on disk was not used by this handle's open.
    pub fn snapshot_discarded(&self) -> Option<&str> {
        self.snapshot_discarded.as_deref()
    }
}

/// The message a restored surface node derives (the snapshot says it
/// derives one).
fn message_of(
    id: &str,
    registry: &Registry,
    view: bool,
    seq: u64,
    code: u16,
    flags: u16,
    payload: &[u8],
) -> Result<Option<messages::Message>> {
    let ev = if view {
        envelope::decode_view(seq, code, flags, payload, registry)
    } else {
        envelope::decode(seq, code, flags, payload, registry)
    }
    .map_err(|err| crate::session::codec::envelope::decode_error(id, seq, err))?;
    let bad = |detail: String| Error::BadEvent {
        session: id.to_string(),
        seq,
        detail,
    };
    let typed = |e: serde_json::Error| bad(format!("{}: {e}", code));
    Ok(match ev.kind {
        EventKind::Core(CoreKind::UserMessage) => messages::user_message(
            seq,
            <UserMessage as serde::Deserialize>::deserialize(&ev.data).map_err(typed)?,
        ),
        EventKind::Core(CoreKind::AssistantMessage) => messages::assistant_message(
            seq,
            <AssistantMessage as serde::Deserialize>::deserialize(&ev.data).map_err(typed)?,
        ),
        EventKind::Core(CoreKind::ToolResult) => messages::tool_result_message(
            seq,
            <ToolResult as serde::Deserialize>::deserialize(&ev.data).map_err(typed)?,
        ),
        _ => {
            return Err(bad(
                "a state snapshot names this event a message but it is not a surface event".into(),
            ))
        }
    })
}
