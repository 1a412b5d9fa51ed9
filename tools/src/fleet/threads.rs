//! The driver: writer threads that each own a share of the sessions and
//! drive their agents round-robin ([`run_thread`]), or as tasks on a
//! current-thread runtime ([`run_thread_async`]); what the threads share
//! (the event budget, the first error, the ack ledger: [`Shared`]); loading
//! a session when its agent first acts ([`load`]); and the end of a
//! thread's run. Apart from the agent so that how agents are scheduled
//! reads apart from what they do.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::stream::{FuturesUnordered, StreamExt};
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::SeedableRng;
use turnstone::session::{Host, RepairReport, SharedSession};

use super::agent::{new_agent, ready, wind_down, Agent, Waits};
use super::workload::{corpus, Gen};

/// What one thread measured.
#[derive(Default)]
pub(super) struct ThreadResult {
    pub(super) ack_us: Vec<u64>,
    /// Events appended and not yet counted on the progress bar.
    pending_progress: u64,
    pub(super) reopened: u64,
    /// Sessions skipped because they were deleted.
    pub(super) skipped: u64,
    pub(super) repairs: Vec<RepairReport>,
}

pub(super) struct Shared<'a> {
    /// Events claimed so far against the budget.
    pub(super) claimed: AtomicU64,
    pub(super) budget: u64,
    pub(super) stop: AtomicBool,
    pub(super) error: Mutex<Option<String>>,
    pub(super) ledger: Option<&'a File>,
    pub(super) ledger_path: Option<&'a Path>,
    pub(super) progress: &'a ProgressBar,
    /// Writer threads, and those that have finished their first pass (or
    /// ended): see [`FirstPass`].
    pub(super) threads: usize,
    pub(super) first_pass_done: AtomicUsize,
}

/// Every writer thread's sessions take their first action before any
/// thread goes on to a second pass. Without this, a thread the scheduler
/// starts late can find the event budget spent by the others, and its
/// sessions never begin (a small `--events` on a loaded machine: a test's
/// `sess-000001` was missing). Counted when the first pass ends, or when
/// the thread ends however it ends (drop), so no thread waits forever.
struct FirstPass<'a> {
    sh: &'a Shared<'a>,
    counted: std::cell::Cell<bool>,
}

impl<'a> FirstPass<'a> {
    fn new(sh: &'a Shared<'a>) -> Self {
        FirstPass {
            sh,
            counted: std::cell::Cell::new(false),
        }
    }

