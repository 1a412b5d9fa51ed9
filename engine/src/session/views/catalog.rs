//! [`Catalog`]: a derived, in-memory index of the sessions of a store for
//! listing with filters and stable pagination (SESSIONS.md, "Listing").
//!
//! The log is the source of truth: each catalog entry is a fold over its
//! session's durable events (metadata from `session/meta`, the tombstone, the
//! open-turn flag, first and last append times), and the catalog can be
//! dropped and rebuilt at any time. It is incremental: it remembers the
//! durable log position it has folded up to, and a [`Catalog::refresh`] folds
//! only the events of sessions with a frame past that position (one pass over
//! the store index's integers to find them, then only their new events), so
//! a listing stays cheap with 100,000 sessions. Like every view it reads only
//! durable events and never causes an `fdatasync`.
//!
//! Order and pagination: sessions are listed in creation order (or newest
//! first), and a [`Cursor`] is the creation rank of the last session
//! returned. A session created later gets a higher rank, so a cursor stays
//! valid while sessions are added: the next pages neither repeat nor skip a
//! session that existed when the listing started (a session deleted in
//! between is left out).

use std::collections::{BTreeSet, HashMap};
use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};

use crate::backend::{ChangeMark, Changed, Changes, EventLog};
use crate::error::{Error, Result};
use crate::session::codec::event::{CoreKind, MetaUpdate, SessionMetadata};
use crate::session::log::LogRef;
use crate::types::LogPos;

/// One listed session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CatalogEntry {
    /// The session id.
    pub id: String,
    /// Durable events, inherited ones included.
    pub events: u64,
    /// Append time of the first own event and of the last event (ms since
    /// the epoch), when recorded.
    pub created_ms: Option<u64>,
    /// See `created_ms`.
    pub updated_ms: Option<u64>,
    /// A turn is open (started, not ended) after the last durable event.
    pub open_turn: bool,
    /// Fork parent and the number of events inherited.
    pub parent: Option<(String, u64)>,
    /// Title, tags and fields.
    pub metadata: SessionMetadata,
}

/// Where the next page of a listing starts: the creation rank of the last
/// session returned. Shown and parsed as text (`"c42"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor(u32);

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.0)
    }
}

impl std::str::FromStr for Cursor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Cursor> {
        s.strip_prefix('c')
            .and_then(|n| n.parse().ok())
            .map(Cursor)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{s:?} is not a listing cursor (they look like \"c42\")"
                ))
            })
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Cursor, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What to list. Every filter given must hold (and).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Sessions carrying every one of these tags.
    pub tags: Vec<String>,
    /// Sessions whose field `key` equals `value`, for each pair.
    pub fields: Vec<(String, String)>,
    /// Sessions whose last event was appended at or after this time (ms
    /// since the epoch).
    pub updated_since_ms: Option<u64>,
    /// Sessions with (true) or without (false) an open turn.
    pub open_turn: Option<bool>,
    /// Fork children of this session.
    pub parent: Option<String>,
    /// Newest first instead of creation order.
    pub newest_first: bool,
    /// Continue after this cursor (from [`ListPage::next`]).
    pub after: Option<Cursor>,
    /// Most sessions per page.
    pub limit: usize,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            tags: Vec::new(),
            fields: Vec::new(),
            updated_since_ms: None,
            open_turn: None,
            parent: None,
            newest_first: false,
            after: None,
            limit: 50,
        }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListPage {
    /// The sessions of this page, in listing order.
    pub sessions: Vec<CatalogEntry>,
    /// The cursor of the next page; `None` when this is the last.
    pub next: Option<Cursor>,
}

#[derive(Debug, Clone)]
struct Slot {
    define_pos: LogPos,
    /// Events folded: seqs `0..folded`.
    folded: u64,
    deleted: bool,
    entry: CatalogEntry,
}

/// The catalog of one store. See the module documentation.
#[derive(Debug, Default)]
pub struct Catalog {
    /// The log it was built on ([`crate::backend::EventLog::log_id`]).
    log_id: Option<[u8; 16]>,
    /// Where the log's last answer of changes left off; `None` for a
    /// catalog refreshed by listing (a log that cannot say what changed).
    mark: Option<ChangeMark>,
    /// Refreshed by listing: ranks are given in the order the log first
    /// listed each session.
    by_listing: bool,
    /// By creation rank (the store's dense session id).
    slots: Vec<Option<Slot>>,
    /// Each listed session's rank, by name.
    ranks: HashMap<String, u32>,
    by_tag: HashMap<String, BTreeSet<u32>>,
    by_field: HashMap<(String, String), BTreeSet<u32>>,
    by_parent: HashMap<String, BTreeSet<u32>>,
    listed: usize,
    /// The store's retention policy at the last refresh: expired sessions
    /// are left out of listings and lookups.
    policy: crate::session::lifecycle::retention::Policy,
}

