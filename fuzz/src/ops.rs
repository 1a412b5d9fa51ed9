//! Target `ops`: an operation sequence against a simple in-memory model.
//!
//! Operations: appends (single and atomic groups, across sessions, with sizes
//! around sector and segment boundaries), forks, durability waits, syncs,
//! power cuts after an arbitrary number of file operations, EIO on the n-th
//! write or fdatasync, ENOSPC after n bytes, clean closes, reopens, and
//! crashes (the simulator keeps any subset of the unsynced writes, with torn
//! sectors, chosen by a seed), deletes (the session layer's tombstone) and
//! segment collections (FORMAT.md §14), with or without a power cut inside.
//!
//! The model is a `Vec` of events per session plus what was acknowledged: an
//! event is acknowledged when a wait or sync that covers it returned `Ok`, or
//! a `close()` returned `Ok`. After every reopen:
//! - every acknowledged event is there, byte for byte;
//! - every session is a dense prefix of what was appended to it (fork
//!   children include their inherited prefix), nothing is invented;
//! - a power cut only ever shows up as a torn tail, never as corruption;
//! - after a successful `close()` the reopen is clean;
//! - a deleted session is either still there whole (tombstone last) or, once
//!   a collection reclaimed it, not found; it never comes back without its
//!   tombstone, and forks of it keep reading their history.

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Error, Options, ProblemKind, Store};

use crate::util::{cut_power_and_drop, dir, payload, segment_bytes, sim_opts};

