//! [`Host`]: the sessions live in this process, and loading (SEMANTICS.md,
//! "Crash recovery and repair").
//!
//! Loading a session that is *active* here (a live handle exists) waits until
//! its in-memory events are durable, is refused while a turn or step is
//! running, and adds nothing; it returns the same handle. Loading an
//! *inactive* session restores it from the log and runs repair.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::session::codec::event::Registry;
use crate::session::handle::repair::{repair, PluginRepair, RepairReport};
use crate::session::handle::{HistoryEvent, Session};
use crate::session::log::LogHandle;
use crate::store::Store;

/// A session shared between an agent loop and the host.
pub type SharedSession = Arc<Mutex<Session>>;

/// The sessions of one store in this process.
pub struct Host {
    log: LogHandle,
    registry: Arc<Registry>,
    plugins: Vec<Box<dyn PluginRepair + Send + Sync>>,
    live: Mutex<HashMap<String, Weak<Mutex<Session>>>>,
}

impl Host {
    /// A host of the sessions of `log` (an `Arc<Store>`, or any other
    /// [`crate::backend::EventLog`]), decoding with `registry`.
    pub fn new(log: impl Into<LogHandle>, registry: Arc<Registry>) -> Host {
        Host {
            log: log.into(),
            registry,
            plugins: Vec::new(),
            live: Mutex::new(HashMap::new()),
        }
    }

    /// Add a plugin's repair hook (runs after the core repair).
    pub fn add_plugin_repair(&mut self, p: Box<dyn PluginRepair + Send + Sync>) {
        self.plugins.push(p);
    }

