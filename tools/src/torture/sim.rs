//! The simulated loop (in process, on [`SimVfs`]): each epoch runs crash
//! cycles on one fresh simulated store, agents appending and waiting for
//! durability until an injected fault or a power cut, then a reboot with
//! torn and garbled unsynced sectors, and a model of what was appended and
//! acknowledged checked against what recovery kept ([`sim_epoch`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use turnstone::sim::{FaultPlan, SimVfs};
use turnstone::{Options, ProblemKind, Store};

use super::agent::{check_repair, filler, Agent};
use super::vfs::TortureVfs;
use super::{Check, Counts};

/// What the simulated loop appended to one session.
#[derive(Debug, Default)]
struct SimSession {
    /// Payload (and kind) of every event, by seq.
    events: Vec<(u16, Vec<u8>)>,
    /// Leading events acknowledged durable.
    acked: usize,
    /// Events already compared byte for byte (they cannot change later).
    verified: usize,
}

const SIM_DIR: &str = "/torture";
const SIM_AGENTS: usize = 4;
const CYCLES_PER_EPOCH: u32 = 6;

/// One epoch: a fresh simulated store, many crash cycles on it.
pub(super) fn sim_epoch(seed: u64, lie: bool, c: &mut Counts) -> Check {
    let mut rng = StdRng::seed_from_u64(seed);
    let vfs = TortureVfs {
        sim: SimVfs::new(),
        tracker: Arc::default(),
        lie,
    };
    let segment_bytes = [8_192u32, 16_384, 65_536][rng.gen_range(0..3)];
    let checkpoints = rng.gen_bool(0.3);
    let text = filler(&mut rng);
    let opts = Options {
        vfs: Arc::new(vfs.clone()),
        segment_bytes,
        checkpoints,
        flush_bytes: usize::MAX,
        preallocate: rng.gen_bool(0.7),
        ..Default::default()
    };
    let names: Vec<String> = (0..SIM_AGENTS).map(|i| format!("a{i}")).collect();
    let mut model: BTreeMap<String, SimSession> = BTreeMap::new();
    c.epochs += 1;
    for cycle in 0..CYCLES_PER_EPOCH {
        let ctx = |what: String| format!("epoch {seed} cycle {cycle}: {what}");
        let store =
            Store::open_with(SIM_DIR, opts.clone()).map_err(|e| ctx(format!("open: {e}")))?;
        // Faults for this cycle, then a power cut somewhere.
        let plan = match rng.gen_range(0..10) {
            0 => FaultPlan {
                fail_sync_nth: Some(vfs.sim.syncs() + rng.gen_range(0..6)),
                ..Default::default()
            },
            1 => FaultPlan {
                fail_write_nth: Some(vfs.sim.writes() + rng.gen_range(0..6)),
                ..Default::default()
            },
            2 => FaultPlan {
                enospc_after_bytes: Some(rng.gen_range(0..4_000_000)),
                ..Default::default()
            },
            _ => FaultPlan::default(),
        };
        if plan.fail_sync_nth.is_some() || plan.fail_write_nth.is_some() {
            c.faults_injected += 1;
        }
        vfs.sim.set_faults(FaultPlan {
            power_cut_after_ops: Some(vfs.sim.ops() + rng.gen_range(1..120)),
            ..plan
        });
        run_agents(&store, &names, cycle, &mut model, &mut rng, &text, &ctx)?;
        // Power cut (if it has not happened), reboot with torn and garbled
        // unsynced sectors.
        vfs.sim.set_faults(FaultPlan {
            power_cut_after_ops: Some(vfs.sim.ops()),
            ..Default::default()
        });
        drop(store);
        c.garbled_sectors += vfs.crash(rng.gen(), &mut rng);
        c.simulated_crashes += 1;

        let store = Store::open_with(SIM_DIR, opts.clone())
            .map_err(|e| ctx(format!("reopen after a power cut failed: {e}")))?;
        check_recovered(&store, &mut model, c, &ctx)?;
        let store = Arc::new(store);
        c.repairs += check_repair(&store).map_err(ctx)?;
        // Repair's events join the model once durable.
        store
            .sync()
            .map_err(|e| ctx(format!("sync after repair: {e}")))?;
        absorb_repairs(&store, &mut model, &ctx)?;
        drop(store);
    }
    Ok(())
}