#[derive(Arbitrary, Debug)]
enum Op {
    Append {
        session: u8,
        kind: u8,
        len: Size,
    },
    Group {
        session: u8,
        n: u8,
        len: Size,
    },
    Fork {
        parent: u8,
        upto: u8,
        child: u8,
    },
    Wait,
    Sync,
    /// The power goes off after this many more file operations.
    PowerCut {
        after_ops: u8,
    },
    FailWrite {
        nth: u8,
    },
    FailSync {
        nth: u8,
    },
    Enospc {
        bytes: u16,
    },
    Crash {
        seed: u64,
    },
    Close,
    /// Drop without close(): the store still closes cleanly on drop.
    Reopen,
    /// `session::delete` (a durable tombstone).
    Delete {
        session: u8,
    },
    /// Close, collect (FORMAT.md §14) with a power cut after `cut` file
    /// operations of the collection if given, reboot if cut, reopen.
    Collect {
        threshold: u8,
        cut: Option<u8>,
    },
    /// Sync, then collect with the store open (`session::gc::collect_live`,
    /// FORMAT.md §14.5) under whatever faults are set; the store stays
    /// open and in use.
    CollectOnline {
        threshold: u8,
        regroup: bool,
    },
    /// Sync, then an online collection with a live-bytes budget
    /// (retention by size: sessions evicted oldest first); the sessions it
    /// reclaims are gone, every other one (forks of evicted parents
    /// included) reads back whole.
    Evict {
        kib: u8,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Size {
    Small(u8),
    /// Frames ending near a 512-byte sector boundary.
    Sector {
        k: u8,
        d: i8,
    },
    Large(u16),
}

impl Size {
    fn bytes(self, max: usize) -> usize {
        let n = match self {
            Size::Small(n) => n as usize,
            Size::Sector { k, d } => ((k % 8 + 1) as i64 * 512 - 24 + d as i64 / 4).max(0) as usize,
            Size::Large(n) => n as usize,
        };
        n % max
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    seg: u8,
    checkpoints: bool,
    preallocate: bool,
    final_seed: u64,
    ops: Vec<Op>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ev {
    kind: u16,
    flags: u16,
    payload: Vec<u8>,
}

#[derive(Debug, Default)]
struct ModelSession {
    events: Vec<Ev>,
    /// Leading events acknowledged durable.
    acked: usize,
    /// The session's define frame is acknowledged durable.
    define_acked: bool,
    /// Fork parent and inherited count.
    fork: Option<(String, usize)>,
    /// Deleted: its last event is its tombstone, acknowledged.
    deleted: bool,
}

/// Pending (unacknowledged) things, in log order.
#[derive(Debug)]
enum Pending {
    Define(String),
    Event(String, usize),
}

#[derive(Debug, Default)]
struct Model {
    sessions: BTreeMap<String, ModelSession>,
    pending: Vec<Pending>,
}

impl Model {
    /// Acknowledge the first `n` pending things (one thread appends, so log
    /// order is append order).
    fn ack(&mut self, n: usize) {
        for p in self.pending.drain(..n.min(self.pending.len())) {
            match p {
                Pending::Define(s) => {
                    if let Some(m) = self.sessions.get_mut(&s) {
                        m.define_acked = true;
                    }
                }
                Pending::Event(s, seq) => {
                    if let Some(m) = self.sessions.get_mut(&s) {
                        m.acked = m.acked.max(seq + 1);
                        m.define_acked = true;
                    }
                }
            }
        }
    }
    fn ack_all(&mut self) {
        self.ack(usize::MAX);
    }

    fn record(&mut self, session: &str, seq: u64, ev: Ev) {
        let new = !self.sessions.contains_key(session);
        let m = self.sessions.entry(session.to_string()).or_default();
        if new {
            self.pending.push(Pending::Define(session.to_string()));
        }
        assert_eq!(
            seq as usize,
            m.events.len(),
            "{session}: the engine handed out seq {seq}, the next dense seq is {}",
            m.events.len()
        );
        m.events.push(ev);
        self.pending
            .push(Pending::Event(session.to_string(), seq as usize));
    }

    /// Check a reopened store; then forget what did not survive.
    fn check_and_rebase(&mut self, store: &Store, ctx: &str) {
        for info in store.sessions() {
            assert!(
                self.sessions.contains_key(&info.name),
                "{ctx}: invented session {:?}",
                info.name
            );
        }
        let names: Vec<String> = self.sessions.keys().cloned().collect();
        for name in names {
            let m = &self.sessions[&name];
            if m.deleted {
                // Reclaimed (not found), or still whole with its tombstone.
                if let Some(len) = store.session_len(&name) {
                    assert_eq!(
                        len as usize,
                        m.events.len(),
                        "{ctx}: deleted session {name:?} is back without its tombstone"
                    );
                }
                continue;
            }
            let Some(len) = store.session_len(&name) else {
                assert!(
                    !m.define_acked && m.acked == 0,
                    "{ctx}: session {name:?} was acknowledged durable but is gone"
                );
                self.sessions.remove(&name);
                continue;
            };
            let len = len as usize;
            assert!(
                len >= m.acked,
                "{ctx}: {name}: {len} events recovered, {} were acknowledged durable",
                m.acked
            );
            assert!(
                len <= m.events.len(),
                "{ctx}: {name}: {len} events recovered, only {} were appended",
                m.events.len()
            );
            if let Some((parent, upto)) = m.fork.as_ref().filter(|(p, _)| {
                // A collected (deleted) parent is not found; the child's
                // reads below check what it inherits.
                !self.sessions.get(p).is_some_and(|pm| pm.deleted)
            }) {
                // A child's define comes after its parent's inherited events.
                let plen = store.session_len(parent).unwrap_or(0) as usize;
                assert!(
                    plen >= *upto,
                    "{ctx}: fork {name:?} exists but its parent {parent:?} lost inherited events"
                );
            }
            if len > 0 {
                let got = store
                    .read_range(&name, 0..len as u64)
                    .unwrap_or_else(|e| panic!("{ctx}: {name}: read_range: {e}"));
                assert_eq!(got.len(), len, "{ctx}: {name}: read_range length");
                for (i, e) in got.iter().enumerate() {
                    let want = &m.events[i];
                    assert!(
                        e.seq.0 == i as u64
                            && e.kind == want.kind
                            && e.flags == want.flags
                            && e.payload == want.payload,
                        "{ctx}: {name} seq {i}: recovered event differs from the appended one"
                    );
                }
            }
            let m = self.sessions.get_mut(&name).expect("listed");
            m.events.truncate(len);
            m.acked = len;
            m.define_acked = true;
        }
        self.pending.clear();
    }
}

struct Run {
    sim: SimVfs,
    opts: Options,
    model: Model,
    /// An fdatasync failed since the last reboot: the page cache may hold
    /// bytes that are not durable, so only a reboot may reopen.
    fsync_failed: bool,
    /// The armed `fail_sync_nth`, if any.
    sync_fault: Option<u64>,
}

impl Run {
    fn open(&self, ctx: &str) -> Store {
        Store::open_with(dir(), self.opts.clone())
            .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"))
    }

    /// Replace the fault plan, remembering whether an armed fdatasync failure
    /// already fired (a failure inside a drop is not seen otherwise).
    fn set_faults(&mut self, plan: FaultPlan) {
        self.fsync_failed |= self.sync_fault.is_some_and(|n| self.sim.syncs() > n);
        self.sync_fault = plan.fail_sync_nth;
        self.sim.set_faults(plan);
    }

    fn reboot(&mut self, seed: u64) {
        self.sim.crash(seed);
        self.fsync_failed = false;
        self.sync_fault = None;
    }

    fn fsync_failed(&self) -> bool {
        self.fsync_failed || self.sync_fault.is_some_and(|n| self.sim.syncs() > n)
    }

    fn note_err(&mut self, e: &Error) {
        if matches!(e, Error::Poisoned { .. }) {
            self.fsync_failed = true;
        }
    }

    /// Before an online collection: make everything durable (false if
    /// that failed: skip the collection), then mark the sessions whose last
    /// event is a tombstone (kind 18) as ones a collection may reclaim.
    fn synced_for_online_collection(&mut self, store: &Store) -> bool {
        if store.sync().is_err() || self.sim.powered_off() || self.fsync_failed() {
            return false;
        }
        self.model.ack_all();
        for m in self.model.sessions.values_mut() {
            if m.events.last().is_some_and(|e| e.kind == 18) {
                m.deleted = true;
            }
        }
        true
    }

    fn crash_and_reopen(&mut self, store: Store, seed: u64, ctx: &str) -> Store {
        cut_power_and_drop(&self.sim, store);
        self.reboot(seed);
        let store = self.open(ctx);
        let report = store.recovery_report().clone();
        for p in &report.problems {
            assert_eq!(
                p.kind,
                ProblemKind::TornTail,
                "{ctx}: a power cut must only produce torn tails: {p:?}"
            );
        }
        self.model.check_and_rebase(&store, ctx);
        store
    }
}

/// Plain sessions `s0..s3`; fork children `f0..f3` (appends may also create
/// an `f` session as a plain one).
fn session_name(sel: u8) -> String {
    let i = sel % 8;
    if i < 4 {
        format!("s{i}")
    } else {
        format!("f{}", i - 4)
    }
}

/// The structured input `data` decodes to (for failure reports).
pub fn describe(data: &[u8]) -> String {
    format!("{:#?}", Input::arbitrary_take_rest(Unstructured::new(data)))
}

pub fn run(data: &[u8]) {
    let u = Unstructured::new(data);
    let Ok(input) = Input::arbitrary_take_rest(u) else {
        return;
    };
    let sim = SimVfs::new();
    let seg = segment_bytes(input.seg);
    let opts = Options {
        checkpoints: input.checkpoints,
        preallocate: input.preallocate,
        ..sim_opts(&sim, seg)
    };
    let mut r = Run {
        sim,
        opts,
        model: Model::default(),
        fsync_failed: false,
        sync_fault: None,
    };
    let mut store = r.open("first open");
    let max = (seg as usize - 512) / 2;
    for (step, op) in input.ops.iter().take(64).enumerate() {
        let ctx = format!("op {step} ({op:?})");
        match op {
            Op::Append { session, kind, len } => {
                let name = session_name(*session);
                if r.model.sessions.get(&name).is_some_and(|m| m.deleted) {
                    continue;
                }
                let ev = Ev {
                    kind: 1 + (*kind as u16 % 30),
                    flags: (*kind as u16 >> 7) & 1,
                    payload: payload(step as u64, len.bytes(max)),
                };
                match store.append(&name, ev.kind, ev.flags, &ev.payload) {
                    Ok(a) => r.model.record(&name, a.seq.0, ev),
                    Err(e) => r.note_err(&e),
                }
            }
            Op::Group { session, n, len } => {
                let name = session_name(*session);
                if r.model.sessions.get(&name).is_some_and(|m| m.deleted) {
                    continue;
                }
                let evs: Vec<Ev> = (0..2 + n % 3)
                    .map(|k| Ev {
                        kind: 7,
                        flags: 0,
                        payload: payload(step as u64 * 8 + k as u64, len.bytes(max / 4)),
                    })
                    .collect();
                let refs: Vec<(u16, u16, &[u8])> = evs
                    .iter()
                    .map(|e| (e.kind, e.flags, e.payload.as_slice()))
                    .collect();
                let mut seqs = Vec::new();
                match store.append_group(&name, &refs, |a| seqs.push(a.seq.0)) {
                    Ok(()) => {
                        assert_eq!(seqs.len(), evs.len(), "{ctx}: one callback per event");
                        for (seq, ev) in seqs.into_iter().zip(evs) {
                            r.model.record(&name, seq, ev);
                        }
                    }
                    Err(e) => r.note_err(&e),
                }
            }
            Op::Fork {
                parent,
                upto,
                child,
            } => {
                let parent = session_name(*parent);
                let child = format!("f{}", child % 4);
                let Some(plen) = r
                    .model
                    .sessions
                    .get(&parent)
                    .filter(|m| !m.deleted)
                    .map(|m| m.events.len())
                else {
                    continue;
                };
                if r.model.sessions.contains_key(&child) {
                    continue;
                }
                let upto = *upto as usize % (plen + 1);
                match store.fork(&parent, upto as u64, &child) {
                    Ok(_) => {
                        let events = r.model.sessions[&parent].events[..upto].to_vec();
                        r.model.sessions.insert(
                            child.clone(),
                            ModelSession {
                                events,
                                acked: 0,
                                define_acked: false,
                                fork: Some((parent, upto)),
                                deleted: false,
                            },
                        );
                        r.model.pending.push(Pending::Define(child));
                    }
                    Err(e) => r.note_err(&e),
                }
            }
            Op::Wait | Op::Sync => {
                // A wait for the last append covers everything before it.
                let n = r.model.pending.len();
                match store.sync() {
                    Ok(_) => r.model.ack(n),
                    Err(e) => r.note_err(&e),
                }
            }
            Op::PowerCut { after_ops } => r.set_faults(FaultPlan {
                power_cut_after_ops: Some(r.sim.ops() + *after_ops as u64 % 32),
                ..Default::default()
            }),
            Op::FailWrite { nth } => r.set_faults(FaultPlan {
                fail_write_nth: Some(r.sim.writes() + *nth as u64 % 4),
                ..Default::default()
            }),
            Op::FailSync { nth } => r.set_faults(FaultPlan {
                fail_sync_nth: Some(r.sim.syncs() + *nth as u64 % 4),
                ..Default::default()
            }),
            Op::Enospc { bytes } => r.set_faults(FaultPlan {
                enospc_after_bytes: Some(*bytes as u64 * 4),
                ..Default::default()
            }),
            Op::Crash { seed } => {
                store = r.crash_and_reopen(store, *seed, &ctx);
            }
            Op::Delete { session } => {
                let name = session_name(*session);
                if r.model.sessions.get(&name).is_none_or(|m| m.deleted) {
                    continue;
                }
                match turnstone::session::delete(&store, &name) {
                    Ok(seq) => {
                        let ev = store
                            .read(&name, seq)
                            .unwrap_or_else(|e| panic!("{ctx}: read the tombstone: {e}"));
                        r.model.record(
                            &name,
                            seq,
                            Ev {
                                kind: ev.kind,
                                flags: ev.flags,
                                payload: ev.payload,
                            },
                        );
                        // delete() waited until the tombstone was durable.
                        r.model.ack_all();
                        r.model.sessions.get_mut(&name).expect("recorded").deleted = true;
                    }
                    Err(e) => r.note_err(&e),
                }
            }
            Op::Collect { threshold, cut } => {
                let closed = store.close();
                if closed.is_err() || r.sim.powered_off() || r.fsync_failed() {
                    r.reboot(step as u64);
                    store = r.open(&ctx);
                    r.model.check_and_rebase(&store, &ctx);
                    continue;
                }
                r.model.ack_all();
                // What a collection reclaims: sessions whose last event is a
                // tombstone (kind 18), whether Delete or a raw append wrote it.
                for m in r.model.sessions.values_mut() {
                    if m.events.last().is_some_and(|e| e.kind == 18) {
                        m.deleted = true;
                    }
                }
                r.set_faults(match cut {
                    Some(n) => FaultPlan {
                        power_cut_after_ops: Some(r.sim.ops() + *n as u64 % 48),
                        ..Default::default()
                    },
                    None => FaultPlan::default(),
                });
                let gc = turnstone::gc::CollectOptions {
                    vfs: std::sync::Arc::new(r.sim.clone()),
                    threshold: (*threshold % 5) as f64 / 4.0,
                    ..Default::default()
                };
                let result = turnstone::session::gc::collect(dir(), &gc);
                if r.sim.powered_off() {
                    r.reboot(step as u64);
                } else if let Err(e) = result {
                    panic!("{ctx}: collection failed without a fault: {e}");
                }
                r.set_faults(FaultPlan::default());
                store = r.open(&ctx);
                for p in &store.recovery_report().problems {
                    assert_eq!(
                        p.kind,
                        ProblemKind::TornTail,
                        "{ctx}: a collection (or a power cut in it) left damage: {p:?}"
                    );
                }
                r.model.check_and_rebase(&store, &ctx);
            }
            Op::CollectOnline { threshold, regroup } => {
                if !r.synced_for_online_collection(&store) {
                    continue;
                }
                let gc = turnstone::gc::CollectOptions {
                    threshold: (*threshold % 5) as f64 / 4.0,
                    regroup: *regroup,
                    ..Default::default()
                };
                let result = turnstone::session::gc::collect_live(
                    &store,
                    &gc,
                    &turnstone::session::gc::Retention::default(),
                );
                match result {
                    Ok(_) => r.model.check_and_rebase(&store, &ctx),
                    Err(e @ Error::Corrupt { .. }) => {
                        panic!("{ctx}: an online collection met damage: {e}")
                    }
                    // An injected fault (a failed write or sync, a full
                    // disk, the power): the next reopen checks the store.
                    Err(e) => r.note_err(&e),
                }
            }
            Op::Evict { kib } => {
                if !r.synced_for_online_collection(&store) {
                    continue;
                }
                let gc = turnstone::gc::CollectOptions {
                    threshold: 1.0,
                    max_live_bytes: Some(*kib as u64 * 1024),
                    ..Default::default()
                };
                let result = turnstone::session::gc::collect_live(
                    &store,
                    &gc,
                    &turnstone::session::gc::Retention::default(),
                );
                match result {
                    Ok(rep) => {
                        // What it evicted is gone for good (as if deleted).
                        let gone = store.reclaimed_names();
                        for n in &gone {
                            if let Some(m) = r.model.sessions.get_mut(n) {
                                m.deleted = true;
                            }
                        }
                        assert!(
                            rep.retry || rep.sessions_evicted as usize <= gone.len(),
                            "{ctx}: evicted more than it reclaimed: {rep:?}"
                        );
                        r.model.check_and_rebase(&store, &ctx);
                    }
                    Err(e @ Error::Corrupt { .. }) => {
                        panic!("{ctx}: an eviction met damage: {e}")
                    }
                    Err(e) => r.note_err(&e),
                }
            }
            Op::Close | Op::Reopen => {
                let closed = if matches!(op, Op::Close) {
                    store.close()
                } else {
                    drop(store);
                    Err(Error::Closed)
                };
                if r.sim.powered_off() || r.fsync_failed() {
                    // Only a reboot brings the power back, and after a failed
                    // fdatasync the page cache must not be trusted.
                    r.reboot(step as u64);
                    store = r.open(&ctx);
                    r.model.check_and_rebase(&store, &ctx);
                    continue;
                }
                if closed.is_ok() {
                    r.model.ack_all();
                }
                r.set_faults(FaultPlan::default());
                store = r.open(&ctx);
                if closed.is_ok() {
                    let rep = store.recovery_report();
                    assert!(
                        rep.problems.is_empty() && rep.clean_shutdown,
                        "{ctx}: close() returned Ok, so the reopen must be clean: {rep:?}"
                    );
                }
                r.model.check_and_rebase(&store, &ctx);
            }
        }
    }
    // The end: a crash, then a clean close and a clean reopen.
    store = r.crash_and_reopen(store, input.final_seed, "final crash");
    store.close().expect("close after the final crash");
    r.model.ack_all();
    let store = r.open("final open");
    let rep = store.recovery_report();
    assert!(
        rep.problems.is_empty() && rep.clean_shutdown,
        "final reopen not clean: {rep:?}"
    );
    r.model.check_and_rebase(&store, "final open");
}