#[derive(Deserialize)]
struct TsOnly {
    #[serde(default)]
    ts: Option<u64>,
}

#[derive(Deserialize)]
struct MetaOnly {
    data: MetaUpdate,
}

impl Catalog {
    /// An empty catalog; [`Catalog::refresh`] fills it.
    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// A catalog of a log (an embedded store, or any other
    /// [`crate::backend::EventLog`]), folded up to its durable end.
    pub fn build<'a>(log: impl Into<LogRef<'a>>) -> Result<Catalog> {
        let mut c = Catalog::new();
        c.refresh(log)?;
        Ok(c)
    }

    /// Number of sessions listed (not deleted as of the last refresh, and
    /// not expired now under the store's retention policy: what `list`
    /// would show unfiltered). With a policy this looks at every entry.
    pub fn len(&self) -> usize {
        if self.policy.is_empty() {
            return self.listed;
        }
        self.slots
            .iter()
            .flatten()
            .filter(|s| !s.deleted && !self.expired(&s.entry))
            .count()
    }

    /// Whether no session is listed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One session's entry (`None`: unknown, not durable yet, or deleted),
    /// as of the last refresh. `log` is the one the catalog was built on
    /// (on the embedded store it tells a session from a later one of the
    /// same name; another log's catalog answers from its own names).
    pub fn get<'a>(&self, log: impl Into<LogRef<'a>>, id: &str) -> Option<&CatalogEntry> {
        let rank = *self.ranks.get(id)?;
        let slot = self.slots.get(rank as usize)?.as_ref()?;
        if slot.deleted || self.expired(&slot.entry) {
            return None;
        }
        if !self.by_listing {
            // A later session of the same name is not this one.
            let (_, define_pos) = log.into().as_log().incarnation(id).ok()??;
            if define_pos != slot.define_pos {
                return None;
            }
        }
        Some(&slot.entry)
    }

    /// Fold every durable event not folded yet. Returns the number of
    /// events read.
    ///
    /// Where the log says what changed since the last refresh
    /// ([`crate::backend::EventLog::changes_since`]: the embedded store)
    /// this is incremental by log position (see the module documentation).
    /// Otherwise (e.g. PostgreSQL) it asks for the listing
    /// ([`crate::backend::EventLog::listing`]) and folds the new durable
    /// events of each session whose length grew; a session the log no
    /// longer lists (deleted) is dropped, and a new one ranks after every
    /// session seen before, so cursors stay valid. Refresh a catalog with
    /// the log it was built on: one built on another log starts again.
    pub fn refresh<'a>(&mut self, log: impl Into<LogRef<'a>>) -> Result<u64> {
        let log = log.into();
        let l = log.as_log();
        if self.log_id != Some(l.log_id()) {
            *self = Catalog {
                log_id: Some(l.log_id()),
                ..Catalog::default()
            };
        }
        self.policy = crate::session::lifecycle::retention::Policy::of_log(log)?;
        if self.by_listing {
            return self.refresh_listed(l);
        }
        match l.changes_since(self.mark)? {
            Some(changes) => self.refresh_changed(l, changes),
            None if self.mark.is_none() => {
                self.by_listing = true;
                self.refresh_listed(l)
            }
            None => {
                // The log stopped saying what changed: list it from now on.
                let log_id = self.log_id;
                *self = Catalog {
                    log_id,
                    by_listing: true,
                    ..Catalog::default()
                };
                self.refresh_listed(l)
            }
        }
    }

    /// [`Catalog::refresh`] with what changed since the last one.
    fn refresh_changed(&mut self, log: &dyn EventLog, changes: Changes) -> Result<u64> {
        if changes.all && self.mark.is_some() {
            // An online collection moved frames (to positions that may lie
            // before the last mark) and may have reclaimed sessions: drop
            // those, and take each define's new position (a session whose
            // durable length did not change is not folded again).
            let now: HashMap<u32, &Changed> =
                changes.sessions.iter().map(|c| (c.rank, c)).collect();
            for rank in 0..self.slots.len() {
                let Some(mut slot) = self.slots[rank].take() else {
                    continue;
                };
                self.unindex(rank as u32, &slot);
                match now.get(&(rank as u32)) {
                    Some(c) if c.name == slot.entry.id => {
                        slot.define_pos = c.define_pos;
                        self.index(rank as u32, &slot);
                        self.slots[rank] = Some(slot);
                    }
                    _ => {
                        self.forget(rank as u32, &slot.entry.id);
                    }
                }
            }
        }
        let mut read = 0;
        for c in &changes.sessions {
            if !c.durable {
                continue; // the session itself is not durable yet
            }
            let rank = c.rank;
            let i = rank as usize;
            if self.slots.len() <= i {
                self.slots.resize(i + 1, None);
            }
            let mut slot = match self.slots[i].take() {
                Some(s) if s.define_pos == c.define_pos && s.entry.id == c.name => {
                    self.unindex(rank, &s);
                    s
                }
                Some(s) => {
                    // Another incarnation of the rank: start again.
                    self.unindex(rank, &s);
                    self.forget(rank, &s.entry.id);
                    fresh(&c.name, c.define_pos, c.parent.clone())
                }
                None => fresh(&c.name, c.define_pos, c.parent.clone()),
            };
            if self.ranks.get(&c.name) != Some(&rank) {
                self.ranks.insert(c.name.clone(), rank);
            }
            if !slot.deleted && c.durable_len > slot.folded {
                read += fold(log, &c.name, c.durable_len, &mut slot)?;
            }
            self.index(rank, &slot);
            self.slots[i] = Some(slot);
        }
        self.mark = Some(changes.mark);
        Ok(read)
    }

    /// Drop `name`'s rank if it is `rank`'s.
    fn forget(&mut self, rank: u32, name: &str) {
        if self.ranks.get(name) == Some(&rank) {
            self.ranks.remove(name);
        }
    }

    /// Whether the retention policy expires `e` now.
    fn expired(&self, e: &CatalogEntry) -> bool {
        !self.policy.is_empty()
            && self.policy.expired(
                &e.id,
                e.created_ms,
                e.updated_ms,
                crate::session::codec::envelope::now_ms(),
            )
    }

    fn unindex(&mut self, rank: u32, s: &Slot) {
        if s.deleted {
            return;
        }
        self.listed -= 1;
        let m = &s.entry.metadata;
        for t in &m.tags {
            if let Some(set) = self.by_tag.get_mut(t) {
                set.remove(&rank);
            }
        }
        for (k, v) in &m.fields {
            if let Some(set) = self.by_field.get_mut(&(k.clone(), v.clone())) {
                set.remove(&rank);
            }
        }
        if let Some((p, _)) = &s.entry.parent {
            if let Some(set) = self.by_parent.get_mut(p) {
                set.remove(&rank);
            }
        }
    }

    fn index(&mut self, rank: u32, s: &Slot) {
        if s.deleted {
            return;
        }
        self.listed += 1;
        let m = &s.entry.metadata;
        for t in &m.tags {
            self.by_tag.entry(t.clone()).or_default().insert(rank);
        }
        for (k, v) in &m.fields {
            self.by_field
                .entry((k.clone(), v.clone()))
                .or_default()
                .insert(rank);
        }
        if let Some((p, _)) = &s.entry.parent {
            self.by_parent.entry(p.clone()).or_default().insert(rank);
        }
    }

    /// One page of the sessions matching `q`, as of the last refresh (call
    /// [`Catalog::refresh`] first to see the log's durable end). Costs the
    /// page plus the entries skipped by filters that no index answers; a
    /// tag, field or parent filter walks only the sessions that have it.
    pub fn list(&self, q: &ListQuery) -> ListPage {
        let limit = q.limit.max(1);
        // The smallest index set among the indexed filters, if any.
        let empty = BTreeSet::new();
        let mut sets: Vec<&BTreeSet<u32>> = Vec::new();
        for t in &q.tags {
            sets.push(self.by_tag.get(t).unwrap_or(&empty));
        }
        for (k, v) in &q.fields {
            sets.push(self.by_field.get(&(k.clone(), v.clone())).unwrap_or(&empty));
        }
        if let Some(p) = &q.parent {
            sets.push(self.by_parent.get(p).unwrap_or(&empty));
        }
        let candidates = sets.into_iter().min_by_key(|s| s.len());
        let after = q.after.map(|c| c.0);
        let ranks: Box<dyn Iterator<Item = u32> + '_> = match (candidates, q.newest_first) {
            (Some(set), false) => match after {
                Some(a) => Box::new(set.range(a.saturating_add(1)..).copied()),
                None => Box::new(set.iter().copied()),
            },
            (Some(set), true) => match after {
                Some(a) => Box::new(set.range(..a).rev().copied()),
                None => Box::new(set.iter().rev().copied()),
            },
            (None, false) => {
                let from = after.map_or(0, |a| a as usize + 1);
                Box::new((from..self.slots.len()).map(|r| r as u32))
            }
            (None, true) => {
                let to = after.map_or(self.slots.len(), |a| (a as usize).min(self.slots.len()));
                Box::new((0..to).rev().map(|r| r as u32))
            }
        };
        let mut sessions = Vec::new();
        let mut last = None;
        let mut more = false;
        for rank in ranks {
            let Some(Some(slot)) = self.slots.get(rank as usize) else {
                continue;
            };
            if slot.deleted || !matches(&slot.entry, q) || self.expired(&slot.entry) {
                continue;
            }
            if sessions.len() == limit {
                more = true;
                break;
            }
            sessions.push(slot.entry.clone());
            last = Some(rank);
        }
        ListPage {
            sessions,
            next: if more { last.map(Cursor) } else { None },
        }
    }
}

