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

use crate::error::{Error, Result};
use crate::session::codec::event::{CoreKind, MetaUpdate, SessionMetadata};
use crate::session::log::LogRef;
use crate::store::Store;
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
    store_id: Option<[u8; 16]>,
    /// Every frame before this durable position is folded.
    covered: LogPos,
    /// By creation rank (the store's dense session id).
    slots: Vec<Option<Slot>>,
    by_tag: HashMap<String, BTreeSet<u32>>,
    by_field: HashMap<(String, String), BTreeSet<u32>>,
    by_parent: HashMap<String, BTreeSet<u32>>,
    listed: usize,
    /// [`Store::collection_epoch`] at the last refresh.
    epoch: Option<(u64, u64)>,
    /// The store's retention policy at the last refresh: expired sessions
    /// are left out of listings and lookups.
    policy: crate::session::lifecycle::retention::Policy,
    /// Built on another log ([`LogRef::Other`]): each session's rank by
    /// name (given in the order the log first listed it).
    ranks: Option<HashMap<String, u32>>,
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
        let store = match log.into() {
            LogRef::Embedded(store) => store,
            LogRef::Other(_) => {
                let rank = *self.ranks.as_ref()?.get(id)?;
                let slot = self.slots.get(rank as usize)?.as_ref()?;
                return (!slot.deleted).then_some(&slot.entry);
            }
        };
        let meta = store.session_meta(id)?;
        let slot = self.slots.get(meta.id.0 as usize)?.as_ref()?;
        (!slot.deleted && slot.define_pos == meta.define_pos && !self.expired(&slot.entry))
            .then_some(&slot.entry)
    }

    /// Fold every durable event not folded yet. Returns the number of
    /// events read.
    ///
    /// On the embedded store this is incremental by log position (see the
    /// module documentation). On another log ([`LogRef::Other`], e.g.
    /// PostgreSQL) it asks for the listing ([`crate::backend::EventLog::listing`])
    /// and folds the new durable events of each session whose length grew;
    /// a session the log no longer lists (deleted) is dropped, and a new
    /// one ranks after every session seen before, so cursors stay valid.
    /// Refresh a catalog with the log it was built on: one built on a store
    /// starts again when refreshed with another log, and the other way
    /// round.
    pub fn refresh<'a>(&mut self, log: impl Into<LogRef<'a>>) -> Result<u64> {
        match log.into() {
            LogRef::Embedded(store) => self.refresh_store(store),
            LogRef::Other(l) => self.refresh_log(l),
        }
    }

    fn refresh_store(&mut self, store: &Store) -> Result<u64> {
        if self.store_id != Some(store.store_id()) || self.ranks.is_some() {
            *self = Catalog {
                store_id: Some(store.store_id()),
                ..Catalog::default()
            };
        }
        let epoch = store.collection_epoch();
        if self
            .epoch
            .is_some_and(|(h, g)| h == epoch.0 && g != epoch.1)
        {
            // An online collection in this store handle moved frames (to
            // positions that may lie before `covered`) and may have
            // reclaimed sessions: drop those, take each define's new
            // position, and look at every session again (a session whose
            // durable length did not change is not folded again).
            for rank in 0..self.slots.len() {
                let Some(slot) = self.slots[rank].take() else {
                    continue;
                };
                self.unindex(rank as u32, &slot);
                match store.session_meta(&slot.entry.id) {
                    Some(m) if m.id.0 as usize == rank => {
                        let mut slot = slot;
                        slot.define_pos = m.define_pos;
                        self.index(rank as u32, &slot);
                        self.slots[rank] = Some(slot);
                    }
                    _ => {}
                }
            }
            self.covered = LogPos(0);
        }
        self.epoch = Some(epoch);
        self.policy = crate::session::lifecycle::retention::Policy::of(store)?;
        let (durable, touched) = store.sessions_touched_since(self.covered);
        let mut read = 0;
        for (name, meta) in touched {
            if meta.define_pos >= durable {
                continue; // the session itself is not durable yet
            }
            let rank = meta.id.0;
            let i = rank as usize;
            if self.slots.len() <= i {
                self.slots.resize(i + 1, None);
            }
            let mut slot = match self.slots[i].take() {
                Some(s) if s.define_pos == meta.define_pos => {
                    self.unindex(rank, &s);
                    s
                }
                Some(s) => {
                    // Another incarnation of the rank: start again.
                    self.unindex(rank, &s);
                    fresh(&name, &meta)
                }
                None => fresh(&name, &meta),
            };
            if !slot.deleted && meta.durable_len > slot.folded {
                read += fold(store, &name, &meta, &mut slot)?;
            }
            self.index(rank, &slot);
            self.slots[i] = Some(slot);
        }
        self.covered = durable;
        Ok(read)
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

fn fresh(name: &str, meta: &crate::store::SessionMeta) -> Slot {
    Slot {
        define_pos: meta.define_pos,
        folded: 0,
        deleted: false,
        entry: CatalogEntry {
            id: name.to_string(),
            events: 0,
            created_ms: None,
            updated_ms: None,
            open_turn: false,
            parent: meta.parent.clone(),
            metadata: SessionMetadata::default(),
        },
    }
}

/// Fold the durable events `slot.folded..durable_len` of one session: kind
/// codes for turns and the tombstone, the data of `session/meta` events,
/// the envelope's time of the first own and the last event. An event the
/// catalog cannot read (a malformed `session/meta`) is skipped: the
/// catalog is a view, and a writable open reports such an event.
fn fold(
    store: &Store,
    name: &str,
    meta: &crate::store::SessionMeta,
    slot: &mut Slot,
) -> Result<u64> {
    let end = meta.durable_len;
    let first_own = meta.parent.as_ref().map_or(0, |(_, n)| *n);
    let e = &mut slot.entry;
    let mut deleted = false;
    let n = store.visit_range(name, slot.folded..end, |ev| {
        fold_event(
            e,
            &mut deleted,
            first_own,
            end,
            ev.seq.0,
            ev.kind,
            ev.payload,
        );
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
            c.slots.push(Some(slot));
        }
        c
    }
}

/// Events read per call from another log.
const LOG_CHUNK: u64 = 4096;

impl Catalog {
    /// [`Catalog::refresh`] on another log: its listing, then the new
    /// durable events of each session that grew.
    fn refresh_log(&mut self, log: &dyn crate::backend::EventLog) -> Result<u64> {
        if self.ranks.is_none() {
            *self = Catalog {
                ranks: Some(HashMap::new()),
                ..Catalog::default()
            };
        }
        let mut listed = vec![false; self.slots.len()];
        let mut read = 0;
        for item in log.listing()? {
            let ranks = self.ranks.get_or_insert_with(HashMap::new);
            let next = self.slots.len() as u32;
            let rank = *ranks.entry(item.name.clone()).or_insert(next);
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
                        fresh_listed(&item)
                    }
                }
                None => fresh_listed(&item),
            };
            let slot = if !slot.deleted && item.durable_len > slot.folded {
                let mut grown = slot.clone();
                match fold_log(log, &item.name, item.durable_len, &mut grown) {
                    Ok(n) => {
                        read += n;
                        grown
                    }
                    // Gone since the listing was read: left out.
                    Err(e) if e.is_not_found() => {
                        if let Some(r) = self.ranks.as_mut() {
                            r.remove(&item.name);
                        }
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
                if let Some(r) = self.ranks.as_mut() {
                    r.remove(&s.entry.id);
                }
            }
        }
        Ok(read)
    }
}

