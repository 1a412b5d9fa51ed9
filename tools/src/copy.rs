//! `turnstone copy SRC DST`: every live session from one log to another,
//! each a store directory or a PostgreSQL URL (issue 18).
//!
//! What is kept: session ids, fork structure (a fork is created as a fork
//! of the same parent at the same fork point, nothing of the prefix is
//! copied), and every event's seq, kind, flags and payload. Timestamps
//! live in the session layer's envelopes inside the payloads, so they are
//! kept with them. Blob references (FORMAT.md §15) are resolved on read:
//! the event carries its content inline in the database; written to a store
//! directory, the payload goes through the session layer's blob threshold
//! again (`blob_refs::outline`, in the session layer's internals), so large blocks become blobs of the
//! destination, each durable before the event that names it is appended.
//!
//! A deleted session is not copied, except as far as a live fork reads
//! through it: then the prefix of it that its forks read is copied, and it
//! is deleted again in the destination once its forks exist. A deleted
//! session whose forks read less of it than it inherited from its own
//! parent is forked from that parent at the point its forks read to (the
//! events past it are read by nothing, and a collected source no longer
//! holds them).
//!
//! The destination must hold none of the sessions (deleted ones included):
//! every name is checked before anything is written ([`CopyError::Exists`]).
//! The copy is not one transaction: sessions are written one after the
//! other, each in groups; a failure (or a crash) part-way leaves the
//! sessions copied so far, the last of them possibly incomplete.
//!
//! The plan (order, extents, the session each is read through) is made in
//! `plan`; this file reads, writes and reports.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use turnstone::session::internals as blob_refs;
use turnstone::session::internals::decode;
use turnstone::session::{searchable_text, Registry};
use turnstone::{Options, Store};
use turnstone_pg::{PgError, PgLog, PgOptions};

use crate::place::Place;
use crate::Failure;

mod plan;

use plan::{plan, Plan};

#[derive(Debug, Args)]
pub struct CopyArgs {
    /// Source: a store directory or a postgres:// (postgresql://) URL.
    pub src: String,
    /// Destination: a store directory (created when absent) or a URL.
    pub dst: String,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Why a copy was refused or stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The destination already has sessions of these names (deleted ones
    /// count: a name is never reused). Nothing was written.
    #[error("{dst} already has session(s) {sessions:?}; nothing was copied (copy into another store or database)")]
    Exists { dst: String, sessions: Vec<String> },
    /// One event could not be carried over (a missing or damaged blob, a
    /// payload the destination cannot hold).
    #[error("{place}: session {session:?}, seq {seq}: {detail}")]
    Event {
        place: String,
        session: String,
        seq: u64,
        detail: String,
    },
    /// The destination gave a session's event another seq than the source.
    #[error("{dst}: session {session:?}: seq {want} expected, {got} found; the copy stopped")]
    Seq {
        dst: String,
        session: String,
        want: u64,
        got: u64,
    },
    /// A fork's parent is gone from the source (collected).
    #[error("{src}: session {session:?} is a fork of {parent:?}, which the store no longer lists")]
    LostParent {
        src: String,
        session: String,
        parent: String,
    },
    #[error("{place}: {source}")]
    Store {
        place: String,
        #[source]
        source: turnstone::Error,
    },
    #[error("{place}: {source}")]
    Pg {
        place: String,
        #[source]
        source: PgError,
    },
}

impl From<CopyError> for Failure {
    fn from(e: CopyError) -> Failure {
        let code = match &e {
            CopyError::Store {
                source: turnstone::Error::Corrupt { .. },
                ..
            } => 1,
            _ => 2,
        };
        Failure {
            code,
            msg: e.to_string(),
        }
    }
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CopyReport {
    /// Live sessions copied.
    pub sessions: u64,
    /// Deleted sessions copied (as far as live forks read through them)
    /// and deleted again in the destination.
    pub deleted_ancestors: u64,
    /// Events written (a fork's inherited events are not written again).
    pub events: u64,
    /// Payload bytes written (blob references resolved).
    pub bytes: u64,
    pub duration_us: u64,
}

/// One session of the source as the copy sees it.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    parent: Option<(String, u64)>,
    /// `None`: deleted (copied only for its forks).
    live_len: Option<u64>,
}

impl Node {
    fn own_from(&self) -> u64 {
        self.parent.as_ref().map_or(0, |p| p.1)
    }
}

/// One event read from the source, blob references resolved.
struct Ev {
    seq: u64,
    kind: u16,
    flags: u16,
    payload: Vec<u8>,
}

enum Source {
    Dir { store: Arc<Store>, show: String },
    Pg { log: PgLog, show: String },
}

impl Source {
    fn open(place: &Place) -> Result<Source, Failure> {
        Ok(match place {
            Place::Dir(d) => Source::Dir {
                store: crate::store_open::read_only(d)?,
                show: place.show(),
            },
            Place::Url(u) => Source::Pg {
                log: crate::place::connect_reader(u)?,
                show: place.show(),
            },
        })
    }