fn matches(e: &CatalogEntry, q: &ListQuery) -> bool {
    q.tags.iter().all(|t| e.metadata.tags.contains(t))
        && q.fields
            .iter()
            .all(|(k, v)| e.metadata.fields.get(k) == Some(v))
        && q.parent
            .as_ref()
            .is_none_or(|p| e.parent.as_ref().is_some_and(|(ep, _)| ep == p))
        && q.updated_since_ms
            .is_none_or(|t| e.updated_ms.is_some_and(|u| u >= t))
        && q.open_turn.is_none_or(|o| e.open_turn == o)
}

fn fresh(name: &str, define_pos: LogPos, parent: Option<(String, u64)>) -> Slot {
    Slot {
        define_pos,
        folded: 0,
        deleted: false,
        entry: CatalogEntry {
            id: name.to_string(),
            events: 0,
            created_ms: None,
            updated_ms: None,
            open_turn: false,
            parent,
            metadata: SessionMetadata::default(),
        },
    }
}

/// Fold the durable events `slot.folded..durable_len` of one session: kind
/// codes for turns and the tombstone, the data of `session/meta` events,
/// the envelope's time of the first own and the last event. An event the
/// catalog cannot read (a malformed `session/meta`) is skipped: the
/// catalog is a view, and a writable open reports such an event.
fn fold(log: &dyn EventLog, name: &str, end: u64, slot: &mut Slot) -> Result<u64> {
    let first_own = slot.entry.parent.as_ref().map_or(0, |(_, n)| *n);
    let e = &mut slot.entry;
    let mut deleted = false;
    let n = log.visit(name, slot.folded..end, &mut |ev| {
        fold_event(e, &mut deleted, first_own, end, ev.seq, ev.kind, ev.payload);
        ControlFlow::Continue(())
    })?;
    e.events = end;
    slot.folded = end;
    slot.deleted |= deleted;
    Ok(n)
}

