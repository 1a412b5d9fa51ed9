//! Target `recovery_image`: the recovery pass over an arbitrary store image.
//!
//! The image is built in two steps: the engine writes a realistic store on the
//! simulator (appends, groups, forks, syncs, clean closes, power cuts with
//! torn writes), then the input damages it: flipped and overwritten bytes,
//! truncated, zeroed, removed, swapped and copied files, and junk files under
//! the names the engine looks at (segments, index checkpoint and its temp
//! file, snapshot-like files). The image is then opened read-only and
//! writable in the three ordinary [`RecoveryMode`]s and read-only in
//! [`RecoveryMode::Salvage`], each time on a fresh copy. The build step
//! records every event it wrote ([`Written`]: session, seq, kind, flags and
//! payload as acknowledged, a fork's inherited events under the child's name,
//! both versions of a seq written again after a power cut).
//!
//! Properties:
//! - no open panics; each returns `Ok` or a typed error (never `Io`: the
//!   simulator does not fail);
//! - read-only and writable opens agree (same error kind, or the same
//!   sessions and events);
//! - the modes are ordered: if absolute-consistency opens, it found no
//!   problem and tolerate-torn-tail opens the same store; if
//!   tolerate-torn-tail opens, it found only torn tails and point-in-time
//!   opens the same store;
//! - every indexed event of an opened store reads back;
//! - after a writable open the store takes a new event, closes, and reopens
//!   clean (no problem, clean shutdown, same sessions and events plus the new
//!   one), and a full rescan agrees with the checkpointed open;
//! - the read-only inspector (`turnstone dump`/`verify`) never panics, and
//!   reports corruption exactly when tolerate-torn-tail refuses with it.
//!
//! Salvage (`turnstone export --salvage`), at every damage above:
//! - a writable salvage open is refused (`InvalidArgument`); the read-only
//!   one never panics and returns `Ok` or a typed error (never `Io`), and
//!   every event it indexes reads back;
//! - nothing invented: every event it keeps is in [`Written`] with the same
//!   session name, seq, kind, flags and payload bytes, and each session's
//!   events are the dense prefix `0..len`;
//! - it keeps at least what the ordinary modes keep: when tolerate-torn-tail
//!   or point-in-time opens read-only with a full rescan, salvage opens too,
//!   with every session of it at least as long and every event of it with
//!   the same bytes. (Compared with full rescans: an open that starts from
//!   an index checkpoint takes covered session-defines from the checkpoint,
//!   so damage to one does not show there, while salvage, which reads only
//!   the segments, loses that session.)
//! - its report adds up: its session and event counts are the store's; the
//!   frames it scanned are the kept ones (one session-define per session,
//!   each event frame of its own) plus the dropped ones, and each dropped
//!   frame has a problem of its own; with no problem reported, an
//!   absolute-consistency full rescan opens the same store;
//! - on an undamaged image (a clean close, no damage applied) it reports no
//!   problem and equals the tolerate-torn-tail open.

use std::collections::{BTreeMap, HashSet};
use std::mem::discriminant;

use arbitrary::{Arbitrary, Unstructured};
use turnstone::inspect;
use turnstone::sim::SimVfs;
use turnstone::{Error, Options, ProblemKind, RecoveryMode, Store};

use crate::util::{
    all_events, cut_power_and_drop, dir, lengths, materialize, payload, segment_bytes, sim_opts,
    snapshot, StoredEvent, MODES,
};