    fn count(&self) {
        if !self.counted.replace(true) {
            self.sh.first_pass_done.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Every thread has counted itself, or the run stops.
    fn all_done(&self) -> bool {
        self.sh.first_pass_done.load(Ordering::SeqCst) >= self.sh.threads
            || self.sh.stop.load(Ordering::Relaxed)
    }

    /// Count this thread, then wait for the others (or a stop).
    fn finish_and_wait(&self) {
        if self.counted.get() {
            return;
        }
        self.count();
        while !self.all_done() {
            std::thread::yield_now();
        }
    }
}

impl Drop for FirstPass<'_> {
    fn drop(&mut self) {
        self.count();
    }
}

impl Shared<'_> {
    fn fail(&self, msg: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(msg);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Claim `n` events of the budget; false once it is spent.
    fn claim(&self, n: u64) -> bool {
        let mut cur = self.claimed.load(Ordering::SeqCst);
        loop {
            if cur >= self.budget {
                return false;
            }
            match self
                .claimed
                .compare_exchange(cur, cur + n, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    fn refund(&self, n: u64) {
        if n > 0 {
            self.claimed.fetch_sub(n, Ordering::SeqCst);
        }
    }

    /// The ack ledger line: `seq` of `session` is durable.
    pub(super) fn ack(&self, session: &str, seq: u64) -> Result<(), String> {
        if let (Some(mut f), Some(p)) = (self.ledger, self.ledger_path) {
            let line = format!("{session} {seq}\n");
            f.write_all(line.as_bytes())
                .map_err(|e| format!("write to ack ledger {}: {e}", p.display()))?;
        }
        Ok(())
    }
}

/// What an agent's turn to act came to.
enum Next {
    /// It acted (or had nothing to do); it acts again.
    Again,
    /// The event budget is spent: a graceful stop.
    Spent,
    /// The run stops (an error, recorded in [`Shared::error`]).
    Stop,
    /// The agent's session was deleted: it does not act in this run.
    Gone,
}

/// One action of agent `a`: claim its events of the budget, load its
/// session if this is its first, act, give back what it did not append.
///
/// The session's lock is held across the action's durability wait: only
/// this agent's task (or thread) ever locks its session, so no one waits
/// on it, and with [`Waits::Async`] the task stays on its thread's
/// current-thread runtime.
#[allow(clippy::await_holding_lock)]
async fn step(
    a: &mut Agent,
    host: &Host,
    sh: &Shared<'_>,
    g: &mut Gen,
    res: &mut ThreadResult,
    waits: Waits,
) -> Next {
    if sh.stop.load(Ordering::Relaxed) {
        return Next::Stop;
    }
    if a.gone {
        return Next::Gone;
    }
    let max = a.phase.max_events();
    if max > 0 && !sh.claim(max) {
        return Next::Spent;
    }
    let session = match &a.session {
        Some(s) => s.clone(),
        None => match load(host, &a.name, res) {
            Ok(Some(s)) => {
                a.prefix = s.lock().len();
                a.session = Some(s.clone());
                s
            }
            Ok(None) => {
                a.gone = true;
                res.skipped += 1;
                sh.refund(max);
                return Next::Gone;
            }
            Err(e) => {
                sh.fail(e);
                return Next::Stop;
            }
        },
    };
    let mut s = session.lock();
    let before = s.len();
    let r = a.act(&mut s, g, sh, waits).await;
    let added = s.len() - before;
    drop(s);
    sh.refund(max.saturating_sub(added));
    match r {
        Ok(Some(us)) => res.ack_us.push(us),
        Ok(None) => {}
        Err(e) => {
            sh.fail(e);
            return Next::Stop;
        }
    }
    res.pending_progress += added;
    if res.pending_progress >= 64 {
        sh.progress.inc(res.pending_progress);
        res.pending_progress = 0;
    }
    Next::Again
}

/// The end of a thread's run: after a graceful stop, close what each
/// session left open and each handle this run used (the host keeps only
/// weak references): a session with a long tail past its state snapshot
/// gets a fresh one, so the next run's open folds little.
fn finish_thread(sh: &Shared<'_>, agents: Vec<Agent>, graceful: bool, res: &mut ThreadResult) {
    if graceful {
        for a in agents.iter().filter_map(|a| a.session.as_ref()) {
            let mut s = a.lock();
            if let Err(e) = wind_down(&mut s) {
                sh.fail(format!(
                    "closing session {} at the end of the run: {e}",
                    s.id()
                ));
                break;
            }
        }
    }
    sh.progress.inc(res.pending_progress);
    res.pending_progress = 0;
    if graceful {
        for a in agents {
            let Some(shared) = a.session else { continue };
            if let Ok(m) = Arc::try_unwrap(shared) {
                let s = m.into_inner();
                let id = s.id().to_string();
                if let Err(e) = s.close() {
                    sh.fail(format!("closing session {id}: {e}"));
                    break;
                }
            }
        }
    }
}

/// A thread of [`Waits::Blocking`]: its sessions act round-robin, one
/// action at a time, each durability wait blocking the thread.
pub(super) fn run_thread<'a>(
    host: &Host,
    sh: &'a Shared<'a>,
    names: Vec<String>,
    seed: u64,
    max_text: usize,
) -> ThreadResult {
    let mut rng = StdRng::seed_from_u64(seed);
    let corpus = corpus(&mut rng).into();
    let mut g = Gen {
        rng,
        corpus,
        max_text,
    };
    let mut res = ThreadResult::default();
    let mut agents: Vec<Agent> = names.into_iter().map(new_agent).collect();
    let mut graceful = false;
    let first_pass = FirstPass::new(sh);
    'outer: loop {
        for a in agents.iter_mut() {
            let next =
                ready(async { Ok(step(a, host, sh, &mut g, &mut res, Waits::Blocking).await) });
            match next {
                Ok(Next::Again | Next::Gone) => {}
                Ok(Next::Spent) => {
                    graceful = true;
                    break 'outer;
                }
                Ok(Next::Stop) => break 'outer,
                Err(e) => {
                    sh.fail(e);
                    break 'outer;
                }
            }
        }
        first_pass.finish_and_wait();
        if agents.iter().all(|a| a.gone) {
            // Nothing left for this thread to do.
            graceful = true;
            break;
        }
    }
    first_pass.count();
    finish_thread(sh, agents, graceful, &mut res);
    res
}

/// A thread of [`Waits::Async`]: each of its sessions is a task on this
/// thread's own current-thread runtime, so a session awaiting durability
/// lets the others act. The tasks of one thread share its corpus; each has
/// its own random stream.
pub(super) fn run_thread_async<'a>(
    host: &Host,
    sh: &'a Shared<'a>,
    names: Vec<String>,
    seed: u64,
    max_text: usize,
) -> ThreadResult {
    let mut res = ThreadResult::default();
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            sh.fail(format!("cannot start a runtime: {e}"));
            return res;
        }
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let corpus: Arc<str> = corpus(&mut rng).into();
    let first_pass = FirstPass::new(sh);
    let total = names.len();
    // Sessions of this thread that have taken their first action.
    let first_done = std::cell::Cell::new(0usize);
    let tasks = names.into_iter().enumerate().map(|(i, name)| {
        let mut g = Gen {
            rng: StdRng::seed_from_u64(seed ^ (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)),
            corpus: corpus.clone(),
            max_text,
        };
        let (first_done, first_pass) = (&first_done, &first_pass);
        async move {
            let mut a = new_agent(name);
            let mut res = ThreadResult::default();
            let mut graceful = false;
            let mut first = true;
            loop {
                let mut gone = false;
                match step(&mut a, host, sh, &mut g, &mut res, Waits::Async).await {
                    Next::Again => {}
                    Next::Gone => gone = true,
                    Next::Spent => {
                        graceful = true;
                        break;
                    }
                    Next::Stop => break,
                }
                if first {
                    // Every session of every thread acts once before any
                    // acts twice (see FirstPass).
                    first = false;
                    first_done.set(first_done.get() + 1);
                    if first_done.get() == total {
                        first_pass.count();
                    }
                    while !first_pass.all_done() {
                        tokio::task::yield_now().await;
                    }
                }
                if gone {
                    break;
                }
            }
            (a, graceful, res)
        }
    });
    let ended: Vec<(Agent, bool, ThreadResult)> =
        rt.block_on(tasks.collect::<FuturesUnordered<_>>().collect());
    // A thread whose sessions did not all act once is counted now, so no
    // other thread waits for it.
    first_pass.count();
    let mut agents = Vec::with_capacity(ended.len());
    let mut graceful = false;
    for (a, g, r) in ended {
        agents.push(a);
        graceful |= g;
        res.ack_us.extend(r.ack_us);
        res.reopened += r.reopened;
        res.skipped += r.skipped;
        res.repairs.extend(r.repairs);
        res.pending_progress += r.pending_progress;
    }
    finish_thread(sh, agents, graceful, &mut res);
    res
}