/// The work of one cycle: fresh agents, picked at random, append their
/// next event (its seq checked dense and recorded in `model`) or wait for
/// durability (the session acknowledged up to there). The first append or
/// sync that fails (the planned power cut, or an injected fault) ends the
/// work: the crash that follows checks what the store kept. A function of
/// its own so that an epoch's cycle reads as its steps.
fn run_agents(
    store: &Store,
    names: &[String],
    cycle: u32,
    model: &mut BTreeMap<String, SimSession>,
    rng: &mut StdRng,
    text: &str,
    ctx: &dyn Fn(String) -> String,
) -> Check {
    let mut agents: Vec<Agent> = (0..SIM_AGENTS)
        .map(|_| Agent::new(format!("c{cycle}"), 4))
        .collect();
    let steps = rng.gen_range(10..80);
    'work: for _ in 0..steps {
        let i = rng.gen_range(0..SIM_AGENTS);
        let name = &names[i];
        match agents[i].next(rng, text) {
            Some((code, payload)) => match store.append(name, code, 0, &payload) {
                Ok(a) => {
                    let m = model.entry(name.clone()).or_default();
                    if a.seq.0 as usize != m.events.len() {
                        return Err(ctx(format!(
                            "{name}: append got seq {}, the next dense seq is {}",
                            a.seq.0,
                            m.events.len()
                        )));
                    }
                    m.events.push((code, payload));
                }
                Err(_) => break 'work,
            },
            None => {
                if store.sync_session(name).is_ok() {
                    let m = model.entry(name.clone()).or_default();
                    m.acked = m.events.len();
                } else {
                    break 'work;
                }
            }
        }
    }
    Ok(())
}

/// The model check after a reboot: only torn tails were reported, no
/// session was invented, and every session holds at least what was
/// acknowledged durable, at most what was appended, each event byte for
/// byte as appended. The model then becomes what was recovered (the cut
/// lost the rest; a session that did not survive drops out), so the next
/// cycle's acknowledgements count from there.
fn check_recovered(
    store: &Store,
    model: &mut BTreeMap<String, SimSession>,
    c: &mut Counts,
    ctx: &dyn Fn(String) -> String,
) -> Check {
    if let Some(p) = store
        .recovery_report()
        .problems
        .iter()
        .find(|p| p.kind != ProblemKind::TornTail)
    {
        return Err(ctx(format!(
            "a power cut left damage that is not a torn tail: {p:?}"
        )));
    }
    for info in store.sessions() {
        if !model.contains_key(&info.name) {
            return Err(ctx(format!("invented session {:?}", info.name)));
        }
    }
    for (name, m) in model.iter_mut() {
        let len = store.session_len(name).unwrap_or(0) as usize;
        if len < m.acked {
            return Err(ctx(format!(
                "{name}: {len} events recovered but {} were acknowledged durable",
                m.acked
            )));
        }
        if len > m.events.len() {
            return Err(ctx(format!(
                "{name}: {len} events recovered but only {} were appended",
                m.events.len()
            )));
        }
        c.acked_events_checked += m.acked as u64;
        let from = m.verified.min(len);
        if from < len {
            let got = store
                .read_range(name, from as u64..len as u64)
                .map_err(|e| ctx(format!("{name}: read: {e}")))?;
            for (e, want) in got.iter().zip(&m.events[from..len]) {
                if e.kind != want.0 || e.payload != want.1 {
                    return Err(ctx(format!(
                        "{name} seq {}: recovered event differs from the appended one",
                        e.seq.0
                    )));
                }
            }
        }
        m.events.truncate(len);
        m.verified = len;
        m.acked = len;
    }
    model.retain(|name, _| store.session_len(name).is_some());
    Ok(())
}

/// Repair's events, durable once the store is synced, join the model as
/// appended, acknowledged and verified: the next cycle's crash must keep
/// them like any acknowledged event.
fn absorb_repairs(
    store: &Store,
    model: &mut BTreeMap<String, SimSession>,
    ctx: &dyn Fn(String) -> String,
) -> Check {
    for (name, m) in model.iter_mut() {
        let len = store.session_len(name).unwrap_or(0);
        if len as usize > m.events.len() {
            for e in store
                .read_range(name, m.events.len() as u64..len)
                .map_err(|e| ctx(format!("read repair events: {e}")))?
            {
                m.events.push((e.kind, e.payload));
            }
        }
        m.acked = m.events.len();
        m.verified = m.events.len();
    }
    Ok(())
}
