//! Where the fleet workload's events go. One small trait, so that the session
//! layer can replace raw engine appends without touching the workload.

use turnstone::{LogPos, Store};

use crate::kinds::EventKind;

/// An append-only event sink with durability acknowledgements.
pub trait Sink: Sync {
    /// What an append returns: enough to wait for its durability.
    type Ticket: Copy + Send;

    /// Append one event to `session` (created on first use).
    fn append(
        &self,
        session: &str,
        kind: EventKind,
        payload: &[u8],
    ) -> turnstone::Result<Self::Ticket>;

    /// The session seq the ticket's event got.
    fn seq(ticket: &Self::Ticket) -> u64;

    /// Block until the ticket's event (and everything of `session` before it)
    /// is durable.
    fn wait_durable(&self, session: &str, ticket: &Self::Ticket) -> turnstone::Result<()>;
}

/// Raw engine appends: one frame per event, payload as given, no flags.
pub struct EngineSink<'a> {
    pub store: &'a Store,
}

#[derive(Debug, Clone, Copy)]
pub struct EngineTicket {
    pub seq: u64,
    pub end: LogPos,
}

impl Sink for EngineSink<'_> {
    type Ticket = EngineTicket;

    fn append(
        &self,
        session: &str,
        kind: EventKind,
        payload: &[u8],
    ) -> turnstone::Result<EngineTicket> {
        let a = self.store.append(session, kind.code(), 0, payload)?;
        Ok(EngineTicket {
            seq: a.seq.0,
            end: a.end,
        })
    }

    fn seq(ticket: &EngineTicket) -> u64 {
        ticket.seq
    }

    fn wait_durable(&self, _session: &str, ticket: &EngineTicket) -> turnstone::Result<()> {
        self.store.wait_durable(ticket.end)
    }
}