/// Take over session `name`: reopen it through the host (which repairs
/// what an earlier run left open before anything is appended) or create it.
/// `None`: the session was deleted (its name stays taken after a
/// collection removed it), so this run leaves it alone.
fn load(host: &Host, name: &str, res: &mut ThreadResult) -> Result<Option<SharedSession>, String> {
    let exists = host.store().is_some_and(|s| s.session_len(name).is_some());
    let loaded = if exists {
        host.load(name).map(|(s, report)| {
            res.reopened += 1;
            if let Some(r) = report.filter(|r| !r.is_noop()) {
                res.repairs.push(r);
            }
            s
        })
    } else {
        host.create(name)
    };
    match &loaded {
        Err(turnstone::Error::SessionDeleted { .. } | turnstone::Error::SessionExpired { .. }) => {
            return Ok(None)
        }
        Err(turnstone::Error::SessionExists(_)) if !exists => return Ok(None),
        _ => {}
    }
    loaded.map(Some).map_err(|e| {
        format!(
            "cannot {} session {name}: {}",
            if exists { "reopen" } else { "create" },
            crate::failure::describe(&e)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstone::session::{Registry, Session, TurnStart};
    use turnstone::Store;

    use crate::fleet::{run, FleetArgs, PLUGIN_KIND};

    /// A reopened store: a session is loaded (and repaired) when its agent
    /// first acts, the others are not read at all.
    #[test]
    fn a_reopened_store_loads_only_the_sessions_it_uses() {
        let dir = tempfile::tempdir().unwrap();
        run(&FleetArgs {
            dir: dir.path().to_path_buf(),
            sessions: 16,
            threads: 1,
            events: 3000,
            segment_bytes: None,
            seed: 5,
            ack_ledger: None,
            async_waits: false,
        })
        .unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let mut reg = Registry::new();
        reg.register(PLUGIN_KIND, true).unwrap();
        let reg = Arc::new(reg);
        // A crash left the first session mid-turn.
        {
            let mut s = Session::open(store.clone(), "sess-000000", reg.clone()).unwrap();
            s.append(
                TurnStart {
                    turn_id: "crashed".into(),
                },
                (),
            )
            .unwrap();
            s.flush().unwrap();
        }
        let lens: Vec<u64> = (0..16)
            .map(|i| store.session_len(&format!("sess-{i:06}")).unwrap())
            .collect();
        let host = Host::new(store.clone(), reg);
        let progress = ProgressBar::hidden();
        let sh = Shared {
            claimed: AtomicU64::new(0),
            budget: 12,
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            ledger: None,
            ledger_path: None,
            progress: &progress,
            threads: 1,
            first_pass_done: AtomicUsize::new(0),
        };
        let names: Vec<String> = (0..16).map(|i| format!("sess-{i:06}")).collect();
        let res = run_thread(&host, &sh, names, 9, usize::MAX);
        assert!(sh.error.lock().unwrap().is_none());
        // A budget of 12 events reaches a few sessions, not all 16.
        assert!(
            res.reopened >= 1 && res.reopened < 16,
            "loaded {}",
            res.reopened
        );
        // The crashed session was repaired before its agent appended.
        assert_eq!(res.repairs.len(), 1);
        assert_eq!(res.repairs[0].turns_interrupted, 1);
        let ev = host
            .load("sess-000000")
            .unwrap()
            .0
            .lock()
            .events(lens[0]..lens[0] + 1)
            .unwrap();
        assert_eq!(ev[0].kind.name(), "turn/end");
        // The sessions never reached were not appended to.
        let untouched = (0..16)
            .filter(|i| store.session_len(&format!("sess-{i:06}")).unwrap() == lens[*i])
            .count() as u64;
        assert_eq!(untouched, 16 - res.reopened);
    }
}