/// One event of the fold (see [`fold`]): the session's events `0..end`,
/// its own ones from `first_own`.
fn fold_event(
    e: &mut CatalogEntry,
    deleted: &mut bool,
    first_own: u64,
    end: u64,
    seq: u64,
    kind: u16,
    payload: &[u8],
) {
    let k = kind;
    if k == CoreKind::TurnStart.code() {
        e.open_turn = true;
    } else if k == CoreKind::TurnEnd.code() {
        e.open_turn = false;
    } else if k == CoreKind::SessionMeta.code() {
        if let Ok(m) = serde_json::from_slice::<MetaOnly>(payload) {
            e.metadata.apply(&m.data);
        }
    } else if k == CoreKind::SessionDelete.code() {
        *deleted = true;
    }
    if seq == first_own || seq + 1 == end {
        let ts = serde_json::from_slice::<TsOnly>(payload)
            .ok()
            .and_then(|t| t.ts);
        if seq == first_own {
            e.created_ms = ts;
        }
        if seq + 1 == end {
            e.updated_ms = ts;
        }
    }
}

/// The catalog fold of a session whose events are read from another log
/// (a PostgreSQL database): feed it the session's events `0..len` in
/// order, inherited ones included, then [`EntryFold::finish`]. Gives the
/// entry [`Catalog::refresh`] gives for the same events.
#[derive(Debug, Clone)]
pub struct EntryFold {
    entry: CatalogEntry,
    deleted: bool,
    len: u64,
}