    fn show(&self) -> &str {
        match self {
            Source::Dir { show, .. } | Source::Pg { show, .. } => show,
        }
    }

    /// Live sessions in creation order, then the deleted ancestors they
    /// read through, each listed once.
    fn nodes(&self) -> Result<Vec<Node>, CopyError> {
        let mut out: Vec<Node> = Vec::new();
        match self {
            Source::Dir { store, show } => {
                let err = |source| CopyError::Store {
                    place: show.clone(),
                    source,
                };
                for s in store.sessions() {
                    let deleted = turnstone::session::deleted_at(store, &s.name)
                        .map_err(err)?
                        .is_some();
                    out.push(Node {
                        id: s.name,
                        parent: s.parent,
                        live_len: (!deleted).then_some(s.len),
                    });
                }
                // A collected (gc'd) deleted parent is no longer listed.
                let known: std::collections::HashSet<String> =
                    out.iter().map(|n| n.id.clone()).collect();
                for n in &out {
                    if let Some((p, _)) = &n.parent {
                        if !known.contains(p) && n.live_len.is_some() {
                            return Err(CopyError::LostParent {
                                src: show.clone(),
                                session: n.id.clone(),
                                parent: p.clone(),
                            });
                        }
                    }
                }
            }
            Source::Pg { log, show } => {
                let err = |source| CopyError::Pg {
                    place: show.clone(),
                    source,
                };
                for s in log.sessions().map_err(err)? {
                    out.push(Node {
                        id: s.id,
                        parent: s.parent,
                        live_len: Some(s.len),
                    });
                }
                // Deleted ancestors are not listed; their fork links are kept.
                let mut known: std::collections::HashSet<String> =
                    out.iter().map(|n| n.id.clone()).collect();
                let mut i = 0;
                while i < out.len() {
                    if let Some((p, _)) = out[i].parent.clone() {
                        if known.insert(p.clone()) {
                            let parent = log.parent(&p).map_err(err)?;
                            out.push(Node {
                                id: p,
                                parent,
                                live_len: None,
                            });
                        }
                    }
                    i += 1;
                }
            }
        }
        Ok(out)
    }

    /// Events `range` of `session` (inherited ones included), blob
    /// references resolved.
    fn read(&self, session: &str, range: std::ops::Range<u64>) -> Result<Vec<Ev>, CopyError> {
        match self {
            Source::Dir { store, show } => {
                let events =
                    store
                        .read_range(session, range)
                        .map_err(|source| CopyError::Store {
                            place: show.clone(),
                            source,
                        })?;
                events
                    .into_iter()
                    .map(|e| {
                        let seq = e.seq.0;
                        let e = blob_refs::resolve_event(store.blobs(), e).map_err(|x| {
                            CopyError::Event {
                                place: show.clone(),
                                session: session.to_string(),
                                seq,
                                detail: format!("its blob references cannot be resolved: {x}"),
                            }
                        })?;
                        Ok(Ev {
                            seq,
                            kind: e.kind,
                            flags: e.flags,
                            payload: e.payload,
                        })
                    })
                    .collect()
            }
            Source::Pg { log, show } => Ok(log
                .read_range(session, range)
                .map_err(|source| CopyError::Pg {
                    place: show.clone(),
                    source,
                })?
                .into_iter()
                .map(|e| Ev {
                    seq: e.seq,
                    kind: e.kind,
                    flags: e.flags,
                    payload: e.payload,
                })
                .collect()),
        }
    }
}

enum Dest {
    Dir { store: Box<Store>, show: String },
    Pg { log: PgLog, show: String },
}

/// The lease owner the copy writes as.
fn owner() -> String {
    format!("turnstone-copy-{}", std::process::id())
}

impl Dest {
    fn open(place: &Place) -> Result<Dest, Failure> {
        Ok(match place {
            Place::Dir(d) => Dest::Dir {
                store: Box::new(Store::open_with(d, Options::default()).map_err(|e| {
                    Failure::from(e).context(format!("opening store {}", d.display()))
                })?),
                show: place.show(),
            },
            Place::Url(u) => Dest::Pg {
                log: PgLog::connect(
                    u,
                    PgOptions {
                        lanes: 1,
                        ..PgOptions::default()
                    },
                )
                .map_err(|e| crate::place::pg_failure(u, e))?,
                show: place.show(),
            },
        })
    }

