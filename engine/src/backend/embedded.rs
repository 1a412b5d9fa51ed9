//! The embedded store as an [`EventLog`]: its fast paths (zero-copy
//! visits, the compact-id hint, log-position waits, blobs out of line, the
//! catalog's changes by position) are its implementations of the trait's
//! methods, and its subscriptions are the trait's [`Follow`].

use super::*;
use crate::store::Subscription;

impl EventLog for Store {
    fn backend(&self) -> &'static str {
        "embedded"
    }

    fn create_session(&self, session: &str) -> Result<()> {
        Store::create_session(self, session).map(|_| ())
    }

    fn fork(&self, parent: &str, upto: u64, child: &str) -> Result<()> {
        let durable = self
            .session_meta(parent)
            .ok_or_else(|| Error::UnknownSession(parent.to_string()))?
            .durable_len;
        if upto > durable {
            return Err(Error::SeqOutOfRange {
                session: parent.to_string(),
                seq: upto,
                len: durable,
            });
        }
        Store::fork(self, parent, upto, child).map(|_| ())
    }

    fn append_group(&self, session: &str, events: &[(u16, u16, &[u8])]) -> Result<u64> {
        let mut first = None;
        Store::append_group(self, session, events, |a| {
            first.get_or_insert(a.seq.0);
        })?;
        first.ok_or_else(|| Error::InvalidArgument("an empty group".into()))
    }

    fn sync_session(&self, session: &str) -> Result<()> {
        Store::sync_session(self, session)
    }

    fn durable_len(&self, session: &str) -> Result<Option<u64>> {
        Ok(self.session_meta(session).map(|m| m.durable_len))
    }

    fn parent(&self, session: &str) -> Result<Option<(String, u64)>> {
        self.session_meta(session)
            .map(|m| m.parent)
            .ok_or_else(|| Error::UnknownSession(session.to_string()))
    }

    fn sessions(&self) -> Result<Vec<String>> {
        Ok(Store::sessions(self).into_iter().map(|s| s.name).collect())
    }

    fn appended_len(&self, session: &str) -> Result<Option<u64>> {
        Ok(self.session_len(session))
    }

    fn visit(
        &self,
        session: &str,
        range: Range<u64>,
        f: &mut dyn FnMut(Visited<'_>) -> ControlFlow<()>,
    ) -> Result<u64> {
        self.visit_range(session, range, |e| {
            f(Visited {
                seq: e.seq.0,
                kind: e.kind,
                flags: e.flags,
                payload: e.payload,
            })
        })
    }

    fn read_event(&self, session: &str, seq: u64) -> Result<LogEvent> {
        let e = Store::read(self, session, seq)?;
        Ok(LogEvent {
            seq: e.seq.0,
            kind: e.kind,
            flags: e.flags,
            payload: e.payload,
        })
    }

    fn blobs(&self) -> Option<&BlobDir> {
        Some(Store::blobs(self))
    }

    fn files(&self) -> Option<(&std::path::Path, &std::sync::Arc<dyn crate::vfs::Vfs>)> {
        Some((self.dir(), self.vfs()))
    }

    fn is_read_only(&self) -> bool {
        Store::is_read_only(self)
    }

    fn log_id(&self) -> [u8; 16] {
        self.store_id()
    }

    fn incarnation(&self, session: &str) -> Result<Option<([u8; 16], LogPos)>> {
        Ok(self
            .session_meta(session)
            .map(|m| (self.store_id(), m.define_pos)))
    }

    fn group_bytes_max(&self) -> usize {
        Store::group_bytes_max(self)
    }

    fn append_group_at_len(
        &self,
        session: &str,
        hint: &mut Option<SessionId>,
        len: u64,
        events: &[(u16, u16, &[u8], Option<&str>)],
    ) -> Result<std::result::Result<(Option<u64>, AppendEnd), u64>> {
        let mut first = None;
        let mut end = AppendEnd::Nothing;
        let known = *hint;
        let mut each = |a: crate::types::Appended| {
            first.get_or_insert(a.seq.0);
            end = AppendEnd::At(a.end);
            *hint = Some(a.session);
        };
        let appended = if let [(kind, flags, payload, _)] = events {
            // One event (nearly every append): nothing to collect.
            Store::append_group_at_len(
                self,
                session,
                known,
                len,
                &[(*kind, *flags, *payload)],
                &mut each,
            )?
        } else {
            let group: Vec<(u16, u16, &[u8])> =
                events.iter().map(|&(k, f, p, _)| (k, f, p)).collect();
            Store::append_group_at_len(self, session, known, len, &group, &mut each)?
        };
        Ok(appended.map(|()| (first, end)))
    }

    fn wait_appended(&self, session: &str, end: AppendEnd) -> Result<()> {
        match end {
            AppendEnd::Nothing => Ok(()),
            AppendEnd::At(pos) => self.wait_durable(pos),
            AppendEnd::Queued(_) => Store::sync_session(self, session),
        }
    }

    fn durable_wait(&self, end: AppendEnd) -> Option<DurableWait> {
        match end {
            AppendEnd::At(pos) => Some(self.wait_durable_async(pos)),
            _ => None,
        }
    }

    fn durable_hint(&self) -> Option<LogPos> {
        Some(Store::durable_hint(self))
    }

    /// From the index, under one read lock.
    fn listing(&self) -> Result<Vec<Listing>> {
        Ok(Store::listing(self))
    }

    fn changes_since(&self, since: Option<ChangeMark>) -> Result<Option<Changes>> {
        let epoch = self.collection_epoch();
        let all = since.is_none_or(|m| m.epoch != epoch);
        let from = match since {
            Some(m) if !all => m.position,
            _ => LogPos(0),
        };
        let (durable, touched) = self.sessions_touched_since(from);
        Ok(Some(Changes {
            mark: ChangeMark {
                position: durable,
                epoch,
            },
            all,
            sessions: touched
                .into_iter()
                .map(|(name, m)| Changed {
                    rank: m.id.0,
                    name,
                    define_pos: m.define_pos,
                    durable: m.define_pos < durable,
                    durable_len: m.durable_len,
                    parent: m.parent,
                })
                .collect(),
        }))
    }

    fn claim(&self, session: &str) -> Result<Claim> {
        let id = self
            .live_sessions()
            .claim(session, crate::types::now_ms())
            .map_err(|since_ms| Error::SessionLive {
                session: session.to_string(),
                since_ms,
            })?;
        // One process holds the store: a claim never takes over a writer.
        Ok(Claim {
            id,
            took_over: false,
        })
    }

    fn release(&self, session: &str, claim: u64) {
        self.live_sessions().release(session, claim);
    }

    fn claims_names(&self) -> bool {
        true
    }

    fn is_claimed(&self, session: &str) -> bool {
        self.live_sessions().live_since(session).is_some()
    }

    fn follow(&self, session: &str, from: u64) -> Result<Box<dyn Follow>> {
        Ok(Box::new(self.subscribe(session, from)?))
    }

    fn embedded(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<Store>> {
        Some(self)
    }

    /// The store's index (`search.sqlite`) is the session layer's: it
    /// decodes events with the caller's registry.
    fn search(&self, query: &str, limit: usize, session: Option<&str>) -> Result<Vec<Hit>> {
        let _ = (query, limit, session);
        Err(Error::Refused(
            "the embedded store is searched through turnstone::session::search (its index needs the session registry)".into(),
        ))
    }

    fn read_range(&self, session: &str, range: Range<u64>) -> Result<Vec<LogEvent>> {
        let durable = self
            .session_meta(session)
            .ok_or_else(|| Error::UnknownSession(session.to_string()))?
            .durable_len;
        if range.end > durable {
            return Err(Error::SeqOutOfRange {
                session: session.to_string(),
                seq: range.end,
                len: durable,
            });
        }
        Ok(Store::read_range(self, session, range)?
            .into_iter()
            .map(|e| LogEvent {
                seq: e.seq.0,
                kind: e.kind,
                flags: e.flags,
                payload: e.payload,
            })
            .collect())
    }
}

/// The embedded store's followers are the [`Follow`] of its
/// [`EventLog::follow`]: the session layer follows every log through that
/// one trait.
impl Follow for Subscription {
    fn next_timeout(&mut self, timeout: std::time::Duration) -> Result<Option<LogEvent>> {
        Ok(self.next_within(timeout)?.map(log_event))
    }

    fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<LogEvent>> {
        use std::future::Future;
        match std::pin::Pin::new(&mut self.next_async()).poll(cx) {
            std::task::Poll::Pending => std::task::Poll::Pending,
            std::task::Poll::Ready(Some(e)) => std::task::Poll::Ready(e.map(log_event)),
            std::task::Poll::Ready(None) => std::task::Poll::Ready(Err(Error::Closed)),
        }
    }
}

fn log_event(e: crate::types::Event) -> LogEvent {
    LogEvent {
        seq: e.seq.0,
        kind: e.kind,
        flags: e.flags,
        payload: e.payload,
    }
}