impl EntryFold {
    /// The fold of session `id` of `len` events (inherited ones included),
    /// a fork of `parent` at its fork seq.
    pub fn new(id: &str, parent: Option<(String, u64)>, len: u64) -> EntryFold {
        EntryFold {
            entry: CatalogEntry {
                id: id.to_string(),
                events: len,
                created_ms: None,
                updated_ms: None,
                open_turn: false,
                parent,
                metadata: SessionMetadata::default(),
            },
            deleted: false,
            len,
        }
    }

    /// The next event (seqs in order, from 0).
    pub fn event(&mut self, seq: u64, kind: u16, payload: &[u8]) {
        let first_own = self.entry.parent.as_ref().map_or(0, |(_, n)| *n);
        fold_event(
            &mut self.entry,
            &mut self.deleted,
            first_own,
            self.len,
            seq,
            kind,
            payload,
        );
    }

    /// The entry; `None` when the events hold a `session/delete` tombstone.
    pub fn finish(self) -> Option<CatalogEntry> {
        (!self.deleted).then_some(self.entry)
    }
}

impl Catalog {
    /// A catalog of entries made elsewhere ([`EntryFold`]), in creation
    /// order (their rank is their place here). [`Catalog::list`] answers
    /// with filters and cursors as for a store; [`Catalog::refresh`] with a
    /// store starts again from that store.
    pub fn from_entries(entries: impl IntoIterator<Item = CatalogEntry>) -> Catalog {
        let mut c = Catalog::new();
        for (rank, entry) in entries.into_iter().enumerate() {
            let slot = Slot {
                define_pos: LogPos::default(),
                folded: entry.events,
                deleted: false,
                entry,
            };
            c.index(rank as u32, &slot);
            c.ranks.insert(slot.entry.id.clone(), rank as u32);
            c.slots.push(Some(slot));
        }
        c.by_listing = true;
        c
    }
}

impl Catalog {
    /// [`Catalog::refresh`] by listing: the log's listing, then the new
    /// durable events of each session that grew.
    fn refresh_listed(&mut self, log: &dyn EventLog) -> Result<u64> {
        let mut listed = vec![false; self.slots.len()];
        let mut read = 0;
        for item in log.listing()? {
            let next = self.slots.len() as u32;
            let rank = *self.ranks.entry(item.name.clone()).or_insert(next);
            let i = rank as usize;
            if self.slots.len() <= i {
                self.slots.resize(i + 1, None);
                listed.resize(i + 1, false);
            }
            let slot = match self.slots[i].take() {
                Some(s) => {
                    self.unindex(rank, &s);
                    // The same session, never shorter (a log's sessions
                    // only grow); anything else starts again.
                    if s.entry.parent == item.parent && s.folded <= item.durable_len {
                        s
                    } else {
                        fresh(&item.name, LogPos::default(), item.parent.clone())
                    }
                }
                None => fresh(&item.name, LogPos::default(), item.parent.clone()),
            };
            let slot = if !slot.deleted && item.durable_len > slot.folded {
                let mut grown = slot.clone();
                match fold(log, &item.name, item.durable_len, &mut grown) {
                    Ok(n) => {
                        read += n;
                        grown
                    }
                    // Gone since the listing was read: left out.
                    Err(e) if e.is_not_found() => {
                        self.ranks.remove(&item.name);
                        continue;
                    }
                    Err(e) => {
                        self.index(rank, &slot);
                        self.slots[i] = Some(slot);
                        return Err(e);
                    }
                }
            } else {
                slot
            };
            listed[i] = true;
            self.index(rank, &slot);
            self.slots[i] = Some(slot);
        }
        // Sessions no longer listed (deleted): dropped.
        for (i, listed) in listed.into_iter().enumerate() {
            if listed {
                continue;
            }
            if let Some(s) = self.slots[i].take() {
                self.unindex(i as u32, &s);
                self.ranks.remove(&s.entry.id);
            }
        }
        Ok(read)
    }
}
