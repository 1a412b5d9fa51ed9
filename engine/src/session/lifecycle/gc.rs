//! Segment collection with the session layer's liveness rules
//! ([`crate::gc::collect`], FORMAT.md §14): a session is dead when its last
//! event is its `session/delete` tombstone (FORMAT.md §10), or when a
//! [`Retention`] rule expires it at this collection. Its frames past every
//! live fork point are reclaimed, and from then on it is not found (like a
//! deleted session).
//!
//! A collection runs on demand on a closed store ([`collect`], `turnstone
//! gc`), or online on an open one ([`collect_live`], and [`Background`],
//! which runs it every so often with its I/O rate bounded).
//!
//! Retention is applied by a collection, not at read time: an expired
//! session stays readable until a collection runs (`turnstone gc
//! --expire-after`). It reads the `ts` of the session's envelopes (§10): a
//! session whose events carry no `ts` (raw engine appends, the server's
//! stream records) never expires.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use crate::error::Result;
use crate::gc::{CollectCandidate, CollectOptions, CollectReport};
use crate::session::codec::envelope;
use crate::session::codec::event::CoreKind;
use crate::session::lifecycle::retention::{ts_of_payload, Policy, Retention};
use crate::Store;

/// A session layer's liveness rule under a retention policy at a time.
pub type Rule = dyn Fn(&CollectCandidate<'_>, &Policy, u64) -> bool + Send + Sync;

/// Collect the store in `dir`: every deleted session's garbage.
pub fn collect(dir: impl AsRef<Path>, opts: &CollectOptions) -> Result<CollectReport> {
    collect_with(dir, opts, &Retention::default())
}

/// Collect the store in `dir`: deleted sessions, and the sessions
/// `retention` expires now.
pub fn collect_with(
    dir: impl AsRef<Path>,
    opts: &CollectOptions,
    retention: &Retention,
) -> Result<CollectReport> {
    collect_with_rule(dir, opts, retention, &is_dead)
}

/// Collect the store in `dir` with `rule` deciding which sessions are dead
/// under the store's policy overridden by `retention` (a layer with records
/// of its own, such as `turnstone serve`'s stream tombstones, passes its
/// rule), then its unreferenced blob files.
pub fn collect_with_rule(
    dir: impl AsRef<Path>,
    opts: &CollectOptions,
    retention: &Retention,
    rule: &Rule,
) -> Result<CollectReport> {
    let started = std::time::Instant::now();
    let dir = dir.as_ref();
    let policy = Policy::load(opts.vfs.as_ref(), dir)?.overridden_by(retention);
    let now = retention.now_ms.unwrap_or_else(envelope::now_ms);
    let mut opts = opts.clone();
    opts.max_live_bytes = opts.max_live_bytes.or(policy.max_bytes);
    let mut report = crate::gc::collect(dir, &opts, &|c| rule(c, &policy, now))?;
    // Derived files: a failure only costs a rebuild of those snapshots.
    let _ = crate::session::views::snapshot::rebase_defines(
        opts.vfs.as_ref(),
        dir,
        &report.moved_defines,
    );
    collect_blobs(dir, &opts, &mut report)?;
    report.duration_us = started.elapsed().as_micros() as u64;
    Ok(report)
}

/// Collect `store` now, while it stays open (an online collection,
/// [`Store::collect`]): deleted sessions, and the sessions `retention`
/// expires now (never one a writable handle holds), then the blob files no
/// live event references (writers keep appending meanwhile; a blob a writer
/// is about to reference is kept, see [`crate::blobs`]).
pub fn collect_live(
    store: &Store,
    opts: &CollectOptions,
    retention: &Retention,
) -> Result<CollectReport> {
    collect_live_with_rule(store, opts, retention, &is_dead)
}

/// [`collect_live`] with a rule of one's own (see [`collect_with_rule`]).
pub fn collect_live_with_rule(
    store: &Store,
    opts: &CollectOptions,
    retention: &Retention,
    rule: &Rule,
) -> Result<CollectReport> {
    collect_live_inner(store, opts, retention, rule, true)
}

/// An online collection; the blob sweep only if `blobs` or the collection
/// reclaimed a session (a blob becomes unreferenced only when a session
/// goes, or when a writer died between writing it and appending its event).
fn collect_live_inner(
    store: &Store,
    opts: &CollectOptions,
    retention: &Retention,
    rule: &Rule,
    blobs: bool,
) -> Result<CollectReport> {
    let started = std::time::Instant::now();
    let policy = Policy::of(store)?.overridden_by(retention);
    let now = retention.now_ms.unwrap_or_else(envelope::now_ms);
    let mut opts = opts.clone();
    opts.max_live_bytes = opts.max_live_bytes.or(policy.max_bytes);
    let mut report = store.collect(&opts, &|c| rule(c, &policy, now))?;
    // Derived files: a failure only costs a rebuild of those snapshots.
    let _ = crate::session::views::snapshot::rebase_defines(
        store.vfs().as_ref(),
        store.dir(),
        &report.moved_defines,
    );
    if !opts.dry_run && (blobs || report.sessions_reclaimed > 0) {
        sweep_blobs(store, &mut report)?;
        report.duration_us = started.elapsed().as_micros() as u64;
    }
    Ok(report)
}

/// Remove, while the store stays open, the blob files no appended event of
/// a live session references (inherited events included), keeping every
/// blob a writer pinned since the sweep opened ([`crate::blobs`] says why
/// that is enough). A referenced blob that is missing or damaged stops it
/// with that error before anything is removed.
fn sweep_blobs(store: &Store, report: &mut CollectReport) -> Result<()> {
    let blobs = store.blobs();
    let sweep = blobs.sweep();
    // Listed after the sweep opened: a blob written since is pinned.
    let present = blobs.list()?;
    report.blobs_examined = present.len() as u64;
    if present.is_empty() {
        return Ok(());
    }
    let live = crate::session::lifecycle::blobs::referenced_blobs(store)?;
    let mut removed = 0;
    for h in present.iter().filter(|h| !live.contains(*h)) {
        let freed = sweep.remove_unused(h)?;
        if freed > 0 {
            removed += 1;
            report.blob_bytes_reclaimed += freed;
        }
    }
    report.blobs_removed = removed;
    if removed > 0 {
        blobs.sync()?;
    }
    drop(sweep);
    Ok(())
}

/// How a [`Background`] collector runs.
#[derive(Debug, Clone)]
pub struct BackgroundOptions {
    /// Time between the end of one collection and the start of the next.
    pub interval: Duration,
    /// Threshold, range size and rate (`rate_bytes_per_sec`: the bound on
    /// the collection's I/O) of each collection; `vfs` and `dry_run` are
    /// ignored (the store's own file layer is used).
    pub collect: CollectOptions,
    /// Retention applied at each collection.
    pub retention: Retention,
}

impl Default for BackgroundOptions {
    fn default() -> Self {
        BackgroundOptions {
            interval: Duration::from_secs(60),
            collect: CollectOptions {
                rate_bytes_per_sec: Some(64 << 20),
                ..Default::default()
            },
            retention: Retention::default(),
        }
    }
}

/// What a [`Background`] collector did so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BackgroundStats {
    /// Collections run (finished, failed or retried).
    pub runs: u64,
    /// Collections that changed something.
    pub productive: u64,
    /// Sessions reclaimed (deleted or expired), over all collections.
    pub sessions_reclaimed: u64,
    /// Segment files removed, over all collections.
    pub segment_files_removed: u64,
    /// Segment bytes freed, over all collections.
    pub bytes_reclaimed: u64,
    /// Blob files removed, over all collections.
    pub blobs_removed: u64,
    /// Blob bytes freed, over all collections.
    pub blob_bytes_reclaimed: u64,
    /// Sum of the collections' durations.
    pub busy_us: u64,
    /// Bytes of the sealed segments the collections looked at (most of
    /// them known from earlier runs, not read again).
    pub bytes_examined: u64,
    /// Bytes the collections read and wrote (their I/O volume, for a
    /// throughput figure with `busy_us`).
    pub bytes_io: u64,
    /// Collections that failed (the collector goes on, unless the store
    /// is closed or poisoned).
    pub errors: u64,
    /// The last failure's message.
    pub last_error: Option<String>,
}

