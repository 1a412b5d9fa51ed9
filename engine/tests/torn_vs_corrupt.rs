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

fn cases() -> Vec<Case> {
    vec![
        // ---- torn tails: only the last batch of the last segment ----
        Case {
            name: "torn: last batch header overwritten with garbage",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                f.poke(f.last().start, &[0xa5; BATCH_HEADER_BYTES]);
                torn_last(f)
            },
        },
        Case {
            name: "torn: last batch header sector old (zero), body sectors new",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let l = f.last().clone();
                f.zero(l.start, at(&l, BATCH_HEADER_BYTES as u32));
                torn_last(f)
            },
        },
        Case {
            name: "torn: one body sector of the last batch zeroed",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let l = f.last().clone();
                let s = (l.start.offset() / SECTOR + 1) * SECTOR;
                assert!(s + SECTOR < l.end.offset(), "batch spans 3 sectors");
                f.poke(
                    LogPos::new(l.start.segment(), s),
                    &vec![0u8; SECTOR as usize],
                );
                torn_last(f)
            },
        },
        Case {
            name: "torn: only the first sector of the last batch written",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let l = f.last().clone();
                let s = (l.start.offset() / SECTOR + 1) * SECTOR;
                f.zero(LogPos::new(l.start.segment(), s), l.end);
                torn_last(f)
            },
        },
        Case {
            name: "torn: last sector of the last batch missing",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let l = f.last().clone();
                let s = ((l.end.offset() - 1) / SECTOR) * SECTOR;
                assert!(s > l.start.offset());
                f.zero(LogPos::new(l.start.segment(), s), l.end);
                torn_last(f)
            },
        },
        Case {
            name: "torn: partial write, the file ends inside the last batch",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let l = f.last().clone();
                f.set_len(l.start.segment().0, l.start.offset() as u64 + 700);
                torn_last(f)
            },
        },
        Case {
            name: "torn: stale non-zero bytes after the last batch",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let l = f.last().clone();
                f.poke(
                    at(&l, l.end.offset() - l.start.offset() + 200),
                    &[0x5a; 300],
                );
                same(Opens {
                    keep: f.n(),
                    torn: Some((l.end.segment().0, pos_off(l.end))),
                })
            },
        },
        Case {
            name: "torn: new segment file, header never written (zeros)",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                f.write_file(&f.path(4), &vec![0u8; SEG_BYTES as usize]);
                same(Opens {
                    keep: f.n(),
                    torn: Some((4, 0)),
                })
            },
        },
        Case {
            name: "torn: new segment file, header half written",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let mut h = SegmentHeader {
                    segment: SegmentId(4),
                    ..f.header(3)
                }
                .encode()
                .to_vec();
                h[24..].fill(0);
                h.resize(SEG_BYTES as usize, 0);
                f.write_file(&f.path(4), &h);
                same(Opens {
                    keep: f.n(),
                    torn: Some((4, 0)),
                })
            },
        },
        Case {
            name: "torn: new segment file, empty",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                f.write_file(&f.path(4), &[]);
                same(Opens {
                    keep: f.n(),
                    torn: Some((4, 0)),
                })
            },
        },
        Case {
            name: "torn: first batch after a clean close, header sector lost",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                // Close cleanly (an empty clean-close batch), reopen, commit
                // one more batch, cut the power; its header sector is lost
                // but later sectors made it.
                let store =
                    Store::open_with(dir(), opts(&f.sim, false, RecoveryMode::default())).unwrap();
                store.close().unwrap();
                let store =
                    Store::open_with(dir(), opts(&f.sim, false, RecoveryMode::default())).unwrap();
                assert!(store.recovery_report().clean_shutdown);
                let marker = f.last().end;
                f.batches.push(Batch {
                    start: marker,
                    end: LogPos::new(marker.segment(), marker.offset() + 32),
                    events: Vec::new(),
                });
                let b = commit(&store, 10, &["a", "b"]);
                assert_eq!(b.start.offset(), marker.offset() + 32, "{b:?}");
                f.batches.push(b);
                cut_power_and_drop(&f.sim, store);
                f.sim.crash(0);
                let l = f.last().clone();
                f.zero(l.start, at(&l, BATCH_HEADER_BYTES as u32));
                torn_last(f)
            },
        },
        // ---- no power cut explains these: corruption ----
        Case {
            name: "corrupt: bit flip in a batch body of a sealed segment",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let b = f.batches[1].clone();
                f.flip(at(&b, 300), 2);
                (
                    Corrupt {
                        segment: 1,
                        offset: pos_off(b.start),
                    },
                    Cut {
                        keep: 1,
                        segment: 1,
                        offset: pos_off(b.start),
                    },
                )
            },
        },
        Case {
            name: "corrupt: bit flip in a batch header of a sealed segment",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let b = f.batches[6].clone();
                f.flip(at(&b, 9), 0);
                (
                    Corrupt {
                        segment: 2,
                        offset: pos_off(b.start),
                    },
                    Cut {
                        keep: 6,
                        segment: 2,
                        offset: pos_off(b.start),
                    },
                )
            },
        },
        Case {
            name: "corrupt: the last batch of a sealed segment torn",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let b = f.batches[3].clone();
                f.zero(at(&b, 600), b.end);
                (
                    Corrupt {
                        segment: 1,
                        offset: pos_off(b.start),
                    },
                    Cut {
                        keep: 3,
                        segment: 1,
                        offset: pos_off(b.start),
                    },
                )
            },
        },
        Case {
            name: "corrupt: bit flip in the last segment, a valid later batch follows",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let b = f.batches[8].clone();
                f.flip(at(&b, 1000), 7);
                (
                    Corrupt {
                        segment: 3,
                        offset: pos_off(b.start),
                    },
                    Cut {
                        keep: 8,
                        segment: 3,
                        offset: pos_off(b.start),
                    },
                )
            },
        },
        Case {
            name: "corrupt: batch header zeroed in the last segment, a valid later batch follows",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let b = f.batches[8].clone();
                f.zero(b.start, at(&b, BATCH_HEADER_BYTES as u32));
                (
                    Corrupt {
                        segment: 3,
                        offset: pos_off(b.start),
                    },
                    Cut {
                        keep: 8,
                        segment: 3,
                        offset: pos_off(b.start),
                    },
                )
            },
        },
        Case {
            name: "corrupt: checksum-valid last batch whose frame breaks seq density",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let l = f.last().clone();
                let forged = forge_batch(f, &l, |i, fr| {
                    if i == 1 {
                        fr.3 += 1;
                    }
                });
                f.poke(l.start, &forged);
                (
                    Corrupt {
                        segment: 3,
                        offset: pos_off(l.start),
                    },
                    Cut {
                        keep: f.n() - 1,
                        segment: 3,
                        offset: pos_off(l.start),
                    },
                )
            },
        },
        Case {
            name: "corrupt: last segment's header damaged while batches follow it",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                f.flip(LogPos::new(SegmentId(3), 2), 1);
                (
                    Corrupt {
                        segment: 3,
                        offset: 0,
                    },
                    Cut {
                        keep: 8,
                        segment: 3,
                        offset: 0,
                    },
                )
            },
        },
        Case {
            name: "corrupt: missing middle segment file",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                f.remove(&f.path(2));
                (
                    Corrupt {
                        segment: 2,
                        offset: 0,
                    },
                    Cut {
                        keep: 4,
                        segment: 2,
                        offset: 0,
                    },
                )
            },
        },
        Case {
            name: "corrupt: middle segment header of another store",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let h = SegmentHeader {
                    store_id: [0x42; 16],
                    ..f.header(2)
                };
                f.poke(LogPos::new(SegmentId(2), 0), &h.encode());
                (
                    Corrupt {
                        segment: 2,
                        offset: 0,
                    },
                    Cut {
                        keep: 4,
                        segment: 2,
                        offset: 0,
                    },
                )
            },
        },
        Case {
            name: "corrupt: last segment header of another store",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let h = SegmentHeader {
                    store_id: [0x42; 16],
                    ..f.header(3)
                };
                f.poke(LogPos::new(SegmentId(3), 0), &h.encode());
                (
                    Corrupt {
                        segment: 3,
                        offset: 0,
                    },
                    Cut {
                        keep: 8,
                        segment: 3,
                        offset: 0,
                    },
                )
            },
        },
        Case {
            // FORMAT.md §6.3 H2: an interrupted creation leaves only the
            // header over zeros (M4), so non-zero bytes past byte 64 cannot be
            // a torn creation: this is corruption (H4).
            name: "corrupt (H4): random garbage file named as the next segment",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let garbage = payload_for("garbage", 0, SEG_BYTES as usize);
                f.write_file(&f.path(4), &garbage);
                (
                    Corrupt {
                        segment: 4,
                        offset: 0,
                    },
                    Cut {
                        keep: f.n(),
                        segment: 4,
                        offset: 0,
                    },
                )
            },
        },
        Case {
            name: "corrupt: random garbage file in place of a middle segment",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let garbage = payload_for("garbage", 2, SEG_BYTES as usize);
                f.write_file(&f.path(2), &garbage);
                (
                    Corrupt {
                        segment: 2,
                        offset: 0,
                    },
                    Cut {
                        keep: 4,
                        segment: 2,
                        offset: 0,
                    },
                )
            },
        },
        Case {
            name: "corrupt: sealed segment truncated inside a batch",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let b = f.batches[2].clone();
                f.set_len(1, b.start.offset() as u64 + 100);
                (
                    Corrupt {
                        segment: 1,
                        offset: pos_off(b.start),
                    },
                    Cut {
                        keep: 2,
                        segment: 1,
                        offset: pos_off(b.start),
                    },
                )
            },
        },
        Case {
            name: "corrupt: sealed segment truncated at a batch boundary",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let b = f.batches[2].clone();
                f.set_len(1, b.start.offset() as u64);
                // Segment 1 itself scans cleanly to its (new) end; the break
                // shows at segment 2, whose header records where segment 1
                // ended and which batch comes next.
                (
                    Corrupt {
                        segment: 2,
                        offset: 0,
                    },
                    Cut {
                        keep: 2,
                        segment: 2,
                        offset: 0,
                    },
                )
            },
        },
        Case {
            name: "clean: sealed segment's zero tail cut off after its last batch",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let end = f.batches[3].end;
                f.set_len(1, end.offset() as u64);
                same(Opens {
                    keep: f.n(),
                    torn: None,
                })
            },
        },
        // ---- typed errors for files that are not (this) turnstone ----
        Case {
            name: "error: wrong format version in a segment header",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                let h = SegmentHeader {
                    version: 2,
                    ..f.header(1)
                };
                f.poke(LogPos::new(SegmentId(1), 0), &h.encode());
                same(Unsupported {
                    segment: 1,
                    found: 2,
                })
            },
        },
        Case {
            name: "error: random garbage file as the only segment",
            checkpoints: false,
            batches: 10,
            setup: |f| {
                for s in 1..=3 {
                    f.remove(&f.path(s));
                }
                let garbage = payload_for("garbage", 1, 3000);
                f.write_file(&f.path(1), &garbage);
                f.batches.clear();
                same(NotTurnstone { segment: 1 })
            },
        },
        // ---- checkpoints: what they cover was durable ----
        Case {
            name: "checkpoint: bit flip in a covered batch of a sealed segment (detected on read)",
            checkpoints: true,
            batches: 9,
            setup: |f| {
                let e = f.batches[1].events[0].clone();
                f.flip(
                    LogPos::new(
                        e.pos.segment(),
                        e.pos.offset() + FRAME_HEADER_BYTES as u32 + 5,
                    ),
                    3,
                );
                same(CorruptOnRead { batch: 1, event: 0 })
            },
        },
        Case {
            name: "checkpoint: bit flip in the last covered batch body (detected on read)",
            checkpoints: true,
            batches: 9,
            setup: |f| {
                let l = f.last().clone();
                let e = l.events[1].clone();
                f.flip(
                    LogPos::new(
                        e.pos.segment(),
                        e.pos.offset() + FRAME_HEADER_BYTES as u32 + 5,
                    ),
                    3,
                );
                same(CorruptOnRead {
                    batch: f.n() - 1,
                    event: 1,
                })
            },
        },
        Case {
            name: "checkpoint: header of the last covered batch damaged",
            checkpoints: true,
            batches: 9,
            setup: |f| {
                let l = f.last().clone();
                f.flip(at(&l, 5), 4);
                (
                    Corrupt {
                        segment: 3,
                        offset: pos_off(l.start),
                    },
                    Cut {
                        keep: f.n() - 1,
                        segment: 3,
                        offset: pos_off(l.start),
                    },
                )
            },
        },
        Case {
            name: "checkpoint: last covered batch zeroed (the log ends before the checkpoint)",
            checkpoints: true,
            batches: 9,
            setup: |f| {
                let l = f.last().clone();
                f.zero(l.start, l.end);
                (
                    Corrupt {
                        segment: 3,
                        offset: pos_off(l.start),
                    },
                    Cut {
                        keep: f.n() - 1,
                        segment: 3,
                        offset: pos_off(l.start),
                    },
                )
            },
        },
        Case {
            name: "checkpoint: the batch after the last covered one torn",
            checkpoints: true,
            batches: 10,
            setup: |f| {
                f.poke(f.last().start, &[0xa5; BATCH_HEADER_BYTES]);
                torn_last(f)
            },
        },
        Case {
            name: "checkpoint: garbage checkpoint file is discarded, the log rescanned",
            checkpoints: true,
            batches: 10,
            setup: |f| {
                let p = dir().join("index.ckpt");
                assert!(f.sim.read_file(&p).is_some(), "fixture has a checkpoint");
                f.write_file(&p, &payload_for("ckpt", 0, 500));
                same(Opens {
                    keep: f.n(),
                    torn: None,
                })
            },
        },
    ]
}

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