    fn show(&self) -> &str {
        match self {
            Dest::Dir { show, .. } | Dest::Pg { show, .. } => show,
        }
    }

    fn store_err(&self) -> impl Fn(turnstone::Error) -> CopyError + '_ {
        move |source| CopyError::Store {
            place: self.show().to_string(),
            source,
        }
    }

    fn pg_err(&self) -> impl Fn(PgError) -> CopyError + '_ {
        move |source| CopyError::Pg {
            place: self.show().to_string(),
            source,
        }
    }

    /// Whether a session of this name exists (deleted ones included).
    fn has(&self, id: &str) -> Result<bool, CopyError> {
        match self {
            Dest::Dir { store, .. } => Ok(store.session_meta(id).is_some()),
            Dest::Pg { log, .. } => match log.parent(id) {
                Ok(_) => Ok(true),
                Err(PgError::UnknownSession(_)) => Ok(false),
                Err(e) => Err(self.pg_err()(e)),
            },
        }
    }

    fn exists_error(&self, id: &str) -> CopyError {
        CopyError::Exists {
            dst: self.show().to_string(),
            sessions: vec![id.to_string()],
        }
    }

    fn create(&self, n: &Node) -> Result<(), CopyError> {
        match self {
            Dest::Dir { store, .. } => {
                let r = match &n.parent {
                    Some((p, at)) => store.fork(p, *at, &n.id).map(|_| ()),
                    None => store.create_session(&n.id).map(|_| ()),
                };
                match r {
                    Err(turnstone::Error::SessionExists(_)) => Err(self.exists_error(&n.id)),
                    r => r.map_err(self.store_err()),
                }
            }
            Dest::Pg { log, .. } => {
                let r = match &n.parent {
                    Some((p, at)) => log.fork(p, *at, &n.id),
                    None => log.create_session(&n.id),
                };
                match r {
                    Err(PgError::SessionExists(_)) => Err(self.exists_error(&n.id)),
                    r => r.map_err(self.pg_err()),
                }
            }
        }
    }

    fn delete(&self, id: &str) -> Result<(), CopyError> {
        match self {
            Dest::Dir { store, .. } => turnstone::session::delete(&**store, id)
                .map(|_| ())
                .map_err(self.store_err()),
            Dest::Pg { log, .. } => log.delete(id).map_err(self.pg_err()),
        }
    }

    fn close(self) -> Result<(), CopyError> {
        match self {
            Dest::Dir { store, show } => store.close().map_err(|source| CopyError::Store {
                place: show,
                source,
            }),
            Dest::Pg { log, .. } => {
                log.close();
                Ok(())
            }
        }
    }
}

/// Events per group written, and bytes after which a group is cut (a
/// store's commit batch holds at most 32 MiB; an event up to the payload
/// limit still goes alone).
const GROUP_EVENTS: usize = 4096;
const GROUP_BYTES: usize = 4 << 20;
/// PostgreSQL: wait for the commits after this many queued bytes (one
/// session's, or those of the sessions held), so that no more than this is
/// held in memory.
const PG_SYNC_BYTES: usize = 32 << 20;

/// Writes one session's own events in groups, checking every seq.
struct SessionWriter<'a> {
    dst: &'a Dest,
    id: &'a str,
    pg: Option<turnstone_pg::Writer>,
    group: Vec<(u16, u16, Vec<u8>, Option<String>)>,
    group_bytes: usize,
    first: u64,
    unsynced: usize,
    registry: Registry,
}

impl<'a> SessionWriter<'a> {
    fn new(dst: &'a Dest, id: &'a str, first: u64) -> Result<Self, CopyError> {
        let pg = match dst {
            Dest::Pg { log, .. } => Some(
                log.acquire(id, &owner(), false)
                    .map_err(dst.pg_err())?
                    .writer,
            ),
            Dest::Dir { .. } => None,
        };
        Ok(SessionWriter {
            dst,
            id,
            pg,
            group: Vec::new(),
            group_bytes: 0,
            first,
            unsynced: 0,
            registry: Registry::new(),
        })
    }