    /// The embedded store, if the host runs on one.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.log.store()
    }

    /// The log the host runs on.
    pub fn log(&self) -> &LogHandle {
        &self.log
    }

    /// The names of the log's sessions.
    fn names(&self) -> Result<Vec<String>> {
        self.log.as_log().sessions()
    }

    fn register(&self, s: Session) -> SharedSession {
        let id = s.id().to_string();
        let shared = Arc::new(Mutex::new(s));
        let mut live = self.live.lock();
        live.retain(|_, w| w.strong_count() > 0);
        live.insert(id, Arc::downgrade(&shared));
        shared
    }

    fn live(&self, id: &str) -> Option<SharedSession> {
        self.live.lock().get(id).and_then(Weak::upgrade)
    }

    /// Whether a live handle of `id` exists in this host.
    pub fn is_active(&self, id: &str) -> bool {
        self.live(id).is_some()
    }

    /// Whether another handle (another host, or a `Session` opened directly)
    /// holds `id` for writing: such a session is not inactive, and is
    /// neither loaded nor repaired here.
    fn live_elsewhere(&self, id: &str) -> bool {
        !self.is_active(id) && self.log.as_log().is_claimed(id)
    }

    /// Create a new session and make it live.
    pub fn create(&self, id: &str) -> Result<SharedSession> {
        let s = Session::create(self.log.clone(), id, self.registry.clone())?;
        Ok(self.register(s))
    }

    /// Create a session from prior history: the history events, then the
    /// `session/end-seed` marker, in one atomic batch (see
    /// [`Session::create_with_history`]).
    pub fn create_with_history(&self, id: &str, history: &[HistoryEvent]) -> Result<SharedSession> {
        let s = Session::create_with_history(self.log.clone(), id, self.registry.clone(), history)?;
        Ok(self.register(s))
    }

    /// Old name of [`Host::create_with_history`].
    #[deprecated(since = "0.1.0", note = "renamed `create_with_history`")]
    pub fn create_seeded(&self, id: &str, seed: &[HistoryEvent]) -> Result<SharedSession> {
        self.create_with_history(id, seed)
    }

    /// Load a session. Active: wait for durability, refuse while a turn or
    /// step runs, return the same handle (no repair, nothing appended).
    /// Inactive: restore from the log and repair; the report says what was
    /// appended.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let host = Host::new(store.clone(), Arc::new(Registry::new()));
    /// {
    ///     // A loop that stops mid-turn (a crash, as far as the log knows).
    ///     let s = host.create("s1").unwrap();
    ///     s.lock().append(TurnStart { turn_id: "t1".into() }, ()).unwrap();
    ///     s.lock().flush().unwrap();
    /// }
    /// // Inactive now: loading repairs it (turn/end {interrupted}).
    /// let (s, report) = host.load("s1").unwrap();
    /// assert_eq!(report.unwrap().turns_interrupted, 1);
    /// assert!(s.lock().open_state().is_idle());
    /// // Active: the same handle, nothing appended.
    /// let (_, report) = host.load("s1").unwrap();
    /// assert!(report.is_none());
    /// ```
    pub fn load(&self, id: &str) -> Result<(SharedSession, Option<RepairReport>)> {
        if let Some(shared) = self.live(id) {
            {
                let s = shared.lock();
                s.flush()?;
                let open = s.open_state();
                if let Some((turn, _)) = &open.turn {
                    return Err(Error::Refused(format!(
                        "session {id:?} is active and turn {turn:?} is still running"
                    )));
                }
                if let Some((_, step, _)) = &open.step {
                    return Err(Error::Refused(format!(
                        "session {id:?} is active and step {step:?} is still running"
                    )));
                }
            }
            return Ok((shared, None));
        }
        let (s, report) = self.open_and_repair(id)?;
        Ok((self.register(s), Some(report)))
    }

    /// Hot swap: a new agent loop takes over a live session. The running
    /// turn is not closed; the next request header is written as `resume`.
    pub fn hot_swap(&self, id: &str) -> Result<SharedSession> {
        let shared = self.live(id).ok_or_else(|| {
            Error::Refused(format!("session {id:?} is not active in this process"))
        })?;
        shared.lock().begin_loop();
        Ok(shared)
    }

    /// Repair every session that is not active (after a crash), in creation
    /// order; sessions another handle holds for writing are skipped. Sessions repaired are not kept live. Stops at the
    /// first session that cannot be opened or repaired (see
    /// [`Host::repair_inactive_each`] to repair the others anyway).
    pub fn repair_inactive(&self) -> Result<Vec<RepairReport>> {
        let mut out = Vec::new();
        for name in self.names()? {
            if self.is_active(&name) || self.live_elsewhere(&name) || self.is_deleted(&name)? {
                continue;
            }
            match self.repair_one(&name) {
                Ok(r) => out.push(r),
                // Another worker holds the session's lease: it is live there
                // (only a log shared by several writers fences).
                Err(Error::Fenced { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Like [`Host::repair_inactive`], but a session that cannot be opened
    /// or repaired (an unknown event kind, a refused plugin repair) does not
    /// stop the others: every inactive session gets its own outcome, in
    /// creation order. A store-level failure (a poisoned store) fails every
    /// session after it.
    pub fn repair_inactive_each(&self) -> Vec<(String, Result<RepairReport>)> {
        let names = match self.names() {
            Ok(n) => n,
            Err(e) => return vec![(String::new(), Err(e))],
        };
        names
            .into_iter()
            .filter(|name| {
                !self.is_active(name)
                    && !self.live_elsewhere(name)
                    && !matches!(self.is_deleted(name), Ok(true))
            })
            .map(|name| {
                let r = self.repair_one(&name);
                (name, r)
            })
            .filter(|(_, r)| !matches!(r, Err(Error::Fenced { .. })))
            .collect()
    }

    /// Whether `id` carries a tombstone (deleted sessions are not repaired).
    fn is_deleted(&self, id: &str) -> Result<bool> {
        Ok(crate::session::lifecycle::delete::deleted_at(&self.log, id)?.is_some())
    }

    /// Delete session `id` (see [`crate::session::delete()`]). Refused while
    /// a handle holds it for writing, in this host or elsewhere.
    pub fn delete(&self, id: &str) -> Result<u64> {
        crate::session::lifecycle::delete::delete(&self.log, id)
    }

    fn repair_one(&self, id: &str) -> Result<RepairReport> {
        self.open_and_repair(id).map(|(_, report)| report)
    }

    /// Restore an inactive session and repair it (core, then plugins).
    fn open_and_repair(&self, id: &str) -> Result<(Session, RepairReport)> {
        let mut s = Session::open(self.log.clone(), id, self.registry.clone())?;
        let plugins: Vec<&dyn PluginRepair> = self
            .plugins
            .iter()
            .map(|p| p.as_ref() as &dyn PluginRepair)
            .collect();
        let report = repair(&mut s, &plugins)?;
        Ok((s, report))
    }
}
