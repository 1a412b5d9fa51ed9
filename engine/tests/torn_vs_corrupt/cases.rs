//! The rows of the table: one named damage each, and what each recovery
//! mode must do with it.

use super::*;

pub(super) fn cases() -> Vec<Case> {
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