    fn push(&mut self, e: Ev) -> Result<(), CopyError> {
        let want = self.first + self.group.len() as u64;
        if e.seq != want {
            return Err(CopyError::Seq {
                dst: self.dst.show().to_string(),
                session: self.id.to_string(),
                want,
                got: e.seq,
            });
        }
        let (payload, text) = match self.dst {
            Dest::Dir { store, show } => {
                // The pins keep an online collection from removing the
                // blobs before the event is appended; none runs here (this
                // process holds the store's lock and starts no collector).
                let mut pins = Vec::new();
                let p = blob_refs::outline(store.blobs(), &e.payload, &mut pins).map_err(|x| {
                    CopyError::Event {
                        place: show.clone(),
                        session: self.id.to_string(),
                        seq: e.seq,
                        detail: format!("cannot store its large blocks as blobs: {x}"),
                    }
                })?;
                (p.unwrap_or(e.payload), None)
            }
            Dest::Pg { .. } => {
                // Indexed for PgLog::search, as a session-layer writer would.
                let text = decode(e.seq, e.kind, e.flags, &e.payload, &self.registry)
                    .ok()
                    .and_then(|ev| searchable_text(&ev));
                (e.payload, text)
            }
        };
        if !self.group.is_empty()
            && (self.group.len() >= GROUP_EVENTS || self.group_bytes + payload.len() > GROUP_BYTES)
        {
            self.write_group()?;
        }
        self.group_bytes += payload.len();
        self.group.push((e.kind, e.flags, payload, text));
        Ok(())
    }

    fn write_group(&mut self) -> Result<(), CopyError> {
        if self.group.is_empty() {
            return Ok(());
        }
        let first = self.first;
        let got = match (self.dst, &self.pg) {
            (Dest::Dir { store, show }, _) => {
                let events: Vec<(u16, u16, &[u8])> = self
                    .group
                    .iter()
                    .map(|(k, f, p, _)| (*k, *f, p.as_slice()))
                    .collect();
                let mut got = None;
                store
                    .append_group(self.id, &events, |a| {
                        got.get_or_insert(a.seq.0);
                    })
                    .map_err(|x| match x {
                        turnstone::Error::TooLarge { .. }
                        | turnstone::Error::InvalidArgument(_) => CopyError::Event {
                            place: show.clone(),
                            session: self.id.to_string(),
                            seq: first,
                            detail: format!("the group of events from this seq: {x}"),
                        },
                        x => self.dst.store_err()(x),
                    })?;
                got.unwrap_or(first)
            }
            (Dest::Pg { .. }, Some(w)) => {
                let events: Vec<(u16, u16, &[u8], Option<&str>)> = self
                    .group
                    .iter()
                    .map(|(k, f, p, t)| (*k, *f, p.as_slice(), t.as_deref()))
                    .collect();
                let got = w
                    .append_group_with_text(&events)
                    .map_err(self.dst.pg_err())?;
                self.unsynced += self.group_bytes;
                if self.unsynced >= PG_SYNC_BYTES {
                    w.sync().map_err(self.dst.pg_err())?;
                    self.unsynced = 0;
                }
                got
            }
            (Dest::Pg { .. }, None) => unreachable!("a PostgreSQL destination has a writer"),
        };
        if got != first {
            return Err(CopyError::Seq {
                dst: self.dst.show().to_string(),
                session: self.id.to_string(),
                want: first,
                got,
            });
        }
        self.first += self.group.len() as u64;
        self.group.clear();
        self.group_bytes = 0;
        Ok(())
    }

    /// Write what is left and wait until the session is durable.
    /// A store directory: the session is durable when this returns. A
    /// database: the writer is returned with the bytes it queued since its
    /// last wait, for [`Held`] to wait for later, so that the next
    /// sessions' commits overlap this one's.
    fn finish(mut self) -> Result<Option<(turnstone_pg::Writer, usize)>, CopyError> {
        self.write_group()?;
        match (self.dst, self.pg.take()) {
            (Dest::Dir { store, .. }, _) => store
                .sync_session(self.id)
                .map(|()| None)
                .map_err(self.dst.store_err()),
            (Dest::Pg { .. }, w) => Ok(w.map(|w| (w, self.unsynced))),
        }
    }
}

/// Database writers of sessions written in full whose commits have not
/// been waited for yet.
#[derive(Default)]
struct Held {
    writers: Vec<(String, turnstone_pg::Writer)>,
    bytes: usize,
}