#[derive(Arbitrary, Debug)]
enum BuildOp {
    Append {
        session: u8,
        kind: u8,
        len: u16,
    },
    Group {
        session: u8,
        n: u8,
        len: u16,
    },
    Sync,
    Fork {
        parent: u8,
        upto: u8,
        child: u8,
    },
    CloseReopen,
    CrashReopen {
        after_ops: u8,
        seed: u64,
    },
    /// Close, copy every sealed segment to its free name (what an online
    /// collection with recycling leaves, FORMAT.md §6.2 rule 7), reopen:
    /// the next segments are recycled ones.
    PlantFree,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum JunkName {
    Checkpoint,
    CheckpointTmp,
    SegmentZero,
    NextSegment,
    GapSegment,
    Snapshot,
    Other,
    /// A free file (`NNNNNNNNNN.tseg.free`) named below the last segment.
    FreeFile,
}

#[derive(Arbitrary, Debug)]
enum Damage {
    Flip {
        file: u8,
        offset: u32,
        xor: u8,
    },
    Write {
        file: u8,
        offset: u32,
        bytes: Vec<u8>,
    },
    Truncate {
        file: u8,
        len: u32,
    },
    Zero {
        file: u8,
        offset: u32,
        len: u16,
    },
    Remove {
        file: u8,
    },
    Junk {
        name: JunkName,
        bytes: Vec<u8>,
    },
    Copy {
        file: u8,
        name: JunkName,
    },
    Swap {
        a: u8,
        b: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    seg: u8,
    checkpoints: bool,
    preallocate: bool,
    /// End of the build: a clean close, or a power cut after n more
    /// operations and a reboot with this seed.
    end_crash: Option<(u8, u64)>,
    damage: Vec<Damage>,
    build: Vec<BuildOp>,
}

/// What one open saw.
#[derive(Debug)]
enum Outcome {
    Opened {
        lengths: Vec<(String, u64)>,
        /// `None`: an event did not read back (a damaged frame that the
        /// open did not rescan because an index checkpoint covers it).
        events: Option<Vec<StoredEvent>>,
        problems: Vec<ProblemKind>,
    },
    Failed(Error),
}

impl Outcome {
    fn same_store(&self, other: &Outcome) -> bool {
        match (self, other) {
            (
                Outcome::Opened {
                    lengths: a,
                    events: ea,
                    ..
                },
                Outcome::Opened {
                    lengths: b,
                    events: eb,
                    ..
                },
            ) => a == b && ea == eb,
            _ => false,
        }
    }
    fn is_ok(&self) -> bool {
        matches!(self, Outcome::Opened { .. })
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
    let seg = segment_bytes(input.seg);
    let opts = |sim: &SimVfs, mode: RecoveryMode| Options {
        checkpoints: input.checkpoints,
        preallocate: input.preallocate,
        recovery_mode: mode,
        ..sim_opts(sim, seg)
    };
    let (mut files, written) = build(&input, seg);
    let built = files.clone();
    damage(&mut files, &input.damage);
    // Exactly what the engine left: a clean close and no damage at all.
    let undamaged = files == built && input.end_crash.is_none();
    let dir = dir();

    let mut by_mode = Vec::new();
    let mut ro_by_mode = Vec::new();
    for mode in MODES {
        let sim = materialize(&dir, &files);
        let ro = outcome(&Store::open_with(
            &dir,
            Options {
                read_only: true,
                ..opts(&sim, mode)
            },
        ));
        let inspected = if mode == RecoveryMode::TolerateTornTail {
            let mut problems = Vec::new();
            let walked = inspect::walk_with(&sim, &dir, |item| {
                if let inspect::Item::Problem(p) = item {
                    problems.push(p);
                }
                std::ops::ControlFlow::Continue(())
            });
            Some((walked, problems))
        } else {
            None
        };
        let rw_store = Store::open_with(&dir, opts(&sim, mode));
        let rw = outcome(&rw_store);
        match (&ro, &rw) {
            (Outcome::Opened { .. }, _) => assert!(
                ro.same_store(&rw),
                "{mode:?}: read-only open {ro:?} and writable open {rw:?} disagree"
            ),
            (Outcome::Failed(Error::NoStore { .. }), _) => {}
            (Outcome::Failed(a), Outcome::Failed(b)) => assert_eq!(
                discriminant(a),
                discriminant(b),
                "{mode:?}: read-only and writable opens fail differently: {a} / {b}"
            ),
            (Outcome::Failed(a), Outcome::Opened { .. }) => {
                panic!("{mode:?}: read-only open failed ({a}) but the writable open worked")
            }
        }
        if let Outcome::Opened { problems, .. } = &rw {
            match mode {
                RecoveryMode::AbsoluteConsistency => {
                    assert!(
                        problems.is_empty(),
                        "absolute consistency opened with {problems:?}"
                    )
                }
                RecoveryMode::TolerateTornTail => assert!(
                    problems.iter().all(|p| *p == ProblemKind::TornTail),
                    "tolerate-torn-tail opened past corruption: {problems:?}"
                ),
                RecoveryMode::PointInTime | RecoveryMode::Salvage => {}
            }
        }
        // An open that starts from an index checkpoint does not rescan what
        // it covers; the inspector always scans everything.
        let rescanned = rw_store
            .as_ref()
            .map_or(true, |s| !s.recovery_report().checkpoint_used);
        if let (Some((walked, problems)), true) = (inspected, rescanned) {
            check_inspect(&walked, &problems, &rw);
        }
        if let (
            Ok(store),
            Outcome::Opened {
                events: Some(_), ..
            },
        ) = (rw_store, &rw)
        {
            reopen_is_stable(store, &rw, opts(&sim, mode));
        }
        by_mode.push(rw);
        ro_by_mode.push(ro);
    }
    let [abs, tol, pit] = &by_mode[..] else {
        unreachable!("three modes")
    };
    if abs.is_ok() {
        assert!(
            abs.same_store(tol),
            "absolute consistency opened {abs:?} but tolerate-torn-tail gave {tol:?}"
        );
    }
    if tol.is_ok() {
        assert!(
            tol.same_store(pit),
            "tolerate-torn-tail opened {tol:?} but point-in-time gave {pit:?}"
        );
    }
    // Salvage is read-only and reads every segment: it compares with the
    // read-only opens (a writable open of a directory without segments
    // creates a new store) that scanned everything (an index checkpoint
    // stands in for what it covers, session-defines included: damage there
    // does not show to an open that starts from it, but loses the session
    // to salvage, which reads only the segments).
    let [_, tol_ro, pit_ro] = &ro_by_mode[..] else {
        unreachable!("three modes")
    };
    let rescan = |mode| {
        let sim = materialize(&dir, &files);
        outcome(&Store::open_with(
            &dir,
            Options {
                read_only: true,
                checkpoints: false,
                ..opts(&sim, mode)
            },
        ))
    };
    let (tol_full, pit_full);
    let (tol_ro, pit_ro) = if input.checkpoints {
        tol_full = rescan(RecoveryMode::TolerateTornTail);
        pit_full = rescan(RecoveryMode::PointInTime);
        (&tol_full, &pit_full)
    } else {
        (tol_ro, pit_ro)
    };
    check_salvage(&files, &opts, &written, tol_ro, pit_ro, undamaged);
}

/// The salvage open of the damaged image (read-only, a fresh copy).
fn check_salvage(
    files: &[(String, Vec<u8>)],
    opts: &dyn Fn(&SimVfs, RecoveryMode) -> Options,
    written: &Written,
    tol: &Outcome,
    pit: &Outcome,
    undamaged: bool,
) {
    let dir = dir();
    let sim = materialize(&dir, files);
    let salvage = |sim: &SimVfs, read_only: bool| {
        Store::open_with(
            &dir,
            Options {
                read_only,
                ..opts(sim, RecoveryMode::Salvage)
            },
        )
    };
    // Salvage never writes: a writable salvage open is refused up front.
    assert!(
        matches!(salvage(&sim, false), Err(Error::InvalidArgument(_))),
        "a writable salvage open was not refused"
    );
    let store = salvage(&sim, true);
    // No panic, `Ok` or a typed error; every indexed event reads back (or
    // `outcome` panics: salvage never starts from a checkpoint).
    let got = outcome(&store);
    let Ok(store) = store else {
        // It keeps at least what the ordinary modes keep.
        for (mode, o) in [("tolerate-torn-tail", tol), ("point-in-time", pit)] {
            assert!(
                !o.is_ok(),
                "{mode} opened {o:?} but salvage failed: {got:?}"
            );
        }
        return;
    };
    let report = store.recovery_report().clone();
    assert!(!report.checkpoint_used, "salvage used a checkpoint");
    let Outcome::Opened {
        lengths: s_len,
        events: Some(s_ev),
        ..
    } = &got
    else {
        unreachable!("opened without a checkpoint: events read")
    };
    let sessions = store.sessions();

    // Nothing invented, dense prefixes: every kept event is one the build
    // wrote, under the same name and seq with the same kind, flags and bytes,
    // and session `s` with n events holds exactly seqs 0..n.
    let mut at: BTreeMap<&str, u64> = BTreeMap::new();
    for ev in s_ev {
        let next = at.entry(ev.0.as_str()).or_default();
        assert_eq!(ev.1, *next, "salvage: session {:?} is not dense", ev.0);
        *next += 1;
        assert!(
            written.contains(ev),
            "salvage invented an event: {:?} seq {} kind {} flags {} ({} bytes)",
            ev.0,
            ev.1,
            ev.2,
            ev.3,
            ev.4.len()
        );
    }
    for (name, len) in s_len {
        assert_eq!(
            at.get(name.as_str()).copied().unwrap_or(0),
            *len,
            "salvage: session {name:?} length and events disagree"
        );
    }

    // At least what the ordinary modes keep, with the same bytes.
    let s_set: HashSet<&StoredEvent> = s_ev.iter().collect();
    for (mode, o) in [("tolerate-torn-tail", tol), ("point-in-time", pit)] {
        let Outcome::Opened {
            lengths, events, ..
        } = o
        else {
            continue;
        };
        for (name, len) in lengths {
            let kept = s_len.iter().find(|(n, _)| n == name).map(|(_, l)| *l);
            assert!(
                kept.is_some_and(|k| k >= *len),
                "{mode} shows session {name:?} with {len} events, salvage {kept:?}"
            );
        }
        for ev in events.iter().flatten() {
            assert!(
                s_set.contains(ev),
                "{mode} shows {:?} seq {} but salvage does not (or other bytes)",
                ev.0,
                ev.1
            );
        }
    }

    // The report adds up: its counts are the store's, and every frame it
    // scanned was kept (a session-define or an event frame of its own) or
    // dropped, each dropped frame with its own problem.
    assert_eq!(report.mode, RecoveryMode::Salvage);
    assert_eq!(report.sessions, sessions.len() as u64, "{report:?}");
    assert_eq!(
        report.events,
        sessions.iter().map(|s| s.len).sum::<u64>(),
        "{report:?}"
    );
    let own: u64 = sessions
        .iter()
        .map(|s| s.len - s.parent.as_ref().map_or(0, |(_, upto)| *upto))
        .sum();
    let kept = sessions.len() as u64 + own;
    assert!(
        report.frames_scanned >= kept,
        "salvage kept {kept} frames of {} scanned",
        report.frames_scanned
    );
    let dropped = report.frames_scanned - kept;
    let frame_problems = report
        .problems
        .iter()
        .filter(|p| p.action.starts_with("dropped the frame"))
        .count() as u64;
    assert_eq!(
        dropped, frame_problems,
        "salvage dropped {dropped} frames but reports {frame_problems}: {:#?}",
        report.problems
    );
    if report.problems.is_empty() {
        // Nothing reported: a full rescan in absolute consistency agrees.
        let sim = materialize(&dir, files);
        let abs = Store::open_with(
            &dir,
            Options {
                read_only: true,
                checkpoints: false,
                ..opts(&sim, RecoveryMode::AbsoluteConsistency)
            },
        );
        let abs = outcome(&abs);
        assert!(
            got.same_store(&abs),
            "salvage reports no problem: {got:?} but absolute consistency gives {abs:?}"
        );
    }
    if undamaged {
        assert!(
            report.problems.is_empty(),
            "salvage of an undamaged store reports {:#?}",
            report.problems
        );
        assert!(
            got.same_store(tol),
            "salvage of an undamaged store gives {got:?}, the normal open {tol:?}"
        );
    }
}

fn outcome(r: &turnstone::Result<Store>) -> Outcome {
    match r {
        Ok(store) => {
            // Frames that an index checkpoint covers are not rescanned at
            // open; damage there shows up at read time, as corruption.
            let events = match all_events(store) {
                Ok(evs) => Some(evs),
                Err(e @ Error::Corrupt { .. }) if store.recovery_report().checkpoint_used => {
                    let _ = e;
                    None
                }
                Err(e) => panic!("an opened store cannot read its own events: {e}"),
            };
            Outcome::Opened {
                lengths: lengths(store),
                events,
                problems: store
                    .recovery_report()
                    .problems
                    .iter()
                    .map(|p| p.kind)
                    .collect(),
            }
        }
        Err(e) => {
            let typed = matches!(
                e,
                Error::Corrupt { .. }
                    | Error::TornTailRefused { .. }
                    | Error::NotTurnstone { .. }
                    | Error::UnsupportedVersion { .. }
                    | Error::NoStore { .. }
            );
            assert!(typed, "open failed with an untyped error: {e:?}");
            Outcome::Failed(clone_err(e))
        }
    }
}

/// `Error` is not `Clone`; keep the variant and the message.
fn clone_err(e: &Error) -> Error {
    let msg = e.to_string();
    match e {
        Error::Corrupt { file, offset, .. } => Error::Corrupt {
            file: file.clone(),
            offset: *offset,
            detail: msg,
        },
        Error::TornTailRefused { file, offset, .. } => Error::TornTailRefused {
            file: file.clone(),
            offset: *offset,
            detail: msg,
        },
        Error::NotTurnstone { file, what, .. } => Error::NotTurnstone {
            file: file.clone(),
            what,
            detail: msg,
        },
        Error::UnsupportedVersion {
            file,
            found,
            supported,
        } => Error::UnsupportedVersion {
            file: file.clone(),
            found: *found,
            supported: *supported,
        },
        _ => Error::NoStore {
            dir: dir(),
            detail: msg,
        },
    }
}

/// The inspector agrees with the store about corruption. One known
/// difference is allowed: non-zero bytes after the end of data in a sealed
/// segment are corruption to the inspector, while the store does not look
/// there (FORMAT.md §6.3: "anything lost there is caught by the next
/// header"); nothing durable is lost either way.
fn check_inspect(
    walked: &turnstone::Result<inspect::Summary>,
    problems: &[inspect::InspectProblem],
    tol: &Outcome,
) {
    if walked.is_err() {
        return;
    }
    let hard = problems.iter().any(|p| {
        p.kind == ProblemKind::Corruption
            && !p
                .detail
                .starts_with("non-zero bytes after the last valid batch")
    });
    match tol {
        Outcome::Opened { .. } => assert!(
            !hard,
            "the store opens (tolerate-torn-tail) but the inspector reports corruption: {problems:?}"
        ),
        Outcome::Failed(Error::Corrupt { .. }) => assert!(
            problems.iter().any(|p| p.kind == ProblemKind::Corruption),
            "the store refuses to open with corruption but the inspector finds none: {problems:?} / {tol:?}"
        ),
        _ => {}
    }
}

/// Append, close, reopen: clean, and nothing changed but the new event.
fn reopen_is_stable(store: Store, before: &Outcome, opts: Options) {
    let checkpoint_used = store.recovery_report().checkpoint_used;
    let Outcome::Opened {
        lengths: mut want_len,
        events: Some(mut want_ev),
        ..
    } = before.clone_opened()
    else {
        unreachable!("opened, events read")
    };
    let probe = payload(0xfeed, 40);
    let a = store
        .append("fuzz-probe", 3, 0, &probe)
        .unwrap_or_else(|e| panic!("append after recovery failed: {e}"));
    store
        .sync()
        .unwrap_or_else(|e| panic!("sync after recovery failed: {e}"));
    store
        .close()
        .unwrap_or_else(|e| panic!("close after recovery failed: {e}"));
    match want_len.iter_mut().find(|(n, _)| n == "fuzz-probe") {
        Some((_, l)) => *l += 1,
        None => want_len.push(("fuzz-probe".into(), 1)),
    }
    want_ev.push(("fuzz-probe".into(), a.seq.0, 3, 0, probe));
    want_ev.sort();
    let again = Store::open_with(crate::util::DIR, opts.clone())
        .unwrap_or_else(|e| panic!("reopen after a recovered open and a clean close failed: {e}"));
    let r = again.recovery_report();
    assert!(
        r.problems.is_empty() && r.clean_shutdown,
        "reopen after recovery is not clean: {r:?}"
    );
    let mut got_ev = all_events(&again).expect("read after reopen");
    got_ev.sort();
    assert_eq!(
        lengths(&again),
        want_len,
        "sessions changed across a reopen"
    );
    assert!(got_ev == want_ev, "events changed across a reopen");
    drop(again);
    // A full rescan sees what the checkpointed opens did not read: damage
    // under an index checkpoint (found by reads, or here) is corruption, or
    // "not a turnstone store" when it hit the first segment's header (H3).
    let rescan = Store::open_with(
        crate::util::DIR,
        Options {
            read_only: true,
            checkpoints: false,
            ..opts
        },
    );
    match rescan {
        Ok(rescan) => {
            // Point-in-time cuts at damage hidden under the checkpoint.
            let cut = checkpoint_used
                && rescan
                    .recovery_report()
                    .problems
                    .iter()
                    .any(|p| p.kind == ProblemKind::Corruption);
            if !cut {
                assert_eq!(
                    lengths(&rescan),
                    want_len,
                    "a full rescan disagrees with the checkpointed open"
                );
            }
        }
        Err(Error::Corrupt { .. } | Error::NotTurnstone { .. }) if checkpoint_used => {}
        Err(e) => panic!("read-only rescan after a clean close failed: {e}"),
    }
}

impl Outcome {
    fn clone_opened(&self) -> Outcome {
        match self {
            Outcome::Opened {
                lengths,
                events,
                problems,
            } => Outcome::Opened {
                lengths: lengths.clone(),
                events: events.clone(),
                problems: problems.clone(),
            },
            Outcome::Failed(e) => Outcome::Failed(clone_err(e)),
        }
    }
}

/// Every event the build step wrote, under every name that reads it (a
/// fork's inherited events under the child's name too), over all of its
/// lives: after a power cut a lost seq is written again with other bytes,
/// and both versions are in the set.
pub type Written = HashSet<StoredEvent>;

/// Let the engine write a store; return its files and what it wrote.
fn build(input: &Input, seg: u32) -> (Vec<(String, Vec<u8>)>, Written) {
    let sim = SimVfs::new();
    let opts = || Options {
        checkpoints: input.checkpoints,
        preallocate: input.preallocate,
        ..sim_opts(&sim, seg)
    };
    let dir = dir();
    let mut written = Written::new();
    // What each session holds as acknowledged (for a fork's inheritance).
    let mut model: BTreeMap<String, Vec<(u16, u16, Vec<u8>)>> = BTreeMap::new();
    let record = |model: &mut BTreeMap<String, Vec<_>>,
                  written: &mut Written,
                  name: &str,
                  seq: u64,
                  kind: u16,
                  flags: u16,
                  payload: &[u8]| {
        let events = model.entry(name.to_string()).or_default();
        events.truncate(seq as usize);
        events.push((kind, flags, payload.to_vec()));
        written.insert((name.to_string(), seq, kind, flags, payload.to_vec()));
    };
    let Ok(mut store) = Store::open_with(&dir, opts()) else {
        return (Vec::new(), written);
    };
    let max_len = seg as usize / 3;
    for (i, op) in input.build.iter().take(48).enumerate() {
        match op {
            BuildOp::Append { session, kind, len } => {
                let name = format!("s{}", session % 4);
                let (kind, flags) = (1 + (*kind as u16 % 20), (*kind as u16 >> 7) & 1);
                let p = payload(i as u64, *len as usize % max_len);
                if let Ok(a) = store.append(&name, kind, flags, &p) {
                    record(&mut model, &mut written, &name, a.seq.0, kind, flags, &p);
                }
            }
            BuildOp::Group { session, n, len } => {
                let name = format!("s{}", session % 4);
                let evs: Vec<Vec<u8>> = (0..2 + n % 3)
                    .map(|k| payload(i as u64 * 8 + k as u64, *len as usize % (max_len / 4)))
                    .collect();
                let refs: Vec<(u16, u16, &[u8])> =
                    evs.iter().map(|p| (5u16, 0u16, p.as_slice())).collect();
                let mut seqs = Vec::new();
                let _ = store.append_group(&name, &refs, |a| seqs.push(a.seq.0));
                for (seq, p) in seqs.into_iter().zip(&evs) {
                    record(&mut model, &mut written, &name, seq, 5, 0, p);
                }
            }
            BuildOp::Sync => {
                let _ = store.sync();
            }
            BuildOp::Fork {
                parent,
                upto,
                child,
            } => {
                let parent = format!("s{}", parent % 4);
                let child = format!("f{}", child % 4);
                if let Some(len) = store.session_len(&parent) {
                    let upto = *upto as u64 % (len + 1);
                    if store.fork(&parent, upto, &child).is_ok() {
                        let inherited: Vec<_> = model.get(&parent).map_or(Vec::new(), |evs| {
                            evs.iter().take(upto as usize).cloned().collect()
                        });
                        for (seq, (kind, flags, p)) in inherited.iter().enumerate() {
                            written.insert((child.clone(), seq as u64, *kind, *flags, p.clone()));
                        }
                        model.insert(child, inherited);
                    }
                }
            }
            BuildOp::CloseReopen => {
                let _ = store.close();
                store = Store::open_with(&dir, opts())
                    .unwrap_or_else(|e| panic!("reopen after a clean close failed: {e}"));
            }
            BuildOp::PlantFree => {
                let _ = store.close();
                plant_free_files(&sim, &dir);
                store = Store::open_with(&dir, opts())
                    .unwrap_or_else(|e| panic!("reopen with free files failed: {e}"));
            }
            BuildOp::CrashReopen { after_ops, seed } => {
                crash(&sim, store, *after_ops, *seed);
                store = Store::open_with(&dir, opts())
                    .unwrap_or_else(|e| panic!("reopen after a power cut failed: {e}"));
                // What the power cut took is written again with other bytes.
                model.retain(|name, evs| match store.session_len(name) {
                    Some(len) => {
                        evs.truncate(len as usize);
                        true
                    }
                    None => false,
                });
            }
        }
    }
    match input.end_crash {
        None => {
            let _ = store.close();
        }
        Some((after_ops, seed)) => crash(&sim, store, after_ops, seed),
    }
    (snapshot(&sim, &dir), written)
}

/// Copy each sealed segment of `dir` to its free name, durably (a fault
/// the input armed may stop it part way: what is planted stays).
fn plant_free_files(sim: &SimVfs, dir: &std::path::Path) {
    let _ = turnstone::sim::plant_free_files(sim, dir);
}

/// Let the store run `after_ops` more file operations (a sync), then cut the
/// power and reboot.
fn crash(sim: &SimVfs, store: Store, after_ops: u8, seed: u64) {
    sim.set_faults(turnstone::sim::FaultPlan {
        power_cut_after_ops: Some(sim.ops() + after_ops as u64 % 8),
        ..Default::default()
    });
    let _ = store.sync();
    cut_power_and_drop(sim, store);
    sim.crash(seed);
}

fn file_index(files: &[(String, Vec<u8>)], sel: u8) -> Option<usize> {
    (!files.is_empty()).then(|| sel as usize % files.len())
}

fn junk_name(files: &[(String, Vec<u8>)], name: JunkName) -> String {
    let last = files
        .iter()
        .filter_map(|(n, _)| turnstone::frame::parse_segment_file_name(n))
        .max()
        .map_or(0, |s| s.0);
    match name {
        JunkName::Checkpoint => turnstone::internals::CHECKPOINT_FILE.into(),
        JunkName::CheckpointTmp => turnstone::internals::CHECKPOINT_TMP_FILE.into(),
        JunkName::SegmentZero => "0000000000.tseg".into(),
        JunkName::NextSegment => format!("{:010}.tseg", last + 1),
        JunkName::GapSegment => format!("{:010}.tseg", last + 2),
        JunkName::Snapshot => "session-0001.tsnap".into(),
        JunkName::Other => "notes.txt".into(),
        JunkName::FreeFile => format!("{:010}.tseg.free", last.saturating_sub(1)),
    }
}

fn damage(files: &mut Vec<(String, Vec<u8>)>, damage: &[Damage]) {
    for d in damage.iter().take(6) {
        match d {
            Damage::Flip { file, offset, xor } => {
                if let Some(i) = file_index(files, *file) {
                    let b = &mut files[i].1;
                    if !b.is_empty() {
                        let at = *offset as usize % b.len();
                        b[at] ^= xor;
                    }
                }
            }
            Damage::Write {
                file,
                offset,
                bytes,
            } => {
                if let Some(i) = file_index(files, *file) {
                    let b = &mut files[i].1;
                    let at = *offset as usize % (b.len() + 1);
                    let end = at + bytes.len().min(1024);
                    if b.len() < end {
                        b.resize(end, 0);
                    }
                    b[at..end].copy_from_slice(&bytes[..end - at]);
                }
            }
            Damage::Truncate { file, len } => {
                if let Some(i) = file_index(files, *file) {
                    let b = &mut files[i].1;
                    let l = *len as usize % (b.len() + 1);
                    b.truncate(l);
                }
            }
            Damage::Zero { file, offset, len } => {
                if let Some(i) = file_index(files, *file) {
                    let b = &mut files[i].1;
                    let at = *offset as usize % (b.len() + 1);
                    let end = (at + *len as usize).min(b.len());
                    b[at..end].fill(0);
                }
            }
            Damage::Remove { file } => {
                if let Some(i) = file_index(files, *file) {
                    files.remove(i);
                }
            }
            Damage::Junk { name, bytes } => {
                let n = junk_name(files, *name);
                files.retain(|(f, _)| *f != n);
                files.push((n, bytes.iter().copied().take(4096).collect()));
            }
            Damage::Copy { file, name } => {
                if let Some(i) = file_index(files, *file) {
                    let n = junk_name(files, *name);
                    let bytes = files[i].1.clone();
                    files.retain(|(f, _)| *f != n);
                    files.push((n, bytes));
                }
            }
            Damage::Swap { a, b } => {
                if let (Some(i), Some(j)) = (file_index(files, *a), file_index(files, *b)) {
                    if i != j {
                        let x = std::mem::take(&mut files[i].1);
                        let y = std::mem::replace(&mut files[j].1, x);
                        files[i].1 = y;
                    }
                }
            }
        }
    }
    files.sort();
}
