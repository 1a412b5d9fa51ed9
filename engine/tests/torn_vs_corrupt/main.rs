//! The torn-tail-versus-corruption decision of the recovery pass, as a table
//! (invariants 3 and 10 of ARCHITECTURE.md, `recovery.rs`).
//!
//! Every row starts from the same store, built on the simulated file layer:
//! batches of two events in 8 KiB segments, three segments, everything synced,
//! then a power cut. The row damages the bytes in one named way and states
//! what each recovery mode must do: open and report a torn tail (losing only
//! the damaged last batch), refuse with `Corrupt` naming the file and offset,
//! or another typed error. After every successful open, new appends go on
//! and a reopen sees old and new events.

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use turnstone::frame::{
    decode_frame, encode_frame, BatchHeader, Salt, SegmentHeader, BATCH_HEADER_BYTES,
    FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use turnstone::sim::SimVfs;
use turnstone::vfs::Vfs;
use turnstone::{Error, LogPos, Options, ProblemKind, RecoveryMode, SegmentId, Store};

use common::{cut_power_and_drop, dir, payload_for, seg, sim_opts};

const SEG_BYTES: u32 = 8192;
const SECTOR: u32 = 512;

#[derive(Debug, Clone)]
struct Ev {
    session: String,
    seq: u64,
    payload: Vec<u8>,
    pos: LogPos,
}

#[derive(Debug, Clone)]
struct Batch {
    start: LogPos,
    end: LogPos,
    events: Vec<Ev>,
}

struct Fixture {
    sim: SimVfs,
    checkpoints: bool,
    store_id: [u8; 16],
    batches: Vec<Batch>,
}

fn opts(sim: &SimVfs, checkpoints: bool, mode: RecoveryMode) -> Options {
    Options {
        checkpoints,
        recovery_mode: mode,
        // The fixture's layout needs each roll's checkpoint written before
        // the next batch: only the flusher thread writes (the default), and
        // it writes the checkpoint before taking more (with waiters leading
        // writes it would run beside them and could cover a later batch).
        flush_in_caller: false,
        ..sim_opts(sim, SEG_BYTES)
    }
}

/// Append one batch of events (one `sync`), recording where it went.
fn commit(store: &Store, batch_no: usize, sessions: &[&str]) -> Batch {
    let before = store.durable_pos();
    let mut events = Vec::new();
    for (j, s) in sessions.iter().enumerate() {
        let seq = store.session_len(s).unwrap_or(0);
        let payload = payload_for(s, seq, 880 + 8 * batch_no + j);
        let a = store.append(s, 1, 0, &payload).unwrap();
        assert_eq!(a.seq.0, seq);
        events.push(Ev {
            session: s.to_string(),
            seq,
            payload,
            pos: a.pos,
        });
    }
    store.sync().unwrap();
    let end = store.durable_pos();
    let start = if end.segment() != before.segment() {
        LogPos::new(end.segment(), SEGMENT_HEADER_BYTES as u32)
    } else {
        before
    };
    assert_eq!(
        events[0].pos.segment(),
        end.segment(),
        "one batch, one segment"
    );
    Batch { start, end, events }
}

impl Fixture {
    /// `n` (9 or 10) batches: four in segment 1, four in segment 2, the rest
    /// in segment 3 (which has room left). No clean close. With checkpoints,
    /// the last checkpoint covers the first batch of segment 3 (written after
    /// the roll), so with 9 batches it covers the whole log.
    fn build(checkpoints: bool, n: usize) -> Fixture {
        let sim = SimVfs::new();
        let store = Store::open_with(dir(), opts(&sim, checkpoints, RecoveryMode::default()))
            .expect("open a new store");
        let store_id = store.store_id();
        let mut batches = Vec::new();
        for b in 0..n {
            let sessions: &[&str] = if b % 2 == 0 { &["a", "b"] } else { &["b", "a"] };
            batches.push(commit(&store, b, sessions));
        }
        let segs: Vec<u32> = batches.iter().map(|b| b.start.segment().0).collect();
        assert_eq!(segs, [1, 1, 1, 1, 2, 2, 2, 2, 3, 3][..n], "fixture layout");
        if checkpoints {
            wait_for_checkpoints(&store, 2);
        }
        cut_power_and_drop(&sim, store);
        sim.crash(0);
        Fixture {
            sim,
            checkpoints,
            store_id,
            batches,
        }
    }

    fn n(&self) -> usize {
        self.batches.len()
    }
    fn last(&self) -> &Batch {
        self.batches.last().expect("batches")
    }
    fn path(&self, segment: u32) -> PathBuf {
        seg(&dir(), segment)
    }
    fn bytes(&self, segment: u32) -> Vec<u8> {
        self.sim
            .read_file(&self.path(segment))
            .expect("segment exists")
    }
    fn poke(&self, pos: LogPos, bytes: &[u8]) {
        self.sim
            .poke(&self.path(pos.segment().0), pos.offset() as u64, bytes)
            .expect("poke");
    }
    fn flip(&self, pos: LogPos, bit: u8) {
        let b = self.bytes(pos.segment().0)[pos.offset() as usize];
        self.poke(pos, &[b ^ (1 << bit)]);
    }
    fn zero(&self, from: LogPos, to: LogPos) {
        assert_eq!(from.segment(), to.segment());
        self.poke(from, &vec![0u8; (to.offset() - from.offset()) as usize]);
    }
    fn set_len(&self, segment: u32, len: u64) {
        let f = self.sim.open(&self.path(segment), true).unwrap();
        f.set_len(len).unwrap();
        f.sync_data().unwrap();
    }
    /// Write a whole file and make it and its name durable.
    fn write_file(&self, path: &Path, bytes: &[u8]) {
        let f = self.sim.create_truncate(path).unwrap();
        f.write_all_at(bytes, 0).unwrap();
        f.sync_data().unwrap();
        self.sim.sync_dir(&dir()).unwrap();
    }
    fn remove(&self, path: &Path) {
        self.sim.remove(path).unwrap();
        self.sim.sync_dir(&dir()).unwrap();
    }
    fn header(&self, segment: u32) -> SegmentHeader {
        SegmentHeader::decode(&self.bytes(segment)).expect("valid header")
    }
    fn salt(&self, segment: u32) -> Salt {
        Salt {
            store_id: self.store_id,
            segment: SegmentId(segment),
        }
    }
    /// Events of batches `..keep`.
    fn survivors(&self, keep: usize) -> Vec<Ev> {
        self.batches[..keep]
            .iter()
            .flat_map(|b| b.events.iter().cloned())
            .collect()
    }
}

fn wait_for_checkpoints(store: &Store, n: u64) {
    // The flusher writes a checkpoint after a segment roll, in the
    // background; wait for it (no timing assertion: just a bounded wait).
    for _ in 0..2000 {
        if store.stats().checkpoints_written >= n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("no checkpoint written: {:?}", store.stats());
}

fn at(b: &Batch, delta: u32) -> LogPos {
    LogPos::new(b.start.segment(), b.start.offset() + delta)
}

fn pos_off(p: LogPos) -> u64 {
    p.offset() as u64
}

/// Rebuild a batch's bytes with `edit` applied to each decoded frame
/// (session, kind, flags, seq, payload), re-sealing all checksums: the
/// result is checksum-valid, so no torn write can explain it.
fn forge_batch(
    f: &Fixture,
    b: &Batch,
    mut edit: impl FnMut(usize, &mut (u32, u16, u16, u64, Vec<u8>)),
) -> Vec<u8> {
    let segment = b.start.segment().0;
    let salt = f.salt(segment);
    let bytes = f.bytes(segment);
    let start = b.start.offset() as usize;
    let h = BatchHeader::decode(&bytes[start..], &salt).expect("batch header");
    let body = &bytes[start + BATCH_HEADER_BYTES..start + BATCH_HEADER_BYTES + h.body_len as usize];
    let mut out_body = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < body.len() {
        let fh = decode_frame(&body[at..], &salt).expect("frame");
        let mut fr = (
            fh.session.0,
            fh.kind,
            fh.flags,
            fh.seq,
            body[at + FRAME_HEADER_BYTES..at + fh.frame_len as usize].to_vec(),
        );
        edit(i, &mut fr);
        encode_frame(
            &mut out_body,
            &salt,
            turnstone::SessionId(fr.0),
            fr.1,
            fr.2,
            fr.3,
            &fr.4,
        );
        at += fh.padded_len();
        i += 1;
    }
    assert_eq!(out_body.len(), body.len(), "forged body keeps its size");
    let nh = BatchHeader {
        body_crc: salt.crc(&out_body),
        ..h
    };
    let mut out = nh.encode(&salt).to_vec();
    out.extend_from_slice(&out_body);
    out
}

/// What a recovery mode must do with a damaged store.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    /// Opens holding exactly the events of batches `..keep`; a torn tail is
    /// reported at (segment, offset) when `torn` is set, nothing otherwise.
    Opens {
        keep: usize,
        torn: Option<(u32, u64)>,
    },
    /// Opens with every batch, without scanning the damage (a checkpoint
    /// covers it); reading event `event` of batch `batch` returns `Corrupt`
    /// naming its file and frame offset. Nothing is reported as torn.
    CorruptOnRead {
        batch: usize,
        event: usize,
    },
    /// Refuses: `Corrupt` naming the file of `segment` and `offset`.
    Corrupt {
        segment: u32,
        offset: u64,
    },
    /// Point-in-time recovery: opens holding the events of batches `..keep`
    /// and reports the corruption at (segment, offset).
    Cut {
        keep: usize,
        segment: u32,
        offset: u64,
    },
    Unsupported {
        segment: u32,
        found: u32,
    },
    NotTurnstone {
        segment: u32,
    },
}
use Outcome::*;

struct Case {
    name: &'static str,
    checkpoints: bool,
    /// Batches in the fixture (10; 9 to end the log at a checkpoint).
    batches: usize,
    /// Damage the fixture; returns the expected outcome for the default mode
    /// (TolerateTornTail) and for PointInTime. AbsoluteConsistency is
    /// derived: a torn tail is refused, anything else as in the default.
    setup: fn(&mut Fixture) -> (Outcome, Outcome),
}

fn same(o: Outcome) -> (Outcome, Outcome) {
    (o, o)
}

fn torn_last(f: &Fixture) -> (Outcome, Outcome) {
    let l = f.last();
    same(Opens {
        keep: f.n() - 1,
        torn: Some((l.start.segment().0, pos_off(l.start))),
    })
}

mod cases;
use cases::cases;

/// Check a store that opened: exactly the survivors, readable, a zeroed
/// tail; then append, reopen in the default mode, and see old and new.
fn check_open(f: &Fixture, store: Store, keep: usize, ctx: &str) {
    let survivors = f.survivors(keep);
    let mut want_len = std::collections::BTreeMap::<String, u64>::new();
    for e in &survivors {
        *want_len.entry(e.session.clone()).or_default() += 1;
    }
    let got_len: std::collections::BTreeMap<String, u64> = store
        .sessions()
        .into_iter()
        .filter(|s| s.len > 0)
        .map(|s| (s.name, s.len))
        .collect();
    assert_eq!(got_len, want_len, "{ctx}: session lengths");
    for e in &survivors {
        let got = store
            .read(&e.session, e.seq)
            .unwrap_or_else(|err| panic!("{ctx}: read {} {}: {err}", e.session, e.seq));
        assert!(
            got.payload == e.payload,
            "{ctx}: payload of {} {}",
            e.session,
            e.seq
        );
    }
    // Nothing non-zero after the recovered end, and no later segment.
    let end = store.durable_pos();
    let bytes = f
        .sim
        .read_file(&seg(&dir(), end.segment().0))
        .expect("active segment");
    assert!(
        bytes[end.offset() as usize..].iter().all(|b| *b == 0),
        "{ctx}: non-zero bytes left after the recovered end {end}"
    );
    assert!(
        f.sim.read_file(&seg(&dir(), end.segment().0 + 1)).is_none(),
        "{ctx}: a segment after the recovered end {end} is left"
    );

    // Append after recovery, close, reopen: old and new are there.
    let a0 = store.session_len("a").unwrap_or(0);
    let n0 = store.session_len("new").unwrap_or(0);
    let pa = payload_for("a", a0, 1500);
    let pn = payload_for("new", n0, 40);
    assert_eq!(store.append("a", 2, 0, &pa).unwrap().seq.0, a0, "{ctx}");
    assert_eq!(store.append("new", 2, 0, &pn).unwrap().seq.0, n0, "{ctx}");
    store.sync().unwrap();
    store.close().unwrap();
    let store = Store::open_with(dir(), opts(&f.sim, f.checkpoints, RecoveryMode::default()))
        .unwrap_or_else(|e| panic!("{ctx}: reopen after appending: {e}"));
    let r = store.recovery_report();
    assert!(
        r.clean_shutdown && r.problems.is_empty(),
        "{ctx}: reopen after appending: {r:?}"
    );
    for e in &survivors {
        assert!(
            store.read(&e.session, e.seq).unwrap().payload == e.payload,
            "{ctx}: after reopen: {} {}",
            e.session,
            e.seq
        );
    }
    assert!(store.read("a", a0).unwrap().payload == pa, "{ctx}");
    assert!(store.read("new", n0).unwrap().payload == pn, "{ctx}");
    assert_eq!(store.session_len("a"), Some(a0 + 1), "{ctx}");
    store.close().unwrap();
}

fn check(f: &Fixture, mode: RecoveryMode, expect: Outcome, ctx: &str) {
    let res = Store::open_with(dir(), opts(&f.sim, f.checkpoints, mode));
    match (expect, res) {
        (Opens { keep, torn }, Ok(store)) => {
            let r = store.recovery_report().clone();
            match torn {
                None => assert!(r.problems.is_empty(), "{ctx}: {r:?}"),
                Some((segment, offset)) => {
                    assert_eq!(r.problems.len(), 1, "{ctx}: {r:?}");
                    let p = &r.problems[0];
                    assert_eq!(p.kind, ProblemKind::TornTail, "{ctx}: {p:?}");
                    assert_eq!(
                        (p.file.as_path(), p.offset),
                        (f.path(segment).as_path(), offset),
                        "{ctx}: {p:?}"
                    );
                    assert!(!r.clean_shutdown, "{ctx}: {r:?}");
                }
            }
            check_open(f, store, keep, ctx);
        }
        (
            Cut {
                keep,
                segment,
                offset,
            },
            Ok(store),
        ) => {
            let r = store.recovery_report().clone();
            assert!(
                r.problems.iter().any(|p| p.kind == ProblemKind::Corruption
                    && p.file == f.path(segment)
                    && p.offset == offset),
                "{ctx}: expected corruption at {segment}:{offset} in {r:?}"
            );
            check_open(f, store, keep, ctx);
        }
        (CorruptOnRead { batch, event }, Ok(store)) => {
            let r = store.recovery_report().clone();
            assert!(r.problems.is_empty(), "{ctx}: {r:?}");
            assert!(r.checkpoint_used, "{ctx}: {r:?}");
            for (bi, b) in f.batches.iter().enumerate() {
                for (ei, e) in b.events.iter().enumerate() {
                    let got = store.read(&e.session, e.seq);
                    if (bi, ei) == (batch, event) {
                        match got {
                            Err(Error::Corrupt { file, offset, .. }) => assert_eq!(
                                (file, offset),
                                (f.path(e.pos.segment().0), pos_off(e.pos)),
                                "{ctx}"
                            ),
                            other => panic!("{ctx}: damaged event read as {other:?}"),
                        }
                    } else {
                        assert!(got.unwrap().payload == e.payload, "{ctx}: {bi}/{ei}");
                    }
                }
            }
        }
        (
            Corrupt { segment, offset },
            Err(Error::Corrupt {
                file,
                offset: o,
                detail,
            }),
        ) => {
            assert_eq!(
                (file.as_path(), o),
                (f.path(segment).as_path(), offset),
                "{ctx}: {detail}"
            );
        }
        (Unsupported { segment, found }, Err(Error::UnsupportedVersion { file, found: v, .. })) => {
            assert_eq!((file, v), (f.path(segment), found), "{ctx}");
        }
        (NotTurnstone { segment }, Err(Error::NotTurnstone { file, .. })) => {
            assert_eq!(file, f.path(segment), "{ctx}");
        }
        (expect, Ok(store)) => panic!(
            "{ctx}: expected {expect:?}, but the store opened: {:?}",
            store.recovery_report()
        ),
        (expect, Err(e)) => panic!("{ctx}: expected {expect:?}, got error: {e}"),
    }
}

/// AbsoluteConsistency refuses any torn tail, and otherwise acts as the
/// default mode.
fn check_absolute(f: &Fixture, expect: Outcome, ctx: &str) {
    if let Opens {
        torn: Some((segment, offset)),
        ..
    } = expect
    {
        match Store::open_with(
            dir(),
            opts(&f.sim, f.checkpoints, RecoveryMode::AbsoluteConsistency),
        ) {
            Err(Error::TornTailRefused {
                file, offset: o, ..
            }) => {
                assert_eq!((file, o), (f.path(segment), offset), "{ctx}")
            }
            other => panic!("{ctx}: expected TornTailRefused, got {other:?}"),
        }
        return;
    }
    check(f, RecoveryMode::AbsoluteConsistency, expect, ctx);
}

#[test]
fn torn_versus_corrupt_table() {
    let mut failures = Vec::new();
    for case in cases() {
        for mode in [
            RecoveryMode::TolerateTornTail,
            RecoveryMode::AbsoluteConsistency,
            RecoveryMode::PointInTime,
        ] {
            let ctx = format!("[{}] {mode:?}", case.name);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut f = Fixture::build(case.checkpoints, case.batches);
                let (default, pit) = (case.setup)(&mut f);
                match mode {
                    RecoveryMode::TolerateTornTail => check(&f, mode, default, &ctx),
                    RecoveryMode::AbsoluteConsistency => check_absolute(&f, default, &ctx),
                    RecoveryMode::PointInTime => check(&f, mode, pit, &ctx),
                    RecoveryMode::Salvage => unreachable!("salvage has its own test"),
                }
            }));
            if let Err(e) = result {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{ctx}: {msg}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing rows:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The repairs an open makes (zeroing a torn tail, a point-in-time cut,
/// removing files) can themselves be cut by a power failure at any
/// operation; opening again in the same mode finishes the job.
#[test]
fn interrupted_repairing_open_can_be_resumed() {
    let mut runs = 0;
    for case in cases() {
        for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::PointInTime] {
            for k in 0..8u64 {
                let mut f = Fixture::build(case.checkpoints, case.batches);
                let (default, pit) = (case.setup)(&mut f);
                let keep = match (mode, default, pit) {
                    (RecoveryMode::TolerateTornTail, Opens { keep, .. }, _) => keep,
                    (RecoveryMode::PointInTime, _, Opens { keep, .. } | Cut { keep, .. }) => keep,
                    _ => continue,
                };
                let ctx = format!(
                    "[{}] {mode:?}, power cut after {k} ops of the open",
                    case.name
                );
                f.sim.set_faults(turnstone::sim::FaultPlan {
                    power_cut_after_ops: Some(f.sim.ops() + k),
                    ..Default::default()
                });
                if let Ok(store) = Store::open_with(dir(), opts(&f.sim, f.checkpoints, mode)) {
                    drop(store);
                }
                f.sim.crash(k);
                let store = Store::open_with(dir(), opts(&f.sim, f.checkpoints, mode))
                    .unwrap_or_else(|e| panic!("{ctx}: second open: {e}"));
                check_open(&f, store, keep, &ctx);
                runs += 1;
            }
        }
    }
    assert!(runs > 100, "{runs}");
}