impl Held {
    fn add(
        &mut self,
        dst: &Dest,
        id: &str,
        w: Option<(turnstone_pg::Writer, usize)>,
    ) -> Result<(), CopyError> {
        if let Some((w, bytes)) = w {
            self.writers.push((id.to_string(), w));
            self.bytes += bytes;
        }
        if self.bytes >= PG_SYNC_BYTES {
            self.wait(dst)?;
        }
        Ok(())
    }

    fn holds(&self, id: &str) -> bool {
        self.writers.iter().any(|(s, _)| s == id)
    }

    /// Wait for every held commit and give the leases up.
    fn wait(&mut self, dst: &Dest) -> Result<(), CopyError> {
        for (_, w) in self.writers.drain(..) {
            w.release().map_err(dst.pg_err())?;
        }
        self.bytes = 0;
        Ok(())
    }
}

/// Copy every live session of `src` to `dst`.
pub fn copy(src: &Place, dst: &Place) -> Result<CopyReport, Failure> {
    let started = Instant::now();
    if src == dst {
        return Err(Failure::usage("SRC and DST are the same"));
    }
    let source = Source::open(src)?;
    let nodes = source.nodes()?;
    let Plan { order, extent, via } = plan(nodes);
    let dest = Dest::open(dst)?;
    // Every name is checked before anything is written.
    let mut taken = Vec::new();
    for n in &order {
        if dest.has(&n.id)? {
            taken.push(n.id.clone());
        }
    }
    if !taken.is_empty() {
        let show = dest.show().to_string();
        dest.close()?;
        return Err(CopyError::Exists {
            dst: show,
            sessions: taken,
        }
        .into());
    }
    let total: u64 = order
        .iter()
        .map(|n| extent[&n.id].saturating_sub(n.own_from()))
        .sum();
    let bar = crate::progress::bar(total, "copying events", false, total >= 100_000);
    let mut report = CopyReport::default();
    let result = (|| -> Result<(), CopyError> {
        let mut held = Held::default();
        for n in &order {
            // A fork's parent must be committed before the fork is made.
            if n.parent.as_ref().is_some_and(|(p, _)| held.holds(p)) {
                held.wait(&dest)?;
            }
            dest.create(n)?;
            let (from, to) = (n.own_from(), extent[&n.id]);
            let mut w = SessionWriter::new(&dest, &n.id, from)?;
            if to > from {
                let reader = via.get(&n.id).ok_or_else(|| CopyError::LostParent {
                    src: source.show().to_string(),
                    session: n.id.clone(),
                    parent: n.id.clone(),
                })?;
                const CHUNK: u64 = 4096;
                let mut at = from;
                while at < to {
                    let end = (at + CHUNK).min(to);
                    for e in source.read(reader, at..end)? {
                        report.events += 1;
                        report.bytes += e.payload.len() as u64;
                        w.push(e)?;
                    }
                    bar.inc(end - at);
                    at = end;
                }
            }
            held.add(&dest, &n.id, w.finish()?)?;
            if n.live_len.is_some() {
                report.sessions += 1;
            } else {
                report.deleted_ancestors += 1;
            }
        }
        held.wait(&dest)?;
        // Deleted again once every fork of them exists.
        for n in order.iter().filter(|n| n.live_len.is_none()) {
            dest.delete(&n.id)?;
        }
        Ok(())
    })();
    bar.finish_and_clear();
    let closed = dest.close();
    result?;
    closed?;
    report.duration_us = started.elapsed().as_micros() as u64;
    Ok(report)
}

pub fn run(a: &CopyArgs) -> Result<ExitCode, Failure> {
    let (src, dst) = (Place::parse(&a.src), Place::parse(&a.dst));
    if let Place::Dir(d) = &src {
        crate::failure::existing_dir(d)?;
    }
    let r = copy(&src, &dst)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&r).expect("the report serializes")
        );
    } else {
        println!(
            "copied {} sessions{}, {} events, {} payload bytes from {} to {} in {:.3} s",
            r.sessions,
            if r.deleted_ancestors > 0 {
                format!(
                    " (and {} deleted ones their forks read through)",
                    r.deleted_ancestors
                )
            } else {
                String::new()
            },
            r.events,
            r.bytes,
            src.show(),
            dst.show(),
            r.duration_us as f64 / 1e6
        );
    }
    Ok(ExitCode::SUCCESS)
}