/// Collects a store in the background while it is used: a thread that runs
/// [`collect_live`] every `interval` until [`Background::stop`] (or drop),
/// or until the store closes.
pub struct Background {
    stop: Arc<(Mutex<bool>, Condvar)>,
    stats: Arc<Mutex<BackgroundStats>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Start collecting `store` in the background with the session layer's
    /// rule (deleted sessions, and `opts.retention`).
    pub fn start(store: Arc<Store>, opts: BackgroundOptions) -> Result<Background> {
        Background::start_with_rule(store, opts, Arc::new(is_dead))
    }

    /// Start collecting `store` in the background, with `rule` deciding
    /// which sessions are dead under the store's policy (reloaded at each
    /// run) overridden by `opts.retention` (a layer with its own records,
    /// such as `turnstone serve`'s stream tombstones, passes its own rule).
    pub fn start_with_rule(
        store: Arc<Store>,
        opts: BackgroundOptions,
        rule: Arc<Rule>,
    ) -> Result<Background> {
        if store.is_read_only() {
            return Err(crate::Error::ReadOnly);
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stats = Arc::new(Mutex::new(BackgroundStats::default()));
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let dir = store.dir().to_path_buf();
        let handle = std::thread::Builder::new()
            .name("turnstone-gc".into())
            .spawn(move || {
                let mut copts = opts.collect.clone();
                copts.vfs = store.vfs().clone();
                copts.dry_run = false;
                // Blobs are swept at the first run (what a writer that
                // died between a blob and its event left) and after each
                // run that reclaimed a session.
                let mut first = true;
                loop {
                    {
                        let (m, cv) = &*stop2;
                        let mut stopped = m.lock();
                        if !*stopped {
                            cv.wait_for(&mut stopped, opts.interval);
                        }
                        if *stopped {
                            return;
                        }
                    }
                    let result = collect_live_inner(&store, &copts, &opts.retention, &*rule, first);
                    first &= result.is_err();
                    let mut s = stats2.lock();
                    s.runs += 1;
                    match result {
                        Ok(r) => {
                            if r.ranges_rewritten > 0 || r.blobs_removed > 0 {
                                s.productive += 1;
                            }
                            s.sessions_reclaimed += r.sessions_reclaimed;
                            s.segment_files_removed += r.segment_files_removed as u64;
                            s.bytes_reclaimed += r.bytes_reclaimed;
                            s.blobs_removed += r.blobs_removed;
                            s.blob_bytes_reclaimed += r.blob_bytes_reclaimed;
                            s.bytes_examined += r.bytes_before;
                            s.bytes_io += r.bytes_io;
                            s.busy_us += r.duration_us;
                        }
                        Err(crate::Error::Closed) => return,
                        Err(e) => {
                            s.errors += 1;
                            s.last_error = Some(e.to_string());
                            if matches!(e, crate::Error::Poisoned { .. }) {
                                return;
                            }
                        }
                    }
                }
            })
            .map_err(|e| crate::Error::io("spawn the collector thread", dir, e))?;
        Ok(Background {
            stop,
            stats,
            handle: Some(handle),
        })
    }

    /// What the collector did so far.
    pub fn stats(&self) -> BackgroundStats {
        self.stats.lock().clone()
    }

    /// Stop the collector, waiting for a collection in progress to finish
    /// its current step (closing the store also stops it).
    pub fn stop(mut self) -> BackgroundStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        {
            let (m, cv) = &*self.stop;
            *m.lock() = true;
            cv.notify_all();
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Remove the blob files (FORMAT.md §15) that no live event references,
/// after the segments are collected: the store is opened for writing, so
/// its lock keeps every writer out while the live set is computed and the
/// files are removed, then the blob directory is fsynced. Live: every blob
/// an event of a session that is not deleted references, its inherited
/// events included (a fork keeps its deleted parent's blobs). A blob that
/// a live event references but that is missing or damaged stops the
/// collection with that error before anything is removed. A crash between
/// removals leaves only unreferenced blobs, removed or not.
fn collect_blobs(dir: &Path, opts: &CollectOptions, report: &mut CollectReport) -> Result<()> {
    // A store without blob files is not opened at all (an open for writing
    // and its close would touch the log).
    let any = opts
        .vfs
        .list(&dir.join(crate::blobs::BLOB_DIR))
        .map(|names| {
            names
                .iter()
                .any(|n| n.ends_with(&format!(".{}", crate::blobs::BLOB_EXT)))
        })
        .unwrap_or(false);
    if !any {
        return Ok(());
    }
    let store_opts = crate::Options {
        vfs: opts.vfs.clone(),
        read_only: opts.dry_run,
        ..Default::default()
    };
    let store = crate::Store::open_with(dir, store_opts)?;
    let present = store.blobs().list()?;
    report.blobs_examined = present.len() as u64;
    if !present.is_empty() {
        let live = crate::session::lifecycle::blobs::referenced_blobs(&store)?;
        for h in present.iter().filter(|h| !live.contains(*h)) {
            report.blobs_removed += 1;
            report.blob_bytes_reclaimed += if opts.dry_run {
                store.blobs().file_bytes(h)
            } else {
                store.blobs().remove(h)?
            };
        }
        if !opts.dry_run && report.blobs_removed > 0 {
            store.blobs().sync()?;
        }
    }
    store.close()
}

/// The session layer's rule: whether `c` is dead under `policy` at `now`
/// (ms since the epoch): its last event is a `session/delete` tombstone, or
/// the policy expires it by the `ts` of its first own and last events (never
/// a session a writable handle holds, nor one the policy keeps); asked
/// whether `c` may be evicted for `max_bytes`, yes unless held or kept.
pub fn is_dead(c: &CollectCandidate<'_>, policy: &Policy, now: u64) -> bool {
    let tombstone = CoreKind::SessionDelete.code();
    if c.last.is_some_and(|(kind, _)| kind == tombstone) {
        return true;
    }
    if c.held || policy.keeps(c.name) {
        return false;
    }
    if c.evicting {
        return true;
    }
    let ts = |ev: Option<(u16, &[u8])>| ev.and_then(|(_, p)| ts_of_payload(p));
    policy.expired(c.name, ts(c.first), ts(c.last), now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::lifecycle::retention::SessionPolicy;

    fn cand<'a>(first: &'a [u8], last: &'a [u8], last_kind: u16) -> CollectCandidate<'a> {
        CollectCandidate {
            name: "s",
            len: 2,
            first: Some((5, first)),
            last: Some((last_kind, last)),
            held: false,
            evicting: false,
        }
    }

    #[test]
    fn tombstones_and_retention_decide_who_is_dead() {
        let old = br#"{"v":0,"ts":1000,"data":{}}"#;
        let new = br#"{"v":0,"ts":90000,"data":{}}"#;
        let none = br#"{"v":0,"data":{}}"#;
        let off = Policy::default();
        assert!(!is_dead(&cand(old, old, 5), &off, 100_000));
        assert!(is_dead(
            &cand(new, new, CoreKind::SessionDelete.code()),
            &off,
            100_000
        ));
        let ttl = Policy {
            expire_after_ms: Some(50_000),
            ..Default::default()
        };
        assert!(is_dead(&cand(old, old, 5), &ttl, 100_000));
        assert!(
            !is_dead(&cand(old, new, 5), &ttl, 100_000),
            "recent last event"
        );
        assert!(
            !is_dead(&cand(none, none, 5), &ttl, 100_000),
            "no ts: never expires"
        );
        let age = Policy {
            max_age_ms: Some(50_000),
            ..Default::default()
        };
        assert!(
            is_dead(&cand(old, new, 5), &age, 100_000),
            "first event too old"
        );
        assert!(!is_dead(&cand(new, new, 5), &age, 100_000));
        let mut held = cand(old, old, 5);
        held.held = true;
        assert!(!is_dead(&held, &ttl, 100_000), "held: retention waits");
        let mut held = cand(new, new, CoreKind::SessionDelete.code());
        held.held = true;
        assert!(is_dead(&held, &off, 100_000), "a held tombstone is dead");
        assert!(!is_dead(&cand(b"not json", b"\xff", 0xFFFF), &age, 100_000));
        // Per-session rules: keep, and a shorter TTL than the store's.
        let mut kept = ttl.clone();
        kept.sessions.insert(
            "s".into(),
            SessionPolicy {
                keep: true,
                ..Default::default()
            },
        );
        assert!(!is_dead(&cand(old, old, 5), &kept, 100_000), "kept");
        let mut evict = cand(new, new, 5);
        evict.evicting = true;
        assert!(is_dead(&evict, &off, 100_000), "evictable");
        assert!(
            !is_dead(&evict, &kept, 100_000),
            "a kept session is not evicted"
        );
        let mut short = Policy::default();
        short.sessions.insert(
            "s".into(),
            SessionPolicy {
                expire_after_ms: Some(5_000),
                ..Default::default()
            },
        );
        assert!(is_dead(&cand(new, new, 5), &short, 100_000));
        assert!(!is_dead(&cand(new, new, 5), &short, 94_000));
    }
}