fn fresh_listed(item: &crate::backend::Listing) -> Slot {
    Slot {
        define_pos: LogPos::default(),
        folded: 0,
        deleted: false,
        entry: CatalogEntry {
            id: item.name.clone(),
            events: 0,
            created_ms: None,
            updated_ms: None,
            open_turn: false,
            parent: item.parent.clone(),
            metadata: SessionMetadata::default(),
        },
    }
}

/// [`fold`] on another log: the durable events `slot.folded..end`, read in
/// chunks.
fn fold_log(
    log: &dyn crate::backend::EventLog,
    name: &str,
    end: u64,
    slot: &mut Slot,
) -> Result<u64> {
    let first_own = slot.entry.parent.as_ref().map_or(0, |(_, n)| *n);
    let mut deleted = false;
    let mut n = 0;
    let mut at = slot.folded;
    while at < end {
        let to = (at + LOG_CHUNK).min(end);
        for ev in log.read_range(name, at..to)? {
            n += 1;
            fold_event(
                &mut slot.entry,
                &mut deleted,
                first_own,
                end,
                ev.seq,
                ev.kind,
                &ev.payload,
            );
        }
        at = to;
    }
    slot.entry.events = end;
    slot.folded = end;
    slot.deleted |= deleted;
    Ok(n)
}
